"""The fault matrix: the usual mistakes and accidents, each run as a real ``amptool``
process, each ending in its documented exit code, one stderr line without a traceback,
nothing left behind (no output folder, no staged file, no MindSpore dump in the current
folder) and no code run that the user did not name.

The cases run two at a time in one module fixture; each test checks one case's outcome.
A case's process is forked from a server that has imported amptool and MindSpore (see
FORK_SERVER): it runs ``python -m amptool`` from there in its own folder, with its own
stdout, stderr and exit code, and exits as that process would.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from queue import Queue
from typing import Optional

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # trains and exports real networks

MODELS = '''
from mindspore import nn, ops


def good():
    return nn.SequentialCell([nn.Flatten(), nn.Dense(64, 10)])


good.input_shape = (1, 8, 8)
good.num_classes = 10


def misfit():
    return nn.SequentialCell([nn.Flatten(), nn.Dense(100, 10)])


misfit.input_shape = (1, 28, 28)
misfit.num_classes = 10


def sized(width=10):
    return nn.SequentialCell([nn.Flatten(), nn.Dense(64, width)])


sized.input_shape = (1, 8, 8)
sized.num_classes = 10


class Deleter(nn.Cell):
    """Runs eagerly; graph mode cannot parse its ``del``."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(64, 10)

    def construct(self, x):
        y = ops.flatten(x)
        del x
        return self.fc(y)


def deleter():
    return Deleter()


deleter.input_shape = (1, 8, 8)
deleter.num_classes = 10


def raises():
    raise RuntimeError("no weights here")
'''

EVIL = '''
from pathlib import Path

Path(__file__).with_name("EXECUTED").write_text("ran")


def build():
    raise SystemExit("must never run")
'''

MARKED = '''from pathlib import Path

