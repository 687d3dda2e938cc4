"""``raetsalt-key``: manage the minion keys of a raetsalt master, as ``salt-key`` does.

    raetsalt-key [-c CONFDIR] [-L | -l STATE]
    raetsalt-key [-c CONFDIR] (-a | -r | -d | -p | -f) MATCH [--state S[,S]] [-y]
    raetsalt-key [-c CONFDIR] (-A | -R | -D | -P | -F) [--state S[,S]] [-y]
    raetsalt-key --gen-keys NAME [--gen-keys-dir DIR]

Keys live in the master's road keep, ``<pki_dir>/road`` (``raetsalt.paths.keep_dir``), in
one of Salt's four states:

  accepted    may join                                       "Accepted Keys:"
  unaccepted  seen on a first join, waits for an operator    "Unaccepted Keys:"
  rejected    refused until accepted or deleted              "Rejected Keys:"
  denied      a key that differs from the accepted or        "Denied Keys:"
              unaccepted key of the same id (set by the
              master only; the id keeps its other key)

MATCH is a glob on minion ids (``web*``, ``db[12]``), a comma-separated list of globs, or a
key fingerprint as ``-f`` prints it (colon-separated hex; it selects exactly that key).
Like salt-key, ``-a`` and ``-r`` act on unaccepted keys; ``--include-rejected``,
``--include-accepted``, ``--include-denied`` widen them, and ``-d`` acts on every state.
``--state`` (beyond salt-key) names the states to act on instead, for example
``raetsalt-key -d web1 --state denied`` deletes only web1's denied key.

Changes are made only to the key that was shown: a key that changed between the
question and the answer is left alone and reported.  While the master runs they are
commands to it over its lane (it applies them at once: a pending minion is accepted
immediately, a deleted accepted minion loses its session and must join again, showing
up as unaccepted); otherwise the keep is edited under its lock.  A key file that cannot
be read is named on stderr and skipped; ``-d ID`` removes it.

Exit status:
  0   done (also: nothing matched, or the question was answered no, as salt-key)
  1   a key could not be changed, or a bad config, keep or key file
  64  bad command line (salt-key's EX_USAGE)
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from raetsalt.cli._flags import add_version_flags
from raetsalt.errors import ConfigError, KeepError, LocalError, RaetSaltError
from raetsalt.keep.listing import (
    ACC,
    BAD,
    DEN,
    LOCAL,
    PRE,
    REJ,
    STATUSES,
    KeyEntry,
    id_lists,
    listed_ids,
    snapshot,
    sort_ids,
)
from raetsalt.keep.records import (
    fingerprint,
    normalize_fingerprint,
)
from raetsalt.keep.store import FileKeep
from raetsalt.output import OUTPUTTERS, render

if TYPE_CHECKING:
    from raetsalt.drivers.laneclient import CommandClient

PROG = "raetsalt-key"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 64  # what salt-key exits with on a usage error (optparse via Salt's parser)

_WORD = {PRE: "unaccepted", ACC: "accepted", REJ: "rejected", DEN: "denied",
         BAD: "unreadable"}
_HEADING = {
    LOCAL: "Local Keys:",
    ACC: "Accepted Keys:",
    DEN: "Denied Keys:",
    PRE: "Unaccepted Keys:",
    REJ: "Rejected Keys:",
    BAD: "Unreadable Keys:",
}
# Salt's key outputter colours (salt.utils.color): heading, then entries.
_COLOURS = {
    LOCAL: ("\033[0;1;35m", "\033[0;35m"),
    ACC: ("\033[0;1;32m", "\033[0;32m"),
    DEN: ("\033[0;1;35m", "\033[0;35m"),
    PRE: ("\033[0;1;31m", "\033[0;31m"),
    REJ: ("\033[0;1;34m", "\033[0;34m"),
    BAD: ("\033[0;1;31m", "\033[0;31m"),
}
_ENDC = "\033[0;0m"
# Which states each action may touch, and the ones it touches by default.
_ALLOWED = {
    "accept": (PRE, REJ, DEN),
    "reject": (PRE, ACC, DEN),
    "delete": STATUSES,
    "print": STATUSES,
    "finger": STATUSES,
}
_PAST = {"accept": "accepted", "reject": "rejected", "delete": "deleted"}


class _Exit(Exception):
    """Leave ``main`` with ``code`` after printing ``message`` (if any) on stderr."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# --------------------------------------------------------------------------- states


