"""amptool.documents.jsontypes: results to JSON and back by their types, keys exactly as before.

The key sets below are those the dict-built results of the release before typed results
wrote (captured from a real ``amptool train --json`` of each kind)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import pytest

from amptool.documents.jsontypes import from_json, optional_key, to_json
from amptool.train.summary import TrainSummary

ACCURACY_RUN = {"best_acc": 0.9554317548746518, "device": "CPU", "epochs": 2,
                "final_loss": 0.19775934517383575, "loss": "cross-entropy", "loss_scale": 1.0,
                "model": "trapmlp", "out": "/tmp/tj/trap", "overflow_steps": 0,
                "policy": "O0/float32", "samples_per_s": 9596.98, "seconds": 2.0,
                "steps": 88, "val_acc": 0.9554317548746518, "weights_sha256": "b614",
                "workers": 1}
"""``amptool train --json`` of a classifier (keys as the dict-built summary wrote them)."""
TASK_RUN = dict(ACCURACY_RUN, val_acc=None, best_acc=None, score="neg_val_loss",
                val_score=-0.5, best_score=None, val_loss=0.5, first_batch_tries=1,
                already_finished=True)
"""A run scored by its loss (best_score None: its key stays), resumed when finished."""


@dataclass(frozen=True)
class Inner:
    """A nested result."""

    name: str
    """Its name."""
    ci: Optional[List[float]] = optional_key()
    """An interval, absent when None."""


@dataclass(frozen=True)
class Outer:
    """A result holding others."""

    inners: Tuple[Inner, ...]
    """Nested results."""
    table: Dict[str, Inner]
    """Nested results by name."""
    kind: Optional[str] = optional_key()
    """A kind, absent when None."""
    detail: Optional[int] = optional_key(follows="kind")
    """Written (None too) whenever ``kind`` is."""


def test_nested_results_round_trip_with_their_optional_keys():
    data = {"inners": [{"name": "a", "ci": [0.0, 1.0]}, {"name": "b"}],
            "table": {"x": {"name": "x"}}, "kind": "k", "detail": None}
    obj = from_json(Outer, data)
    assert obj.inners[1] == Inner("b") and isinstance(obj.inners, tuple)
    assert obj.table["x"] == Inner("x") and obj.detail is None
    assert to_json(obj) == data
    assert to_json(Outer((), {})) == {"inners": [], "table": {}}


def test_an_unknown_or_missing_key_is_refused_by_name():
    with pytest.raises(ValueError, match=r"Outer.inners\[0\]: key\(s\) nam not in Inner"):
        from_json(Outer, {"inners": [{"nam": "a"}], "table": {}})
    with pytest.raises(ValueError, match="key.s. table missing for Outer"):
        from_json(Outer, {"inners": []})


@pytest.mark.parametrize("data", [ACCURACY_RUN, TASK_RUN], ids=["accuracy", "task"])
def test_training_summary_keeps_its_keys(data):
    summary = TrainSummary.from_dict(data)
    assert summary.to_dict() == data
    assert summary.model == "trapmlp" and summary.policy == "O0/float32"


def test_a_renamed_training_key_is_caught():
    renamed = {("val_accuracy" if k == "val_acc" else k): v for k, v in ACCURACY_RUN.items()}
    with pytest.raises(ValueError, match="val_accuracy not in TrainSummary"):
        TrainSummary.from_dict(renamed)
