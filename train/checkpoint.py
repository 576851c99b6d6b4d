"""Training checkpoints: network, optimizer and loss-scale state, written atomically."""
from __future__ import annotations

import os
from pathlib import Path

from amptool.errors import UsageError
from amptool.fileio import atomic_path

SCALER_PREFIX = "amptool_loss_scale."
META_KEYS = ("epoch", "step", "best_acc", "val_acc", "overflow", "model", "optimizer")


def state_items(net, optimizer, scaler_params) -> list:
    """Name/data entries of everything a resume needs, each parameter once."""
    seen, items = set(), []
    for param in list(net.get_parameters()) + list(optimizer.get_parameters()):
        if param.name not in seen:
            seen.add(param.name)
            items.append({"name": param.name, "data": param})
    for param in scaler_params:
        items.append({"name": SCALER_PREFIX + param.name, "data": param})
    return items


def save_state(path: str | os.PathLike, items: list, meta: dict, fmt: str = "ckpt") -> None:
    """Write a checkpoint atomically: a crash never leaves a half-written file."""
    import mindspore as ms

    if fmt == "safetensors":  # safetensors holds tensors only: numbers yes, strings no
        meta = {k: v for k, v in meta.items() if not isinstance(v, str)}
    with atomic_path(path) as tmp:
        ms.save_checkpoint(items, str(tmp), append_dict=dict(meta), format=fmt)


def read_checkpoint(path: str | os.PathLike) -> dict:
    """name -> Parameter; one clear error for a missing, truncated or corrupt file."""
    import mindspore as ms

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"checkpoint {path} does not exist", "check the path or train first")
    fmt = "safetensors" if path.suffix == ".safetensors" else "ckpt"
    try:
        return ms.load_checkpoint(str(path), format=fmt)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"checkpoint {path} cannot be read ({reason[:160]})",
                         "it is truncated or corrupt: re-train or re-convert it") from None


def meta_of(params: dict) -> dict:
    meta = {}
    for key in META_KEYS:
        if key in params:
            value = params[key]
            meta[key] = value.asnumpy().item() if hasattr(value, "asnumpy") else value
    return meta


def load_into_net(net, params: dict, source: str = "checkpoint") -> None:
    """Load weights, refusing a checkpoint whose names or shapes do not fit the network."""
    import mindspore as ms

    missing, mismatched = [], []
    for p in net.get_parameters():
        if p.name not in params:
            missing.append(p.name)
        elif tuple(params[p.name].shape) != tuple(p.shape):
            mismatched.append(f"{p.name} {tuple(params[p.name].shape)} vs {tuple(p.shape)}")
    if missing or mismatched:
        what = []
        if missing:
            what.append(f"{len(missing)} missing parameter(s) (e.g. {', '.join(missing[:3])})")
        if mismatched:
            what.append(f"{len(mismatched)} shape mismatch(es) (e.g. {'; '.join(mismatched[:2])})")
        raise UsageError(f"{source} does not fit the model: " + ", ".join(what),
                         "pass the --model the checkpoint was trained with")
    ms.load_param_into_net(net, {p.name: params[p.name] for p in net.get_parameters()},
                           strict_load=True)


def restore_state(net, optimizer, scaler_params, params: dict, source: str) -> dict:
    """Restore network, optimizer and loss-scale state; return the saved metadata."""
    import mindspore as ms

    load_into_net(net, params, source)
    # The learning rate is configuration: a resumed run uses the one it is given.
    opt_params = {p.name: params[p.name] for p in optimizer.get_parameters()
                  if p.name in params and p.name != "learning_rate"}
    ms.load_param_into_net(optimizer, opt_params)
    for param in scaler_params:
        key = SCALER_PREFIX + param.name
        if key in params:
            param.set_data(params[key])
    return meta_of(params)