def parse_state(text: str) -> tuple[str, ...]:
    """Statuses named by a salt-key ``--list`` argument (also used by ``--state``).

    Salt matches by prefix: ``acc``/``accepted``, ``pre``/``un``/``unaccepted``,
    ``rej``/``rejected``, ``den``/``denied``, ``all``.  Raises ValueError otherwise.
    """
    word = text.strip().lower()
    if word.startswith("acc"):
        return (ACC,)
    if word.startswith(("pre", "un")):
        return (PRE,)
    if word.startswith("rej"):
        return (REJ,)
    if word.startswith("den"):
        return (DEN,)
    if word.startswith("all"):
        return STATUSES
    raise ValueError(f"'{text}' is not a valid argument to '--list'")


# --------------------------------------------------------------------------- the keys


def _is_fingerprint(pattern: str) -> bool:
    # Ids never contain ':' (raetsalt.keep.records.validate_name), so a pattern with a
    # colon cannot be meant as an id glob.
    return ":" in pattern


def _check_fingerprint(pattern: str, hash_type: str) -> str:
    want = normalize_fingerprint(pattern)
    size = len(fingerprint("", hash_type))
    bare = want.replace(":", "")
    if len(want) != size or any(c not in "0123456789abcdef" for c in bare):
        raise _Exit(
            EXIT_USAGE,
            f"'{pattern}' is neither an id glob nor a {hash_type} fingerprint "
            "(ids cannot contain ':')",
        )
    return want


def select(entries: Iterable[KeyEntry], match: str, hash_type: str) -> list[KeyEntry]:
    """Entries matching salt-key's MATCH: comma-separated id globs and/or fingerprints.

    Globs are case-sensitive (fnmatch, as Salt on POSIX).  A fingerprint matches the one
    key it belongs to; either case and with or without colons.
    """
    globs: list[str] = []
    fingers: set[str] = set()
    for part in match.split(","):
        part = part.strip()
        if not part:
            continue
        if _is_fingerprint(part):
            fingers.add(_check_fingerprint(part, hash_type))
        else:
            globs.append(part)
    return [
        entry
        for entry in entries
        if any(fnmatch.fnmatchcase(entry.id, g) for g in globs)
        or (fingers and entry.finger(hash_type) in fingers)
    ]


def _per_id(
    entries: Iterable[KeyEntry], statuses: Sequence[str], value: Any, *, keep_empty: bool
) -> dict[str, dict[str, Any]]:
    """``{status: {id: value(entry)}}``; an id with several denied keys gets a list."""
    out: dict[str, dict[str, Any]] = {s: {} for s in statuses}
    for entry in entries:
        if entry.status not in out:
            continue
        slot = out[entry.status]
        item = value(entry)
        if entry.id not in slot:
            slot[entry.id] = item
        elif isinstance(slot[entry.id], list):
            slot[entry.id].append(item)
        else:
            slot[entry.id] = [slot[entry.id], item]
    sorted_out = {s: {k: v[k] for k in sort_ids(v)} for s, v in out.items()}
    if keep_empty:
        return sorted_out
    return {s: v for s, v in sorted_out.items() if v}


def key_text(entry: KeyEntry) -> str:
    """What ``-p`` prints for a key: both public keys in hex, as Salt's RAET keys did."""
    return f"pub: {entry.pubhex}\nverify: {entry.verhex}"


def local_fingerprint(keep: FileKeep, hash_type: str) -> dict[str, str]:
    """``{estate name: fingerprint}`` of the master's own verify key ("Local Keys"), or
    ``{}`` before the master first ran."""
    local = keep.load_local()
    if local is None:
        return {}
    # Only raetsalt.crypto may use nacl; the verify key is derived from the stored seed.
    from raetsalt.crypto import Signer

    try:
        verify = Signer(bytes.fromhex(local.sighex)).verify_key
    except (ValueError, LocalError) as exc:
        raise KeepError(f"{keep.path_of('local', 'estate')}: bad sighex: {exc}") from None
    return {local.name: fingerprint(verify.hex(), hash_type)}


