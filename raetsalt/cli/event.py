"""``raetsalt-event``: watch or fire events on a node's bus.

    raetsalt-event listen [--master|--minion] [-c CONFDIR] [--tag T] [--match-type M] [--out json]
    raetsalt-event fire [--master|--minion] [-c CONFDIR] TAG JSON

``listen`` prints each event as it arrives: ``<tag>\\t<data as JSON>`` (as Salt's
``state.event pretty=False``), or one JSON object ``{"tag", "data"}`` per line with
``--out json``.  ``fire`` exits 0 when the bus took the event, 1 when it did not.
The node defaults to the minion; ``--sock-dir``/``--id`` override the config file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from raetsalt.bus import MATCH_TYPES
from raetsalt.cli._flags import add_version_flags
from raetsalt.errors import ConfigError, LocalError
from raetsalt.event import SaltEvent

DEFAULT_CONFDIR = "/etc/raetsalt"


def _opts(args: argparse.Namespace) -> dict[str, Any]:
    from raetsalt.config import load_node_config

    confdir = args.confdir
    if confdir is None and args.sock_dir is not None:
        opts: dict[str, Any] = {}
    else:
        opts = load_node_config(confdir or os.environ.get("RAETSALT_CONFIG_DIR", DEFAULT_CONFDIR),
                                args.node)
    if args.sock_dir is not None:
        opts["sock_dir"] = args.sock_dir
    if args.node_id is not None:
        opts["id"] = args.node_id
    return opts


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raetsalt-event", description=__doc__.split("\n\n")[0])
    add_version_flags(parser)
    common = argparse.ArgumentParser(add_help=False)
    which = common.add_mutually_exclusive_group()
    which.add_argument("--master", dest="node", action="store_const", const="master")
    which.add_argument("--minion", dest="node", action="store_const", const="minion")
    common.add_argument("-c", "--config-dir", dest="confdir", default=None,
                        help=f"config directory (default {DEFAULT_CONFDIR})")
    common.add_argument("--sock-dir", default=None, help="use this sock_dir (no config file)")
    common.add_argument("--id", dest="node_id", default=None, help="minion id")
    common.set_defaults(node="minion")
    sub = parser.add_subparsers(dest="command", required=True)
    listen = sub.add_parser("listen", parents=[common], help="print events as they arrive")
    listen.add_argument("--tag", default="")
    listen.add_argument("--match-type", choices=MATCH_TYPES, default=None)
    listen.add_argument("--out", choices=("text", "json"), default="text")
    fire = sub.add_parser("fire", parents=[common], help="fire one event")
    fire.add_argument("tag")
    fire.add_argument("data", help="event data as a JSON object")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        opts = _opts(args)
        event = SaltEvent(args.node, opts=opts)
        if args.command == "fire":
            try:
                data = json.loads(args.data)
            except json.JSONDecodeError as exc:
                print(f"error: data is not JSON: {exc}", file=sys.stderr)
                return 2
            if not isinstance(data, dict):
                print("error: data must be a JSON object", file=sys.stderr)
                return 2
            ok = event.fire_event(data, args.tag)
            if not ok:
                print(f"error: the {args.node} event bus did not take the event", file=sys.stderr)
            event.destroy()
            return 0 if ok else 1
        for item in event.iter_events(tag=args.tag, full=True, match_type=args.match_type):
            if args.out == "json":
                line = json.dumps(item, default=repr)
            else:
                line = f"{item['tag']}\t{json.dumps(item['data'], default=repr)}"
            print(line, flush=True)
    except (ConfigError, LocalError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
