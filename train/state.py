"""``RunState``: a training run's counters, the only part of a run that changes as it trains."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class RunState:
    """Where a training run stands: its position, its overflow counts, its accuracy and loss,
    and the read-back window its throughput is measured over."""

    epoch: int = 0
    """Epochs finished: the run goes on with this epoch (0-based)."""
    step: int = 0
    """Steps taken over the whole run, skipped ones included."""
    overflow: int = 0
    """Steps skipped over the whole run because their gradients overflowed."""
    overflow_before: int = 0
    """Skipped steps of the run before this process's device counters (a resumed run's)."""
    consecutive: int = 0
    """Steps skipped in a row up to the last read-back."""
    forward_bad: int = 0
    """Steps in a row, up to the last read-back, whose loss itself was not finite."""
    best_score: float = float("-inf")
    """Best held-out score after an epoch so far (-inf: no epoch ended yet): accuracy for a
    classifier, the ``--metric``, or the negative validation loss."""
    val_score: float = 0.0
    """Held-out score after the last epoch."""
    val_loss: Optional[float] = None
    """Held-out loss after the last epoch (None: not computed, as for accuracy alone)."""
    loss: float = float("nan")
    """The loss at the last read-back (NaN before the first)."""
    window_start: float = 0.0
    """``time.perf_counter()`` at the last read-back (or the epoch's start)."""
    window_samples: int = 0
    """Samples trained on since then, over every worker."""
    timed_samples: int = 0
    """Samples of the windows that count towards throughput."""
    timed_seconds: float = 0.0
    """Seconds of those windows."""
    first_batch_tries: Optional[int] = None
    """Tries of a fresh run's first batch under a dynamic scale (None: not tried)."""

    def open_window(self, now: float) -> None:
        """Start a read-back window at ``now``."""
        self.window_start, self.window_samples = now, 0

    def advance(self, steps: int, samples: int) -> None:
        """Count ``steps`` steps over ``samples`` samples into the run and its window."""
        self.step += steps
        self.window_samples += samples

    def close_window(self, now: float, timed: bool) -> tuple:
        """End the window at ``now`` and open the next; (samples, seconds) of the closed one,
        added to the throughput's totals when ``timed``."""
        samples, seconds = self.window_samples, now - self.window_start
        if timed:
            self.timed_samples += samples
            self.timed_seconds += seconds
        self.open_window(now)
        return samples, seconds

    def samples_per_s(self) -> float:
        """Throughput over the timed windows (0 when none)."""
        return self.timed_samples / self.timed_seconds if self.timed_seconds else 0.0
