"""ReferenceSpread: degenerate_reference's figures streamed, merged and carried as state."""
from __future__ import annotations

import json

import numpy as np
import pytest

from amptool.stats.metrics import degenerate_reference
from amptool.stats.stream import ReferenceSpread

RNG = np.random.RandomState(3)
CASES = {
    "spread": RNG.rand(50, 10),
    "constant": np.ones((50, 10)),
    "same for every input": np.tile(RNG.rand(1, 10) + 1.0, (50, 1)),
    "one value a sample": RNG.rand(50),
    "nan": np.where(RNG.rand(40, 3) > 0.9, np.nan, 1.0),
    "one sample": RNG.rand(1, 10),
    "near-constant": 5.0 + 1e-8 * RNG.rand(30, 2, 3),
    "images": RNG.rand(20, 3, 4, 4),
    "empty": np.zeros((0, 4)),
}


def _streamed(ref: np.ndarray, size: int) -> ReferenceSpread:
    spread = ReferenceSpread()
    for start in range(0, max(1, len(ref)), size):
        spread.update(ref[start:start + size])
    return spread


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("size", [1, 7, 64])
def test_same_verdict_as_degenerate_reference(name, size):
    ref = CASES[name]
    whole, streamed = degenerate_reference(ref), _streamed(ref, size).reason()
    assert (whole is None) == (streamed is None)
    if whole is not None:  # the same finding; its figures agree up to rounding noise
        assert whole.split("(")[0] == streamed.split("(")[0]


def test_shards_merge_in_any_order_through_json():
    ref = CASES["images"]
    parts = [_streamed(ref[a:a + 6], 4) for a in range(0, len(ref), 6)]
    states = [json.loads(json.dumps({k: v.tolist() for k, v in p.to_state().items()}))
              for p in parts]
    merged = ReferenceSpread.from_state(states[-1])
    for state in reversed(states[:-1]):
        merged.merge(ReferenceSpread.from_state(state))
    whole = _streamed(ref, len(ref))
    assert merged.samples == whole.samples and merged.bad == whole.bad
    np.testing.assert_allclose(merged.m2, whole.m2, rtol=1e-12)
    assert merged.reason() == whole.reason() is None


def test_state_is_one_samples_output():
    small, big = _streamed(RNG.rand(10, 32), 5), _streamed(RNG.rand(1000, 32), 5)
    assert {k: v.nbytes for k, v in small.to_state().items()} == {
        k: v.nbytes for k, v in big.to_state().items()}
