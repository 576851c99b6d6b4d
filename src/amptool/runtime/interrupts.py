"""Ctrl+C and SIGTERM stay Python's while MindSpore runs.

MindSpore installs C signal handlers of its own over the ones Python set: its data engine a
SIGTERM handler whenever a pipeline's threads start (measured on 2.10: a SIGTERM then ends
``amptool train`` at once, with exit 0 or 143 and nothing said), its runtime a SIGINT
handler around graph runs (Ctrl+C then ends it as killed by SIGTERM, 143). The command line
puts its own back within ``GUARD_PERIOD`` whenever they are replaced (``stop_on_signals``);
the data feed calls ``keep_handlers`` at every batch, for library users too. An interrupt
then unwinds as ``KeyboardInterrupt``: staged files are removed, written checkpoints stay,
and the command line reports it in one line (exit 130).
"""
from __future__ import annotations

import signal
import sys
import threading

WATCHED = (signal.SIGINT, signal.SIGTERM)


def keep_handlers() -> None:
    """Reinstall the handlers Python holds for SIGINT and SIGTERM (whatever they are: the
    caller's own, Python's default, or ``stop_on_signals``'s) over any a library put in
    their place. Only the main thread may set handlers: elsewhere nothing happens."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in WATCHED:
        handler = signal.getsignal(sig)
        if handler is not None:  # None: set outside Python, nothing of ours to restore
            signal.signal(sig, handler)


RETRY = 0.05
"""Seconds before an interrupt that arrived at a moment MindSpore cannot unwind from is tried
again."""

UNSAFE = ("<module>", "compile")
"""MindSpore's functions an exception should not unwind: its import (a half-imported MindSpore
crashes the interpreter's exit) and a graph compile (its C++ compiler calls back into Python
and logs the whole trace of an exception raised there)."""

GUARD_PERIOD = 0.01
"""Seconds between the guard's looks at the installed handlers."""


def stop_on_signals() -> None:
    """SIGINT and SIGTERM stop the process as ``KeyboardInterrupt`` in the main thread (for
    the command line; a library user's own handlers are left alone), whichever handlers
    MindSpore installs later: a guard thread puts these back within ``GUARD_PERIOD``. One
    that arrives while MindSpore is imported or compiles a graph is raised a moment later,
    once that has returned (an exception cannot unwind through either cleanly)."""
    for sig in WATCHED:
        signal.signal(sig, _interrupt)
    _guard(WATCHED)


def _interrupt(signum, frame) -> None:
    if _unsafe(frame):
        import _thread

        retry = threading.Timer(RETRY, _thread.interrupt_main, args=(
            (signum,) if sys.version_info >= (3, 10) else ()))  # 3.9: as SIGINT
        retry.daemon = True
        retry.start()
        return
    raise KeyboardInterrupt


def _unsafe(frame) -> bool:
    """Whether ``frame`` runs inside MindSpore's import or a compiler callback."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.partition(".")[0] == "mindspore" and frame.f_code.co_name in UNSAFE:
            return True
        frame = frame.f_back
    return False


def _guard(signals: tuple) -> None:
    """A daemon thread that reinstalls the C-level handlers of ``signals`` as they are now
    whenever another library replaced them (Linux; elsewhere ``keep_handlers`` alone)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import time

    libc = ctypes.CDLL(None, use_errno=True)
    size, word = 512, ctypes.sizeof(ctypes.c_void_p)  # struct sigaction fits, handler first
    saved = {}
    for sig in signals:
        buf = ctypes.create_string_buffer(size)
        if libc.sigaction(int(sig), None, buf) != 0:
            return
        saved[int(sig)] = buf

    def watch():
        now = ctypes.create_string_buffer(size)
        while True:
            time.sleep(GUARD_PERIOD)
            for sig, want in saved.items():
                if libc.sigaction(sig, None, now) == 0 and now.raw[:word] != want.raw[:word]:
                    libc.sigaction(sig, want, None)

    threading.Thread(target=watch, name="amptool-signal-guard", daemon=True).start()
