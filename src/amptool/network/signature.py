"""Input signatures: each input's name, shape (-1 for a dynamic dimension), dtype and, for
generated inputs, a value range.

Text form (``--input-spec``), inputs separated by commas:
``NAME:SHAPE:DTYPE[:LOW..HIGH]``, SHAPE as dims joined by ``x`` with -1 for dynamic ones,
e.g. ``input_ids:-1x128:int32:0..30522,attention_mask:-1x128:int32:0..2``. A network (or its
factory) may declare ``input_signature`` as that text or as a list of mappings
``{"name", "shape", "dtype", "range"}``; ``input_shape`` (C, H, W) is the image shorthand.
Integer ranges are half-open [LOW, HIGH).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from amptool.errors import UsageError

DTYPES = ("float32", "float16", "float64", "int32", "int64", "int16", "int8", "uint8", "bool")
FLOAT_DTYPES = ("float32", "float16", "float64")


@dataclass(frozen=True)
class InputSpec:
    """One input of a network."""

    name: str
    shape: tuple
    """Dimensions; -1 marks a dynamic one (the first is the batch)."""
    dtype: str = "float32"
    low: Optional[float] = None
    """Smallest generated value (integers: inclusive)."""
    high: Optional[float] = None
    """Largest generated value (integers: exclusive)."""

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def to_dict(self) -> dict:
        out = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.low is not None or self.high is not None:
            out["range"] = [self.low, self.high]
        return out

    def concrete_shape(self, batch: int, fill: int = 8) -> tuple:
        """The shape with the batch set and other dynamic dimensions set to ``fill``."""
        return tuple(batch if i == 0 else (fill if d == -1 else d)
                     for i, d in enumerate(self.shape))

    def example(self, batch: int) -> np.ndarray:
        """Deterministic valid values: zeros, or the range's low end for integers."""
        value = 0 if self.low is None else self.low
        return np.full(self.concrete_shape(batch), value, dtype=np.dtype(self.dtype))

    def generate(self, batch: int, rng: np.random.RandomState) -> np.ndarray:
        """Seeded values in the declared range (floats: standard normal without one)."""
        shape = self.concrete_shape(batch)
        if self.dtype == "bool":
            return rng.randint(0, 2, size=shape).astype(bool)
        if not self.is_float:
            low = int(self.low if self.low is not None else 0)
            high = int(self.high if self.high is not None else 2)
            return rng.randint(low, high, size=shape).astype(self.dtype)
        if self.low is not None and self.high is not None:
            return rng.uniform(self.low, self.high, size=shape).astype(self.dtype)
        return rng.standard_normal(shape).astype(self.dtype)


def image_signature(shape, name: str = "model") -> tuple:
    """(InputSpec('x', (-1, C, H, W), float32),) from the (C, H, W) shorthand."""
    if not (isinstance(shape, (tuple, list)) and len(shape) == 3
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape)):
        raise UsageError(f"model {name} declares input_shape {shape!r}, not (C, H, W)",
                         "declare three positive whole numbers, or an input_signature")
    return (InputSpec("x", (-1, *[int(v) for v in shape]), "float32"),)


def parse_signature(value, source: str) -> tuple:
    """A tuple of InputSpec from the text form, a list of mappings/InputSpec, or a shape."""
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
        specs = tuple(_parse_text(item, source) for item in items)
    elif isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
        return image_signature(value, source)
    elif isinstance(value, (list, tuple)):
        specs = tuple(_parse_item(item, source) for item in value)
    else:
        specs = ()
    if not specs:
        raise UsageError(f"{source}: no inputs in {value!r}",
                         "write NAME:SHAPE:DTYPE, e.g. x:-1x3x32x32:float32")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise UsageError(f"{source}: input names repeat ({', '.join(names)})",
                         "give every input its own name")
    return specs


def _parse_text(item: str, source: str) -> InputSpec:
    parts = item.split(":")
    if len(parts) not in (3, 4):
        raise UsageError(f"{source}: bad input '{item}'",
                         "write NAME:SHAPE:DTYPE[:LOW..HIGH], e.g. ids:-1x128:int32:0..30522")
    name, shape_text, dtype = parts[:3]
    try:
        shape = tuple(int(d) for d in shape_text.lower().split("x"))
    except ValueError:
        raise UsageError(f"{source}: bad shape '{shape_text}' in '{item}'",
                         "join whole numbers with x, -1 for a dynamic dimension") from None
    rng = _parse_range(parts[3], item, source) if len(parts) == 4 else (None, None)
    return _checked(name, shape, dtype, rng, source)


def _parse_range(text: str, item: str, source: str) -> tuple:
    low, sep, high = text.partition("..")
    try:
        if not sep:
            raise ValueError
        return float(low), float(high)
    except ValueError:
        raise UsageError(f"{source}: bad range '{text}' in '{item}'",
                         "write LOW..HIGH, e.g. 0..30522") from None


def _parse_item(item, source: str) -> InputSpec:
    if isinstance(item, InputSpec):
        return item
    if not isinstance(item, dict) or "name" not in item or "shape" not in item:
        raise UsageError(f"{source}: bad input {item!r}",
                         "give mappings with name, shape, dtype (and optionally range)")
    rng = item.get("range") or (None, None)
    shape = tuple(-1 if d is None else int(d) for d in item["shape"])
    return _checked(str(item["name"]), shape, str(item.get("dtype", "float32")), tuple(rng), source)


def _checked(name: str, shape: tuple, dtype: str, rng: tuple, source: str) -> InputSpec:
    problems = []
    if not name.isidentifier():
        problems.append(f"input name '{name}' is not an identifier")
    if not shape or any(d == 0 or d < -1 for d in shape):
        problems.append(f"shape {list(shape)} of {name} (dims must be positive or -1)")
    if dtype not in DTYPES:
        problems.append(f"dtype '{dtype}' of {name} (use one of {', '.join(DTYPES)})")
    low, high = (None, None) if rng is None else rng
    if low is not None and high is not None and not low < high:
        problems.append(f"range {low}..{high} of {name} is empty")
    if problems:
        raise UsageError(f"{source}: " + "; ".join(problems), "fix the input signature")
    return InputSpec(name, tuple(int(d) for d in shape), dtype,
                     None if low is None else float(low), None if high is None else float(high))


def format_signature(inputs) -> str:
    """The text form of a signature (what ``--input-spec`` takes)."""
    parts = []
    for spec in inputs:
        text = f"{spec.name}:{'x'.join(str(d) for d in spec.shape)}:{spec.dtype}"
        if spec.low is not None and spec.high is not None:
            text += f":{spec.low:g}..{spec.high:g}"
        parts.append(text)
    return ",".join(parts)