# --------------------------------------------------------------------------- output


def format_keys(data: Mapping[str, Any], *, color: bool = False) -> str:
    """salt-key's own outputter: a heading per status (sorted by Salt's status name, so
    Accepted, Denied, Unaccepted, Rejected; Local first), then one line per id, or
    ``id:  value`` per value when the status maps ids to values."""
    lines: list[str] = []
    for status in sorted(data):
        head, body = _COLOURS[status] if color else ("", "")
        end = _ENDC if color else ""
        lines.append(f"{head}{_HEADING[status]}{end}")
        items = data[status]
        for key in sorted(items):
            if isinstance(items, Mapping):
                values = items[key] if isinstance(items[key], list) else [items[key]]
                lines.extend(f"{body}{key}:  {value}{end}" for value in values)
            else:
                lines.append(f"{body}{key}{end}")
    return "\n".join(lines)


@dataclass
class _Out:
    fmt: str
    color: bool
    indent: int | None
    quiet: bool
    stdout: TextIO

    def data(self, data: Mapping[str, Any]) -> None:
        if self.fmt == "key":
            text = format_keys(data, color=self.color)
        else:
            text = render(dict(data), self.fmt, color=self.color, indent=self.indent)
        if text:
            print(text, file=self.stdout, flush=True)

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.stdout, flush=True)


# --------------------------------------------------------------------------- actions


