"""A master worker process: the disk and CPU work of the file server and of pillar, so the
master daemon's loop never waits on them.

``python -m raetsalt.saltbridge.worker READ_FD WRITE_FD`` reads frames
(``control.FrameReader``) on one inherited pipe and answers on the other (never stdout:
nothing a library prints can corrupt a frame), one request at a time, in order:

* first ``{kind: 'files'|'pillar', opts: {...}, log: {...}}``: what this worker serves;
* then ``{id, op, args}`` -> ``{id, ret}``, ``{id, refused: text}`` (a path that leaves
  ``file_roots``: the minion is told) or ``{id, error: text}`` (an unreadable file, or a
  bug: only a bug is logged here with its traceback; the minion gets one line).

``files`` ops: ``hash``, ``find``, ``serve``, ``list`` (``raetsalt.saltbridge.roots``);
``pillar`` op: ``pillar`` (``raetsalt.saltbridge.pillar``).  The daemon starts a worker
when it first needs one, restarts it when it dies and kills it when an answer is late.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any

from raetsalt.errors import BadPacket

from .control import FrameReader, child_logging, encode_frame, write_all
from .paths import PathRefused
from .pillar import PillarCompiler, make_compiler
from .roots import FileRoots

log = logging.getLogger("raetsalt.saltbridge.worker")


class Handler:
    """Runs the ops of one worker kind."""

    def __init__(self, kind: str, opts: dict[str, Any]) -> None:
        self.kind = kind
        self.files: FileRoots | None = None
        self.pillar: PillarCompiler | None = None
        if kind == "files":
            self.files = FileRoots(opts.get("file_roots") or {},
                                   hash_type=str(opts.get("hash_type", "sha256")),
                                   buffer_size=int(opts.get("file_buffer_size", 65536)))
        elif kind == "pillar":
            self.pillar = make_compiler(opts.get("pillar_roots") or {}, opts)
        else:
            raise ValueError(f"unknown worker kind {kind!r}")

    def run(self, op: str, args: dict[str, Any]) -> Any:
        if self.files is not None:
            files = self.files
            if op == "hash":
                return files.file_hash(args["saltenv"], args["path"])
            if op == "find":
                return files.find(args["saltenv"], args["path"])
            if op == "serve":
                return files.serve(args["saltenv"], args["path"], args["loc"], args["gzip"])
            if op == "list":
                lister = {"files": files.file_list, "dirs": files.dir_list,
                          "empty_dirs": files.empty_dirs}[args["form"]]
                return lister(args["saltenv"], args["prefix"])
        if self.pillar is not None and op == "pillar":
            return self.pillar.compile(args["minion"], args["grains"], args["pillarenv"],
                                       args["override"])
        raise ValueError(f"{self.kind} worker has no op {op!r}")

    def answer(self, request: Any) -> dict[str, Any]:
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            return {"id": None, "error": "not a request"}
        ident = request.get("id")
        try:
            return {"id": ident, "ret": self.run(request["op"], request.get("args") or {})}
        except PathRefused as exc:
            return {"id": ident, "refused": str(exc)}
        except OSError as exc:  # an unreadable file: the master counts it, no traceback
            return {"id": ident, "error": exc.strerror or type(exc).__name__}
        except Exception as exc:  # noqa: BLE001 - one failed request must not end the worker
            log.exception("%s worker: %s failed", self.kind, request.get("op"))
            return {"id": ident, "error": f"{type(exc).__name__}: {exc}"}


def serve(read_fd: int, write_fd: int) -> int:
    reader = FrameReader()
    handler: Handler | None = None
    while True:
        chunk = os.read(read_fd, 1 << 20)
        if not chunk:
            return 0
        try:
            frames = reader.feed(chunk)
        except BadPacket as exc:
            log.error("worker: bad frame from the master: %s", exc)
            return 1
        for frame in frames:
            if handler is None:
                handler = _start(frame)
                continue
            write_all(write_fd, encode_frame(handler.answer(frame)))


def _start(frame: Any) -> Handler:
    opts = frame.get("opts") or {}
    child_logging(opts.get("log_file"), frame.get("log"), "master")
    return Handler(str(frame.get("kind")), opts)


def main(argv: list[str]) -> int:
    # Salt imports modules Python deprecates; that is not the operator's business.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    return serve(int(argv[0]), int(argv[1]))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
