"""Python's SIGINT/SIGTERM handlers kept over handlers a C library installs."""
import ctypes
import signal
import sys

import pytest

from amptool.runtime.interrupts import keep_handlers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc signal()")


def test_keep_handlers_puts_python_handlers_back():
    libc = ctypes.CDLL(None)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        libc.signal(signal.SIGTERM, ctypes.c_void_p(1))  # SIG_IGN behind Python's back
        signal.raise_signal(signal.SIGTERM)
        assert seen == []
        keep_handlers()
        signal.raise_signal(signal.SIGTERM)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
