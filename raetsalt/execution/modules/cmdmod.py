"""Run shell commands on the minion."""

from __future__ import annotations

import os
import subprocess
from typing import Any

from raetsalt.execution.loader import Context

__virtualname__ = "cmd"


def _run(
    cmd: str, cwd: str | None, env: dict[str, str] | None, python_shell: bool, timeout: float | None
) -> dict[str, Any]:
    full_env = dict(os.environ, **{str(k): str(v) for k, v in (env or {}).items()})
    try:
        proc = subprocess.Popen(
            cmd if python_shell else cmd.split(),
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
