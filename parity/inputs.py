"""Inputs for a comparison, batched runs, and golden outputs files.

Real samples (``--data``) are kept as raw images in [0, 1] and standardized per side,
as that side's manifest says: an artefact that expects other preprocessing gets what
it expects, and a disagreement shows up as a numerical difference, not a silent match.
Given inputs (``--inputs FILE.npz``) are fed as they are to every side.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from amptool.errors import UsageError

DEFAULT_DATA = "digits"


@dataclass
class InputSet:
    """What is fed to every side, before each side's own preprocessing."""

    raw: Optional[np.ndarray]
    """Images in [0, 1], (N, C, H, W), when the inputs come from a data source."""
    given: Optional[list]
    """Ready inputs, one array per model input, fed as they are."""
    labels: Optional[np.ndarray]
    description: str
    fallback_preprocess: Optional[dict] = None
    class_labels: Optional[np.ndarray] = None
    """Class labels for the outputs a model declares as class logits: ``labels`` when they
    are integers, else the run's one integer target of one value per sample among several."""

    def __post_init__(self):
        if self.class_labels is None:
            self.class_labels = integer_labels(self.labels)

    @property
    def count(self) -> int:
        return len(self.raw) if self.raw is not None else len(self.given[0])

    def for_preprocess(self, preprocess: Optional[dict]) -> list:
        """The arrays a side with this preprocessing is fed."""
        prep = preprocess or self.fallback_preprocess
        if self.raw is not None and prep is not None:
            return [((self.raw - prep["mean"]) / prep["std"]).astype(np.float32)]
        if self.given is not None:
            return self.given
        raise UsageError("no preprocessing is known for these inputs (no manifest or run.json)",
                         "pass --inputs FILE.npz with ready inputs")

    def head(self, n: int) -> "InputSet":
        return InputSet(None if self.raw is None else self.raw[:n],
                        None if self.given is None else [g[:n] for g in self.given],
                        None if self.labels is None else self.labels[:n], self.description,
                        self.fallback_preprocess,
                        None if self.class_labels is None else self.class_labels[:n])


def integer_labels(targets) -> Optional[np.ndarray]:
    """The one array of ``targets`` (an array, a list of them, or None) that holds one whole
    number per sample; None when there is none or more than one."""
    arrays = targets if isinstance(targets, list) else [] if targets is None else [targets]
    found = [np.asarray(a).reshape(-1) for a in arrays
             if np.issubdtype(np.asarray(a).dtype, np.integer)
             and (np.ndim(a) == 1 or np.shape(a)[1:] == (1,))]
    return found[0].astype(np.int64) if len(found) == 1 else None


def load_data_inputs(spec: str, preprocess: dict, num_classes: Optional[int],
                     val_fraction: float, samples: Optional[int],
                     task: Optional[dict] = None) -> InputSet:
    """The held-out split of ``spec`` as raw images fitted to the preprocess's C, H, W
    (``task``: the run's recorded loss, whose targets the labels are)."""
    from amptool.data import load_val_raw
    from amptool.losses import loss_from_record

    shape = (preprocess["channels"], preprocess["height"], preprocess["width"])
    if samples is not None and samples < 1:
        raise UsageError(f"--samples must be >= 1 (got {samples})", "give a positive count")
    x, y = load_val_raw(spec, shape, num_classes, val_fraction, samples,
                        loss_from_record(task))
    several = isinstance(y, list)  # several targets: parity's labels are one array
    return InputSet(x, None, None if several else y,
                    f"{spec} held-out split ({len(x)} samples)", preprocess,
                    integer_labels(y))


def load_signature_inputs(spec: str, model_ref, val_fraction: float,
                          samples: Optional[int], task: Optional[dict] = None) -> InputSet:
    """Inputs for a network that does not take images: the held-out split of ``spec``
    (``npz:FILE`` with one array per input, or ``tokens``), or with ``random[:SEED]``
    values generated from the signature (in the declared ranges), without labels."""
    from amptool.data import load_eval_inputs
    from amptool.losses import loss_from_record
    from amptool.models import resolve_model

    if samples is not None and samples < 1:
        raise UsageError(f"--samples must be >= 1 (got {samples})", "give a positive count")
    model = resolve_model(model_ref)
    kind, _, seed = spec.partition(":")
    if kind == "random":
        return generate_inputs(model.inputs, samples or 64, int(seed or 0))
    loss = loss_from_record(task)
    if loss is not None and not loss.classifier:  # whatever width its first output has
        import dataclasses

        model = dataclasses.replace(model, num_classes=None)
    given, labels = load_eval_inputs(spec, model, None, val_fraction, samples, loss)
    several = isinstance(labels, list)  # several targets: parity's labels are one array
    return InputSet(None, given, None if several else labels,
                    f"{spec} held-out split ({len(given[0])} samples)",
                    class_labels=integer_labels(labels))


def generate_inputs(inputs: tuple, count: int, seed: int = 0) -> InputSet:
    """``count`` seeded samples per input of a signature, in its declared value ranges."""
    rng = np.random.RandomState(seed)
    given = [spec.generate(count, rng) for spec in inputs]
    return InputSet(None, given, None, f"{count} generated samples (seed {seed})")


