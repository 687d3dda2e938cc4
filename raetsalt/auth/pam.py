"""PAM authentication through ``libpam`` with ``ctypes`` (no extra package).

``pam_authenticate(user, password)`` runs the ``login`` service's auth and account
stacks, answering every echo-off prompt with the password.  It blocks for as long as
the stack wants (``pam_faildelay`` after a wrong password), so the master calls it in a
worker thread.  Checking passwords of other users needs the privileges ``pam_unix``
needs (root, to read ``/etc/shadow``).  Where ``libpam`` cannot be loaded,
``pam_available()`` says why and every login fails.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from typing import Any

SERVICE = "login"
_PAM_SUCCESS = 0
_PAM_PROMPT_ECHO_OFF = 1
_PAM_BUF_ERR = 5


class _Message(ctypes.Structure):
    _fields_ = [("msg_style", ctypes.c_int), ("msg", ctypes.c_char_p)]


class _Response(ctypes.Structure):
    _fields_ = [("resp", ctypes.c_void_p), ("resp_retcode", ctypes.c_int)]


_CONV = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int,
                         ctypes.POINTER(ctypes.POINTER(_Message)),
                         ctypes.POINTER(ctypes.POINTER(_Response)), ctypes.c_void_p)


class _Conv(ctypes.Structure):
    _fields_ = [("conv", _CONV), ("appdata_ptr", ctypes.c_void_p)]


_lock = threading.Lock()
_libs: tuple[Any, Any] | None = None
_load_error = ""


def _load() -> tuple[Any, Any] | None:
    global _libs, _load_error
    with _lock:
        if _libs is None and not _load_error:
            try:
                pam = ctypes.CDLL(ctypes.util.find_library("pam") or "libpam.so.0")
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                libc.calloc.restype = ctypes.c_void_p
                libc.calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
                libc.strdup.restype = ctypes.c_void_p
                libc.strdup.argtypes = [ctypes.c_char_p]
                pam.pam_start.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.POINTER(_Conv), ctypes.POINTER(ctypes.c_void_p)]
                pam.pam_authenticate.argtypes = [ctypes.c_void_p, ctypes.c_int]
                pam.pam_acct_mgmt.argtypes = [ctypes.c_void_p, ctypes.c_int]
                pam.pam_end.argtypes = [ctypes.c_void_p, ctypes.c_int]
                pam.pam_strerror.restype = ctypes.c_char_p
                pam.pam_strerror.argtypes = [ctypes.c_void_p, ctypes.c_int]
                _libs = (pam, libc)
            except (OSError, AttributeError) as exc:
                _load_error = f"libpam cannot be loaded: {exc}"
        return _libs


def pam_available() -> tuple[bool, str]:
    """(True, '') when libpam can be used, else (False, why)."""
    return (True, "") if _load() is not None else (False, _load_error)


def pam_authenticate(user: str, password: str, service: str = SERVICE) -> tuple[bool, str]:
    """(ok, why not)."""
    libs = _load()
    if libs is None:
        return False, _load_error
    pam, libc = libs
    secret = password.encode("utf-8")

    def converse(count: int, messages: Any, responses: Any, _data: Any) -> int:
        block = libc.calloc(count, ctypes.sizeof(_Response))
        if not block:
            return _PAM_BUF_ERR
        answers = ctypes.cast(block, ctypes.POINTER(_Response))
        for i in range(count):
            if messages[i].contents.msg_style == _PAM_PROMPT_ECHO_OFF:
                answers[i].resp = libc.strdup(secret)
                answers[i].resp_retcode = 0
        responses[0] = answers
        return _PAM_SUCCESS

    callback = _CONV(converse)  # kept alive until pam_end
    conv = _Conv(callback, None)
    handle = ctypes.c_void_p()
    code = pam.pam_start(service.encode(), user.encode("utf-8"), ctypes.byref(conv),
                         ctypes.byref(handle))
    if code != _PAM_SUCCESS:
        return False, f"pam_start failed ({code})"
    try:
        code = pam.pam_authenticate(handle, 0)
        if code == _PAM_SUCCESS:
            code = pam.pam_acct_mgmt(handle, 0)
        why = "" if code == _PAM_SUCCESS else (pam.pam_strerror(handle, code) or b"").decode(
            "utf-8", "replace")
        return code == _PAM_SUCCESS, why
    finally:
        pam.pam_end(handle, code)
