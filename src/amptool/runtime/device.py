"""Device selection and MindSpore's context: ``import_mindspore`` (the import that keeps
compile dumps private and start-up logs quiet; the commands call it before any other
module imports MindSpore), ``set_device`` and ``execution_mode``."""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile

from amptool.errors import DeviceError, UsageError, debugging

DEVICES = ("auto", "CPU", "GPU", "Ascend")


DUMP_ENV = "MS_OM_PATH"
"""Where MindSpore writes ``rank_*/om/analyze_fail.ir`` when a graph fails to compile
(without it: the current folder)."""

LOG_LEVEL_ENV = "GLOG_v"
"""MindSpore's log level. ``import amptool`` sets it to 3 (errors only) unless it is set, so
that the warnings MindSpore logs as it probes for Ascend and GPU libraries stay out of a
command's output; set it lower to see them."""

CPU_ISA_ENV = "ONEDNN_MAX_CPU_ISA"
"""The widest x86 instruction set oneDNN, the library behind MindSpore's CPU convolutions and
matrix products, may use. amptool sets it to AVX2 (``CPU_ISA``) before MindSpore's first
kernel unless it is already set; set it to ``ALL`` to give oneDNN AVX-512 back."""
CPU_ISA = "AVX2"
"""Why AVX2: MindSpore 2.10's oneDNN, free to use AVX-512, runs a convolution's forward pass
on a reference kernel (``jit_uni_ncsp:conv+ref:any``), about 55 ms a call where AVX2's
``gemm:jit`` takes under 1 ms; on an AVX-512 Xeon that made the default sample's CPU
training 1.6x and its parity 4.3x slower (bench/cpu_isa.py). Hosts without AVX-512 use AVX2
either way."""


def private_dumps() -> None:
    """Send MindSpore's compile-failure dumps to a private temp folder, removed at exit
    (kept, and named in the report, with AMPTOOL_DEBUG=1); a folder the user set wins."""
    if os.environ.get(DUMP_ENV):
        return
    folder = tempfile.mkdtemp(prefix="amptool-ms-")
    os.environ[DUMP_ENV] = folder
    if not debugging():
        atexit.register(shutil.rmtree, folder, True)


_quiet = {"on": False}


def quiet_framework_logs() -> None:
    """Silence MindSpore's Python log lines (now, or when it is imported): a command reports
    every failure itself, in one line. Not with AMPTOOL_DEBUG=1."""
    import logging
    import sys

    if debugging():
        return
    _quiet["on"] = True
    if "mindspore" in sys.modules:
        from mindspore import log

        log._get_logger().setLevel(logging.CRITICAL + 1)


_owned = {"process": False, "frozen": False}


def own_process() -> None:
    """Mark this process as amptool's own (the command line, an msrun worker it started):
    ``import_mindspore`` may then freeze what the import made (``gc.freeze``). Never in a
    user's process, whose objects amptool does not own."""
    _owned["process"] = True


def import_mindspore():
    """Import MindSpore with its start-up chatter (GLOG warnings) silenced and its dumps
    kept out of the current folder. In a process of amptool's own (``own_process``), the
    first import is then frozen: MindSpore runs a full ``gc.collect()`` before each graph it
    compiles, amptool one after each graph it lets go, and each walked the whole framework
    (about 0.08 s); frozen, the collections see only what came after (``amptool run`` of
    the causal LM sample took 7% less CPU). Nothing a command builds is frozen: each calls
    this before it builds or loads a network."""
    os.environ.setdefault(LOG_LEVEL_ENV, "3")
    os.environ.setdefault(CPU_ISA_ENV, CPU_ISA)  # read by oneDNN at its first kernel
    private_dumps()
    import mindspore

    if _quiet["on"]:
        quiet_framework_logs()
    if _owned["process"] and not _owned["frozen"]:
        import gc

        _owned["frozen"] = True
        gc.collect()
        gc.freeze()
    return mindspore


def normalize_device(name: str) -> str:
    for dev in DEVICES:
        if name.lower() == dev.lower():
            return dev
    raise UsageError(f"unknown device '{name}'", f"use one of {', '.join(DEVICES)}")


def available_devices() -> list[str]:
    """The MindSpore backends usable on this host, CPU always last."""
    ms = import_mindspore()
    found = []
    for dev in ("Ascend", "GPU"):
        try:
            if ms.hal.is_available(dev):
                found.append(dev)
        except Exception:  # a broken plugin means the device is not usable
            pass
    return found + ["CPU"]


def resolve_device(name: str = "auto") -> str:
    """Turn ``auto`` into the best backend here; refuse a backend this host lacks."""
    name = normalize_device(name)
    usable = available_devices()
    if name == "auto":
        return usable[0]
    if name not in usable:
        raise DeviceError(f"device {name} is not usable on this host (usable: {', '.join(usable)})",
                          "pass --device auto or one of those")
    return name


_selected: list = []


def set_device(device: str, graph: bool = True) -> None:
    """Select the backend (once per process, before any kernel runs) and the mode."""
    ms = import_mindspore()  # also: dumps into a private folder
    if not _selected:
        try:
            ms.set_device(device)
        except RuntimeError:  # the runtime already started on the default backend
            if device != ms.get_context("device_target"):
                raise DeviceError(f"this process already runs on "
                                  f"{ms.get_context('device_target')}, cannot switch to {device}",
                                  "run one device per process") from None
        _selected.append(device)
    elif _selected[0] != device:
        raise DeviceError(f"this process already runs on {_selected[0]}, cannot switch to {device}",
                          "run one device per process")
    ms.set_context(mode=ms.GRAPH_MODE if graph else ms.PYNATIVE_MODE)


@contextlib.contextmanager
def execution_mode(graph: bool):
    """MindSpore in GRAPH_MODE (``graph``) or PyNative for the block, the caller's mode
    restored after, whatever happens inside."""
    ms = import_mindspore()
    previous = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE if graph else ms.PYNATIVE_MODE)
    try:
        yield
    finally:
        ms.set_context(mode=previous)


def release_compiled(graph: bool = True) -> None:
    """Let MindSpore free what it keeps of the last graph it compiled once no cell holds
    it: the weights it was handed at the compile (``set_weights_values``, held until the
    next compile) and, with ``graph``, the graph itself (a loaded MindIR's weights with it).
    With MindSpore 2.10 on CPU a deleted ``GraphCell``'s weights stay resident through
    ``gc.collect()`` and ``mindspore.ms_memory_recycle()``; they go when a one-operation
    cell is compiled (measured: 0.59 GB of a 150M-parameter fp32 graph). That compile
    costs about 0.1 s: callers ask for it when the graph's weights are worth it."""
    import gc

    import numpy as np

    ms = import_mindspore()
    try:
        from mindspore.graph.api import _cell_graph_executor

        _cell_graph_executor._graph_executor.set_weights_values({})
    except (ImportError, AttributeError, RuntimeError, TypeError):
        pass  # another MindSpore: nothing held that this knows of
    if not graph:
        return

    from mindspore import nn

    class _Step(nn.Cell):
        def construct(self, x):
            return x + 1

    gc.collect()  # the cells and graphs nothing holds are freed first
    _Step().compile(ms.Tensor(np.zeros(1, np.float32)))


def trim_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). A released network or graph frees many blocks of a few MB (a transformer's
    weights) below malloc's mapping threshold: they stay resident, and the large arrays
    allocated next (mapped apart from the heap) cannot reuse them (measured: 1.2 GB left
    resident after a 300M-parameter fp16 graph; a 150M transformer's fp32 network through
    its fp16 export)."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
    except (OSError, AttributeError, TypeError):  # not glibc
        pass
