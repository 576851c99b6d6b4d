"""``amptool convert policy``: build or read a policy, show what it means for a network."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from amptool.network.models import resolve_model
from amptool.precision.apply import cell_dtypes, cell_origins
from amptool.precision.policy import (Policy, check_dtype_on_device, load_policy, make_policy,
                                      save_policy)
from amptool.runtime.device import import_mindspore, resolve_device

from .config import DEFAULT_DTYPE, DEFAULT_LEVEL, PolicyConfig, validate

LEVEL_MEANING = {
    "O0": "everything in float32",
    "O1": "MindSpore's white-list operators (Conv, Dense, MatMul, ReLU...) in the low dtype, "
          "the rest float32",
    "O2": "every cell in the low dtype except the black list (BatchNorm, LayerNorm) and the "
          "policy's fp32 cells",
    "O3": "every cell in the low dtype except the policy's fp32 cells",
}


@dataclass
class PolicyReport:
    policy: Policy
    meaning: str
    rows: list
    out: Optional[str]
    kept_where: dict = field(default_factory=dict)
    """The policy's fp32 cell paths -> ``Class (file.py:LINE)`` of their construct."""

    def to_dict(self) -> dict:
        return {"policy": self.policy.to_dict(), "meaning": self.meaning, "out": self.out,
                "cells": [{"path": p, "type": t, "dtype": d, "params": n}
                          for p, t, d, n in self.rows],
                "kept_where": self.kept_where}

    def counts(self) -> dict:
        by_dtype: dict = {}
        for _, _, dtype, nparams in self.rows:
            cells, params = by_dtype.get(dtype, (0, 0))
            by_dtype[dtype] = (cells + 1, params + nparams)
        return by_dtype


def build_policy(cfg: PolicyConfig):
    """The policy the options describe (``validate``-d): a file, or a level plus extra cell
    lists."""
    if cfg.policy:
        return load_policy(cfg.policy)
    return make_policy(cfg.level or DEFAULT_LEVEL, cfg.dtype or DEFAULT_DTYPE, cfg.fp32_types,
                       cfg.fp32_cells, cfg.fp16_cells)


def explain_policy(cfg: PolicyConfig) -> PolicyReport:
    """Resolve the policy, check it against the model and device, optionally write it."""
    validate(cfg)
    policy = build_policy(cfg)
    if cfg.device:
        check_dtype_on_device(policy, resolve_device(cfg.device))
    rows, where = [], {}
    if cfg.model:
        import_mindspore()
        net = resolve_model(cfg.model, cfg.model_args, cfg.input_spec).build()
        rows = cell_dtypes(net, policy)  # raises one error listing unknown paths/types
        where = cell_origins(net, policy.fp32_cells)
    if cfg.out:
        save_policy(policy, cfg.out, force=cfg.force, notes=where or None)
    return PolicyReport(policy, LEVEL_MEANING[policy.level], rows, cfg.out, where)
