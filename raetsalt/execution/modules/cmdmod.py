"""Run shell commands on the minion.

Every argument is checked for its type before anything runs: ``cmd`` is text,
``python_shell`` a real boolean (the string ``'False'`` would be true in Python and
run the command through the shell), ``cwd`` text, ``env`` a mapping of names to text or
numbers, ``timeout`` a positive number.  A wrong type fails the job with ``ERROR: ...``
instead of being coerced.  Salt's other ``cmd`` keyword arguments (``runas``, ``shell``,
``stdin``, ``umask``...) do not exist here, so passing one fails the job too.

With ``python_shell=False`` the command is split like a POSIX shell would
(``shlex.split``) and run without one; the program is looked up in ``env['PATH']`` when
``env`` sets it, as with Salt, so access rules must never leave ``env`` free (see
``raetsalt.acl``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping
from typing import Any

from raetsalt.execution.loader import CommandExecutionError, Context

__virtualname__ = "cmd"


def _checked(cmd: Any, cwd: Any, env: Any, python_shell: Any, timeout: Any
             ) -> tuple[str | list[str], dict[str, str]]:
    """The argv (or shell text) and environment to run, or CommandExecutionError."""
    if not isinstance(cmd, str) or not cmd.strip():
        raise CommandExecutionError(f"cmd must be a non-empty string, not {type(cmd).__name__}")
    if not isinstance(python_shell, bool):
        raise CommandExecutionError("python_shell must be True or False, not "
                                    f"{type(python_shell).__name__} {python_shell!r}")
    if cwd is not None and not isinstance(cwd, str):
        raise CommandExecutionError(f"cwd must be a path string, not {type(cwd).__name__}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or timeout <= 0):
        raise CommandExecutionError(f"timeout must be a positive number, not {timeout!r}")
    if env is not None and not isinstance(env, Mapping):
        raise CommandExecutionError(f"env must be a mapping, not {type(env).__name__}")
    extra: dict[str, str] = {}
    for key, value in (env or {}).items():
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(
                value, str | int | float):
            raise CommandExecutionError(
                f"env entries must map names to text or numbers, not {key!r}: {value!r}")
        extra[key] = str(value)
    if any("\0" in text for text in (cmd, cwd or "", *extra, *extra.values())):
        raise CommandExecutionError("cmd, cwd and env may not contain NUL characters")
    if python_shell:
        return cmd, dict(os.environ, **extra)
    try:
        argv = shlex.split(cmd)
    except ValueError as exc:
        raise CommandExecutionError(f"cannot split {cmd!r} into arguments: {exc}") from None
    return argv, dict(os.environ, **extra)


def _run(
    cmd: Any, cwd: Any, env: Any, python_shell: Any, timeout: Any
) -> dict[str, Any]:
    command, full_env = _checked(cmd, cwd, env, python_shell, timeout)
    try:
        proc = subprocess.Popen(
            command,
            shell=python_shell,
            cwd=cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        return {"pid": 0, "retcode": 127, "stdout": "", "stderr": str(exc)}
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\nTimed out after {timeout} seconds"
        return {
            "pid": proc.pid,
            "retcode": 1,
            "stdout": out.rstrip("\n"),
            "stderr": err.strip("\n"),
        }
    return {
        "pid": proc.pid,
        "retcode": proc.returncode,
        "stdout": out.rstrip("\n"),
        "stderr": err.rstrip("\n"),
    }


def run(
    cmd: str,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    python_shell: bool = True,
    timeout: float | None = None,
    *,
    ctx: Context,
) -> str:
    """Run ``cmd`` and return its standard output and error together.  A non-zero exit
    status makes the job's retcode non-zero, as in Salt."""
    result = _run(cmd, cwd, env, python_shell, timeout)
    ctx.retcode = result["retcode"]
    return "\n".join(part for part in (result["stdout"], result["stderr"]) if part)


def run_all(
    cmd: str,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    python_shell: bool = True,
    timeout: float | None = None,
    *,
    ctx: Context,
) -> dict[str, Any]:
    """Run ``cmd`` and return ``{pid, retcode, stdout, stderr}``."""
    result = _run(cmd, cwd, env, python_shell, timeout)
    ctx.retcode = result["retcode"]
    return result


def retcode(
    cmd: str,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    python_shell: bool = True,
    timeout: float | None = None,
) -> int:
    """Run ``cmd`` and return its exit status."""
    return int(_run(cmd, cwd, env, python_shell, timeout)["retcode"])
