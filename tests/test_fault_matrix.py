"""The fault matrix: the usual mistakes and accidents, each run as a real ``amptool``
process, each ending in its documented exit code, one stderr line without a traceback,
nothing left behind (no output folder, no staged file, no MindSpore dump in the current
folder) and no code run that the user did not name.

The cases run two at a time in one module fixture; each test checks one case's outcome.
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
    "train-full-disk": Case(["train", "--epochs", "1", "--out", "{out}", "-q"], 2,
                            "File too large", ["{out}/last.ckpt", "{out}/best.ckpt"],
                            fsize=200_000),
    "train-config-not-a-mapping": Case(["train", "--config", "{files}/list.json", "--out",
                                        "{out}"], 2, "list.json", ["{out}"]),
    "train-config-is-a-folder": Case(["train", "--config", "{files}", "--out", "{out}"], 2,
                                     "config", ["{out}"]),
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
    # --- convert and run ---
    "convert-missing-checkpoint": Case(["convert", "ckpt", "{files}/missing.ckpt",
                                        "{out}.ckpt", "--to", "fp16"], 2, "missing.ckpt",
                                       ["{out}.ckpt"]),
    "convert-truncated-checkpoint": Case(["convert", "ckpt", "{files}/truncated.ckpt",
                                          "{out}.ckpt", "--to", "fp16"], 2, "truncated.ckpt",
                                         ["{out}.ckpt"]),
    "convert-full-disk": Case(["convert", "ckpt", "{run}/best.ckpt", "{out}.ckpt", "--to",
                               "fp16"], 2, "File too large", ["{out}.ckpt"], fsize=50_000),
    "convert-unknown-level": Case(["convert", "policy", "--level", "O9"], 2, "O9"),
    "convert-search-run-json-not-a-mapping": Case(["convert", "search", "--run", "{nondict}"],
                                                  2, "not a JSON object"),
    "run-config-not-a-mapping": Case(["run", "--config", "{files}/list.json", "--out", "{out}",
                                      "-q"], 2, "list.json", ["{out}"]),
}


def _amptool(args: list, cwd: Path, fsize: int = 0, readonly: str = "") -> tuple:
    cmd = [sys.executable, "-m", "amptool", *args]
    if readonly:  # root ignores permissions: a read-only bind mount binds it too
        cmd = ["unshare", "-m", "sh", "-c", f'mount --bind "{readonly}" "{readonly}" && '
               f'mount -o remount,bind,ro "{readonly}" && exec "$@"', "sh", *cmd]

    def limit():
        if fsize:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = dict(os.environ, COLUMNS="200")
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
def kit(sample_runs, simplecnn_export, tmp_path_factory) -> dict:
    """Everything the cases read: a trained run, its artefacts and the broken copies."""
    from amptool.fileio import sha256

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
    nondict = root / "nondict"
    shutil.copytree(run, nondict)
    (nondict / "run.json").write_text("[]\n")
    ro = root / "readonly"
    ro.mkdir()
    return {"root": root, "run": run, "art": art, "files": files, "tampered": tampered.parent,
            "foreign_run": foreign_run, "foreign_art": foreign_art.parent, "nondict": nondict,
            "ro": ro, "evil": evil}


@pytest.fixture(scope="module")
def outcomes(kit) -> dict:
    """Every case run as a real process, two at a time."""
    can_bind = _can_bind_read_only()

    def one(name: str, case: Case):
        if case.readonly and not can_bind:
            return None
        cwd = kit["root"] / "cwd" / name
        cwd.mkdir(parents=True)
        paths = {k: str(v) for k, v in kit.items()}
        paths["out"] = str(kit["root"] / "outs" / name)
        args = [a.format(**paths) for a in case.args]
        code, out, err = _amptool(args, cwd, case.fsize, case.readonly.format(**paths))
        absent = [a.format(**paths) for a in case.absent]
        return {"code": code, "stdout": out, "stderr": err, "cwd": cwd, "absent": absent,
                "out": Path(paths["out"])}

    (kit["root"] / "outs").mkdir()
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(one, name, case) for name, case in CASES.items()}
        return {name: f.result() for name, f in futures.items()}


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


def test_export_run_takes_the_model_the_user_names(kit, tmp_path):
    """The way out the refusal names: ``--model`` replaces the run's model, so the run's
    weights export without its recorded file ever running."""
    from amptool.export.api import ExportConfig, export_model

    results = export_model(ExportConfig(run=str(kit["foreign_run"]), model="simplecnn",
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
