"""``execution_mode``: the one place MindSpore's mode is switched for a block and restored."""
import pytest

from amptool.runtime.device import execution_mode


@pytest.mark.parametrize("graph", [True, False])
def test_the_callers_mode_comes_back_even_when_the_block_raises(graph):
    import mindspore as ms

    outer = ms.PYNATIVE_MODE if graph else ms.GRAPH_MODE
    inner = ms.GRAPH_MODE if graph else ms.PYNATIVE_MODE
    ms.set_context(mode=outer)
    with execution_mode(graph=graph):
        assert ms.get_context("mode") == inner
    assert ms.get_context("mode") == outer
    with pytest.raises(ZeroDivisionError), execution_mode(graph=graph):
        assert ms.get_context("mode") == inner
        1 / 0
    assert ms.get_context("mode") == outer


CONV = """
import json
import numpy as np
import mindspore as ms  # imported first, as a user's script may: no kernel has run yet
from mindspore import nn

from amptool.runtime.device import import_mindspore, set_device

import_mindspore()
set_device("CPU", graph=False)
net = nn.Conv2d(1, 8, 3, pad_mode="valid")
net(ms.Tensor(np.ones((4, 1, 28, 28), np.float32))).asnumpy()
"""


def _conv_kernels(env: dict) -> list:
    """The oneDNN implementations a convolution's forward pass ran on, in a fresh process."""
    import os
    import subprocess
    import sys

    env = {**{k: v for k, v in os.environ.items() if k != "ONEDNN_MAX_CPU_ISA"},
           "ONEDNN_VERBOSE": "1", **env}
    done = subprocess.run([sys.executable, "-c", CONV], env=env, capture_output=True,
                          text=True, timeout=300, check=True)
    rows = [line.split(",") for line in done.stdout.splitlines()
            if line.startswith("onednn_verbose,")]
    return [row[6] for row in rows if len(row) > 6 and row[3] == "exec"
            and row[5] == "convolution"]


def _avx512() -> bool:
    from pathlib import Path

    return " avx512f" in Path("/proc/cpuinfo").read_text()


@pytest.mark.slow  # fresh processes, each importing MindSpore
def test_onednn_is_capped_at_avx2_before_its_first_kernel():
    """The cap (``CPU_ISA``) takes effect although MindSpore was imported before amptool set
    it; oneDNN left free on an AVX-512 host runs the reference kernel the cap avoids (shown
    so that this test fails if oneDNN stops reading the variable)."""
    from amptool.runtime.device import CPU_ISA

    capped = _conv_kernels({})
    assert capped and not any("ref" in k or "avx512" in k for k in capped), (CPU_ISA, capped)
    if _avx512():
        free = _conv_kernels({"ONEDNN_MAX_CPU_ISA": "ALL"})
        assert free and any("ref" in k or "avx512" in k for k in free), free


def test_a_users_own_isa_setting_is_kept(monkeypatch):
    import os

    from amptool.runtime.device import CPU_ISA_ENV, import_mindspore

    monkeypatch.setenv(CPU_ISA_ENV, "ALL")
    import_mindspore()
    assert os.environ[CPU_ISA_ENV] == "ALL"
    monkeypatch.delenv(CPU_ISA_ENV)
    import_mindspore()
    assert os.environ[CPU_ISA_ENV] == "AVX2"


FROZEN = """
import gc
import sys

from amptool.runtime.device import import_mindspore, own_process

if sys.argv[1] == "own":
    own_process()
import_mindspore()
print(gc.get_freeze_count())
"""


@pytest.mark.slow  # fresh processes, each importing MindSpore
@pytest.mark.parametrize("whose", ["own", "user"])
def test_only_a_process_of_amptools_own_freezes_the_import(whose):
    """The command line and its msrun workers (``own_process``) freeze what importing
    MindSpore made; a user's process calling the API keeps its collector as it was."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FROZEN, whose], capture_output=True,
                          text=True, timeout=300, check=True)
    frozen = int(done.stdout.split()[-1])
    assert (frozen > 10_000) if whose == "own" else (frozen == 0), frozen
