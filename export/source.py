"""Where an export's model, weights, policy and preprocessing come from.

``--run DIR`` reads all of it from the training run (``run.json`` and ``best``/``last``
checkpoint); ``--ckpt FILE --model NAME`` takes it from options.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from amptool.errors import UsageError


@dataclass
class Source:
    """The resolved inputs of one export."""

    spec: object
    """The ModelSpec (builds the network, knows input shape and class count)."""
    model_spec: str
    """The string ``resolve_model`` accepts for this model."""
    checkpoint: Path
    policy: object
    """The training run's precision policy (or the one given)."""
    preprocess: dict | None
    data: str | None
    val_fraction: float | None


def _read_run_json(run_dir: Path) -> dict:
    if not run_dir.is_dir():
        raise UsageError(f"run folder {run_dir} does not exist", "pass the --out of amptool train")
    path = run_dir / "run.json"
    if not path.is_file():
        raise UsageError(f"{run_dir} has no run.json", "pass the --out folder of amptool train")
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        _ = info["config"]["model"], info["policy"], info["data"]["preprocess"]
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path} is malformed ({type(exc).__name__}: {exc})",
                         "train again to rewrite it") from None
    return info


def _run_checkpoint(run_dir: Path, which: str) -> Path:
    if which not in ("best", "last"):
        raise UsageError(f"unknown checkpoint '{which}'", "use best or last")
    for suffix in (".ckpt", ".safetensors"):
        candidate = run_dir / f"{which}{suffix}"
        if candidate.is_file():
            return candidate
    raise UsageError(f"{run_dir} has no {which}.ckpt or {which}.safetensors",
                     "train until a checkpoint is written, or pass --ckpt FILE")


def _override_policy(policy, policy_file: str, amp_level: str):
    from amptool.convert.policy import load_policy, make_policy

    if policy_file:
        return load_policy(policy_file)
    if amp_level:
        return make_policy(amp_level)
    return policy


def from_run(run_dir: str, which: str, policy_file: str = "", amp_level: str = "") -> Source:
    from amptool.convert.policy import policy_from_dict
    from amptool.samples.loader import resolve_model

    run_dir = Path(run_dir)
    info = _read_run_json(run_dir)
    ckpt = _run_checkpoint(run_dir, which)
    policy = policy_from_dict(info["policy"], source=f"{run_dir / 'run.json'} policy")
    spec = resolve_model(info["config"]["model"])
    data = info["data"]
    return Source(spec, info["config"]["model"], ckpt,
                  _override_policy(policy, policy_file, amp_level), dict(data["preprocess"]),
                  data.get("source"), data.get("val_fraction"))


def from_checkpoint(ckpt: str, model: str, policy_file: str = "", amp_level: str = "",
                    data: str = "digits", val_fraction: float = 0.2) -> Source:
    """Preprocessing is recomputed from ``data`` exactly as training derives it."""
    from amptool.convert.policy import make_policy
    from amptool.samples.loader import resolve_model

    if not model:
        raise UsageError("--ckpt needs --model", "name the model the checkpoint was trained with")
    path = Path(ckpt)
    if not path.is_file():
        raise UsageError(f"checkpoint {path} does not exist", "check the --ckpt path")
    spec = resolve_model(model)
    policy = _override_policy(make_policy("O2"), policy_file, amp_level)
    preprocess = None
    if data and data.lower() != "none":
        from amptool.train.data import load_dataset

        prep = load_dataset(data, spec.input_shape, spec.num_classes, val_fraction).preprocess
        preprocess = prep.to_dict()
    return Source(spec, model, path, policy, preprocess, data or None,
                  val_fraction if preprocess else None)


def export_policy(policy):
    """The policy an FP16 graph is built with: cell-level, float16.

    O0 and O1 runs get O2's cell-level rule (BatchNorm/LayerNorm kept fp32): an O1
    operator list does not say which stored weights may be fp16. A bfloat16 policy keeps
    its cell lists and exports float16.
    """
    from amptool.convert.policy import make_policy

    if policy.level in ("O0", "O1"):
        return make_policy("O2")
    return dataclasses.replace(policy, dtype="float16")
