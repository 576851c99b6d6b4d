"""One interface to run any artefact: ``load_runner(path, key).run(inputs) -> outputs``.

MindIR runs through ``nn.GraphCell(mindspore.load(...))`` (decrypting when keyed), ONNX
through onnxruntime. Inputs are cast to the artefact's own input dtype. An artefact traced
with a fixed batch runs any batch: inputs are split into chunks of that size (the last
one zero-padded) and the outputs joined.

``Artefact(path, key)`` reads what a runner knows (inputs, outputs, precision, manifest)
without loading the graph; its ``load()`` gives the runner, and a runner's ``close()``
lets its graph go (``with artefact.load() as runner: ...``), so that a caller running
several artefacts holds one graph at a time.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from amptool.artefact import mindir
from amptool.artefact import onnx as onnx_format
from amptool.artefact.files import locate, total_size
from amptool.artefact.keys import ENV_VAR, coerce_key, key_from_env
from amptool.artefact.readers import reader
from amptool.documents.manifest import Manifest, read_manifest
from amptool.errors import UsageError, first_line
from amptool.network.models import flat_outputs
from amptool.runtime import device
from amptool.runtime.device import import_mindspore


def artefact_format(path) -> str:
    """The format of the artefact at ``path``, by its suffix (MINDIR, ONNX or AIR)."""
    suffix = Path(path).suffix.lower()
    formats = {reader(f).SUFFIX: f for f in ("MINDIR", "ONNX", "AIR")}
    if suffix not in formats:
        raise UsageError(f"{path}: unknown artefact type '{suffix}'",
                         "give a .mindir or .onnx file")
    return formats[suffix]


RELEASE_GRAPH_BYTES = 64 << 20
"""A closed MindIR runner has MindSpore let go of its graph (a compile, ~0.1 s) when the
artefact's files hold at least this much; a smaller graph stays until the next compile."""


