"""A fault deep in a transformer's stack (block 6 of 8, ``planted_branches.deep``): the
per-layer pass and the range pass of ``--policy auto`` each name exactly that cell."""
from pathlib import Path

import numpy as np
import pytest

PLANTED = f"{Path(__file__).resolve().parent.parent / 'planted_branches.py'}:deep"
CULPRIT = "blocks.6.mlp.act"


@pytest.mark.slow  # a 150-cell transformer probed layer by layer, in fp32 and fp16
def test_per_layer_and_the_range_pass_name_the_cell_deep_in_the_stack():
    import mindspore as ms

    from amptool import find_fp32_cells
    from amptool.parity.layers import LayerProbe
    from amptool.precision.policy import make_policy
    from amptool.runtime.device import execution_mode

    ms.set_seed(0)
    probe = LayerProbe(PLANTED)
    net = probe.spec.build()
    assert len(list(net.cells_and_names())) > 150
    weights = {p.name: p.asnumpy() for p in net.get_parameters()}
    fp16 = {name: value.astype(np.float16) for name, value in weights.items()}
    x = np.random.default_rng(0).standard_normal((8, 3, 16, 16)).astype(np.float32)
    with execution_mode(graph=False):
        layer = probe.localize((weights, "fp32"), (fp16, "fp16"), make_policy("O2"), x, x, 0.99)
    assert layer["first_flagged"] == CULPRIT and layer["origin"] == "born"
    rows = {r["path"]: r for r in layer["rows"]}
    assert rows[CULPRIT]["dtype"] == "float16" and rows[CULPRIT]["cosine"] < 0.5
    assert rows["blocks.6.mlp.fc1"]["cosine"] > 0.999  # its input is fine
    assert not any(r["flagged"] for r in layer["rows"][:list(rows).index(CULPRIT)])

    found = find_fp32_cells(net, [x])
    assert found.paths == [CULPRIT]
    assert found.kept[0]["local_error"] >= 0.5 and found.kept[0]["out_max"] < 1
    assert list(found.policy.fp32_cells) == [CULPRIT]