def _read_npz(path: str, flag: str, fix: str, unreadable: str) -> dict:
    """name -> array of an .npz file; one line naming ``flag`` when it cannot be read."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{flag} {path} does not exist", fix)
    try:
        with np.load(p, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception as exc:
        raise UsageError(unreadable.replace("{name}", type(exc).__name__), fix) from None


def load_npz_inputs(path: str, input_names: list, samples: Optional[int]) -> InputSet:
    """Ready inputs from an .npz: arrays named after the inputs, or ``x`` (labels ``y``)."""
    arrays = _read_npz(path, "--inputs", "give an .npz from numpy.savez",
                       f"cannot read --inputs {path} as .npz ({{name}})")
    if all(n in arrays for n in input_names):
        given = [arrays[n] for n in input_names]
    elif len(input_names) == 1 and "x" in arrays:
        given = [arrays["x"]]
    elif len(input_names) == 1 and len(arrays) == 1:
        given = list(arrays.values())
    else:
        raise UsageError(f"--inputs {path} has arrays {', '.join(sorted(arrays))}, the model "
                         f"takes {', '.join(input_names)}",
                         "name the arrays after the inputs (or 'x' for one input, 'y' for labels)")
    labels = arrays.get("y")
    if samples is not None:
        given = [g[:samples] for g in given]
        labels = None if labels is None else labels[:samples]
    if len({len(g) for g in given}) != 1 or (labels is not None and len(labels) != len(given[0])):
        raise UsageError(f"--inputs {path}: arrays hold different sample counts",
                         "store one row per sample in every array")
    if labels is not None and np.issubdtype(labels.dtype, np.integer):
        labels = labels.astype(np.int64)  # class labels; float targets stay as they are
    return InputSet(None, given, labels, f"{path} ({len(given[0])} samples)")


def run_batched(runner, arrays: list, chunk: int = 512) -> list:
    """Run all samples through a runner, ``chunk`` samples per call.

    Runners of fixed-batch artefacts split (and pad) their input themselves.
    """
    n = len(arrays[0])
    if n <= chunk:
        return [np.asarray(o) for o in runner.run(arrays)]
    parts = [runner.run([a[start:start + chunk] for a in arrays]) for start in range(0, n, chunk)]
    return [np.concatenate([np.asarray(p[i]) for p in parts]) for i in range(len(parts[0]))]


def save_golden(path: str, ref, inputs: InputSet, fed: list, outputs: list) -> None:
    """Reference outputs, the inputs fed to make them, raw images and labels, in one .npz."""
    from amptool.fileio import atomic_path

    meta = {"reference": ref.path, "format": ref.format, "precision": ref.precision,
            "preprocess": ref.preprocess or inputs.fallback_preprocess, "model": ref.model,
            "num_classes": ref.num_classes, "task": ref.task, "class_logits": ref.class_logits,
            "inputs_meta": ref.inputs,
            "outputs_meta": ref.outputs, "description": inputs.description}
    arrays = {f"input_{i}": a for i, a in enumerate(fed)}
    arrays.update({f"output_{i}": o for i, o in enumerate(outputs)})
    if inputs.raw is not None:
        arrays["raw"] = inputs.raw
    if inputs.labels is not None:
        arrays["labels"] = inputs.labels
    if inputs.class_labels is not None:
        arrays["class_labels"] = inputs.class_labels
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    with atomic_path(path, suffix=".npz") as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)


def load_golden(path: str):
    """(Side standing for the stored reference, its InputSet, its outputs)."""
    from amptool.parity.sides import Side, _indices

    fix = "make it with 'amptool parity REFERENCE --save-outputs FILE'"
    bad = f"--load-outputs {path} is not a golden outputs file"
    arrays = _read_npz(path, "--load-outputs", fix, bad)
    try:
        meta = json.loads(arrays.pop("meta").tobytes().decode("utf-8"))
        fed = [arrays[f"input_{i}"] for i in range(len(meta["inputs_meta"]))]
        outputs = [arrays[f"output_{i}"] for i in range(len(meta["outputs_meta"]))]
        if any(k not in meta for k in ("reference", "format", "precision", "preprocess",
                                       "description")):
            raise KeyError("meta")
    except Exception:  # not JSON, not a mapping, or a key or array missing
        raise UsageError(bad, fix) from None
    from amptool.losses import task_record
    from amptool.trust import recorded_reference

    named = meta.get("model")  # a file's word: vetted before any of its code runs
    src = Side(path=f"{path} (golden of {meta['reference']})", kind="golden",
               format=meta["format"], precision=meta["precision"],
               preprocess=meta["preprocess"], model=named,
               model_ref=recorded_reference({"model": named}, None, path, Path(path).parent)
               if isinstance(named, str) and named else None,
               num_classes=meta.get("num_classes"), task=task_record(meta.get("task")),
               class_logits=_indices(meta.get("class_logits")),
               golden={"inputs_meta": meta["inputs_meta"], "outputs_meta": meta["outputs_meta"]})
    inputs = InputSet(arrays.get("raw"), fed, arrays.get("labels"),
                      f"golden {meta['description']}", meta["preprocess"],
                      arrays.get("class_labels"))
    return src, inputs, outputs