class Runner:
    """Runs one artefact. ``inputs``/``outputs``: [{name, shape (-1 dynamic), dtype}].
    ``close()`` (or the end of a ``with`` block) lets the loaded graph go; a closed runner
    does not run."""

    format = ""

    def __init__(self, path, facts: dict, manifest: Manifest | None):
        self.path = str(path)
        self.inputs = facts["inputs"]
        self.outputs = facts["outputs"]
        self.manifest = manifest
        self.precision = manifest.precision if manifest else infer_precision(facts)

    def _batch_outputs(self, arrays: list) -> list:
        raise NotImplementedError

    def close(self) -> None:
        """Let the loaded graph go (its weights, its compiled form)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, inputs: list) -> list:
        """Run on numpy arrays (one per input); returns numpy arrays (one per output)."""
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if len(inputs) != len(self.inputs):
            raise UsageError(f"{Path(self.path).name} takes {len(self.inputs)} input(s), "
                             f"got {len(inputs)}", "pass one array per input")
        arrays = [self._cast(np.asarray(x), spec) for x, spec in zip(inputs, self.inputs)]
        batch = self.inputs[0]["shape"][0] if self.inputs[0]["shape"] else -1
        n = arrays[0].shape[0] if arrays[0].ndim else 1
        if batch in (-1, n):
            return self._batch_outputs(arrays)
        return self._chunked_outputs(arrays, batch, n)

    def _cast(self, array: np.ndarray, spec: dict) -> np.ndarray:
        want = spec["shape"][1:]
        have = list(array.shape[1:])
        if len(want) != len(have) or any(w not in (-1, h) for w, h in zip(want, have)):
            raise UsageError(f"input {spec['name']} of {Path(self.path).name} has shape "
                             f"{['N', *want]}, got {list(array.shape)}",
                             "pass arrays of the artefact's input shape")
        return np.ascontiguousarray(array.astype(np.dtype(spec["dtype"]), copy=False))

    def _chunked_outputs(self, arrays: list, batch: int, n: int) -> list:
        pieces = []
        for start in range(0, n, batch):
            chunk = [a[start:start + batch] for a in arrays]
            real = chunk[0].shape[0]
            if real < batch:
                chunk = [np.concatenate([c, np.zeros((batch - real, *c.shape[1:]), c.dtype)])
                         for c in chunk]
            pieces.append([o[:real] for o in self._batch_outputs(chunk)])
        return [np.concatenate([p[i] for p in pieces]) for i in range(len(pieces[0]))]


class MindIRRunner(Runner):
    format = "MINDIR"

    def __init__(self, path, key: bytes | None, manifest: Manifest | None, facts: dict):
        self.cell = mindir.load_graph(path, key)  # facts read (and let go) before
        super().__init__(path, facts, manifest)

    def close(self) -> None:
        if self.cell is not None:
            self.cell = None
            device.release_compiled(graph=total_size(self.path) >= RELEASE_GRAPH_BYTES)

    def _batch_outputs(self, arrays: list) -> list:
        import mindspore as ms

        if self.cell is None:
            raise RuntimeError(f"{Path(self.path).name}: its runner was closed")
        try:
            out = self.cell(*[ms.Tensor(a) for a in arrays])
        except (RuntimeError, ValueError, TypeError) as exc:  # the graph does not run here
            shapes = ", ".join("x".join(map(str, a.shape)) for a in arrays)
            raise UsageError(f"{Path(self.path).name} does not run on inputs of shape {shapes}: "
                             f"{first_line(exc)}", "export it again (a fixed batch if it was "
                             "exported with --dynamic-batch)") from None
        return [o.asnumpy() for o in flat_outputs(out)]


class ONNXRunner(Runner):
    format = "ONNX"

    def __init__(self, path, manifest: Manifest | None, facts: dict):
        self.session = onnx_format.load_session(path)
        self.providers = list(self.session.get_providers())  # the preferred one first
        super().__init__(path, facts, manifest)

    def close(self) -> None:
        self.session = None

    def _batch_outputs(self, arrays: list) -> list:
        if self.session is None:
            raise RuntimeError(f"{Path(self.path).name}: its runner was closed")
        feed = {spec["name"]: a for spec, a in zip(self.inputs, arrays)}
        return list(self.session.run(None, feed))


def infer_precision(facts: dict) -> str | None:
    """fp16 when any stored weight is float16, fp32 when all are float32, else None."""
    dtypes = {dtype for dtype, _ in facts.get("weights", {}).values()}
    if "float16" in dtypes:
        return "fp16"
    return "fp32" if dtypes == {"float32"} else None


def _env_key() -> bytes | None:
    return key_from_env(ENV_VAR, required=False)


def _ensure_device() -> None:
    """Select the best backend unless this process already chose one (mode left as is)."""
    if not device._selected:
        device.set_device(device.resolve_device("auto"))


class Artefact:
    """An artefact's facts (inputs, outputs, stored weights' dtypes and shapes), manifest and
    precision, read from its files without loading its graph; ``load()`` gives its runner.
    A .mindir or .onnx file (a split one by its main file); ``key`` (bytes or hex) for
    encrypted MindIR."""

    def __init__(self, path, key=None):
        path = locate(path)  # x.mindir given, x_graph.mindir there: MindSpore split it
        fmt = artefact_format(path)
        if not path.is_file():
            raise UsageError(f"artefact {path} does not exist",
                             "check the path or export it first")
        manifest = read_manifest(path)
        if fmt == "AIR":
            raise UsageError(f"{path}: AIR artefacts run on Ascend with CANN tools, not here",
                             "run the MINDIR export of the same model")
        self.path, self.format, self.manifest, self.key = path, fmt, manifest, coerce_key(key)
        if fmt == "MINDIR":
            import_mindspore()
            _ensure_device()
            if mindir.is_encrypted(path) and self.key is None:
                self.key = _env_key()
            self.facts = mindir.describe(path, self.key)
        else:
            onnx_format.require_onnx()
            self.facts = onnx_format.describe(path)
        self.inputs, self.outputs = self.facts["inputs"], self.facts["outputs"]
        self.precision = (manifest.precision if manifest
                          else infer_precision(self.facts))

    def load(self) -> Runner:
        """The artefact's runner, its graph loaded (``close()`` it to let the graph go)."""
        if self.format == "MINDIR":
            return MindIRRunner(self.path, self.key, self.manifest, self.facts)
        return ONNXRunner(self.path, self.manifest, self.facts)


def load_runner(path, key=None) -> Runner:
    """A runner for a .mindir or .onnx artefact (a split one by its main file: the graph
    finds its weights beside it); ``key`` (bytes or hex) for encrypted MindIR."""
    return Artefact(path, key).load()
