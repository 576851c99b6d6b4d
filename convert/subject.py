"""What a search (or any eager check) runs on: network, fp32 weights and held-out inputs.

Either a training run folder (run.json names the model, data and preprocessing; best
checkpoint) or a checkpoint plus a model name (data preprocessed as training would, from
the training split's statistics).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from amptool.errors import UsageError
from amptool.runs.trained import from_checkpoint, from_run


@dataclass
class SearchSubject:
    """A model spec, its fp32 weights and one batch of held-out inputs with their targets
    (class labels, or the run's targets: one array, a list for several)."""

    spec: object
    weights: dict
    x: np.ndarray
    y: object
    ckpt: str
    data: str
    classifier: bool = True
    """Whether the network's first output is class logits, by its run's recorded loss (a
    run without one, or a checkpoint alone: a classifier, as before ``--loss``)."""


def load_subject(run: Optional[str], ckpt: Optional[str], model: Optional[str],
                 data: Optional[str], samples: Optional[int], model_args: Optional[dict] = None,
                 input_spec: Optional[str] = None) -> SearchSubject:
    """Resolve ``--run`` or ``--ckpt --model`` into weights and held-out inputs."""
    if samples is not None and samples < 1:
        raise UsageError(f"--samples must be >= 1 (got {samples})", "give a positive count")
    if run is None and (ckpt is None or model is None):
        raise UsageError("nothing to search on", "pass --run DIR, or --ckpt FILE with --model M")
    if run is not None:
        trained = from_run(run, None, ckpt=ckpt, model=model, model_args=model_args,
                           input_spec=input_spec)
    else:
        assert ckpt is not None  # refused above without one
        trained = from_checkpoint(ckpt, model, data or "digits", model_args=model_args,
                                  input_spec=input_spec)
    inputs, y = trained.eval_split(data, samples)
    if len(inputs) != 1:
        raise UsageError(f"model {trained.model_ref} takes {len(inputs)} inputs; the search runs "
                         "on single-input networks", "search a single-input network")
    x = inputs[0]
    classifier = trained.task is None or bool(trained.task.get("classifier", True))
    return SearchSubject(trained.spec, trained.fp32_weights(), x, y, str(trained.checkpoint),
                         data or trained.data or "digits", classifier)
