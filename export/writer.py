"""Build each network, trace it to every requested format, stage and commit the files;
one ``ExportResult`` per written artefact."""
from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass
from pathlib import Path

from amptool.artefact.files import (GRAPH_SUFFIX, ONNX_DATA_SUFFIX, VARIABLES_SUFFIX, file_facts,
                                    split_mindir)
from amptool.artefact.audit import AuditPolicy, AuditReport, audit_artefact
from amptool.artefact.readers import reader
from amptool.documents.manifest import MANIFEST, Manifest, manifest_path
from amptool.documents.provenance import PROVENANCE_KEY
from amptool.errors import AmpToolError, CheckFailed, UsageError, first_line
from amptool.files.fileio import atomic_path, atomic_set, ms_safe, sha256
from amptool.network.ckptstream import build_uninitialized
from amptool.network.trust import model_copy
from amptool.precision.apply import resolve_fp32_cells
from amptool.precision.policy import export_policy, make_policy
from amptool.runtime.device import release_compiled, trim_heap

from . import air, mindir, onnx
from .deploy import deployment_section, settings_paths, settings_texts
from .graph import build_network, example_inputs
from .manifest import build_manifest, build_provenance
from .split import check_free_space, estimate_bytes, param_elements


@dataclass
class ExportResult:
    """One written artefact."""

    format: str
    precision: str
    path: str
    manifest_path: str
    manifest: Manifest
    audit: AuditReport | None = None
    """The precision audit of the written graph; None where it was not run (AIR,
    ``--no-audit``)."""

    def to_dict(self) -> dict:
        return {"format": self.format, "precision": self.precision, "path": self.path,
                "manifest_path": self.manifest_path, "manifest": MANIFEST.json(self.manifest),
                "audit": None if self.audit is None else self.audit.to_dict()}


def format_module(name: str):
    """The writer module of a format: MINDIR, AIR or ONNX."""
    return {"MINDIR": mindir, "AIR": air, "ONNX": onnx}[name]


def kept_cells(spec, policy) -> list:
    """[{path, type}] of the cells an fp16 graph built under ``policy`` keeps in fp32
    (outermost first; the whole network is path '')."""
    if policy is None:
        return []
    net = build_uninitialized(spec.build)  # the structure alone is read: no weights are made
    return [{"path": path, "type": type(cell).__name__}
            for path, cell in resolve_fp32_cells(net, policy).items()]


def write_all(cfg, trained, policy, jobs: list) -> list:
    """Stage every (precision, format, path) job; rename all into place on success."""
    params = trained.checkpoint  # read into each network as it is built, a tensor at a time
    ckpt_facts = {"path": str(trained.checkpoint.resolve()),
                  "sha256": sha256(trained.checkpoint)}
    results: list = []
    copy = model_copy(trained.spec, Path(jobs[0][2]).parent) if jobs else None
    kept_dir = copy[0].parent if copy else None
    made_dir = kept_dir is not None and not kept_dir.exists()
    try:
        with contextlib.ExitStack() as stack:
            if copy:  # the artefacts' folder carries the model file they were made from
                copy[0].parent.mkdir(parents=True, exist_ok=True)
                stack.enter_context(atomic_path(copy[0])).write_bytes(copy[1])
            _stage(cfg, trained, policy, jobs, params, ckpt_facts, copy[2] if copy else {}, stack,
                   results)
            order = [(prec, fmt) for prec, fmt, _ in jobs]
            results.sort(key=lambda r: order.index((r.precision, r.format)))
    except BaseException:
        if made_dir and kept_dir is not None and not any(kept_dir.iterdir()):
            kept_dir.rmdir()
        raise
    return results


