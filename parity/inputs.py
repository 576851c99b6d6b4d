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

from amptool.data.dataset import load_model_data, load_val_raw
from amptool.data.sources import found_targets, match_inputs, readable_here
from amptool.documents.door import read_document
from amptool.documents.records import GOLDEN, GOLDEN_VERSION
from amptool.errors import UsageError
from amptool.files.fileio import atomic_path
from amptool.network.losses import loss_from_record, task_record
from amptool.network.models import resolve_model
from amptool.network.trust import recorded_reference
from amptool.parity.sides import Side, _indices
from amptool.parity.store import StoredArray, stored_npz, write_npz

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
    targets: Optional[list] = None
    """Every target array of the samples (the run's loss's), when there are several."""
    target_names: tuple = ()
    """The data arrays the targets (or the labels) come from."""
    labels_from: Optional[str] = None
    """The target array ``labels`` is (class labels for class-logit outputs)."""

    @property
    def class_labels(self) -> Optional[np.ndarray]:
        """Class labels for the outputs a model declares as class logits: ``labels`` when
        they are whole class indices (one per sample), else None."""
        return integer_labels(self.labels)

    @property
    def metric_targets(self):
        """What a ``--metric`` function is given, as training gives it: the one target, a
        list of arrays for several, or None."""
        return list(self.targets) if self.targets is not None else self.labels

    @property
    def count(self) -> int:
        if self.raw is not None:
            return len(self.raw)
        assert self.given is not None  # an input set holds raw images or ready inputs
        return len(self.given[0])

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
        return self.select(slice(0, n))

    def select(self, rows) -> "InputSet":
        """The samples ``rows`` (a slice, or an array of indices) of every array."""
        def cut(a):
            return None if a is None else a[rows]

        return InputSet(cut(self.raw), None if self.given is None else [cut(g) for g in self.given],
                        cut(self.labels), self.description, self.fallback_preprocess,
                        None if self.targets is None else [cut(t) for t in self.targets],
                        self.target_names, self.labels_from)


def integer_labels(targets) -> Optional[np.ndarray]:
    """The one array of ``targets`` (an array, a list of them, or None) that holds one whole
    number per sample; None when there is none or more than one."""
    arrays = targets if isinstance(targets, list) else [] if targets is None else [targets]
    found = [np.asarray(a).reshape(-1) for a in arrays
             if np.issubdtype(np.asarray(a).dtype, np.integer)
             and (np.ndim(a) == 1 or np.shape(a)[1:] == (1,))]
    return found[0].astype(np.int64) if len(found) == 1 else None


def pick_labels(names: tuple, ys: list, classes: Optional[int] = None) -> tuple:
    """(labels, their array's name, what is said about them) of a sample set's targets.
    One target is the labels, as stored (integers widened to int64). Of several, the labels
    for class-logit outputs are the one target holding one whole class index per sample
    (integers, shape (N,) or (N, 1), each in 0..classes-1 when the class count is known);
    none or several such: no labels, and the note says so."""
    if not ys:
        return None, None, ""
    if len(ys) == 1:
        y = np.asarray(ys[0])
        return (y.astype(np.int64) if np.issubdtype(y.dtype, np.integer) else y), names[0], ""
    fits = [i for i, y in enumerate(ys) if _class_labels(np.asarray(y), classes)]
    listed = ", ".join(names)
    if len(fits) != 1:
        why = "none holds" if not fits else "several hold"
        return None, None, (f"targets {listed}: {why} one class index per sample, no labels "
                            "for class logits")
    i = fits[0]
    return (np.asarray(ys[i]).reshape(-1).astype(np.int64), names[i],
            f"targets {listed}; class labels: {names[i]}")


def _class_labels(y: np.ndarray, classes: Optional[int]) -> bool:
    if not np.issubdtype(y.dtype, np.integer) or not (y.ndim == 1 or y.shape[1:] == (1,)):
        return False
    return not len(y) or (y.min() >= 0 and (classes is None or y.max() < classes))


def target_set(inputs: "InputSet", names: tuple, ys: list, classes: Optional[int]) -> "InputSet":
    """``inputs`` with these targets: labels picked by ``pick_labels``, all of them kept for
    ``--metric`` when there are several, and the description saying what is used."""
    labels, source, note = pick_labels(tuple(names), list(ys), classes)
    inputs.labels, inputs.labels_from, inputs.target_names = labels, source, tuple(names)
    inputs.targets = [np.asarray(y) for y in ys] if len(ys) > 1 else None
    if note:
        inputs.description = f"{inputs.description[:-1]}; {note})"
    return inputs


def load_data_inputs(spec: str, preprocess: dict, num_classes: Optional[int],
                     val_fraction: float, samples: Optional[int],
                     task: Optional[dict] = None) -> InputSet:
    """The held-out split of ``spec`` as raw images fitted to the preprocess's C, H, W
    (``task``: the run's recorded loss, whose targets the labels are)."""
    shape = (preprocess["channels"], preprocess["height"], preprocess["width"])
    if samples is not None and samples < 1:
        raise UsageError(f"--samples must be >= 1 (got {samples})", "give a positive count")
    x, names, ys = load_val_raw(spec, shape, num_classes, val_fraction, samples,
                                loss_from_record(task))
    inputs = InputSet(x, None, None, f"{spec} held-out split ({len(x)} samples)", preprocess)
    return target_set(inputs, names, ys, num_classes)


