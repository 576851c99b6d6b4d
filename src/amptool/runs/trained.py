"""A trained model: the network, its checkpoint, the run's policy and preprocessing.

Export and convert start from one, given either as a training run folder (``--run``:
run.json and the best/last checkpoint) or as a checkpoint plus a model reference
(``--ckpt FILE --model M``, preprocessing derived from the data as training derives it).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from amptool.data.dataset import load_eval_inputs, load_model_data
from amptool.documents.door import to_json
from amptool.errors import UsageError
from amptool.network import checkpoint as ckpt
from amptool.network.losses import loss_from_record, task_record
from amptool.network.models import ModelSpec, resolve_model, user_reference
from amptool.precision.policy import Policy, policy_for, policy_from_dict
from amptool.runs.rundir import RunDir


@dataclass
class TrainedModel:
    """What a stage needs to rebuild a trained network."""

    spec: ModelSpec
    checkpoint: Path
    policy: Policy
    """The training run's precision policy (O2 when only a checkpoint is known)."""
    preprocess: Optional[dict]
    """How raw images become inputs (None when unknown)."""
    data: Optional[str]
    """The training data source."""
    val_fraction: Optional[float]
    task: Optional[dict] = None
    """The run's loss as recorded (``losses.task_record``: name, kind, targets, classifier);
    None when unknown (a checkpoint alone, a run from before ``--loss``)."""

    @property
    def model_ref(self) -> str:
        """The reference ``resolve_model`` accepts for this model."""
        return self.spec.name

    def fp32_weights(self) -> dict:
        """name -> fp32 Parameter of every tensor entry (fp16 checkpoints are widened)."""
        import mindspore as ms

        weights = {}
        # read at call time (``ckpt.read_checkpoint``): tests replace it
        for name, value in ckpt.read_checkpoint(self.checkpoint).items():
            if isinstance(value, str):
                continue
            if value.dtype in (ms.float16, ms.bfloat16, ms.float64):
                value = ms.Parameter(value.astype(ms.float32), name=name)
            weights[name] = value
        return weights

    def eval_split(self, data: Optional[str] = None, samples: Optional[int] = None) -> tuple:
        """(inputs, y): the held-out split, one array per input, preprocessed as in training
        (``data`` overrides the source)."""
        source = data or self.data or ("digits" if self.spec.input_shape else "tokens")
        return load_eval_inputs(source, self.spec, self.preprocess, self.val_fraction or 0.2,
                                samples, loss_from_record(self.task))


def from_run(run: str | os.PathLike, which: Optional[str] = "best",
             ckpt: Optional[str] = None, model: Optional[str] = None,
             model_args: Optional[dict] = None, input_spec: Optional[str] = None) -> TrainedModel:
    """The model of a training run folder; ``ckpt``/``model`` override the run's. A ``model``
    the user names runs without vetting; it takes the run's recorded factory arguments and
    signature where it is the run's own model and ``model_args``/``input_spec`` are not given."""
    run_dir = RunDir(run)
    info = run_dir.read()
    path = Path(ckpt) if ckpt else run_dir.find_checkpoint(which)
    if ckpt and not path.is_file():
        raise UsageError(f"checkpoint {path} does not exist", "check the --ckpt path")
    policy = policy_from_dict(to_json(info.policy), source=f"{run_dir.info_path} policy")
    data = info.data
    user_reference(model, model_args, input_spec)  # arguments without a model are refused
    ref = run_dir.model_reference(info)
    if model:
        own = model == ref.get("model")
        ref = {"model": model,
               "model_args": model_args if model_args is not None or not own
               else ref.get("model_args"),
               "input_spec": input_spec if input_spec is not None or not own
               else ref.get("input_spec")}
    prep = to_json(data.preprocess) if data.preprocess else None
    task = task_record(to_json(info.loss) if info.loss else None)
    spec = resolve_model(ref)
    if task is not None and not task.get("classifier", True):  # no class logits to judge
        spec = dataclasses.replace(spec, num_classes=None)
    return TrainedModel(spec, path, policy, prep, data.source, data.val_fraction, task)


def from_checkpoint(ckpt: str | os.PathLike, model: Optional[str], data: Optional[str] = "digits",
                    val_fraction: float = 0.2, model_args: Optional[dict] = None,
                    input_spec: Optional[str] = None) -> TrainedModel:
    """A checkpoint and the model it was trained with; preprocessing is recomputed from
    ``data`` exactly as training derives it (``None`` or "none": unknown)."""
    if not model:
        raise UsageError("--ckpt needs --model", "name the model the checkpoint was trained with")
    path = Path(ckpt)
    if not path.is_file():
        raise UsageError(f"checkpoint {path} does not exist", "check the --ckpt path")
    spec = resolve_model(model, model_args, input_spec)
    preprocess = None
    if data and data.lower() != "none" and spec.input_shape is not None:
        prep = load_model_data(data, spec, val_fraction).preprocess
        preprocess = dataclasses.asdict(prep) if prep is not None else None
    return TrainedModel(spec, path, policy_for(), preprocess, data if preprocess else None,
                        val_fraction if preprocess else None)
