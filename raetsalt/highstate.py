"""Salt's ``highstate`` outputter: state returns as Salt prints them, data in, text out.

The default outputter for ``state.*`` returns (the minion marks them ``out: highstate``),
and ``--out highstate``.  For each minion: one block per state in run order (``ID``,
``Function``, ``Name`` when it differs from the ID, ``Result``, ``Comment``, ``Started``,
``Duration``, ``Changes`` shown with the nested outputter), then the summary::

    Summary for web1
    ------------
    Succeeded: 2 (changed=2)
    Failed:    0
    ------------
    Total states run:     2
    Total run time:  31.310 ms

A list return (compile errors) prints ``Data failed to compile:`` and each error; a
string or an integer prints indented, as Salt does.  ``HighstateOptions`` carries
Salt's ``state_output`` (``full``, ``terse``, ``mixed``, ``changes``, each also with
``_id``), ``state_verbose``, ``state_output_profile``, ``state_output_diff`` and
``state_output_pct``; the defaults are Salt's.  Not implemented: ``state_output:
filter``, ``state_tabular`` and ``state_compress_ids``.
"""

from __future__ import annotations

import pprint
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["HighstateOptions", "render"]

# Salt's colour codes (salt.utils.color) for the names this outputter uses.
_COLORS = {
    "GREEN": "\033[0;32m",
    "CYAN": "\033[0;36m",
    "RED": "\033[0;31m",
    "LIGHT_RED": "\033[0;1;31m",
    "LIGHT_YELLOW": "\033[0;1;33m",
    "ENDC": "\033[0;0m",
}
_NO_COLORS = {name: "" for name in _COLORS}
_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_LABELS = {True: "Succeeded", False: "Failed", None: "Not Run", "warnings": "Warnings"}
_LABEL_WIDTH = max(len(label) for label in _LABELS.values())
_NESTED_STATES = ("state.orch", "state.orchestrate", "state.sls")
_INDENT = " " * 14


@dataclass(frozen=True, slots=True)
class HighstateOptions:
    """Salt's highstate settings (master config on the CLI); defaults as in Salt."""

    state_output: str = "full"
    state_verbose: bool = True
    state_output_profile: bool = True
    state_output_diff: bool = False
    state_output_pct: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any], state_output: str | None = None,
                    state_verbose: Any = None) -> HighstateOptions:
        """The settings of a Salt config (its ``state_output``, ``state_verbose``...; values
        of the wrong kind are left at Salt's default), then the command line's
        ``--state-output``/``--state-verbose`` (Salt's reading: ``true``/``True``,
        ``false``/``False``, any other text counts as true)."""
        fields: dict[str, Any] = {}
        if isinstance(config.get("state_output"), str):
            fields["state_output"] = config["state_output"]
        for key in ("state_verbose", "state_output_profile", "state_output_diff",
                    "state_output_pct"):
            if isinstance(config.get(key), bool):
                fields[key] = config[key]
        if state_output is not None:
            fields["state_output"] = state_output
        if state_verbose is not None:
            fields["state_verbose"] = state_verbose not in ("False", "false", False)
        return cls(**fields)


def render(data: Any, *, color: bool = False, indent: int | None = None, retcode: int = 0,
           options: HighstateOptions | None = None) -> str:
    """Format ``{minion: state return}`` as Salt's highstate outputter does (no final
    newline).  ``indent`` and ``retcode`` are accepted for the outputter interface."""
    return _Highstate(color, options or HighstateOptions()).output(data, 1)


def outputter(data: Any, options: Any) -> str:
    """The ``highstate`` entry of ``raetsalt.output``'s table (``options`` is its
    ``OutputOptions``)."""
    settings = getattr(options, "highstate", None)
    return render(data, color=options.color, indent=options.indent, retcode=options.retcode,
                  options=settings if isinstance(settings, HighstateOptions) else None)


def _unwrap(data: Any) -> Any:
    """The state data inside the envelopes Salt's outputter looks through."""
    if isinstance(data, dict) and "return" in data:
        data = data["return"]
    if isinstance(data, dict) and "data" in data:
        data = data["data"]
    if isinstance(data, dict) and len(data) == 1:
        inner = next(iter(data.values()))
        if isinstance(inner, dict) and "jid" in inner and "fun" in inner:
            found = inner.get("return", {})
            data = found.get("data", data) if isinstance(found, dict) else data
    return data


