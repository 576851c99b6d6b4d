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

        def building(this, model, params, source):
            self.events.append(("load", "checkpoint", self.live_cells()))
            eager_init(this, model, params, source)

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
    import amptool.device
    from amptool.artefact import runners

    seen = Lifecycle(monkeypatch)
    released, release = [], amptool.device.release_compiled
    monkeypatch.setattr(amptool.device, "release_compiled",
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
