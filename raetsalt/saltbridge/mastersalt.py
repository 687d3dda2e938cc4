"""Salt's code on the master side, outside its loop: the reactor's renderers and the
``event_return`` returners (both in the master's automation process,
``raetsalt.daemon.automation``), Salt's view of the master's config and Salt's engines
(the Salt-surfaces process, ``raetsalt.daemon.saltbus``).  Salt is imported only inside
these functions."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from raetsalt.services.reactor import event_context


def salt_renderer_available() -> bool:
    """Whether Salt's template renderers can be imported here (an import, not a look)."""
    try:
        import salt.template  # noqa: F401
    except ImportError:
        return False
    return True


def local_path(sls: str, opts: Mapping[str, Any]) -> str | None:
    """A reactor file's path: as written, or ``salt://PATH`` in the master's base
    ``file_roots`` (never outside them)."""
    if not sls.startswith("salt://"):
        return sls
    relative = sls[len("salt://"):].lstrip("/")
    roots = (opts.get("file_roots") or {}).get("base") or []
    for root in roots:
        real_root = os.path.realpath(str(root))
        candidate = os.path.realpath(os.path.join(real_root, relative))
        if candidate.startswith(real_root + os.sep) and os.path.isfile(candidate):
            return candidate
    return None


def salt_renderer(opts: Mapping[str, Any]) -> Callable[[str, str, Mapping[str, Any]], Any]:
    """Salt's renderers (``renderer``, default ``jinja|yaml``) for reactor files; raises
    ImportError without the salt extra."""
    import salt.config
    import salt.loader
    import salt.template

    cachedir = os.path.join(str(opts["cachedir"]), "salt-reactor")
    salt_opts = salt.config.apply_master_config(
        {"id": opts["id"], "root_dir": "/", "cachedir": cachedir,
         "pki_dir": os.path.join(cachedir, "pki"), "sock_dir": opts["sock_dir"],
         "file_roots": dict(opts.get("file_roots") or {}),
         "pillar_roots": dict(opts.get("pillar_roots") or {}),
         "log_file": opts.get("log_file"), "conf_file": opts.get("conf_file")},
        salt.config.DEFAULT_MASTER_OPTS.copy())
    renderers = salt.loader.render(salt_opts, salt.loader.minion_mods(salt_opts))
    _cache_jinja_compilation()
    # Salt logs a template's error with its traceback, at every render; the reactor says
    # it once, in one line, with the file and the tag (``Reactor._failed``).
    logging.getLogger("salt").setLevel(logging.CRITICAL)
    lock = threading.Lock()

    def render(sls: str, tag: str, data: Mapping[str, Any]) -> Any:
        path = local_path(sls, opts)
        if path is None or not os.path.isfile(path):
            raise FileNotFoundError(f"no such file {sls}")
        sls = path
        context = event_context(tag, data)
        with lock:  # Salt's loader is not meant for several threads at once
            return salt.template.compile_template(
                sls, renderers, salt_opts["renderer"], salt_opts["renderer_blacklist"],
                salt_opts["renderer_whitelist"], **context)

    return render


JINJA_CACHE = 256
"""Compiled reactor templates kept (by source and environment settings)."""


def _cache_jinja_compilation() -> None:
    """Salt's jinja renderer builds an environment and compiles the template again at
    every render: two thirds of a reactor file's cost.  In the reactor's process only,
    ``jinja2.Environment.compile`` keeps the code of the last ``JINJA_CACHE`` sources,
    keyed by everything of the environment that changes the code (the syntax settings
    and extensions), so a file renders as Salt renders it, only without recompiling."""
    import functools

    import jinja2

    original: Any = jinja2.Environment.compile
    if getattr(original, "_raetsalt_cached", False):
        return

    @functools.lru_cache(maxsize=JINJA_CACHE)
    def compiled(key: tuple[Any, ...], env: Any, source: str, name: Any, filename: Any,
                 raw: bool, defer_init: bool) -> Any:
        return original(env.env, source, name, filename, raw, defer_init)

    def compile_cached(self: Any, source: Any, name: Any = None, filename: Any = None,
                       raw: bool = False, defer_init: bool = False) -> Any:
        if not isinstance(source, str):
            return original(self, source, name, filename, raw, defer_init)
        key = (source, name, filename, raw, defer_init, self.block_start_string,
               self.block_end_string, self.variable_start_string, self.variable_end_string,
               self.comment_start_string, self.comment_end_string,
               self.line_statement_prefix, self.line_comment_prefix, self.trim_blocks,
               self.lstrip_blocks, self.newline_sequence, self.keep_trailing_newline,
               self.optimized, repr(self.autoescape), tuple(sorted(self.extensions)))
        return compiled(key, _Unhashed(self), source, name, filename, raw, defer_init)

    compile_cached._raetsalt_cached = True  # type: ignore[attr-defined]
    jinja2.Environment.compile = compile_cached  # type: ignore[method-assign]


class _Unhashed:
    """An environment passed through ``lru_cache`` without being part of its key."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Unhashed)


def salt_returners(opts: Mapping[str, Any]) -> Any:
    """Salt's returner modules for the master (``event_return``); raises LookupError
    without the salt extra."""
    try:
        import salt.config
        import salt.loader
    except ImportError:
        raise LookupError("event_return: returners other than sqlite3 are Salt's; install "
                          "the salt extra (pip install 'raetsalt[salt]')") from None
    cachedir = os.path.join(str(opts["cachedir"]), "salt-reactor")
    salt_opts = salt.config.apply_master_config(
        {"id": opts["id"], "root_dir": "/", "cachedir": cachedir,
         "pki_dir": os.path.join(cachedir, "pki"), "sock_dir": opts["sock_dir"],
         **{k: v for k, v in opts.items() if "." in k.strip(".")}},
        salt.config.DEFAULT_MASTER_OPTS.copy())
    return salt.loader.returners(salt_opts, salt.loader.minion_mods(salt_opts))


def salt_engines_available() -> bool:
    """Whether Salt's engines and pyzmq (its request channel) can be imported here."""
    try:
        import salt.engines  # noqa: F401
        import zmq  # noqa: F401
    except ImportError:
        return False
    return True


def salt_master_opts(conf_file: str) -> dict[str, Any]:
    """The master's config file as Salt's own clients read it (``LocalClient(c_path=...)``
    calls the same function): Salt's ``sock_dir``, ``cachedir``, ``ret_port``..."""
    import salt.config

    opts: dict[str, Any] = salt.config.master_config(conf_file)
    return opts


def start_salt_engines(salt_opts: dict[str, Any], name: str) -> Any:
    """Salt's ``engines:`` started by Salt's ``start_engines`` under a Salt
    ``ProcessManager`` (on the master, and in a minion's scheduler process with its Salt
    minion opts) (returned: ``check_children``, ``stop_restarting``,
    ``kill_children``)."""
    import salt.engines
    import salt.utils.process

    manager = salt.utils.process.ProcessManager(name=name)
    salt.engines.start_engines(salt_opts, manager)
    return manager
