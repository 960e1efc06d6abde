"""The C library, for the few syscalls Python's os module does not wrap (inotify for the lock file, mount(2) for
tmpfs volumes). Loaded once, with errno kept (``ctypes.get_errno()`` after a call that failed)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


__all__ = ["libc"]