def _stage(cfg, trained, base, jobs, params, ckpt_facts, kept: dict, stack,
           results: list) -> None:
    """Trace each job into a staging folder of its own, under its final names, with its
    manifest (``kept``: the model file facts to record); every set is moved into place
    when the stack closes. Free space is checked before the first file is written.

    One network is alive at a time: each precision's is built, traced by its formats
    (ONNX last: its writer rewrites the network it traces) and let go before the next
    is built; what a writer held is collected before the artefact is read back."""
    import gc

    release_compiled(graph=False)  # the weights of what resolving the model ran go first
    gc.collect()
    checked = False
    for precision in dict.fromkeys(p for p, _, _ in jobs):
        policy = export_policy(base) if precision == "fp16" else None
        net = _build(trained, params, precision, policy, cfg.io_dtype)
        fp32_cells = kept_cells(trained.spec, policy)
        if not checked:
            _check_space(net, jobs, streamed=cfg.encrypt_key is None)
            checked = True
        mine = sorted((job for job in jobs if job[0] == precision), key=lambda j: j[1] == "ONNX")
        for i, (_, fmt, path) in enumerate(mine):
            superseded: list = []
            stage = stack.enter_context(atomic_set(path.parent, superseded))
            started = time.perf_counter()
            if net is None:  # an earlier job's writer rewrote (ONNX) the network
                net = _build(trained, params, precision, policy, cfg.io_dtype)
            last = fmt == "ONNX" or i == len(mine) - 1  # nothing traces this network again
            released: list = []  # a MindIR or ONNX writer lets go of the network mid-write
            release = functools.partial(_let_go, net, released) if last else None
            entries = _provenance(cfg, trained, fmt, precision, policy, fp32_cells, ckpt_facts)
            written, facts = _trace(net, trained, cfg, fmt, precision, stage / path.name, path,
                                    release, entries)
            seconds = time.perf_counter() - started
            if last:
                if not released:  # its writer did not (AIR, an encrypted MindIR)
                    _let_go(net)
                net = None
                release_compiled(graph=False)
            gc.collect()
            audit = _audit(cfg, fmt, precision, written, fp32_cells, path)
            final = path.parent / written.name
            manifest = _manifest(cfg, trained, fmt, precision, policy, written, ckpt_facts,
                                 facts, kept=kept, seconds=seconds,
                                 deployment=_stage_settings(written, precision, fp32_cells))
            _write_json(manifest_path(written), MANIFEST.json(manifest))
            # what an earlier export left under another form's names (or settings this
            # one does not need) goes once the set is in place
            superseded += [n for n in other_forms(path) if not (stage / n).exists()]
            results.append(ExportResult(fmt, precision, str(final), str(manifest_path(final)),
                                        manifest, audit))


def _audit(cfg, fmt: str, precision: str, written: Path, kept: list,
           target: Path) -> AuditReport | None:
    """The precision audit of the staged graph ``written`` against the policy it was built
    under; ``CheckFailed`` (one line naming the node and the cell) when the graph
    contradicts it, which discards the whole staged set. None for AIR or ``--no-audit``."""
    if fmt == "AIR" or not cfg.audit:
        return None
    io_dtype = cfg.io_dtype if precision == "fp16" else "fp32"
    policy = AuditPolicy(precision, io_dtype, tuple(c["path"] for c in kept))
    key = cfg.encrypt_key if fmt == "MINDIR" else None
    report = audit_artefact(written, key, policy)
    if not report.passed:
        errors = report.errors
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise CheckFailed(f"the exported {fmt} {precision} graph {target.name} contradicts its "
                          f"policy: {errors[0].text}{more}; nothing was written",
                          "report it with the model; --no-audit writes it anyway, and "
                          "amptool inspect then lists every finding")
    return report


def _let_go(net, done: list | None = None) -> None:
    """Free the weights of a network whose artefacts are written. Dropping the last
    reference is not enough: MindSpore's graph executor keeps a cell alive once it has
    compiled a ``construct(self, *args)`` (as ``precision.cast_outputs``' wrapper, and
    many users' networks, have), and with it every weight, until the process ends. And
    glibc keeps freed blocks of a few MB (a transformer's weights) in its heap, its mmap
    threshold having risen past them as bigger blocks were freed: they are handed back
    (``malloc_trim``) instead of counting towards the next network's peak. ``done``, when
    given, is told that it ran."""
    import mindspore as ms

    if net is None:
        return
    for param in net.get_parameters():
        param.set_data(ms.Tensor([], dtype=param.dtype), slice_shape=True)
    trim_heap()
    if done is not None:
        done.append(True)


def _stage_settings(written: Path, precision: str, kept: list) -> dict:
    """Write the deployment settings beside the staged artefact ``written`` when it keeps
    cells in fp32 (they move into place with it). Returns the manifest's ``deployment``
    section."""
    import hashlib

    files = {}
    if kept:
        targets = settings_paths(written)
        for kind, text in settings_texts().items():
            data = text.encode("utf-8")
            targets[kind].write_bytes(data)
            files[kind] = (targets[kind].name, hashlib.sha256(data).hexdigest())
    return deployment_section(precision, kept, files)


def artefact_forms(path: Path) -> list:
    """Every name the artefact planned at ``path`` can take in its folder (its files, its
    weights written apart, their manifests)."""
    names = [path.name, path.name + ".json"]
    names += [p.name for p in settings_paths(path).values()]
    if path.suffix == ".mindir":
        graph = split_mindir(path).name
        names += [graph, graph + ".json", graph[:-len(GRAPH_SUFFIX)] + VARIABLES_SUFFIX]
        names += [p.name for p in settings_paths(path.with_name(graph)).values()]
    elif path.suffix == ".onnx":
        names.append(path.name + ONNX_DATA_SUFFIX)
    return names


def other_forms(path: Path) -> list:
    return [n for n in artefact_forms(path) if (path.parent / n).exists()]


