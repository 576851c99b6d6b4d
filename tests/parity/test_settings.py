"""The emulation of a runtime that ignores an fp16 artefact's deployment settings: the same
network with its kept fp32 cells in fp16, run eagerly on the same inputs and judged with the
candidate's limits. Informational: it reports whether the model depends on its kept cells
and never changes a verdict.

What this shows is the fp16 emulation on MindSpore's CPU kernels; no Ascend runtime reads
the settings files on this host.
"""
from __future__ import annotations

import json
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from amptool.cli import app
from amptool.parity.report import format_table, junit_xml

from .conftest import typed_report

runner = CliRunner()


def _parity_json(tmp_path, *args) -> tuple:
    out = tmp_path / "report.json"
    result = runner.invoke(app, ["parity", *map(str, args), "--json-out", str(out)])
    assert "Traceback" not in result.output
    return result, json.loads(out.read_text())


@pytest.fixture(scope="module")
def trap_kept(trap, shared):
    """trapmlp (trained in fp32) exported with its fp16-unsafe cell 'norm' kept in fp32."""
    def make(out):
        from amptool.export.api import ExportConfig, export

        policy = out / "keep-norm.json"
        policy.write_text(json.dumps({"level": "O2", "fp32_cells": ["norm"]}))
        results = export(ExportConfig(run=trap["run"], policy=str(policy), out=str(out / "x")))
        return {r.precision: r.path for r in results}

    return shared.get("parity-trap-kept", make)


@pytest.mark.slow
def test_trapmlp_passes_with_its_kept_cell_and_depends_on_it(trap_kept, tmp_path):
    result, report = _parity_json(tmp_path, trap_kept["fp32"], trap_kept["fp16"],
                                  "--samples", 96)
    assert result.exit_code == 0, result.output  # the gate is healthy: informational only
    cand = report["candidates"][0]
    assert cand["passed"] and cand["outputs"][0]["metrics"]["cosine"] >= 0.999
    dep = cand["deployment"]
    assert dep["settings"]["needed"] and dep["kept_fp32"] == [{"path": "norm",
                                                                "type": "L2Normalize"}]
    assert dep["depends"] is True
    emulated = dep["emulated"]["outputs"][0]
    m = emulated["metrics"]
    # the kept cell in fp16 loses the model: cosine far below the limit and most top-1 flipped
    assert m["cosine"] < 0.9 and m["top1_agree"] < 0.5 and not emulated["passed"]
    assert m["ref_acc"] - m["cand_acc"] > 0.3
    assert dep["message"].startswith("ignoring the deployment settings (norm in fp16): top-1 "
                                     "agreement ")
    assert "the kept cells matter: without the settings this gate fails (" in dep["message"]
    lines = result.output.splitlines()
    name = trap_kept["fp16"].rsplit("/", 1)[-1]
    assert (f"  deployment settings: {name}.lite.ini, {name}.atc.txt keep the fp32 cells in "
            "fp32 on Ascend") in lines
    assert f"  deployment: {dep['message']} (informational)" in lines
    assert lines[-2].startswith("parity PASSED (1/1 candidates")
    assert lines[-1] == f"report: {tmp_path / 'report.json'}, {tmp_path / 'report.html'}"
    off = runner.invoke(app, ["parity", trap_kept["fp32"], trap_kept["fp16"], "--samples", "16",
                              "--no-emulate-settings", "--json"])
    assert off.exit_code == 0, off.output
    assert json.loads(off.output)["candidates"][0]["deployment"] is None


@pytest.mark.slow
def test_a_healthy_network_with_kept_cells_does_not_depend_on_them(seeded_export, tmp_path):
    """ResNet keeps its BatchNorms in fp32 (O2): in fp16 they still pass the gate."""
    paths = seeded_export("resnet")
    result, report = _parity_json(tmp_path, paths["mindir_fp32"], paths["mindir_fp16"],
                                  "--samples", 64)
    assert result.exit_code == 0, result.output
    dep = report["candidates"][0]["deployment"]
    assert dep["settings"]["needed"] and len(dep["kept_fp32"]) == 9
    assert dep["depends"] is False and dep["emulated"]["outputs"][0]["passed"]
    assert dep["message"].endswith("— no dependency: the gate passes with them in fp16 too")


@pytest.mark.slow
def test_nothing_kept_reports_no_settings_needed(simplecnn, tmp_path):
    result, report = _parity_json(tmp_path, simplecnn["mindir_fp32"], simplecnn["mindir_fp16"],
                                  "--samples", 32)
    assert result.exit_code == 0, result.output
    dep = report["candidates"][0]["deployment"]
    assert dep["kept_fp32"] == [] and dep["depends"] is False and dep["emulated"] is None
    assert dep["settings"]["needed"] is False
    assert ("  deployment: no cell is kept in fp32: the graph needs no deployment settings"
            in result.output.splitlines())


