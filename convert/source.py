"""What a search (or any eager check) runs on: network, weights and held-out inputs.

Either a training run folder (run.json names the model, data and preprocessing;
best checkpoint) or a checkpoint plus a model name (data preprocessed as training
would, from the training split's statistics).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from amptool.errors import UsageError

RUN_CKPTS = ("best.ckpt", "best.safetensors", "last.ckpt", "last.safetensors")


@dataclass
class EvalSource:
    """A model spec, its fp32 weights and one batch of held-out inputs with labels."""

    spec: object
    weights: dict
    x: np.ndarray
    y: np.ndarray
    ckpt: str
    data: str


def read_run(run: str | Path) -> dict:
    run_json = Path(run) / "run.json"
    if not Path(run).is_dir():
        raise UsageError(f"run folder {run} does not exist", "point --run at a training output folder")
    if not run_json.is_file():
        raise UsageError(f"{run} has no run.json", "point --run at a folder written by amptool train")
    try:
        info = json.loads(run_json.read_text(encoding="utf-8"))
        info["model"]["name"], info["data"]["preprocess"]
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{run_json} is malformed", "re-run amptool train into that folder") from None
    return info


def run_checkpoint(run: str | Path) -> Path:
    for name in RUN_CKPTS:
        if (Path(run) / name).is_file():
            return Path(run) / name
    raise UsageError(f"{run} holds no checkpoint ({', '.join(RUN_CKPTS)})",
                     "train into that folder first, or pass --ckpt")


def fp32_weights(spec, path: str | Path) -> dict:
    """name -> fp32 Parameter for every network parameter (fp16 checkpoints are widened)."""
    import mindspore as ms

    from amptool.convert.ckpt import read_entries

    entries, _ = read_entries(path)
    weights = {}
    for name, value in entries.items():
        if isinstance(value, str):
            continue
        if value.dtype in (ms.float16, ms.bfloat16, ms.float64):
            value = ms.Parameter(value.astype(ms.float32), name=name)
        weights[name] = value
    return weights


def build_with_weights(spec, weights: dict, source: str):
    """A fresh network of ``spec`` holding ``weights``."""
    from amptool.train.checkpoint import load_into_net

    net = spec.build()
    load_into_net(net, weights, source)
    net.set_train(False)
    return net


def load_source(run: Optional[str], ckpt: Optional[str], model: Optional[str],
                data: Optional[str], samples: Optional[int]) -> EvalSource:
    """Resolve ``--run`` or ``--ckpt --model`` into weights and held-out inputs."""
    from amptool.samples.loader import resolve_model
    from amptool.train.data import load_dataset, load_eval_split

    if samples is not None and samples < 1:
        raise UsageError(f"--samples must be >= 1 (got {samples})", "give a positive count")
    if run is None and (ckpt is None or model is None):
        raise UsageError("nothing to search on", "pass --run DIR, or --ckpt FILE with --model M")
    if run is not None:
        info = read_run(run)
        spec = resolve_model(model or info["model"]["name"])
        path = Path(ckpt) if ckpt else run_checkpoint(run)
        source = data or info["data"]["source"]
        x, y = load_eval_split(source, info["data"]["preprocess"], spec.num_classes,
                               info["data"].get("val_fraction", 0.2), samples)
    else:
        spec = resolve_model(model)
        path = Path(ckpt)
        source = data or "digits"
        ds = load_dataset(source, spec.input_shape, spec.num_classes)
        x, y = ds.val_x[:samples], ds.val_y[:samples]
    weights = fp32_weights(spec, path)
    return EvalSource(spec, weights, x, y, str(path), source)
