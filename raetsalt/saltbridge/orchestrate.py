"""Salt's orchestrate runner (``state.orchestrate``/``state.orch``) for ``raetsalt-run``.

Where it runs.  Salt runs orchestrate inside the master, as the master's user, and
checks only whether the caller may run the runner.  raetsalt runs it in the
``raetsalt-run`` process, as the user who typed it: Salt's own state compiler (its
loader, renderers, requisites, ``test=True``) renders the SLS from the master's
``file_roots`` (and the orchestrating "minion"'s pillar from ``pillar_roots``), and the
``salt.state``/``salt.function``/``salt.runner`` states reach the minions through
raetsalt's master with this user's connection and credentials
(``raetsalt.saltbridge.client``).  So each step is allowed or refused by the master
exactly as the same command typed by this user (``publisher_acl``, ``external_auth``),
the files are read with this user's rights, and no master process renders anything a
user wrote.  The price: the user must be able to read the SLS files.

The orchestrating minion's id is ``<master id>_master`` (Salt's), its cache a private
temporary directory removed afterwards.  The return is Salt's: ``{data: {id:
{state: result}}, outputter: 'highstate', retcode}``, ``retcode`` 1 when a step
failed (Salt's ``state.check_result``).  Salt's job events for the orchestration
(``salt/run/<jid>/...``) are not fired.
"""

from __future__ import annotations

import getpass
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

from .client import Connection, LocalClient, RunnerClient

FUNCTIONS = frozenset({"state.orchestrate", "state.orch", "state.sls"})
"""The runner names that mean orchestrate (Salt's aliases)."""
MISSING_SALT = ("{prog}: {fun} needs the 'salt' package (pip install 'raetsalt[salt]'): "
                "Salt's state compiler renders the orchestration")


def orchestrate_id(master_opts: Mapping[str, Any]) -> str:
    """The orchestrating minion's id: Salt's ``<master id>_master``."""
    master_id = str(master_opts.get("id") or "master")
    return master_id if master_id.endswith("_master") else f"{master_id}_master"


def _salt_opts(master_opts: Mapping[str, Any], cachedir: str) -> dict[str, Any]:
    import salt.config

    overrides = {
        "id": orchestrate_id(master_opts), "root_dir": "/", "cachedir": cachedir,
        "pki_dir": os.path.join(cachedir, "pki"), "sock_dir": os.path.join(cachedir, "sock"),
        "extension_modules": os.path.join(cachedir, "extmods"),
        "conf_file": str(master_opts.get("conf_file") or os.path.join(cachedir, "master")),
        "log_file": os.path.join(cachedir, "log"), "file_client": "local",
        "file_roots": dict(master_opts.get("file_roots") or {}),
        "pillar_roots": dict(master_opts.get("pillar_roots") or {}),
        "renderer": master_opts.get("renderer", "jinja|yaml"),
        "state_top": master_opts.get("state_top", "top.sls"),
        "nodegroups": dict(master_opts.get("nodegroups") or {}),
        "master_job_cache": "local_cache", "user": getpass.getuser(),
        "multiprocessing": False, "cache_jobs": False, "grains_cache": False,
        "state_events": False, "transport": "zeromq", "master_type": "str",
        "__role": "master",
    }
    opts: dict[str, Any] = salt.config.apply_minion_config(
        overrides, salt.config.DEFAULT_MINION_OPTS.copy())
    opts["file_client"] = "local"
    return opts


def _patch_salt(local: LocalClient, runner: RunnerClient) -> None:
    """Salt's client entry points -> the raetsalt clients; its job events -> nothing."""
    import salt.client
    import salt.runner
    import salt.utils.event

    salt.client.get_local_client = lambda *args, **kwargs: local
    salt.client.LocalClient = lambda *args, **kwargs: local
    salt.runner.RunnerClient = lambda *args, **kwargs: runner
    salt.utils.event.fire_args = lambda *args, **kwargs: None


def run(master_opts: Mapping[str, Any], conn: Connection, auth: Mapping[str, Any],
        mods: Any, *, saltenv: str | None = "base", test: Any = None,
        pillar: Any = None, pillarenv: str | None = None, exclude: Any = None,
        timeout: float | None = None) -> dict[str, Any]:
    """Run the orchestration ``mods`` (``raetsalt-run state.orchestrate mods``) and
    return Salt's runner return (see the module docstring).  Raises Salt's exceptions
    for a bad call (``SaltInvocationError``: a pillar that is not a mapping)."""
    import salt.exceptions
    import salt.loader
    import salt.utils.jid
    import salt.utils.state

    if pillar is not None and not isinstance(pillar, dict):
        raise salt.exceptions.SaltInvocationError("Pillar data must be formatted as a "
                                                  "dictionary")
    wait = float(timeout) if timeout else float(master_opts.get("timeout") or 5)
    local = LocalClient(conn, auth, timeout=wait)
    runner = RunnerClient(conn, auth, timeout=max(wait, 60.0))
    cachedir = tempfile.mkdtemp(prefix="raetsalt-orch-")
    try:
        opts = _salt_opts(master_opts, cachedir)
        _patch_salt(local, runner)
        opts["grains"] = salt.loader.grains(opts)
        opts["pillar"] = {}
        utils = salt.loader.utils(opts)
        functions = salt.loader.minion_mods(opts, utils=utils)
        jid = salt.utils.jid.gen_jid(opts)
        running = functions["state.sls"](
            mods, test, exclude, pillar=pillar, saltenv=saltenv or "base",
            pillarenv=pillarenv, __pub_jid=jid, orchestration_jid=jid)
        data = {opts["id"]: running}
        ok = salt.utils.state.check_result(data)
        return {"data": data, "outputter": "highstate", "retcode": 0 if ok else 1}
    finally:
        shutil.rmtree(cachedir, ignore_errors=True)