def test_the_emulation_is_reported_but_never_judged():
    """A failed emulation on a passing candidate: table, JUnit and verdict (no network)."""
    files = [{"kind": kind, "name": name, "sha256": "0"} for kind, name in
             (("mindspore_lite_config", "m.mindir.lite.ini"), ("atc_options", "m.mindir.atc.txt"))]
    dep = {"settings": {"needed": True, "files": files, "why": "norm overflows in fp16",
                        "kept_fp32": [{"path": "norm", "type": "L2Normalize"}],
                        "precision_mode": {"mindspore_lite": "preferred_optimal"}},
           "kept_fp32": [{"path": "norm", "type": "L2Normalize"}], "depends": True,
           "emulated": {"weights": "m.ckpt", "outputs": []},
           "message": "ignoring the deployment settings (norm in fp16): ... — the kept cells "
                      "matter"}
    cand = {"path": "m.mindir", "format": "MINDIR", "precision": "fp16", "passed": True,
            "outputs": [{"name": "output0", "metrics": {"cosine": 1.0},
                         "checks": [{"metric": "cosine", "value": 1.0, "limit": ">= 0.999",
                                     "passed": True}]}],
            "task": None, "findings": [], "deployment": dep}
    report = {"passed": True, "reference": {"path": "r.mindir", "format": "MINDIR",
                                            "precision": "fp32"},
              "inputs": {"description": "x", "labels": True}, "candidates": [cand],
              "seconds": 1.0}
    report = typed_report(report)
    table = format_table(report).splitlines()
    assert "  deployment settings: m.mindir.lite.ini, m.mindir.atc.txt keep the fp32 cells in " \
           "fp32 on Ascend" in table
    assert f"  deployment: {dep['message']} (informational)" in table
    assert table[-1].startswith("parity PASSED")
    suite = ET.fromstring(junit_xml(report)).find("testsuite")
    assert suite.get("failures") == "0"
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["depends_on_kept_fp32_cells"] == "true"
    assert dep["message"] in suite.find("system-out").text


def test_weights_load_into_a_network_holding_an_integer_buffer():
    """Artefacts store floating-point weights only: a network's integer parameter (mindyolo's
    head keeps its strides in one) keeps its built value, so the emulation and per-layer
    load an fp16 YOLOv8-n's weights; a missing floating-point weight is still refused."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn

    from amptool.errors import UsageError
    from amptool.parity.layers import load_weights

    class Head(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(4, 2)
            self.stride = ms.Parameter(ms.Tensor([8, 16, 32], ms.int32), requires_grad=False)

        def construct(self, x):
            return self.fc(x)

    net = Head()
    stored = {"fc.weight": np.full((2, 4), 0.5, np.float16), "fc.bias": np.ones(2, np.float16)}
    load_weights(net, stored, "head_fp16.mindir")
    assert np.array_equal(net.fc.weight.asnumpy(), np.full((2, 4), 0.5, np.float32))
    assert net.stride.asnumpy().tolist() == [8, 16, 32]
    with pytest.raises(UsageError, match="lacks weights fc.bias of the model"):
        load_weights(Head(), {"fc.weight": stored["fc.weight"]}, "head_fp16.mindir")


def test_per_layer_networks_take_the_weights_they_are_given_without_a_copy():
    """Per-layer builds its networks without weights and gives them the arrays it read: an
    fp32 weight is the given array itself, and the candidate under an fp16 policy stores the
    policy's weights in fp16 as the fp16 artefact does, its fp16 arrays again not copied; a
    non-float parameter the weights lack gets the value the model initializes it with."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn
    from mindspore.common.initializer import initializer

    from amptool.network.ckptstream import build_uninitialized
    from amptool.parity.layers import _Capture
    from amptool.precision.policy import make_policy
    from amptool.runtime.device import execution_mode

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(4, 2)
            self.seen = ms.Parameter(initializer("ones", [3], ms.int32), requires_grad=False)

        def construct(self, x):
            return self.fc(x)

    rng = np.random.default_rng(0)
    fp32 = {"fc.weight": rng.standard_normal((2, 4)).astype(np.float32),
            "fc.bias": rng.standard_normal(2).astype(np.float32)}
    fp16 = {name: value.astype(np.float16) for name, value in fp32.items()}
    ref = _Capture(build_uninitialized(Net), None)
    ref.load_weights(fp32, "fp32.mindir")
    cand = _Capture(build_uninitialized(Net), make_policy("O2"))
    cand.load_weights(fp16, "fp16.mindir")
    for capture, given, dtype in ((ref, fp32, ms.float32), (cand, fp16, ms.float16)):
        for param in capture.net.fc.get_parameters():
            held = param.asnumpy()
            assert param.dtype == dtype and np.array_equal(held, given[param.name])
            assert np.shares_memory(held, given[param.name]), param.name
        assert capture.net.seen.asnumpy().tolist() == [1, 1, 1]
    with execution_mode(graph=False):  # as per-layer runs it: hooks need PyNative
        out = cand.runnable(ms.Tensor(np.ones((1, 4), np.float32))).asnumpy()
    assert np.allclose(out, np.ones((1, 4)) @ fp16["fc.weight"].T.astype(np.float32)
                       + fp16["fc.bias"], rtol=1e-2)
