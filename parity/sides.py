"""What parity compares: exported artefacts, a checkpoint run eagerly in fp32, golden outputs.

Each is opened into a ``Side``: its inputs and outputs, what its manifest (or the run
folder's run.json) says about the model, its inputs' preprocessing, its precision and
policy, and where its weights come from, plus a way to load what runs it
(``runner.run(inputs) -> outputs``). An artefact's graph is loaded only for the time it
runs (``Side.opened()``) and let go after, so that a comparison holds one side's graph
at a time.
"""
from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from amptool.artefact.files import check_files, file_facts, locate
from amptool.artefact.readers import stored_weights
from amptool.artefact.runners import Artefact
from amptool.documents.door import to_json
from amptool.documents.manifest import Manifest, manifest_path
from amptool.errors import UsageError
from amptool.network.ckptstream import build_uninitialized, checkpoint_arrays, load_streamed
from amptool.network.losses import task_record
from amptool.network.models import flat_outputs, probed, resolve_model
from amptool.network.trust import recorded_reference
from amptool.runs.rundir import RunDir, is_checkpoint_file
from amptool.runtime.device import trim_heap


@dataclass
class Side:
    """One side of a comparison."""

    path: str
    """The file or folder given."""
    kind: str
    """artefact, checkpoint or golden."""
    format: str
    """MINDIR, ONNX, CKPT or GOLDEN."""
    precision: Optional[str]
    """fp32 or fp16 (None when unknown)."""
    runner: object = None
    """Runs inputs to outputs (``run(inputs) -> outputs``) while the side is open
    (``opened()``); None otherwise and for golden outputs."""
    io: dict = field(default_factory=dict)
    """``inputs`` and ``outputs`` ([{name, shape, dtype}]) as read without running; empty
    for golden outputs (their file records them)."""
    opener: Optional[Callable[[], object]] = None
    """Loads the runner (an artefact's graph, a checkpoint's network); None for golden
    outputs."""
    manifest: Optional[Manifest] = None
    """The artefact's manifest, when one sits beside it."""
    preprocess: Optional[dict] = None
    """How raw images become this side's inputs."""
    model: Optional[str] = None
    """Model name or file.py:factory (for per-layer localization)."""
    model_ref: Optional[dict] = None
    """What rebuilds the model: reference, factory arguments, input signature."""
    num_classes: Optional[int] = None
    """Width of the class-logits output, where known."""
    task: Optional[dict] = None
    """The training run's loss as recorded (name, kind, targets, classifier), where known."""
    class_logits: Optional[list] = None
    """The outputs (indices) the model declares as class logits; None: undeclared."""
    checkpoint: Optional[str] = None
    """The checkpoint the weights come from, where known."""
    policy: Optional[dict] = None
    """The precision policy the graph was built with."""
    data: Optional[str] = None
    """The training data source, from the manifest or run.json."""
    val_fraction: Optional[float] = None
    """The held-out fraction used in training."""
    encrypted: bool = False
    """An encrypted MindIR (its weights cannot be read)."""
    golden: dict = field(default_factory=dict)
    """Stored arrays and io metadata of a golden-outputs file."""
    files: Optional[list] = None
    """Its files as opened ([{path, size, sha256}], the main one first), where hashed then
    (an artefact with a manifest to check them against); else hashed when reported."""
    spec: object = None
    """The model resolved as the side opened (a checkpoint's ``ModelSpec``), else None."""
    cache: dict = field(default_factory=dict)

    @property
    def classifier(self) -> Optional[bool]:
        """Whether the first output is class logits by the run's loss; None: not recorded."""
        return None if self.task is None else bool(self.task.get("classifier", True))

    @property
    def label(self) -> str:
        prec = self.precision or "?"
        return f"{self.path} ({self.format} {prec})"

    @property
    def inputs(self) -> list:
        return self.io["inputs"] if self.io else self.golden["inputs_meta"]

    @property
    def input_names(self) -> list:
        """The model's own input names, as its manifest records them (one per input of the
        artefact), else the artefact's."""
        declared = (self.manifest.model.inputs if self.manifest else None) or []
        if len(declared) == len(self.inputs) and all(d.name for d in declared):
            return [d.name for d in declared]
        return [str(i["name"]) for i in self.inputs]

    @property
    def outputs(self) -> list:
        return self.io["outputs"] if self.io else self.golden["outputs_meta"]

    @contextlib.contextmanager
    def opened(self):
        """The side's runner for the time of the block: loaded as the block starts (after
        what earlier steps let go is collected), closed and let go as it ends."""
        if self.opener is None:
            raise RuntimeError(f"{self.path}: stored outputs run nothing")
        gc.collect()
        self.runner = self.opener()
        try:
            yield self.runner
        finally:
            runner, self.runner = self.runner, None
            runner.close()
            del runner
            gc.collect()
            trim_heap()

    def describe(self) -> dict:
        return {"path": self.path, "kind": self.kind, "format": self.format,
                "precision": self.precision, "model": self.model,
                "preprocess": self.preprocess, "policy": self.policy}