def load_signature_inputs(spec: str, model_ref, val_fraction: float,
                          samples: Optional[int], task: Optional[dict] = None,
                          resolved=None) -> InputSet:
    """Inputs for a network that does not take images: the held-out split of ``spec``
    (``npz:FILE`` with one array per input, or ``tokens``), or with ``random[:SEED]``
    values generated from the signature (in the declared ranges), without labels.
    ``resolved``: the ``ModelSpec`` of ``model_ref`` where a side has it already (else the
    model is resolved here, which builds and runs it)."""
    if samples is not None and samples < 1:
        raise UsageError(f"--samples must be >= 1 (got {samples})", "give a positive count")
    model = resolved if resolved is not None else resolve_model(model_ref)
    kind, _, seed = spec.partition(":")
    if kind == "random":
        return generate_inputs(model.inputs, samples or 64, int(seed or 0))
    loss = loss_from_record(task)
    if loss is not None and not loss.classifier:  # whatever width its first output has
        import dataclasses

        model = dataclasses.replace(model, num_classes=None)
    data = load_model_data(spec, model, val_fraction, None, loss=loss)
    given, ys = data.val_inputs(samples)
    ys = ys if isinstance(ys, list) else [ys]
    inputs = InputSet(None, given, None, f"{spec} held-out split ({len(given[0])} samples)")
    return target_set(inputs, data.target_names, ys, model.num_classes)


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


def load_npz_inputs(path: str, input_names: list, samples: Optional[int],
                    task: Optional[dict] = None, graph_names: tuple = (),
                    classes: Optional[int] = None) -> InputSet:
    """Ready inputs from an .npz, by the rule training's npz data follows
    (``sources.INPUTS_RULE``): arrays named after the model's inputs (``graph_names``, the
    artefact's own, are accepted too), ``x`` or the one array left for a single input, or
    input0, input1, ...; targets by the run's loss (``task``): its declared names, else y,
    else y0, y1, ... (optional: no labels without them)."""
    arrays = _read_npz(path, "--inputs", "give an .npz from numpy.savez",
                       f"cannot read --inputs {path} as .npz ({{name}})")
    loss = loss_from_record(task)
    declared = loss.targets if loss is not None and loss.declared else None
    names, ys = found_targets(arrays, declared, f"--inputs {path}")
    given = match_inputs(arrays, list(input_names), f"--inputs {path}", tuple(graph_names),
                         tuple(names))
    if samples is not None:
        given, ys = [g[:samples] for g in given], [y[:samples] for y in ys]
    if len({len(a) for a in given + ys}) != 1:
        raise UsageError(f"--inputs {path}: arrays hold different sample counts",
                         "store one row per sample in every array")
    inputs = InputSet(None, given, None, f"{path} ({len(given[0])} samples)")
    return target_set(inputs, names, ys, classes)


def batched_outputs(runner, arrays: list, chunk: int = 512) -> list:
    """Run all samples through a runner, ``chunk`` samples per call.

    Runners of fixed-batch artefacts split (and pad) their input themselves.
    """
    n = len(arrays[0])
    if n <= chunk:
        return [np.asarray(o) for o in runner.run(arrays)]
    parts = [runner.run([a[start:start + chunk] for a in arrays]) for start in range(0, n, chunk)]
    return [np.concatenate([np.asarray(p[i]) for p in parts]) for i in range(len(parts[0]))]


def save_golden(path: str, ref, inputs: InputSet, fed: list, outputs: list) -> None:
    """Reference outputs, the inputs fed to make them, raw images and labels, in one
    uncompressed .npz (``numpy.savez``'s layout), written in chunks: ``fed`` and ``outputs``
    may be arrays or ``StoredArray`` .npy files (copied as they are)."""
    meta = {"schema_version": GOLDEN_VERSION, "reference": ref.path, "format": ref.format,
            "precision": ref.precision,
            "preprocess": ref.preprocess or inputs.fallback_preprocess, "model": ref.model,
            "num_classes": ref.num_classes, "task": ref.task, "class_logits": ref.class_logits,
            "inputs_meta": ref.inputs,
            "outputs_meta": ref.outputs, "description": inputs.description,
            "target_names": list(inputs.target_names), "labels_from": inputs.labels_from}
    arrays = {f"input_{i}": a for i, a in enumerate(fed)}
    arrays.update({f"output_{i}": o for i, o in enumerate(outputs)})
    if inputs.raw is not None:
        arrays["raw"] = inputs.raw
    if inputs.labels is not None:
        arrays["labels"] = inputs.labels
    for i, target in enumerate(inputs.targets or []):
        arrays[f"target_{i}"] = target
    arrays["meta"] = np.frombuffer(json.dumps(GOLDEN.json(meta)).encode("utf-8"), dtype=np.uint8)
    arrays = {k: v.file() or v.memmap() if isinstance(v, StoredArray) else v
              for k, v in arrays.items()}
    with atomic_path(path, suffix=".npz") as tmp:
        write_npz(str(tmp), arrays)