def _stale(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def apply(keep: FileKeep, action: str, entry: KeyEntry) -> bool:
    """Carry out ``action`` on one listed key in the keep (the master is not running);
    False (nothing changed) if the key is no longer stored as listed."""
    return keep.apply_change(action, entry.ref()) is not None


class Master:
    """The running master, reached over its lane (``raetsalt.daemon.keys``)."""

    ANSWER_TIMEOUT = 30.0

    def __init__(self, client: CommandClient) -> None:
        self.client = client

    @classmethod
    def connect(cls, opts: Mapping[str, Any]) -> Master | None:
        """The running master, or None if it is not running (then edit the keep)."""
        from raetsalt.paths import manor_path

        try:
            path = manor_path(opts["sock_dir"], "master", None)
        except (LocalError, ConfigError):
            return None  # a socket path too long to bind: no master serves there
        if not os.path.exists(path):
            return None  # no socket at all (a crashed master leaves one: then we connect)
        from raetsalt.drivers.laneclient import CommandClient
        from raetsalt.errors import DaemonNotRunning, DaemonUnavailable
        try:
            return cls(CommandClient("master", opts["sock_dir"]))
        except DaemonNotRunning:
            return None
        except DaemonUnavailable as exc:
            raise _Exit(EXIT_FAILED, f"{exc}; the master is running, so the keep must not "
                                     "be edited behind its back") from None

    def ask(self, action: str, **fields: Any) -> dict[str, Any]:
        req = self.client.request("key", action=action, **fields)
        deadline = time.monotonic() + self.ANSWER_TIMEOUT
        while (left := deadline - time.monotonic()) > 0:
            for answer in self.client.receive(left):
                if answer.get("req") == req:
                    if isinstance(answer.get("error"), str) and "stale" not in answer:
                        raise _Exit(EXIT_FAILED, f"the master refused: {answer['error']}")
                    return answer
        raise _Exit(EXIT_FAILED, f"the master did not answer within {self.ANSWER_TIMEOUT:.0f} "
                                 "s; the change may or may not have been made (list again)")

    def close(self) -> None:
        self.client.close()


def _no_match_message(match: str, statuses: Sequence[str]) -> str:
    # Salt's words and order (unaccepted, accepted, rejected, denied), but naming the
    # states actually searched (salt-key says "unaccepted" even for -d).
    words = [_WORD[s] for s in (PRE, ACC, REJ, DEN) if s in statuses]
    text = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
    return f"The key glob '{match}' does not match any {text} keys."


def _ask(action: str) -> bool | None:
    """The confirmation; True/False, or None when stdin ended without an answer."""
    prompt = "Proceed? [N/y] " if action == "delete" else "Proceed? [n/Y] "
    try:
        answer = input(prompt)
    except EOFError:
        print(file=sys.stdout, flush=True)
        return None
    answer = answer.strip().lower()
    if not answer:
        return action != "delete"
    return answer.startswith("y")


def run_change(
    keep: FileKeep,
    action: str,
    match: str,
    statuses: Sequence[str],
    *,
    yes: bool,
    out: _Out,
    hash_type: str,
    master: Master | None = None,
    cluster: Callable[[list[KeyEntry]], list[KeyEntry]] = lambda entries: entries,
) -> int:
    """-a/-A, -r/-R, -d/-D: select, show, ask, change; returns the exit status."""
    if action == "delete":
        statuses = (*statuses, BAD)  # an unreadable key file goes with its id
    entries = cluster(snapshot(keep, _stale))
    chosen = [e for e in select(entries, match, hash_type) if e.status in statuses]
    if not chosen:
        out.say(_no_match_message(match, statuses))
        return EXIT_OK
    status = EXIT_OK
    if action != "delete":
        # An id has one key that can be accepted or rejected.  When the match names
        # several (an unaccepted and a denied one, two denied ones) the operator must say
        # which, otherwise we might accept a key they did not mean.
        by_id: dict[str, list[KeyEntry]] = {}
        for entry in chosen:
            by_id.setdefault(entry.id, []).append(entry)
        chosen = []
        for minion, found in by_id.items():
            if len(found) == 1:
                chosen.extend(found)
                continue
            states = ", ".join(sorted({_WORD[e.status] for e in found}))
            _stale(
                f"minion {minion} has {len(found)} matching keys ({states}); choose one "
                "by fingerprint (-f shows them) or with --state"
            )
            status = EXIT_FAILED
        if not chosen:
            return status
    out.say(f"The following keys are going to be {_PAST[action]}:")
    if not out.quiet:
        out.data({s: ids for s, ids in id_lists(chosen, (*STATUSES, BAD)).items() if ids})
    if not yes:
        answer = _ask(action)
        if answer is None:
            _stale("no answer on standard input; nothing changed (use -y to skip the question)")
            return EXIT_FAILED
        if not answer:
            return status
    done: list[str] = []
    stale: list[KeyEntry] = []
    if master is not None:
        reply = master.ask(action, keys=[entry.wire() for entry in chosen])
        refused = {i for i in reply.get("stale", ()) if isinstance(i, int)}
        for index, entry in enumerate(chosen):
            if index in refused:
                stale.append(entry)
            else:
                done.append(entry.id)
        if isinstance(reply.get("error"), str):
            _stale(f"the master made the change but {reply['error']}")
            status = EXIT_FAILED
    else:
        for entry in chosen:
            if apply(keep, action, entry):
                done.append(entry.id)
            else:
                stale.append(entry)
    for entry in stale:
        _stale(
            f"the {_WORD[entry.status]} key of minion {entry.id} changed since it was "
            f"listed; it was not {_PAST[action]}"
        )
        status = EXIT_FAILED
    # One line per id even when two of its keys went (salt-key repeats the line).
    for minion in sort_ids(done):
        out.say(f"Key for minion {minion} {_PAST[action]}.")
    return status


# --------------------------------------------------------------------------- gen-keys


def gen_keys(name: str, directory: str, hash_type: str) -> dict[str, dict[str, str]]:
    """Write a new estate key set: ``NAME.pem`` (private: ``sighex``, ``prihex``; mode 0600)
    and ``NAME.pub`` (``verhex``, ``pubhex``), both small YAML mappings.  Existing files are
    never overwritten.  Returns ``{"local": {"NAME.pub": fingerprint}}``."""
    from raetsalt.crypto import KeyPair, Signer

    if not name or "/" in name or name in (".", ".."):
        raise _Exit(EXIT_USAGE, f"--gen-keys: '{name}' is not a usable file name")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise _Exit(EXIT_FAILED, f"{directory}: cannot create: {exc.strerror or exc}") from None
    signer, pair = Signer.generate(), KeyPair.generate()
    files = {
        f"{name}.pem": (f"sighex: {signer.seed.hex()}\nprihex: {pair.secret.hex()}\n", 0o600),
        f"{name}.pub": (f"verhex: {signer.verify_key.hex()}\npubhex: {pair.public.hex()}\n",
                        0o644),
    }
    for filename in files:
        if os.path.lexists(os.path.join(directory, filename)):
            raise _Exit(EXIT_FAILED, f"{os.path.join(directory, filename)}: already exists")
    for filename, (text, mode) in files.items():
        path = os.path.join(directory, filename)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write(text)
        except OSError as exc:
            raise _Exit(EXIT_FAILED, f"{path}: cannot write: {exc.strerror or exc}") from None
    return {LOCAL: {f"{name}.pub": fingerprint(signer.verify_key.hex(), hash_type)}}


# --------------------------------------------------------------------------- command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _default_confdir() -> str:
    from raetsalt import syspaths

    return os.environ.get("RAETSALT_CONFIG_DIR", syspaths.CONFIG_DIR)


def _parser() -> argparse.ArgumentParser:
    doc = __doc__ or ""
    parser = _Parser(
        prog=PROG,
        description=doc.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=doc[doc.index("Keys live"):],
    )
    add_version_flags(parser)
    parser.add_argument("-c", "--config-dir", dest="confdir", default=None,
                        help=f"master config directory (default {_default_confdir()})")
    acts = parser.add_argument_group("Actions").add_mutually_exclusive_group()
    acts.add_argument("-l", "--list", metavar="ARG", default=None,
                      help="list keys in a state: acc[epted], un[accepted]/pre, rej[ected], "
                           "den[ied] or all")
    acts.add_argument("-L", "--list-all", action="store_true",
                      help="list all keys (same as --list all)")
    acts.add_argument("-a", "--accept", metavar="MATCH", help="accept matching unaccepted keys")
    acts.add_argument("-A", "--accept-all", action="store_true",
                      help="accept all unaccepted keys")
    acts.add_argument("-r", "--reject", metavar="MATCH", help="reject matching unaccepted keys")
    acts.add_argument("-R", "--reject-all", action="store_true",
                      help="reject all unaccepted keys")
    acts.add_argument("-d", "--delete", metavar="MATCH",
                      help="delete matching keys in every state")
    acts.add_argument("-D", "--delete-all", action="store_true", help="delete all keys")
    acts.add_argument("-p", "--print", dest="print_", metavar="MATCH",
                      help="print matching public keys")
    acts.add_argument("-P", "--print-all", action="store_true", help="print all public keys")
    acts.add_argument("-f", "--finger", metavar="MATCH",
                      help="print the fingerprints of matching keys")
    acts.add_argument("-F", "--finger-all", action="store_true",
                      help="print all fingerprints, the master's own key included")
    acts.add_argument("--gen-keys", metavar="NAME",
                      help="write a new key set to NAME.pem/NAME.pub (no config needed)")
    parser.add_argument("--gen-keys-dir", metavar="DIR", default=".",
                        help="directory for --gen-keys (default: the current directory)")
    parser.add_argument("--include-accepted", action="store_true",
                        help="-r/-R also reject accepted keys")
    parser.add_argument("--include-rejected", action="store_true",
                        help="-a/-A also accept rejected keys")
    parser.add_argument("--include-denied", action="store_true",
                        help="-a/-r also act on denied keys")
    parser.add_argument("--include-all", action="store_true",
                        help="deprecated in salt-key: --include-rejected for -a, "
                             "--include-accepted for -r")
    parser.add_argument("--state", metavar="S[,S]", default=None,
                        help="act only on keys in these states (names as for --list); "
                             "replaces the defaults and the --include-* options")
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no messages from -a/-r/-d (listings still print)")
    parser.add_argument("--out", default="key", choices=("key", *OUTPUTTERS),
                        help="output format (default: salt-key's own)")
    parser.add_argument("--out-indent", type=int, default=None, metavar="N")
    colour = parser.add_mutually_exclusive_group()
    colour.add_argument("--no-color", "--no-colour", dest="color", action="store_false",
                        default=None, help="never colour the output")
    colour.add_argument("--force-color", "--force-colour", dest="color", action="store_true",
                        help="colour the output even when it is not a terminal")
    return parser


def _action(args: argparse.Namespace) -> tuple[str, str]:
    """(action, match) from the parsed options; listing all when none is given."""
    for action, single, every in (
        ("accept", args.accept, args.accept_all),
        ("reject", args.reject, args.reject_all),
        ("delete", args.delete, args.delete_all),
        ("print", args.print_, args.print_all),
        ("finger", args.finger, args.finger_all),
    ):
        if single is not None:
            return action, single
        if every:
            return action, "*"
    return "list", args.list if args.list is not None else "all"


def _statuses(action: str, args: argparse.Namespace) -> tuple[str, ...]:
    """States the action looks at: --state, else salt-key's defaults widened by the
    --include-* options."""
    allowed = _ALLOWED[action]
    if args.state is not None:
        wanted: list[str] = []
        for part in args.state.split(","):
            try:
                wanted.extend(parse_state(part))
            except ValueError:
                raise _Exit(EXIT_USAGE, f"'{part}' is not a valid argument to '--state'") from None
        if action in ("accept", "reject") and not any(s in allowed for s in wanted):
            raise _Exit(EXIT_USAGE, f"keys cannot be {_PAST[action]} from the state(s) "
                                    f"given by --state {args.state}")
        return tuple(s for s in STATUSES if s in wanted and s in allowed)
    if action == "accept":
        extra = {REJ: args.include_rejected or args.include_all, DEN: args.include_denied}
    elif action == "reject":
        extra = {ACC: args.include_accepted or args.include_all, DEN: args.include_denied}
    else:
        return allowed
    return tuple(s for s in STATUSES if s == PRE or extra.get(s, False))


def _run(args: argparse.Namespace, out: _Out) -> int:
    action, match = _action(args)
    if action == "list":
        if args.state is not None:
            raise _Exit(EXIT_USAGE, "--state filters -a/-r/-d/-p/-f; to list one state use -l")
        try:
            statuses = parse_state(match)
        except ValueError as exc:
            raise _Exit(EXIT_USAGE, str(exc)) from None
    else:
        statuses = _statuses(action, args)

    from raetsalt.config import load_node_config
    from raetsalt.paths import keep_dir

    opts = load_node_config(args.confdir or _default_confdir(), "master")
    hash_type = str(opts.get("hash_type") or "sha256")
    keep = FileKeep(keep_dir(opts))

    def cluster(entries: list[KeyEntry]) -> list[KeyEntry]:
        # A key denied on another master is accepted or rejected there (its keep holds
        # it); from here it is listed, and deleted everywhere.
        return with_cluster(opts, entries, denied=action not in ("accept", "reject"))

    if action == "list":
        if in_cluster(opts):
            out.data(id_lists(cluster(snapshot(keep, _stale)), statuses))
        else:  # one master: the ids straight from the key index
            out.data(listed_ids(keep, statuses, _stale))
        _report_limit(opts)
        return EXIT_OK
    if action in ("print", "finger"):
        entries = cluster(snapshot(keep, _stale))
        keep_empty = match == "*" and args.state is None  # -P/-F show every heading
        chosen = entries if match == "*" else select(entries, match, hash_type)
        if action == "print":
            out.data(_per_id(chosen, statuses, key_text, keep_empty=keep_empty))
            return EXIT_OK
        data: dict[str, Any] = _per_id(
            chosen, statuses, lambda e: e.finger(hash_type), keep_empty=keep_empty
        )
        if args.state is None:
            local = local_fingerprint(keep, hash_type)
            if match != "*":
                local = {k: v for k, v in local.items() if select_name(k, match)}
            if local:
                data[LOCAL] = local
        out.data(data)
        return EXIT_OK
    master = Master.connect(opts)
    try:
        if master is None and in_cluster(opts):
            cluster = _local_only  # the cluster's other keys go through a running master
        return run_change(keep, action, match, statuses, yes=args.yes, out=out,
                          hash_type=hash_type, master=master, cluster=cluster)
    finally:
        if master is not None:
            master.close()


def _local_only(entries: list[KeyEntry]) -> list[KeyEntry]:
    return entries


def in_cluster(opts: Mapping[str, Any]) -> bool:
    """A master of a cluster whose shared store this tool can read (``cluster_id`` and
    ``cluster_store``)."""
    return bool(opts.get("cluster_id") and opts.get("cluster_store"))


def with_cluster(opts: Mapping[str, Any], entries: list[KeyEntry], *,
                 denied: bool = True) -> list[KeyEntry]:
    """The keys of this master's keep and, in a cluster (``cluster_id`` with
    ``cluster_store``), the ids accepted, rejected or waiting (pending) on the other
    masters that this one has not seen, and (``denied``) the keys denied on any master (a
    store that cannot be read is said on stderr: the local keys are listed)."""
    if not in_cluster(opts):
        return entries
    try:
        import psycopg

        from raetsalt.store.pgconfig import connection_params
        from raetsalt.store.pgkeys import stored
    except ImportError as exc:
        _stale(f"the cluster's keys are not listed: {exc}")
        return entries
    try:
        decisions = stored(connection_params(opts), str(opts["cluster_id"]))
    except (psycopg.Error, ValueError) as exc:
        text = str(exc).strip().splitlines()
        _stale(f"the cluster's keys are not listed (only this master's): "
               f"{text[0] if text else type(exc).__name__}")
        return entries
    here = {entry.id for entry in entries if entry.status != DEN}  # a record here
    denied_here = {(e.id, e.verhex, e.pubhex) for e in entries if e.status == DEN}
    status = {"accepted": ACC, "rejected": REJ, "pending": PRE}
    extra = [KeyEntry(d.role, status[d.state], d.verhex, d.pubhex) for d in decisions
             if d.state in status and d.role not in here]
    extra += [KeyEntry(d.role, DEN, d.verhex, d.pubhex) for d in decisions
              if denied and d.state == "denied"
              and (d.role, d.verhex, d.pubhex) not in denied_here]
    return entries + extra if extra else entries


def _report_limit(opts: Mapping[str, Any]) -> None:
    """On stderr (stdout stays salt-key's listing): new ids the running master dropped
    because ``max_pending_keys`` keys wait for an operator."""
    master = Master.connect(opts)
    if master is None:
        return
    try:
        status = master.ask("status")
    finally:
        master.close()
    dropped, pending = status.get("dropped"), status.get("pending")
    limit = status.get("max_pending")
    if isinstance(dropped, int) and dropped > 0:
        _stale(f"the master dropped {dropped} join(s) of new minion ids: {pending} keys wait "
               f"for an operator and max_pending_keys is {limit}")


def select_name(name: str, match: str) -> bool:
    """Does ``name`` match one of the comma-separated globs of ``match``?"""
    return any(
        fnmatch.fnmatchcase(name, part.strip())
        for part in match.split(",")
        if part.strip() and not _is_fingerprint(part)
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``raetsalt-key``; returns the exit status."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # usage error (64) or --help (0)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    color = args.color if args.color is not None else sys.stdout.isatty()
    out = _Out(args.out, color, args.out_indent, args.quiet, sys.stdout)
    try:
        if args.gen_keys is not None:
            out.data(gen_keys(args.gen_keys, args.gen_keys_dir, "sha256"))
            return EXIT_OK
        return _run(args, out)
    except _Exit as exc:
        if exc.message:
            if exc.code == EXIT_USAGE:
                _parser().print_usage(sys.stderr)
            print(f"{PROG}: error: {exc.message}", file=sys.stderr, flush=True)
        return exc.code
    except (ConfigError, KeepError, LocalError, RaetSaltError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the exit flush
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