class EagerRunner:
    """A checkpoint run eagerly (PyNative) in fp32, with the runners' interface."""

    format = "CKPT"
    precision = "fp32"
    manifest = None

    def __init__(self, model, ckpt: Path, source: str):
        """The network of ``model`` built without weights and given the checkpoint's, one
        tensor at a time (one copy of the weights), then probed: its outputs, class count
        and class logits are read from the weights it runs with."""
        import mindspore as ms

        spec = build_uninitialized(lambda: resolve_model(model, probe=False))
        net = build_uninitialized(spec.build)
        load_streamed(net, ckpt, source)
        net.set_train(False)
        self.net, self._ms = net, ms
        self.spec, probe = probed(spec, net)
        self.inputs = [i.to_dict() for i in self.spec.inputs]
        self.outputs = [{"name": f"output{k}", "shape": [-1, *o.shape[1:]], "dtype": "float32"}
                        for k, o in enumerate(probe)]

    def run(self, inputs: list) -> list:
        ms = self._ms
        fed = [ms.Tensor(np.asarray(x, dtype=np.dtype(spec["dtype"])))
               for x, spec in zip(inputs, self.inputs)]
        out = self.net(*fed)
        return [o.asnumpy().astype(np.float32) for o in flat_outputs(out)]

    def close(self) -> None:
        """Let the network go (collected when the next side opens)."""
        self.net = None


def open_side(path: str, model: Optional[dict] = None, ckpt: Optional[str] = None,
              key=None) -> Side:
    """An artefact, a checkpoint file or a training run folder; ``model`` is a reference the
    user named, over any the files record."""
    p = locate(path)  # x.mindir given, x_graph.mindir there: MindSpore split it
    if not p.exists():
        raise UsageError(f"{path} does not exist",
                         "give an exported artefact, a checkpoint or a run folder")
    if p.is_dir() or is_checkpoint_file(p):
        return _open_checkpoint(p, model)
    return _open_artefact(p, model, ckpt, key)


def _open_checkpoint(p: Path, model: Optional[dict]) -> Side:
    if p.is_dir():
        run_dir = RunDir(p)
        ckpt, info = run_dir.find_checkpoint(), run_dir.read_optional()
    else:
        ckpt, info = p, RunDir(p.parent).read_optional()
    ref = dict(model) if model else (
        RunDir(ckpt.parent).model_reference(info) if info else {})
    if not ref.get("model"):
        raise UsageError(f"checkpoint {ckpt} has no run.json beside it to name its model",
                         "pass --model NAME or path/to/file.py:factory")
    data = info.data if info else None
    runner = EagerRunner(ref, ckpt, f"checkpoint {ckpt}")
    task = task_record(to_json(info.loss) if info and info.loss else None)
    classes = None if task and not task.get("classifier", True) else runner.spec.num_classes
    built = [runner]  # built (and probed) here: the first opening takes it

    def opener():
        return built.pop() if built else EagerRunner(ref, ckpt, f"checkpoint {ckpt}")

    src = Side(path=str(ckpt), kind="checkpoint", format="CKPT", precision="fp32",
               io={"inputs": runner.inputs, "outputs": runner.outputs}, opener=opener,
               preprocess=to_json(data.preprocess) if data and data.preprocess else None,
               model=ref["model"],
               model_ref=ref, spec=runner.spec, num_classes=classes, task=task,
               class_logits=_indices(runner.spec.class_logits), checkpoint=str(ckpt),
               policy={"level": "O0"}, data=data.source if data else None,
               val_fraction=data.val_fraction if data else None)
    return src