Path(__file__).resolve().parents[1].joinpath("EXECUTED").write_text("ran")
'''
"""Put before a run's kept model copy: importing it writes EXECUTED into the run folder."""

UNTRUSTED_COPY = "is not code you have trusted on this machine); pass --trust-model {crafted}"


@dataclass
class Case:
    args: list
    code: int
    words: str
    absent: list = field(default_factory=list)
    """Paths (templates) that must not exist afterwards."""
    fsize: int = 0
    """RLIMIT_FSIZE of the child in bytes (a full disk), 0 for none."""
    readonly: str = ""
    """A folder (template) made read-only for the child by a read-only bind mount."""


CASES = {
    # --- train: the model ---
    "train-unknown-model": Case(["train", "--model", "nosuch", "--out", "{out}", "-q"], 2,
                                "unknown model 'nosuch'", ["{out}"]),
    "train-misdeclared-model": Case(["train", "--model", "{files}/models.py:misfit", "--out",
                                     "{out}", "-q"], 2, "layer 1 (Dense) fails", ["{out}"]),
    "train-graph-compile-error": Case(["train", "--model", "{files}/models.py:deleter", "--out",
                                       "{out}", "-q"], 2,
                                      "does not compile: Unsupported statement 'Delete'",
                                      ["{out}"]),
    "train-model-import-fails": Case(["train", "--model", "{files}/broken.py:build", "--out",
                                      "{out}", "-q"], 2, "failed to import", ["{out}"]),
    "train-factory-raises": Case(["train", "--model", "{files}/models.py:raises", "--out",
                                  "{out}", "-q"], 2, "raised RuntimeError: no weights here",
                                 ["{out}"]),
    "train-unknown-model-arg": Case(["train", "--model", "{files}/models.py:sized",
                                     "--model-arg", "depth=3", "--out", "{out}", "-q"], 2,
                                    "does not take the model argument(s) depth", ["{out}"]),
    "train-signature-wrong-shape": Case(["train", "--model", "{files}/models.py:sized",
                                         "--input-spec", "x:-1x3x8x8:float32", "--out", "{out}",
                                         "-q"], 2, "does not fit its inputs x:-1x3x8x8:float32: "
                                         "layer 1 (Dense) fails", ["{out}"]),
    "train-signature-wrong-dtype": Case(["train", "--model", "textcls", "--input-spec",
                                         "tokens:-1x32:float32", "--data", "tokens", "--out",
                                         "{out}", "-q"], 2, "does not fit its inputs "
                                         "tokens:-1x32:float32", ["{out}"]),
    "train-bad-input-spec": Case(["train", "--input-spec", "x:abc:float32", "--out", "{out}",
                                  "-q"], 2, "--input-spec", ["{out}"]),
    # --- train: options, data, output ---
    "train-epochs-not-a-number": Case(["train", "--epochs", "abc"], 2,
                                      "Invalid value for '--epochs'"),
    "train-unknown-flag": Case(["train", "--frobnicate"], 2, "No such option: --frobnicate"),
    "train-missing-data-file": Case(["train", "--data", "npz:{files}/missing.npz", "--out",
                                     "{out}", "-q"], 2, "missing.npz", ["{out}"]),
    "train-sample-count-not-a-number": Case(["train", "--data", "digits:many", "--out", "{out}",
                                             "-q"], 2, "'many' is not a number of samples",
                                            ["{out}"]),
    "train-more-samples-than-the-source": Case(["train", "--data", "digits:5000", "--out",
                                                "{out}", "-q"], 2,
                                               "asks for 5000 samples; it holds 1797", ["{out}"]),
    "train-unknown-augmentation": Case(["train", "--augment", "crop,blur", "--out", "{out}",
                                        "-q"], 2, "unknown augmentation blur", ["{out}"]),
    "train-augment-token-ids": Case(["train", "--model", "textcls", "--data", "tokens",
                                     "--augment", "flip", "--out", "{out}", "-q"], 2,
                                    "--augment changes images; tokens feeds", ["{out}"]),
    "train-data-workers-zero": Case(["train", "--data-workers", "0", "--out", "{out}", "-q"], 2,
                                    "data workers must be >= 1", ["{out}"]),
    "train-sink-size-on-cpu": Case(["train", "--sink-size", "4", "--out", "{out}", "-q"], 2,
                                   "data sinking runs on Ascend and GPU only", ["{out}"]),
    "train-sink-size-zero": Case(["train", "--sink-size", "0", "--out", "{out}", "-q"], 2,
                                 "--sink-size must be >= 1", ["{out}"]),
    "train-imagefolder-without-classes": Case(["train", "--data", "imagefolder:{files}/flat",
                                               "--out", "{out}", "-q"], 2,
                                              "no class sub-folders", ["{out}"]),
    "train-imagefolder-without-images": Case(["train", "--data", "imagefolder:{files}/noimages",
                                              "--out", "{out}", "-q"], 2,
                                             "no images in the class sub-folders", ["{out}"]),
    "train-npz-without-labels": Case(["train", "--data", "npz:{files}/wrong.npz", "--out",
                                      "{out}", "-q"], 2, "lacks array 'x' or 'y'", ["{out}"]),
    "train-npz-lengths-differ": Case(["train", "--data", "npz:{files}/uneven.npz", "--out",
                                      "{out}", "-q"], 2, "50 images but 40 labels", ["{out}"]),
    "train-out-is-a-file": Case(["train", "--out", "{files}/models.py", "-q"], 2, "is a file"),
    "train-read-only-parent": Case(["train", "--out", "{ro}/out", "-q"], 2,
                                   "cannot create output folder", readonly="{ro}"),
    "train-full-disk": Case(["train", "--epochs", "1", "--data", "{tiny}", "--out", "{out}",
                             "-q"], 2, "File too large", ["{out}/last.ckpt", "{out}/best.ckpt"],
                            fsize=200_000),
    "train-config-not-a-mapping": Case(["train", "--config", "{files}/list.json", "--out",
                                        "{out}"], 2, "list.json", ["{out}"]),
    "train-config-is-a-folder": Case(["train", "--config", "{files}", "--out", "{out}"], 2,
                                     "config", ["{out}"]),
    "train-into-a-trained-run": Case(["train", "--epochs", "1", "--out", "{trained}", "-q"], 2,
                                     "{trained} already holds a trained run (run.json, "
                                     "best.ckpt, last.ckpt); pass --resume to continue it, "
                                     "--overwrite to replace it, or another --out"),
    "train-diverges-before-a-checkpoint": Case(["train", "--loss-scale", "static:1e30",
                                                "--max-skipped", "3", "--epochs", "1", "--out",
                                                "{out}", "-q"], 1, "--max-skipped is 3"),
    # --- export ---
    "export-missing-run": Case(["export", "--run", "{files}/nowhere", "--out", "{out}"], 2,
                               "does not exist", ["{out}"]),
    "export-run-json-not-a-mapping": Case(["export", "--run", "{nondict}", "--out", "{out}"], 2,
                                          "not a JSON object", ["{out}"]),
    "export-run-names-a-foreign-file": Case(["export", "--run", "{foreign_run}", "--out",
                                             "{out}"], 2, "does not run on a file's word",
                                            ["{out}"]),
    "train-resume-a-foreign-run": Case(["train", "--resume", "--epochs", "1", "--out",
                                        "{foreign_run}", "-q"], 2,
                                       "does not run on a file's word"),
    "export-run-crafted-model-copy": Case(["export", "--run", "{crafted}", "--out", "{out}"], 2,
                                          UNTRUSTED_COPY, ["{out}"]),
    "export-run-names-an-untrusted-package": Case(["export", "--run", "{pkg_run}", "--out",
                                                   "{out}"], 2, "from package amptool, which "
                                                  "is not trusted", ["{out}"]),
    "train-resume-crafted-model-copy": Case(["train", "--resume", "--epochs", "2", "--out",
                                             "{crafted}", "-q"], 2, UNTRUSTED_COPY),
    "export-air-without-ascend": Case(["export", "--run", "{run}", "-f", "AIR", "--out",
                                       "{out}"], 2, "Ascend", ["{out}"]),
    "export-truncated-checkpoint": Case(["export", "--ckpt", "{files}/truncated.ckpt", "--model",
                                         "simplecnn", "--out", "{out}"], 2, "truncated.ckpt",
                                        ["{out}"]),
    "export-existing-artefacts": Case(["export", "--run", "{run}", "--out", "{art}"], 2,
                                      "already exist"),
    "export-full-disk": Case(["export", "--run", "{run}", "-f", "MINDIR", "--out", "{out}"], 2,
                             "File too large", ["{out}"], fsize=60_000),
    "export-out-is-a-file": Case(["export", "--run", "{run}", "--out", "{files}/models.py"], 2,
                                 "is a file"),
    # --- parity ---
    "parity-truncated-mindir": Case(["parity", "{files}/truncated.mindir", "{art}/simplecnn_fp16"
                                     ".mindir", "-q"], 2, "truncated.mindir"),
    "parity-truncated-onnx": Case(["parity", "{art}/simplecnn_fp32.mindir",
                                   "{files}/truncated.onnx", "-q"], 2, "truncated.onnx"),
    "parity-tampered-manifest": Case(["parity", "{art}/simplecnn_fp32.mindir",
                                      "{tampered}/simplecnn_fp16.mindir", "-q"], 2,
                                     "does not describe"),
    "parity-report-folder-missing": Case(["parity", "{art}/simplecnn_fp32.mindir",
                                          "{art}/simplecnn_fp16.mindir", "--json-out",
                                          "{files}/nodir/report.json", "-q"], 2,
                                         "folder {files}/nodir does not exist"),
    "parity-inputs-do-not-match": Case(["parity", "{art}/simplecnn_fp32.mindir",
                                        "{art}/simplecnn_fp16.mindir", "--inputs",
                                        "{files}/wrong.npz", "-q"], 2,
                                       "has shape ['N', 1, 28, 28], got [4, 3]"),
    "parity-metric-import-fails": Case(["parity", "{art}/simplecnn_fp32.mindir",
                                        "{art}/simplecnn_fp16.mindir", "--metric",
                                        "{files}/broken.py:fn", "-q"], 2, "failed to import"),
    "parity-onnx-unknown-operator": Case(["parity", "{art}/simplecnn_fp32.mindir",
                                          "{files}/unknown_op.onnx", "-q"], 2,
                                         "onnxruntime cannot load {files}/unknown_op.onnx"),
    "parity-onnx-inputs-do-not-match": Case(["parity", "{art}/simplecnn_fp32.onnx",
                                             "{art}/simplecnn_fp16.onnx", "--inputs",
                                             "{files}/wrong.npz", "-q"], 2,
                                            "of simplecnn_fp32.onnx has shape ['N', 1, 28, "
                                            "28], got [4, 3]"),
    "parity-one-artefact": Case(["parity", "{art}/simplecnn_fp32.mindir", "-q"], 2,
                                "candidate"),
    "parity-manifest-names-a-foreign-file": Case(["parity", "{art}/simplecnn_fp32.mindir",
                                                  "{foreign_art}/simplecnn_fp16.mindir",
                                                  "--per-layer", "-q"], 2,
                                                 "does not run on a file's word"),
    "parity-run-crafted-model-copy": Case(["parity", "{crafted}", "{art}/simplecnn_fp16.mindir",
                                           "-q"], 2, UNTRUSTED_COPY),
    # --- convert and run ---
    "convert-missing-checkpoint": Case(["convert", "ckpt", "{files}/missing.ckpt",
                                        "{out}.ckpt", "--to", "fp16"], 2, "missing.ckpt",
                                       ["{out}.ckpt"]),
    "convert-truncated-checkpoint": Case(["convert", "ckpt", "{files}/truncated.ckpt",
                                          "{out}.ckpt", "--to", "fp16"], 2, "truncated.ckpt",
                                         ["{out}.ckpt"]),
    "convert-full-disk": Case(["convert", "ckpt", "{run}/best.ckpt", "{out}.ckpt", "--to",
                               "fp16"], 2, "File too large", ["{out}.ckpt"], fsize=50_000),
    "convert-ckpt-crafted-model-copy": Case(["convert", "ckpt", "{crafted}/best.ckpt",
                                             "{out}.ckpt", "--to", "fp16"], 2, UNTRUSTED_COPY,
                                            ["{out}.ckpt"]),
    "convert-search-crafted-model-copy": Case(["convert", "search", "--run", "{crafted}",
                                               "--out", "{out}.toml"], 2, UNTRUSTED_COPY,
                                              ["{out}.toml"]),
    "convert-unknown-level": Case(["convert", "policy", "--level", "O9"], 2, "O9"),
    "convert-search-run-json-not-a-mapping": Case(["convert", "search", "--run", "{nondict}"],
                                                  2, "not a JSON object"),
    "run-config-not-a-mapping": Case(["run", "--config", "{files}/list.json", "--out", "{out}",
                                      "-q"], 2, "list.json", ["{out}"]),
    "run-into-a-finished-pipeline": Case(["run", "--epochs", "1", "--out", "{pipeline}", "-q"],
                                         2, "{pipeline} already holds a pipeline run "
                                         "(summary.json); pass --overwrite to replace it"),
}


def _amptool(args: list, cwd: Path, fsize: int = 0, readonly: str = "",
             env: Optional[dict] = None) -> tuple:
    cmd = [sys.executable, "-m", "amptool", *args]
    if readonly:  # root ignores permissions: a read-only bind mount binds it too
        cmd = ["unshare", "-m", "sh", "-c", f'mount --bind "{readonly}" "{readonly}" && '
               f'mount -o remount,bind,ro "{readonly}" && exec "$@"', "sh", *cmd]

    def limit():
        if fsize:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = dict(os.environ, COLUMNS="200", **(env or {}))
    env.pop("AMPTOOL_DEBUG", None)
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, env=env,
                          preexec_fn=limit, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def _can_bind_read_only() -> bool:
    folder = tempfile.mkdtemp()
    try:
        done = subprocess.run(["unshare", "-m", "sh", "-c", f'mount --bind "{folder}" "{folder}" '
                               f'&& mount -o remount,bind,ro "{folder}" && touch "{folder}/x"'],
                              capture_output=True, text=True, check=False)
        return done.returncode != 0 and "Read-only file system" in done.stderr
    except OSError:
        return False
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _copy_artefact(art: Path, name: str, folder: Path) -> Path:
    folder.mkdir()
    shutil.copy(art / name, folder / name)
    shutil.copy(art / f"{name}.json", folder / f"{name}.json")
    return folder / f"{name}.json"


@pytest.fixture(scope="module")
def kit(sample_runs, simplecnn_export, tiny_digits, tmp_path_factory) -> dict:
    """Everything the cases read: a trained run, its artefacts and the broken copies."""
    from amptool.files.fileio import sha256

    root = tmp_path_factory.mktemp("faults")
    run = sample_runs.get("simplecnn")
    art = Path(simplecnn_export[("ONNX", "fp32")]).parent  # the session's, only read here
    files = root / "files"
    files.mkdir()
    (files / "models.py").write_text(MODELS)
    (files / "broken.py").write_text("import amptool_no_such_module_xyz\n")
    (files / "list.json").write_text("[1, 2]\n")
    np.savez(files / "wrong.npz", z=np.zeros((4, 3), np.float32))
    np.savez(files / "uneven.npz", x=np.zeros((50, 8, 8), np.uint8), y=np.arange(40) % 10)
    (files / "flat").mkdir()
    (files / "flat" / "a.png").write_bytes(b"\x89PNG not really")
    (files / "noimages" / "cat").mkdir(parents=True)
    (files / "noimages" / "cat" / "notes.txt").write_text("no image here\n")
    for src, name in ((art / "simplecnn_fp32.mindir", "truncated.mindir"),
                      (art / "simplecnn_fp32.onnx", "truncated.onnx"),
                      (run / "best.ckpt", "truncated.ckpt")):
        data = src.read_bytes()
        (files / name).write_bytes(data[: len(data) // 3])
    # an ONNX file that parses but names an operator onnxruntime does not have
    import onnx

    graph = onnx.load(str(art / "simplecnn_fp32.onnx"))
    graph.graph.node[0].op_type = "NoSuchOperator"
    onnx.save(graph, str(files / "unknown_op.onnx"))
    # a manifest that describes another file
    tampered = _copy_artefact(art, "simplecnn_fp16.mindir", root / "tampered")
    manifest = json.loads(tampered.read_text())
    tampered.write_text(json.dumps(dict(manifest, sha256="0" * 64)))
    # records naming a file outside their folder, which would write EXECUTED if imported
    evil = root / "elsewhere" / "evil.py"
    evil.parent.mkdir()
    evil.write_text(EVIL)
    foreign_run = root / "foreign_run"
    shutil.copytree(run, foreign_run)
    info = json.loads((foreign_run / "run.json").read_text())
    info["config"]["model"] = f"{evil}:build"
    (foreign_run / "run.json").write_text(json.dumps(info))
    foreign_art = _copy_artefact(art, "simplecnn_fp16.mindir", root / "foreign_art")
    manifest = json.loads(foreign_art.read_text())
    manifest["model"].update(spec=f"{evil}:build", name=f"{evil}:build",
                             file="model/evil.py", sha256=sha256(evil))
    foreign_art.write_text(json.dumps(manifest))
    crafted = _crafted_run(root, files)
    pkg_run = root / "pkg_run"  # names its sample by package: runs only if amptool is trusted
    shutil.copytree(run, pkg_run)
    info = json.loads((pkg_run / "run.json").read_text())
    info["config"].update(model="amptool.samples.models:SimpleCNN",
                          input_spec="x:-1x1x28x28:float32")
    (pkg_run / "run.json").write_text(json.dumps(info))
    nondict = root / "nondict"
    shutil.copytree(run, nondict)
    (nondict / "run.json").write_text("[]\n")
    ro = root / "readonly"
    ro.mkdir()
    trained = root / "trained"  # a trained run that a new run must not replace unasked
    shutil.copytree(run, trained)
    pipeline = root / "pipeline"  # what a finished `amptool run` leaves
    pipeline.mkdir()
    (pipeline / "summary.json").write_text("{}\n")
    return {"root": root, "run": run, "art": art, "files": files, "tampered": tampered.parent,
            "foreign_run": foreign_run, "foreign_art": foreign_art.parent, "nondict": nondict,
            "ro": ro, "evil": evil, "crafted": crafted, "pkg_run": pkg_run,
            "trained": trained, "pipeline": pipeline, "tiny": tiny_digits}


def _crafted_run(root: Path, files: Path) -> Path:
    """A run trained with a file model under another user's trust store, whose kept copy is
    then edited to write EXECUTED into the run folder, with run.json's sha256 rewritten to
    match the edited copy."""
    from amptool.files.fileio import sha256
    from amptool.train.config import TrainConfig
    from amptool.train.run import run_training

    run, ours = root / "crafted_run", os.environ["AMPTOOL_TRUST_STORE"]
    os.environ["AMPTOOL_TRUST_STORE"] = str(root / "foreign_store.json")
    try:
        run_training(TrainConfig(model=f"{files}/models.py:good", epochs=1, out=str(run),
                                batch_size=64))
    finally:
        os.environ["AMPTOOL_TRUST_STORE"] = ours
    copy = run / "model" / "models.py"
    copy.write_text(MARKED + copy.read_text())
    info = json.loads((run / "run.json").read_text())
    info["model"]["sha256"] = sha256(copy)
    (run / "run.json").write_text(json.dumps(info))
    return run


def _paths(kit: dict, name: str) -> dict:
    """What a case's templates name: the kit's paths and the case's own output path."""
    return {**{k: str(v) for k, v in kit.items()}, "out": str(kit["root"] / "outs" / name)}


FORK_SERVER = """
import gc
import json
import os
import resource
import runpy
import signal
import sys

import amptool.cli  # noqa: F401  first, as `python -m amptool`: it sets the framework's env
import mindspore  # noqa: F401  what a case that builds, loads or reads a network imports

gc.freeze()  # the children's collections leave the imported objects (and their pages) be
for line in sys.stdin:
    case = json.loads(line)
    pid = os.fork()
    if pid == 0:  # the case: `python -m amptool ARGS` from here on, with its own folder
        signal.alarm(600)  # a case that hangs is killed (and fails), as the timeout did
        os.chdir(case["cwd"])
        if case["fsize"]:
            resource.setrlimit(resource.RLIMIT_FSIZE, (case["fsize"], case["fsize"]))
        for fd, name, flags in ((0, os.devnull, os.O_RDONLY),
                                (1, case["stdout"], os.O_WRONLY | os.O_CREAT),
                                (2, case["stderr"], os.O_WRONLY | os.O_CREAT)):
            os.dup2(os.open(name, flags), fd)
        sys.argv = ["-m", *case["args"]]
        runpy.run_module("amptool", run_name="__main__", alter_sys=True)
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""
"""Runs the cases it reads (one JSON line each) as processes forked from one that has
imported MindSpore and amptool, as ``python -m amptool`` has by the time it refuses, so a
case costs its own work and not the second of the framework's import each time."""


class ForkServer:
    """A FORK_SERVER process; its own folder and stderr must stay empty (a dump, or a
    warning the imports print, would be missed by every case)."""

    def __init__(self, root: Path):
        self.home = root / "home"
        self.home.mkdir(parents=True)
        self.err = root / "stderr"
        env = dict(os.environ, COLUMNS="200")
        env.pop("AMPTOOL_DEBUG", None)
        with open(self.err, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", FORK_SERVER], cwd=self.home,
                                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, text=True)

    def run(self, args: list, cwd: Path, fsize: int = 0) -> tuple:
        out, err = cwd.parent / f"{cwd.name}.out", cwd.parent / f"{cwd.name}.err"
        self.proc.stdin.write(json.dumps({"args": args, "cwd": str(cwd), "fsize": fsize,
                                          "stdout": str(out), "stderr": str(err)}) + "\n")
        self.proc.stdin.flush()
        code = int(self.proc.stdout.readline())
        return code, out.read_text(), err.read_text()

    def close(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0 and not self.proc.stdout.read()
        assert self.err.read_text() == "" and not any(self.home.iterdir())


@pytest.fixture(scope="module")
def outcomes(kit) -> dict:
    """Every case run as a process of its own, two at a time: forked from a FORK_SERVER,
    or started by ``unshare`` where a folder must be read-only to it."""
    can_bind = _can_bind_read_only()
    servers = Queue()
    for k in range(2):
        servers.put(ForkServer(kit["root"] / f"server{k}"))

    def one(name: str, case: Case):
        if case.readonly and not can_bind:
            return None
        cwd = kit["root"] / "cwd" / name
        cwd.mkdir(parents=True)
        paths = _paths(kit, name)
        args = [a.format(**paths) for a in case.args]
        if case.readonly:
            code, out, err = _amptool(args, cwd, case.fsize, case.readonly.format(**paths))
        else:
            server = servers.get()
            try:
                code, out, err = server.run(args, cwd, case.fsize)
            finally:
                servers.put(server)
        absent = [a.format(**paths) for a in case.absent]
        return {"code": code, "stdout": out, "stderr": err, "cwd": cwd, "absent": absent,
                "out": Path(paths["out"])}

    (kit["root"] / "outs").mkdir()
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(one, name, case) for name, case in CASES.items()}
        results = {name: f.result() for name, f in futures.items()}
    while not servers.empty():
        servers.get().close()
    return results


BEFORE_MINDSPORE = """
import json
import sys

from amptool.cli import app

codes = []
for args in json.loads(sys.argv[1]):
    try:
        app(args=args, prog_name="amptool")
    except SystemExit as stop:
        codes.append(stop.code)
print(json.dumps({"codes": codes, "mindspore": "mindspore" in sys.modules}))
"""


def test_mistakes_in_what_the_options_name_are_refused_before_mindspore_loads(kit, tmp_path):
    """An unknown model, an unparsable signature, a missing data file or run folder, an
    untrusted run: refused in a fraction of a second, before the framework is imported."""
    names = ["train-unknown-model", "train-bad-input-spec", "train-sink-size-zero",
             "train-missing-data-file", "train-sample-count-not-a-number",
             "export-missing-run", "export-run-json-not-a-mapping",
             "export-run-names-a-foreign-file", "export-run-crafted-model-copy",
             "export-run-names-an-untrusted-package", "export-out-is-a-file",
             "convert-missing-checkpoint", "convert-search-run-json-not-a-mapping",
             "convert-search-crafted-model-copy"]
    argv = [[a.format(**_paths(kit, f"early-{n}")) for a in CASES[n].args] for n in names]
    done = subprocess.run([sys.executable, "-c", BEFORE_MINDSPORE, json.dumps(argv)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {"codes": [2] * len(names), "mindspore": False}, done.stderr


def test_the_matrix_has_at_least_thirty_cases():
    assert len(CASES) >= 30


@pytest.mark.parametrize("name", list(CASES))
def test_fault(name, outcomes, kit):
    result = outcomes[name]
    if result is None:
        pytest.skip("no read-only bind mount here (unshare -m needs CAP_SYS_ADMIN)")
    case = CASES[name]
    err = result["stderr"]
    lines = [line for line in err.splitlines() if line.strip()]
    assert result["code"] == case.code, err
    assert "Traceback" not in err and len(lines) == 1, err
    words = case.words.format(**{k: str(v) for k, v in kit.items()})
    assert lines[0].startswith("amptool: error: ") and words in lines[0], lines[0]
    assert result["stdout"] == ""
    assert not any(result["cwd"].iterdir()), list(result["cwd"].iterdir())  # no dumps
    for path in result["absent"]:
        assert not Path(path).exists(), path
    out = result["out"]
    if out.is_dir():  # whatever was written is whole: no staged temp files remain
        assert not list(out.rglob(".amptool-*")), list(out.rglob(".amptool-*"))
    assert not (kit["evil"].parent / "EXECUTED").exists()
    assert not (kit["crafted"] / "EXECUTED").exists()


def test_a_crafted_run_runs_once_its_user_trusts_it(kit, tmp_path):
    """The consent the refusal names: --trust-model FOLDER runs the folder's code and
    remembers it by sha256 in this user's store; no other store learns of it."""
    from amptool.files.fileio import sha256

    crafted = tmp_path / "crafted"
    shutil.copytree(kit["crafted"], crafted)
    store = tmp_path / "store.json"
    args = ["export", "--run", str(crafted), "-f", "MINDIR", "--precision", "fp32", "--out",
            str(tmp_path / "art"), "--trust-model", str(crafted)]
    code, _, err = _amptool(args, tmp_path, env={"AMPTOOL_TRUST_STORE": str(store)})
    assert code == 0, err
    assert (crafted / "EXECUTED").read_text() == "ran"
    digest = sha256(crafted / "model" / "models.py")
    assert json.loads(store.read_text())["sha256"][digest]["how"] == f"--trust-model {crafted}"
    from amptool.network.trust import is_trusted

    assert not is_trusted(digest)  # the test session's own store


def test_a_trusted_package_runs_without_consent(kit, tmp_path):
    args = ["export", "--run", str(kit["pkg_run"]), "-f", "MINDIR", "--precision", "fp32",
            "--out", str(tmp_path / "art")]
    code, out, err = _amptool(args, tmp_path, env={"AMPTOOL_TRUST_PACKAGES": "amptool"})
    assert code == 0, err
    assert len(list((tmp_path / "art").glob("*_fp32.mindir"))) == 1, out


def test_export_run_takes_the_model_the_user_names(kit, tmp_path):
    """The way out the refusal names: ``--model`` replaces the run's model, so the run's
    weights export without its recorded file ever running."""
    from amptool.export.api import ExportConfig, export

    results = export(ExportConfig(run=str(kit["foreign_run"]), model="simplecnn",
                                  formats=("MINDIR",), precision="fp32",
                                  out=str(tmp_path / "art")))
    assert [Path(r.path).name for r in results] == ["simplecnn_fp32.mindir"]
    assert not (kit["evil"].parent / "EXECUTED").exists()


def test_a_kill_during_export_leaves_no_half_written_file(kit, tmp_path):
    """SIGTERM mid-export: exit 130, one line, nothing written. SIGKILL: no file under an
    artefact's name, and the next export into that folder clears the dead staging."""
    out = tmp_path / "out"
    args = [sys.executable, "-m", "amptool", "export", "--run", str(kit["run"]), "-f",
            "MINDIR,ONNX", "--out", str(out)]

    def started_writing(proc) -> bool:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if list(out.glob(".amptool-tmp-*")):
                return True
            time.sleep(0.02)
        return False

    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert started_writing(proc)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert stderr.strip() == "amptool: error: interrupted" and "Traceback" not in stderr
    assert not out.exists() or not list(out.rglob("*")), list(out.rglob("*"))

    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert started_writing(proc)
    proc.kill()
    proc.communicate(timeout=60)
    assert not list(out.glob("*.mindir")) and not list(out.glob("*.onnx"))
    assert list(out.glob(".amptool-tmp-*"))  # the dead process's staging, nothing more
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert not list(out.glob(".amptool-tmp-*"))
    assert len(list(out.glob("*.mindir"))) == 2 and len(list(out.glob("*.onnx"))) == 2


def test_a_refused_run_touches_nothing(outcomes, kit):
    """Training into a trained run without --resume or --overwrite leaves it as it was;
    a run stopped before its first checkpoint claims none."""
    from amptool.files.fileio import sha256

    for name in ("run.json", "best.ckpt", "last.ckpt", "metrics.jsonl"):
        assert sha256(kit["trained"] / name) == sha256(kit["run"] / name), name
    assert sorted(p.name for p in kit["pipeline"].iterdir()) == ["summary.json"]
    stopped = outcomes["train-diverges-before-a-checkpoint"]
    assert not (stopped["out"] / "last.ckpt").exists()
    assert "checkpoint" not in stopped["stderr"], stopped["stderr"]


def _train(kit, *args) -> list:
    """A short run of a one-layer network with the default data workers (digits: 22 steps an
    epoch), as a command line."""
    return [sys.executable, "-m", "amptool", "train", "--model", f"{kit['files']}/models.py:good",
            "--batch-size", "64", *args]


def _wait_for(path: Path, proc, seconds: float = 120) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists():
            return True
        time.sleep(0.02)
    return False


def _steps(path: Path) -> list:
    """The steps of a metrics.jsonl, each line read as the JSON object it must be."""
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def _run(cmd: list, cwd: Path) -> tuple:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    return done.returncode, done.stdout, done.stderr


def test_two_writers_at_once(kit, tmp_path):
    """The second writer into a folder is refused (exit 2, one line naming the first) before
    it touches anything; the first finishes as if alone."""
    out = tmp_path / "run"
    first = subprocess.Popen(_train(kit, "--epochs", "1", "--out", str(out), "-q"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert _wait_for(out / ".amptool.lock", first)
    code, stdout, stderr = _amptool(["train", "--epochs", "1", "--out", str(out), "-q"], tmp_path)
    assert code == 2 and stdout == "", stderr
    assert stderr == (f"amptool: error: output folder {out} is in use by pid {first.pid} "
                      f"(amptool {' '.join(first.args[3:])}); wait for it to end, or write to "
                      "another --out\n")
    stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0 and stdout.startswith("done:"), stderr
    assert _steps(out / "metrics.jsonl") == [1, 10, 20, 22, 22]
    assert sorted(p.name for p in out.iterdir()) == ["best.ckpt", "last.ckpt", "metrics.jsonl",
                                                    "model", "report.html", "run.json"]


def test_a_run_killed_before_its_first_checkpoint_is_run_again_as_it_was(kit, tmp_path):
    """``kill -9`` once run.json is written and before any checkpoint: the folder holds
    nothing trained, so the same command runs into it again, without --overwrite (and
    --resume, which needs a checkpoint, is not needed); the new run's metrics are its own.
    A folder with a checkpoint stays protected (the test below)."""
    out = tmp_path / "run"
    cmd = _train(kit, "--batch-size", "4", "--epochs", "2", "--out", str(out))
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert _wait_for(out / "run.json", first)
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=60)
    assert first.returncode == -signal.SIGKILL
    left = sorted(p.name for p in out.iterdir())
    assert "run.json" in left and not {"best.ckpt", "last.ckpt"} & set(left), left
    code, stdout, stderr = _run(cmd, tmp_path)
    assert code == 0, stderr
    assert stdout.splitlines()[0] == (f"replacing the run in {out} that stopped before its "
                                      "first checkpoint (its run.json; nothing trained was "
                                      "kept)")
    steps = _steps(out / "metrics.jsonl")
    assert steps == sorted(steps) and steps[0] == 1 and steps.count(steps[-1]) == 2
    assert {"best.ckpt", "last.ckpt"} <= {p.name for p in out.iterdir()}


def test_a_killed_holder_holds_nobody_up(kit, tmp_path):
    """A writer killed with SIGKILL leaves its lock file behind, locked by nobody: the next
    run proceeds; what the killed run wrote is a trained run only --overwrite replaces."""
    out = tmp_path / "run"
    holder = subprocess.Popen(_train(kit, "--epochs", "50", "--out", str(out), "-q"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # best.ckpt is the last file of the first epoch (after last.ckpt): a kill between the two
    # would leave a run of run.json and last.ckpt only
    assert _wait_for(out / "best.ckpt", holder)
    holder.kill()
    holder.communicate(timeout=60)
    assert (out / ".amptool.lock").exists()
    code, stdout, stderr = _run(_train(kit, "--epochs", "1", "--out", str(out)), tmp_path)
    assert code == 2 and "already holds a trained run (run.json, best.ckpt, last.ckpt)" in stderr
    code, stdout, stderr = _run(_train(kit, "--epochs", "1", "--out", str(out), "--overwrite"),
                                tmp_path)
    assert code == 0, stderr
    assert stdout.splitlines()[0] == (f"overwriting the run in {out}: run.json, best.ckpt, "
                                      "last.ckpt replaced")
    assert not (out / ".amptool.lock").exists()
    assert _steps(out / "metrics.jsonl") == [1, 10, 20, 22, 22]


@pytest.fixture(scope="module")
def stopped(kit) -> dict:
    """Runs with the default data workers stopped by SIGTERM and by SIGINT once their first
    checkpoint is written, side by side."""

    def stop(sig):
        out = kit["root"] / "stopped" / sig.name
        proc = subprocess.Popen(_train(kit, "--epochs", "50", "--out", str(out), "-q"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        written = _wait_for(out / "last.ckpt", proc)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
        return {"written": written, "code": proc.returncode, "stdout": stdout,
                "stderr": stderr, "out": out}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(("SIGTERM", "SIGINT"), pool.map(stop, (signal.SIGTERM, signal.SIGINT))))


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_stopped_run_exits_130_and_keeps_its_checkpoint(stopped, sig):
    from amptool.network.checkpoint import meta_of, read_checkpoint

    result = stopped[sig]
    assert result["written"], result["stderr"]
    assert result["code"] == 130, result["stderr"]
    assert result["stderr"] == "amptool: error: interrupted\n" and result["stdout"] == ""
    out = result["out"]
    assert not list(out.rglob(".amptool-*")) and not (out / ".amptool.lock").exists()
    assert meta_of(read_checkpoint(out / "last.ckpt"))["epoch"] >= 1
    _steps(out / "metrics.jsonl")
