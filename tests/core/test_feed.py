"""The data stream's reader, stopped before its end (a failed or interrupted run)."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest


def _workers() -> list:
    return [t for t in threading.enumerate() if t.name.startswith("GeneratorWorkerThread")]


@pytest.mark.slow  # waits a second for the pipeline's workers to block
def test_a_reader_stopped_early_ends_its_workers_without_waiting_for_them():
    """The pipeline's worker threads have filled their result queues and sit in a blocked
    put; MindSpore's own stop joins them only after that put's 5 s timeout (a run that
    failed at its first step sat idle that long). The reader releases them first."""
    from amptool.data.feed import batches
    from amptool.data.rows import ArrayRows

    rows = ArrayRows([np.zeros((2048, 8, 8), np.float32)], images=True)
    labels = np.zeros(2048, np.int32)
    order = [np.arange(k, k + 8) for k in range(0, 2048, 8)]  # 256 batches, read ahead
    reader = batches(rows, labels, order, workers=2)
    x, y = next(reader)
    assert x[0].shape == (8, 8, 8) and len(y) == 8
    deadline = time.monotonic() + 30
    while len(_workers()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the workers fill their queues and block in put
    t0 = time.monotonic()
    reader.close()
    took = time.monotonic() - t0
    assert _workers() == []
    assert took < 2.5, f"stopping the reader took {took:.1f} s"  # unreleased: >= 5 s