def _stored_golden(path: str, fix: str, bad: str) -> dict:
    """name -> array of a golden file: memory-mapped where stored uncompressed (what every
    version writes), read whole otherwise; outputs stay ``StoredArray``."""
    if not Path(path).is_file():
        raise UsageError(f"--load-outputs {path} does not exist", fix)
    try:
        found = stored_npz(path)
    except Exception:  # not a zip, or a member that is no .npy
        raise UsageError(bad, fix) from None
    return {k: v if k.startswith("output_") or not isinstance(v, StoredArray) else v.memmap()
            for k, v in found.items()}


def _golden_count(path: str, fed: list, outputs: list) -> int:
    """The samples of a golden file: one count for every input and output, else one line."""
    counts = {len(a) for a in fed + outputs}
    if len(counts) > 1:
        raise UsageError(f"--load-outputs {path} holds arrays of different sample counts "
                         f"({', '.join(str(c) for c in sorted(counts))})",
                         "save the golden file again with --save-outputs")
    return counts.pop() if counts else 0


def load_golden(path: str):
    """(Side standing for the stored reference, its InputSet, its outputs: ``StoredArray``
    each, or arrays from a compressed file)."""
    fix = GOLDEN.fix
    bad = f"--load-outputs {path} is not a golden outputs file"
    arrays = _stored_golden(path, fix, bad)
    try:
        text = np.asarray(arrays.pop("meta")).tobytes().decode("utf-8")
        meta = json.loads(text)
    except Exception:  # no meta, or not JSON
        raise UsageError(bad, fix) from None
    if not isinstance(meta, dict):
        raise UsageError(bad, fix)
    read_document(GOLDEN, text, path)
    try:
        fed = [arrays[f"input_{i}"] for i in range(len(meta["inputs_meta"]))]
        outputs = [arrays[f"output_{i}"] for i in range(len(meta["outputs_meta"]))]
    except KeyError:  # an array the meta names is missing
        raise UsageError(bad, fix) from None
    _golden_count(path, fed, outputs)
    named = meta.get("model")  # a file's word: vetted before any of its code runs
    src = Side(path=f"{path} (golden of {meta['reference']})", kind="golden",
               format=meta["format"], precision=meta["precision"],
               preprocess=meta["preprocess"], model=named,
               model_ref=recorded_reference({"model": named}, None, path, Path(path).parent)
               if isinstance(named, str) and named else None,
               num_classes=meta.get("num_classes"), task=task_record(meta.get("task")),
               class_logits=_indices(meta.get("class_logits")),
               golden={"inputs_meta": meta["inputs_meta"], "outputs_meta": meta["outputs_meta"]})
    names = tuple(meta.get("target_names") or ())
    several = [arrays[f"target_{i}"] for i in range(len(names)) if f"target_{i}" in arrays]
    inputs = InputSet(arrays.get("raw"), fed, arrays.get("labels"),
                      f"golden {meta['description']}", meta["preprocess"],
                      several if len(several) > 1 else None, names, meta.get("labels_from"))
    return src, inputs, outputs


def _data_spec(cfg, sides: list) -> str:
    if cfg.data:
        return cfg.data
    for src in sides:
        if src.data and readable_here(src.data):
            return src.data
    return DEFAULT_DATA


def make_inputs(cfg, ref, cands: list) -> InputSet:
    """The inputs of a check: ``cfg``'s ready inputs or data, read as the sides' records
    (``ref`` then ``cands``) say."""
    sides = [ref] + cands
    if cfg.inputs:
        task = next((s.task for s in sides if s.task), None)
        classes = next((s.num_classes for s in sides if s.num_classes), None)
        return load_npz_inputs(cfg.inputs, ref.input_names, cfg.samples, task,
                               tuple(str(i["name"]) for i in ref.inputs), classes)
    val = cfg.val_fraction or next((s.val_fraction for s in sides if s.val_fraction), 0.2)
    prep = next((s.preprocess for s in sides if s.preprocess), None)
    model_ref = next((s.model_ref for s in sides if s.model_ref), None)
    task = next((s.task for s in sides if s.task), None)
    if prep is None and model_ref is not None:  # inputs that are not images
        spec = _data_spec(cfg, sides)
        spec = "random" if spec == DEFAULT_DATA and not cfg.data else spec
        resolved = next((s.spec for s in sides if s.model_ref is model_ref), None)
        return load_signature_inputs(spec, model_ref, val, cfg.samples, task, resolved)
    if prep is None:
        raise UsageError("no manifest or run.json says how to preprocess inputs",
                         "pass --inputs FILE.npz with ready inputs")
    classes = next((s.num_classes for s in sides if s.num_classes), None)
    declared = next((s.class_logits for s in sides if s.class_logits is not None), None)
    if classes is None and declared is None and (task is None or task.get("classifier", True)):
        raise UsageError("the number of classes is unknown (no manifest)", "pass --inputs FILE.npz")
    return load_data_inputs(_data_spec(cfg, sides), prep, classes, val, cfg.samples, task)