def _duration(value: Any) -> float | None:
    """A state's duration in ms (Salt writes a number, older returns ``'12 ms'``)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        try:
            return float(str(value).partition(" ms")[0])
        except ValueError:
            return None


class _Highstate:
    def __init__(self, color: bool, options: HighstateOptions) -> None:
        self.c = _COLORS if color else _NO_COLORS
        self.opts = options

    def output(self, data: Any, level: int) -> str:
        data = _unwrap(data)
        if isinstance(data, int | str):
            return str(data)
        if data is None:
            return "None"
        if not isinstance(data, Mapping):
            return str(data)
        hosts = dict(data)
        masters = [key for key in hosts if isinstance(key, str) and key.endswith("_master")]
        if "retcode" in hosts and len(masters) == 1:
            del hosts["retcode"]  # an orchestration's envelope
        return "\n".join(self.host(host, hostdata, level)[0] for host, hostdata in hosts.items())

    # -- one minion ---------------------------------------------------------------------

    def host(self, host: Any, data: Any, level: int = 1) -> tuple[str, bool]:
        c = self.c
        hcolor = c["GREEN"]
        lines: list[str] = []
        nchanges = 0
        if isinstance(data, int) and not isinstance(data, bool):
            nchanges = 1
            lines.append(f"{hcolor}    {data}{c['ENDC']}")
            hcolor = c["CYAN"]
        elif isinstance(data, str):
            nchanges = 1
            lines.extend(f"{hcolor}    {line}{c['ENDC']}" for line in data.splitlines())
            hcolor = c["CYAN"]
        elif isinstance(data, list):
            hcolor = c["LIGHT_RED"]
            lines.append(f"    {hcolor}Data failed to compile:{c['ENDC']}")
            for err in data:
                lines.append(f"{hcolor}----------\n    {_ESCAPE.sub('', str(err))}{c['ENDC']}")
        elif isinstance(data, Mapping):
            hcolor, nchanges = self.states(str(host), data, lines, hcolor, level)
        name = _ESCAPE.sub("", str(host))
        lines.insert(0, f"{hcolor}{name}:{c['ENDC']}")
        return "\n".join(lines), nchanges > 0

    def states(self, host: str, data: Mapping[Any, Any], lines: list[str], hcolor: str,
               level: int) -> tuple[str, int]:
        c, opts = self.c, self.opts
        counts: dict[Any, int] = {}
        durations: list[float] = []
        parallel: list[float] = []
        nchanges = 0
        chunks: dict[Any, dict[str, Any]] = {}
        for tname, info in data.items():
            if isinstance(info, dict) and tname != "changes" and info and (
                    "__run_num__" not in info):
                lines.insert(0, pprint.pformat(info))
                lines.insert(0, "The State execution failed to record the order in which "
                                "all states were executed. The state return missing data is:")
            if isinstance(info, dict) and "result" in info:
                chunks[tname] = info
        for tname in sorted(chunks, key=lambda k: chunks[k].get("__run_num__", 0)):
            ret = dict(chunks[tname])
            result = ret["result"]
            counts[result] = counts.get(result, 0) + 1
            spent = _duration(ret.get("duration", 0))
            if spent is not None:
                (parallel if "__parallel__" in ret else durations).append(spent)
            tcolor = c["GREEN"]
            if ret.get("name") in _NESTED_STATES:
                nested = self.output(ret.get("changes"), level + 1)
                ctext = re.sub("^", " " * 14 * level, "\n" + nested, flags=re.MULTILINE)
                changed = True
                nchanges += 1
            else:
                changed, ctext = self.changes(ret.get("changes"))
                nchanges += 1 if changed else 0
            if opts.state_output_diff and result and not changed:
                continue
            if not opts.state_verbose and result and not changed:
                continue
            if changed:
                tcolor = c["CYAN"]
            if result is False:
                hcolor = tcolor = c["RED"]
            elif result is None:
                hcolor = tcolor = c["LIGHT_YELLOW"]
            mode = opts.state_output.lower()
            comps = str(tname).split("_|-")
            if len(comps) < 4:
                comps = (comps + ["", "", "", ""])[:4]
            if mode.endswith("_id"):
                comps[2] = comps[1]
            if (mode.startswith("terse")
                    or (mode.startswith("mixed") and result is not False)
                    or (mode.startswith("changes") and result and not changed)):
                lines.append(self.terse(tcolor, comps, ret))
                continue
            lines.extend(self.full(tcolor, comps, ret, ctext))
            if "warnings" in ret:
                counts["warnings"] = counts.get("warnings", 0) + 1
                text = textwrap.TextWrapper(width=80, initial_indent=_INDENT,
                                            subsequent_indent=_INDENT).fill(
                    "\n".join(str(w) for w in ret["warnings"])).lstrip()
                lines.append(f"   {c['LIGHT_RED']} Warnings: {text}{c['ENDC']}")
        lines.extend(self.summary(host, counts, nchanges, durations, parallel))
        return hcolor, nchanges

    def full(self, tcolor: str, comps: list[str], ret: dict[str, Any], ctext: str
             ) -> list[str]:
        end = self.c["ENDC"]
        comment = ret.get("comment")
        text = (comment if isinstance(comment, str) else str(comment)).strip()
        text = text.replace("\n", "\n" + _INDENT)
        extra = ret.get("data")
        if "data" in ret:
            if isinstance(extra, list):
                text += "".join(f" {item}" for item in extra)
            elif isinstance(extra, dict):
                text += "".join(f"\n\t\t{key}: {value}" for key, value in extra.items())
            else:
                text += f" {extra}"
        out = [
            f"{tcolor}----------{end}",
            f"    {tcolor}      ID: {comps[1]}{end}",
            f"    {tcolor}Function: {comps[0]}.{comps[3]}{end}",
        ]
        if comps[1] != comps[2]:
            out.append(f"    {tcolor}    Name: {comps[2]}{end}")
        out.append(f"    {tcolor}  Result: {ret['result']!s}{end}")
        out.append(f"    {tcolor} Comment: {text}{end}")
        if self.opts.state_output_profile and "start_time" in ret:
            duration = ret.get("duration", "")
            shown = f"{duration} ms" if duration != "" else ""
            out.append(f"    {tcolor} Started: {ret['start_time']!s}{end}")
            out.append(f"    {tcolor}Duration: {shown}{end}")
        out.append(f"{tcolor}     Changes:   {ctext}{end}")
        return out

    def terse(self, tcolor: str, comps: list[str], ret: dict[str, Any]) -> str:
        c = self.c
        status = "Changed" if ret.get("changes") else "Clean"
        if ret["result"] is False:
            status = "Failed"
        elif ret["result"] is None:
            status = "Differs"
        text = ""
        if "warnings" in ret:
            warnings = "\n".join(str(w) for w in ret["warnings"])
            text += f"{c['LIGHT_RED']}Warnings:\n{warnings}{c['ENDC']}"
        text += f" {tcolor} Name: {comps[2]} - Function: {comps[0]}.{comps[-1]} - Result: {status}"
        if self.opts.state_output_profile and "start_time" in ret:
            text += f" - Started: {ret['start_time']!s} - Duration: {ret.get('duration')!s} ms"
        return text + c["ENDC"]

    def changes(self, changes: Any) -> tuple[bool, str]:
        """(changed, the text after ``Changes:``)."""
        if not changes:
            return False, ""
        if not isinstance(changes, Mapping):
            return True, f"Invalid Changes data: {changes}"
        inner = changes.get("ret")
        if inner is not None and changes.get("out") == "highstate" and isinstance(inner, Mapping):
            text = ""
            changed = False
            for host, hostdata in inner.items():
                block, host_changed = self.host(host, hostdata)
                text += "\n" + "\n".join(_INDENT + line for line in block.splitlines())
                changed = changed or host_changed
            return changed, text
        from raetsalt.output import render as render_output

        nested = render_output(dict(changes), "nested", color=self.c is _COLORS,
                               nested_indent=14)
        return True, "\n" + nested.rstrip()

    def summary(self, host: str, counts: dict[Any, int], nchanges: int,
                durations: list[float], parallel: list[float]) -> list[str]:
        c, opts = self.c, self.opts
        end = c["ENDC"]
        width = _LABEL_WIDTH + max([len(str(n)) for n in counts.values()] or [0]) + 2

        def line(label: str, count: Any) -> str:
            return f"{label}: {count:>{width - (len(label) + 2)}}"

        out = [f"{c['CYAN']}\nSummary for {host}\n{'-' * width}{end}"]
        stats = []
        if counts.get(None, 0) > 0:
            stats.append(f"{c['LIGHT_YELLOW']}unchanged={counts[None]}{end}")
        if nchanges > 0:
            stats.append(f"{c['GREEN']}changed={nchanges}{end}")
        succeeded = counts.get(True, 0) + counts.get(None, 0)
        suffix = f" ({', '.join(stats)})" if stats else ""
        out.append(f"{c['GREEN']}{line(_LABELS[True], succeeded)}{end}{suffix}")
        failed = counts.get(False, 0)
        fail_color = c["RED"] if failed else c["CYAN"]
        out.append(f"{fail_color}{line(_LABELS[False], failed)}{end}")
        warnings = counts.get("warnings", 0)
        total = sum(counts.values()) - warnings
        if opts.state_output_pct and total:
            out.append(f"{c['GREEN']}{line('Success %', round(succeeded / total * 100, 2))}{end}")
            out.append(f"{fail_color}{line('Failure %', round(failed / total * 100, 2))}{end}")
        if warnings:
            out.append(f"{c['LIGHT_RED']}{line(_LABELS['warnings'], warnings)}{end}")
        out.append(f"{c['CYAN']}{'-' * width}\nTotal states run: {total:>{width - 7}}{end}")
        if opts.state_output_profile:
            spent = sum(durations) + (max(parallel) if parallel else 0.0)
            unit = "ms"
            if spent > 999:
                spent, unit = spent / 1000, "s"
            out.append(f"{c['CYAN']}Total run time: {f'{spent:.3f}'.rjust(width - 5)} {unit}{end}")
        return out
