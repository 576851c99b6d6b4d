"""One side's graph at a time: parity loads a side's runner when that side runs and lets it
go (closed, its MindSpore cell collected) before the next side loads."""
from __future__ import annotations

import weakref
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amptool.cli import app

pytestmark = pytest.mark.slow  # exports real networks

runner = CliRunner()


class Lifecycle:
    """Every runner load and close, in order, with a weak reference to each MindIR cell."""

    def __init__(self, monkeypatch):
        from amptool.artefact import runners
        from amptool.parity import sides

        self.events, self.cells = [], []
        load, close = runners.Artefact.load, runners.Runner.close
        eager_init, eager_close = sides.EagerRunner.__init__, sides.EagerRunner.close

        def loading(art):
            self.events.append(("load", Path(art.path).name, self.live_cells()))
            opened = load(art)
            if getattr(opened, "cell", None) is not None:
                self.cells.append(weakref.ref(opened.cell))
            return opened

        def closing(this):
            self.events.append(("close", Path(this.path).name, None))
            close(this)

        def building(this, model, ckpt, source):
            self.events.append(("load", "checkpoint", self.live_cells()))
            eager_init(this, model, ckpt, source)

        def letting_go(this):
            self.events.append(("close", "checkpoint", None))
            eager_close(this)

        monkeypatch.setattr(runners.Artefact, "load", loading)
        for cls in (runners.MindIRRunner, runners.ONNXRunner):
            monkeypatch.setattr(cls, "close", lambda this, c=cls.close: (closing(this), c(this)))
        monkeypatch.setattr(sides.EagerRunner, "__init__", building)
        monkeypatch.setattr(sides.EagerRunner, "close", letting_go)

    def live_cells(self) -> int:
        return sum(ref() is not None for ref in self.cells)

    def assert_one_at_a_time(self, names: list) -> None:
        """Each side loaded in turn and closed before the next loads, no earlier MindIR
        cell still alive when a side loads."""
        kinds = [(kind, name) for kind, name, _ in self.events]
        assert kinds == [(k, n) for n in names for k in ("load", "close")], self.events
        assert all(live == 0 for kind, _, live in self.events if kind == "load"), self.events


def test_each_artefact_is_released_before_the_next_opens(simplecnn, monkeypatch, tmp_path):
    import amptool.runtime.device
    from amptool.artefact import runners

    seen = Lifecycle(monkeypatch)
    released, release = [], amptool.runtime.device.release_compiled
    monkeypatch.setattr(amptool.runtime.device, "release_compiled",
                        lambda graph=True: (released.append(graph), release(graph)))
    monkeypatch.setattr(runners, "RELEASE_GRAPH_BYTES", 0)  # as a big artefact: graph too
    sides = [simplecnn["mindir_fp32"], simplecnn["mindir_fp16"]]
    if "onnx_fp16" in simplecnn:
        sides.append(simplecnn["onnx_fp16"])
    report = tmp_path / "r.json"
    result = runner.invoke(app, ["parity", *sides, "--samples", "32", "--json-out", str(report)])
    assert result.exit_code in (0, 1), result.output
    assert report.is_file()
    seen.assert_one_at_a_time([Path(p).name for p in sides])
    assert seen.live_cells() == 0  # the last one too, once parity returns
    assert released == [True, True]  # each MindIR's graph let go as it closed


def test_a_checkpoint_reference_is_released_before_a_candidate_opens(simplecnn, monkeypatch):
    from amptool.parity.compare import parity
    from amptool.parity.config import ParityConfig

    seen = Lifecycle(monkeypatch)
    report = parity(ParityConfig(reference=simplecnn["run"],
                                 candidates=(simplecnn["mindir_fp16"],), samples=32))
    assert len(report.to_dict()["candidates"]) == 1
    # the reference's network is built (and probed) as it opens, run, then let go
    seen.assert_one_at_a_time(["checkpoint", Path(simplecnn["mindir_fp16"]).name])


COUNTED_MODEL = '''
import os
import mindspore as ms
from mindspore import nn


class Net(nn.Cell):
    input_signature = "x:-1x24:float32"

    def __init__(self):
        super().__init__()
        self.body = nn.SequentialCell(nn.Dense(24, 32), nn.ReLU(), nn.Dense(32, 5))

    def construct(self, x):
        return self.body(x)


def build():
    # MindSpore's no_init_parameters sets Parameter.init_param False: no weights are made
    made = getattr(ms.Parameter, "init_param", True)
    ms.set_seed(0)
    net = Net()
    with open(os.environ["AMPTOOL_TEST_BUILDS"], "a") as fh:
        fh.write("with weights\\n" if made else "structure\\n")
    return net
'''


def test_a_checkpoint_reference_is_one_network_read_entry_by_entry(tmp_path, monkeypatch):
    """The reference's network is built without weights and given the checkpoint's a tensor
    at a time: the whole-file reader (the file's tensors alive beside the network's) is not
    used, and no network with fresh weights is built, to read its outputs or to make the
    inputs from its signature."""
    import mindspore as ms

    import amptool.network.checkpoint
    from amptool.export.api import ExportConfig, export
    from amptool.network.models import resolve_model
    from amptool.parity.compare import parity
    from amptool.parity.config import ParityConfig

    builds = tmp_path / "builds.txt"
    monkeypatch.setenv("AMPTOOL_TEST_BUILDS", str(builds))
    (tmp_path / "counted.py").write_text(COUNTED_MODEL)
    model = f"{tmp_path / 'counted.py'}:build"
    ckpt = tmp_path / "w.ckpt"
    ms.save_checkpoint(resolve_model(model, probe=False).build(), str(ckpt))
    fp16 = export(ExportConfig(ckpt=str(ckpt), model=model, precision="fp16",
                               out=str(tmp_path / "out"), data="none"))[0].path
    builds.unlink()

    whole = []
    read = amptool.network.checkpoint.read_checkpoint
    monkeypatch.setattr(amptool.network.checkpoint, "read_checkpoint",
                        lambda *a, **k: (whole.append(a), read(*a, **k))[1])
    report = parity(ParityConfig(reference=str(ckpt), candidates=(fp16,), model=model,
                                 samples=16)).to_dict()
    assert len(report["candidates"]) == 1 and report["passed"], report
    assert whole == []
    assert builds.read_text().splitlines()[0] == "structure"  # the reference's network
    assert "with weights" not in builds.read_text()