def _check_space(net, jobs: list, streamed: bool = True) -> None:
    """Refuse before writing when the folders the jobs stage in lack the room their
    parameter bytes need (each staging folder is on the output's file system, or in the
    system temp folder when MindSpore refuses the output folder's name). A one-file MindIR
    (``streamed``: not encrypted) is streamed from MindSpore's split form written beside
    it, removed once it is read: room for the largest such artefact twice."""
    import tempfile

    elements = param_elements(net)
    needed = sum(estimate_bytes(elements, precision) for precision, _, _ in jobs)
    if streamed:
        needed += max((estimate_bytes(elements, precision) for precision, fmt, _ in jobs
                       if fmt == "MINDIR"), default=0)
    folder = jobs[0][2].parent
    what = f"exporting {len(jobs)} artefact(s)"
    check_free_space(folder, needed, what)
    if not ms_safe(folder):
        check_free_space(Path(tempfile.gettempdir()), needed, what + " (staged here)")


def _build(trained, params, precision, policy, io_dtype):
    net, _ = build_network(trained.spec, params, precision, policy, io_dtype,
                           f"checkpoint {trained.checkpoint}")
    return net


def _trace(net, trained, cfg, fmt, precision, tmp: Path, target: Path,
           release=None, entries: dict | None = None) -> tuple:
    """Write ``fmt`` into the staged ``tmp`` for ``target`` (``entries``: the provenance
    written inside it); returns the main file written (in ``tmp``'s folder) and its facts
    when the writer has them (else None); failures name ``target``."""
    try:
        return _write_format(net, trained, cfg, fmt, precision, tmp, release, entries)
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}",
                         "free some space, raise the file size limit or write elsewhere") from None
    except UsageError as exc:
        if str(tmp.parent) not in exc.problem:
            raise
        raise UsageError(exc.problem.replace(str(tmp.parent), str(target.parent)),
                         exc.fix) from None


def _write_format(net, trained, cfg, fmt, precision, tmp: Path, release=None,
                  entries: dict | None = None) -> tuple:
    io_dtype = cfg.io_dtype if precision == "fp16" else "fp32"
    inputs = example_inputs(trained.spec, cfg.batch_size, cfg.dynamic_batch, io_dtype)
    module = format_module(fmt)
    key = cfg.encrypt_key if fmt in ("MINDIR", "AIR") else None
    try:
        return module.write(net, inputs, tmp, key=key, dynamic_batch=cfg.dynamic_batch,
                            release=release, entries=entries)
    except AmpToolError:
        raise
    except (RuntimeError, TypeError, ValueError) as exc:
        fix = ("export with a fixed batch (drop --dynamic-batch), or check that the model "
               "traces in GRAPH_MODE" if cfg.dynamic_batch else
               "check that the model traces in GRAPH_MODE; try another --format")
        raise UsageError(f"{fmt} export of {trained.spec.name} ({precision}) failed: "
                         f"{first_line(exc)}", fix) from None


def _manifest(cfg, trained, fmt, precision, policy, tmp: Path, ckpt_facts: dict,
              facts: dict | None, kept: dict, seconds: float, deployment: dict) -> Manifest:
    key = cfg.encrypt_key if fmt == "MINDIR" else None
    if facts is None:  # read back (a writer that has them spares reading the weights)
        facts = reader(fmt).describe(tmp, key) if fmt != "AIR" else _air_facts(trained)
    effective = policy if policy is not None else make_policy("O0")
    spec = trained.spec
    return build_manifest(
        fmt=fmt, precision=precision, io_dtype=cfg.io_dtype if precision == "fp16" else "fp32",
        policy=effective.to_dict(), source_policy=trained.policy.to_dict(), facts=facts,
        files=file_facts(tmp), checkpoint=ckpt_facts, model={**spec.describe(), **kept},
        preprocess=trained.preprocess, data=trained.data, val_fraction=trained.val_fraction,
        batch={"dynamic": cfg.dynamic_batch, "size": None if cfg.dynamic_batch else cfg.batch_size},
        encrypted=key is not None, task=trained.task, export_seconds=seconds,
        deployment=deployment)


def _provenance(cfg, trained, fmt, precision, policy, kept: list, ckpt_facts: dict) -> dict:
    """The entries written inside the artefact: its provenance (none for AIR)."""
    if fmt == "AIR":
        return {}
    effective = policy if policy is not None else make_policy("O0")
    provenance = build_provenance(
        fmt=fmt, precision=precision, io_dtype=cfg.io_dtype if precision == "fp16" else "fp32",
        policy=effective.to_dict(), kept=kept, checkpoint=ckpt_facts, run=cfg.run,
        model=trained.spec.name, preprocess=trained.preprocess, data=trained.data)
    return {PROVENANCE_KEY: provenance.to_json()}


def _air_facts(trained) -> dict:
    """AIR files are not parsed here: describe the traced inputs only."""
    return {"inputs": [], "outputs": [], "weights": {}}


def _write_json(path: Path, obj: dict) -> None:
    import json

    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")
