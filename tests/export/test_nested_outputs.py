"""A network whose outputs nest (``(head, (a, b))``, as a detector's ``(boxes, (p3, p4,
p5))``): amptool unrolls them depth-first everywhere, so it probes, trains with a loss on
every output, exports MINDIR in fp32 and fp16 with the same three outputs, and
passes parity. Before, the probe stopped with an internal error, the fp16 export could not
cast a tuple, and the fp32 MindIR kept one nested output that no runner could compare."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # trains and exports

NESTED = '''
import mindspore.nn as nn


class Nested(nn.Cell):
    def __init__(self):
        super().__init__()
        self.body = nn.SequentialCell([nn.Dense(6, 16), nn.ReLU()])
        self.head, self.a, self.b = nn.Dense(16, 2), nn.Dense(16, 3), nn.Dense(16, 1)

    def construct(self, x):
        h = self.body(x)
        return self.head(h), (self.a(h), self.b(h))


def build():
    return Nested()


build.input_signature = "x:-1x6:float32"


def every_output():
    def loss(head, a, b, y):
        return ((head - y[:, :2]) ** 2).mean() + ((a - y[:, 2:5]) ** 2).mean() \\
            + ((b - y[:, 5:]) ** 2).mean()
    return loss
'''
SHAPES = [[-1, 2], [-1, 3], [-1, 1]]


def test_flat_outputs_unrolls_depth_first_in_both_modes():
    import mindspore as ms

    from amptool.network.models import flat_outputs
    from amptool.runtime.device import execution_mode

    t = [ms.Tensor(np.full((1,), k, np.float32)) for k in range(4)]
    nested = (t[0], (t[1], [t[2], (t[3],)]))
    assert [float(o.asnumpy()[0]) for o in flat_outputs(nested)] == [0, 1, 2, 3]
    assert flat_outputs(t[0]) == (t[0],)

    class Sum(ms.nn.Cell):
        def construct(self, x):
            outs = flat_outputs((x, (x * 2, (x * 3,))))
            return outs[0] + outs[1] * 10 + outs[2] * 100, len(outs)

    with execution_mode(graph=True):
        value, count = Sum()(t[1])
    assert float(value.asnumpy()[0]) == 321 and count == 3


@pytest.fixture(scope="module")
def nested_flow(tmp_path_factory):
    import amptool
    from amptool import ExportConfig, ParityConfig, TrainConfig

    root = tmp_path_factory.mktemp("nested")
    (root / "nested.py").write_text(NESTED)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 6)).astype(np.float32)
    y = np.tanh(x @ rng.standard_normal((6, 6))).astype(np.float32)
    np.savez(root / "data.npz", x=x, y=y)
    summary = amptool.train(TrainConfig(
        model=f"{root / 'nested.py'}:build", data=f"npz:{root / 'data.npz'}",
        loss=f"{root / 'nested.py'}:every_output", epochs=1, batch_size=16, lr=0.01,
        log_every=1, out=str(root / "run")))
    report = amptool.export(ExportConfig(run=str(root / "run"), formats=("MINDIR",),
                                         dynamic_batch=True, out=str(root / "export")))
    paths = {(r.format, r.precision): r.path for r in report}
    parity = amptool.parity(ParityConfig(
        reference=paths[("MINDIR", "fp32")],
        candidates=tuple(paths[k] for k in sorted(paths) if k != ("MINDIR", "fp32")),
        data=f"npz:{root / 'data.npz'}"))
    return root, summary, report, parity


def test_a_loss_on_every_nested_output_trains(nested_flow):
    root, summary, _, _ = nested_flow
    steps = [json.loads(line) for line in (root / "run" / "metrics.jsonl").read_text()
             .splitlines() if "loss" in line and "val_loss" not in line]
    assert summary.steps == len(steps) == (96 - round(96 * 0.2)) // 16
    assert steps[-1]["loss"] < steps[0]["loss"], steps


def test_every_artefact_gives_the_outputs_unrolled_and_passes_parity(nested_flow):
    _, _, report, parity = nested_flow
    assert len(report) == 2  # fp32 and fp16 (ONNX: tests/zoo/test_yolov8n.py)
    for result in report:
        assert [o.shape for o in result.manifest.outputs] == SHAPES, result.path
    assert parity.passed, [[o.checks for o in c.outputs] for c in parity.candidates]
    (candidate,) = parity.candidates
    assert len(candidate.outputs) == 3