def _open_artefact(p: Path, model: Optional[dict], ckpt: Optional[str], key) -> Side:
    art = Artefact(str(p), key)  # its facts: the graph is loaded when it runs
    manifest = art.manifest
    files = file_facts(p) if manifest is not None else None  # hashed once: checked, recorded
    differs = check_files(p, manifest, on_disk=files)
    if differs:
        raise UsageError(f"the manifest {manifest_path(p)} does not describe {p} ("
                         f"{'; '.join(differs[:2])}): its preprocessing and model cannot be "
                         "trusted",
                         "export the artefact again, or remove the manifest to compare the "
                         "file alone")
    if manifest is None:
        return _bare_artefact(art, p, model, ckpt)
    mdl = manifest.model
    out_shape = art.outputs[0]["shape"] if art.outputs else []
    task = to_json(manifest.task) if manifest.task else None
    num_classes = mdl.num_classes or (out_shape[1] if len(out_shape) == 2 else None)
    if manifest.task is not None and not manifest.task.classifier:  # the run's loss says so
        num_classes = None
    name = mdl.spec or mdl.name
    return Side(path=str(p), kind="artefact", format=art.format, task=task,
                class_logits=_indices(mdl.class_logits),
                precision=art.precision or manifest.precision,
                io={"inputs": art.inputs, "outputs": art.outputs}, opener=art.load,
                manifest=manifest, preprocess=to_json(manifest.preprocess)
                if manifest.preprocess else None,
                model=(model or {}).get("model") or name,
                num_classes=num_classes, model_ref=dict(model) if model else recorded_reference(
                    {"model": name, "model_args": mdl.args, "input_spec": mdl.input_spec},
                    to_json(mdl), manifest_path(p), p.parent),
                checkpoint=ckpt or manifest.checkpoint.path, policy=to_json(manifest.policy),
                data=manifest.data, val_fraction=manifest.val_fraction,
                encrypted=manifest.encrypted, files=files)


def _bare_artefact(art, p: Path, model: Optional[dict], ckpt: Optional[str]) -> Side:
    """An artefact without a manifest: what its file says, and what the user names."""
    out_shape = art.outputs[0]["shape"] if art.outputs else []
    return Side(path=str(p), kind="artefact", format=art.format, task=None,
                class_logits=None, precision=art.precision,
                io={"inputs": art.inputs, "outputs": art.outputs}, opener=art.load,
                manifest=None, preprocess=None, model=(model or {}).get("model"),
                num_classes=out_shape[1] if len(out_shape) == 2 else None,
                model_ref=dict(model) if model else None, checkpoint=ckpt, policy=None,
                data=None, val_fraction=None, encrypted=False)


def _indices(declared) -> Optional[list]:
    """A recorded ``class_logits`` as a list of output indices (None: none recorded)."""
    if not isinstance(declared, (list, tuple)):
        return None
    return [i for i in declared if isinstance(i, int) and not isinstance(i, bool)]


def side_weights(src: Side) -> Optional[dict]:
    """The weights a side computes with, where they can be read (cached on the side)."""
    if "weights" not in src.cache:
        src.cache["weights"] = stored_weights(src.path, src.format, src.encrypted) \
            if src.kind == "artefact" else checkpoint_arrays(src.checkpoint) \
            if src.kind == "checkpoint" else None
    return src.cache["weights"]


def check_compatible(ref: Side, cand: Side) -> None:
    """Refuse two sides whose inputs or outputs cannot match (batch sizes may differ)."""
    for what in ("inputs", "outputs"):
        a, b = getattr(ref, what), getattr(cand, what)
        if len(a) != len(b):
            raise UsageError(f"{cand.path} has {len(b)} {what}, "
                             f"the reference {ref.path} has {len(a)}",
                             "compare artefacts of the same model")
        for x, y in zip(a, b):
            sx, sy = list(x["shape"]), list(y["shape"])
            fits = len(sx) == len(sy) and all(
                p == q or p == -1 or q == -1 for p, q in list(zip(sx, sy))[1:])
            if not fits:
                raise UsageError(f"{what[:-1]} shapes cannot match: {cand.path} {sy} vs the "
                                 f"reference {ref.path} {sx}",
                                 "compare artefacts of the same model")


def fp16_faithful(cand: Side, runner) -> Optional[bool]:
    """Whether an fp16 candidate computes in fp16 here (``runner``: what ran it); None for
    other candidates."""
    if cand.precision != "fp16":
        return None
    if cand.format != "ONNX":
        return True
    providers = getattr(runner, "providers", None) or []
    return bool(providers) and providers[0] != "CPUExecutionProvider"
