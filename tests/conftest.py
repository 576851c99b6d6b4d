"""Shared fixtures: real MindSpore on CPU, small real data."""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import pickle
import re
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from amptool.runtime.device import CPU_ISA, CPU_ISA_ENV

# Helpers the tests import by name (smalldata): this folder on the path, whatever the
# import mode.
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("GLOG_v", "3")
# oneDNN's instruction-set cap, as amptool's commands set it, for the kernels a test runs
# before anything calls ``import_mindspore`` (and for the processes the tests start).
os.environ.setdefault(CPU_ISA_ENV, CPU_ISA)

# Model code the tests name is trusted in a store of the test session's own (shared by
# the xdist workers, which reuse each other's runs, and inherited by the amptool processes
# the tests start), never in the user's.
if "AMPTOOL_TEST_TRUST_STORE" not in os.environ:  # the first process of the session
    _STORE_DIR = tempfile.mkdtemp(prefix="amptool-test-trust-")
    os.environ["AMPTOOL_TEST_TRUST_STORE"] = str(Path(_STORE_DIR) / "trusted.json")
    atexit.register(shutil.rmtree, _STORE_DIR, True)
os.environ["AMPTOOL_TRUST_STORE"] = os.environ["AMPTOOL_TEST_TRUST_STORE"]


def _device_present(name: str) -> bool:
    from amptool.runtime.device import available_devices

    return name in available_devices()


ORDER = ("zoo", "test_fault_matrix.py", "test_docs.py", "train", "export", "parity", "convert",
         "", "core")
"""Folders (and files of tests/ itself; "" for the rest of them) in the order their modules
are handed to the workers: the longest modules (the zoo's networks, the fault matrix and the
documents' examples, over a minute each) first, the quick ones last, so that the workers
finish together (with ``--no-loadscope-reorder``)."""


def _rank(item) -> int:
    parts = item.path.relative_to(Path(__file__).parent).parts
    key = parts[0] if len(parts) > 1 or parts[0] in ORDER else ""
    return ORDER.index(key) if key in ORDER else len(ORDER)


def pytest_collection_modifyitems(config, items):
    for item in items:
        for marker, device in (("ascend", "Ascend"), ("gpu", "GPU")):
            if marker in item.keywords and not _device_present(device):
                item.add_marker(pytest.mark.skip(reason=f"needs a {device} device"))
    items.sort(key=_rank)  # stable: a module's tests keep their order


WORKERS = 3
"""Worker processes of ``-n auto`` (pyproject's addopts) for a whole run on CI's 2-core box:
the third runs while the others wait on the amptool processes, locks and files their tests wait
for (measured side by side: 6:59 against 7:38 with two)."""
FAST_TIER_WORKERS = 2
"""... for the fast tier (``-m "not slow"``), whose tests hardly wait: they take about 12 CPU
seconds, and each worker's start (collecting the suite, importing MindSpore, its runtime's
first use) 4-5 more. Measured in CPU seconds of the whole tier: 16 in this process (one core
busy), 25 on two workers (both busy), 31.5 on three (a third start and no core to run it)."""


ALL_SLOW = re.compile(r"^pytestmark = pytest\.mark\.slow\b", re.MULTILINE)
"""How a test module marks every test of it slow."""


def pytest_ignore_collect(collection_path, config):
    """The fast tier (``-m "not slow"``) does not import a test module whose every test is
    slow: the tier would deselect them all anyway, after paying for the module's imports
    (MindSpore and the networks it defines, 2 s a worker). Its tests still run in the whole
    suite."""
    if " ".join(config.option.markexpr.split()) != "not slow":
        return None
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    return True if ALL_SLOW.search(collection_path.read_text(encoding="utf-8")) else None


def pytest_xdist_auto_num_workers(config):
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # the user's own count, which xdist reads
    fast_tier = " ".join(config.option.markexpr.split()) == "not slow"
    return FAST_TIER_WORKERS if fast_tier else WORKERS


# The planted fp16-unsafe cell of trapmlp stays fp32 in its training (and so export) policy.
POLICIES = {"trapmlp": {"level": "O2", "fp32_cells": ["norm"]}}


class Shared:
    """Things built once per test session and shared by every xdist worker: the first
    worker to ask builds one under a file lock, the others wait for it and read its result."""

    def __init__(self, root: Path):
        self.root = root
        self.memo: dict = {}

    def get(self, key: str, make):
        """``make(folder)``'s (picklable) result; ``folder`` is the thing's own, empty at first."""
        if key not in self.memo:
            folder, result = self.root / key, self.root / f"{key}.pickle"
            with _locked(self.root / f"{key}.lock"):
                if not result.is_file():
                    shutil.rmtree(folder, ignore_errors=True)  # what a failed attempt left
                    folder.mkdir(parents=True)
                    result.write_bytes(pickle.dumps(make(folder)))
                self.memo[key] = pickle.loads(result.read_bytes())
        return self.memo[key]


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def shared(tmp_path_factory) -> Shared:
    """A folder every worker of this session sees (under xdist each worker's base
    temporary folder sits in the session's own; alone, the process's own folder)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    root = base / "shared"
    root.mkdir(exist_ok=True)
    return Shared(root)


def train_shared(shared: Shared, key: str, policy: dict | None = None, **config):
    """(run folder, TrainSummary) of ``TrainConfig(**config)``, trained once per session;
    ``policy``, if given, is written to a policy file the run is given."""
    def make(out: Path):
        from amptool.train.config import TrainConfig
        from amptool.train.run import run_training

        if policy is not None:
            path = shared.root / f"train-{key}.policy.json"
            path.write_text(json.dumps(policy))
            config["policy"] = str(path)
        return out, run_training(TrainConfig(out=str(out), **config))

    return shared.get(f"train-{key}", make)


@pytest.fixture(scope="session")
def trained(shared):
    """``trained(key, **TrainConfig fields) -> (run folder, summary)``, once per session."""
    return lambda key, **config: train_shared(shared, key, **config)


class Runs:
    """Trains each sample model once (1 epoch) on demand."""

    def __init__(self, shared: Shared):
        self.shared = shared
        self.summaries: dict = {}

    def get(self, name: str) -> Path:
        if name == "simplecnn":  # the default configuration, which convert and parity train
            return quickstart_training(self.shared)
        if name in DOC_TRAINED:
            out, self.summaries[name] = doc_training(self.shared, name)
            return out
        rows, batch = SUBSET_MODELS.get(name, (0, 64))
        extra = {"data": f"npz:{digits_subset(self.shared, rows)}"} if rows else {}
        out, self.summaries[name] = train_shared(self.shared, f"sample-{name}", model=name,
                                                 policy=POLICIES.get(name), epochs=1,
                                                 batch_size=batch, lr=0.003, **extra)
        return out


DOC_TRAINED = {"transformer": "runs/transformer"}
"""Sample models whose shared run is a docs example's training (``DOC_RUNS[name]``,
tests/docruns.py, which the docs' tests run anyway): name -> its ``--out``. The transformer's
(``--data digits:512``, 12 steps of 32) shows that it learns as the 720-row subset's would."""


def doc_training(shared: Shared, name: str) -> tuple:
    """(run folder, TrainSummary) of the docs' ``DOC_RUNS[name]`` training, copied once a
    session into a folder of its own, so that no test reads the folder the docs test copies."""
    def make(folder: Path) -> tuple:
        from docruns import DOC_RUNS, cli_run

        from amptool.train.summary import TrainSummary

        run = cli_run(shared, DOC_RUNS[name])
        assert run.exit_code == 0, f"{DOC_RUNS[name]}\n{run.output[-3000:]}"
        shutil.copytree(run.cwd / DOC_TRAINED[name], folder / "run")
        info = json.loads((folder / "run" / "run.json").read_text())
        return folder / "run", TrainSummary.from_dict(info["summary"])

    return shared.get(f"train-doc-{name}", make)


def quickstart_training(shared: Shared) -> Path:
    """The default configuration's one-epoch run (simplecnn, O2, the whole digits): the train
    stage of the README's quickstart pipeline (``amptool run --epochs 1``, tests/docruns.py),
    which the docs' tests run anyway, copied once a session into a folder of its own (its
    run.json checked to record the settings ``amptool train --epochs 1`` gives, as
    ``copy_shared_training`` checks a docs example's), so that no test reads the folder the
    pipeline's readers read, and the suite trains that configuration once."""
    def make(folder: Path) -> Path:
        from docruns import copy_shared_training

        copy_shared_training(shared, "amptool train --epochs 1", folder, "the simplecnn run")
        return folder / "runs" / "train"

    return shared.get("train-simplecnn-quickstart", make)


TRAP_TRAINING = "amptool train --model trapmlp --amp-level O0 --epochs 1 --out runs/trap"
"""The planted-fault sample trained in fp32 (docs/guides/fp16-trouble.md), which the docs'
planted-fault pipeline (``DOC_RUNS["trap"]``, tests/docruns.py) trains in its train stage."""


def trap_training(shared: Shared) -> Path:
    """trapmlp trained in fp32 (O0, one epoch of the whole digits): healthy in fp32, its
    cell ``norm`` overflows fp16. The train stage of the docs' planted-fault pipeline, which
    the docs' tests run anyway, copied once a session into a folder of its own (its run.json
    checked to record the settings of ``TRAP_TRAINING``), for the convert and parity tests."""
    def make(folder: Path) -> Path:
        from docruns import copy_shared_training, train_settings

        copy_shared_training(shared, TRAP_TRAINING, folder, "the trapmlp fp32 run")
        return folder / train_settings(TRAP_TRAINING)[1]

    return shared.get("train-trapmlp-O0-trap", make)


def digits_subset(shared: Shared, rows: int = 0) -> Path:
    """The first ``rows`` (default SUBSET_ROWS) rows of the bundled digits as an npz (images
    scaled to [0, 1] as the bundled source scales them), written once a session."""
    rows = rows or SUBSET_ROWS

    def make(path: Path) -> Path:
        from importlib import resources

        import numpy as np

        with resources.as_file(resources.files("amptool.samples") / "data"
                               / "digits.npz") as src:
            digits = np.load(src)
            np.savez(path / "digits.npz", y=digits["y"][:rows],
                     x=digits["x"][:rows].astype(np.float32) / 16.0)
        return path / "digits.npz"

    return shared.get(f"digits-subset-{rows}", make)


SUBSET_ROWS = 720
"""Rows of the digits subset that runs which need no accuracy train on (18 steps of 32, or 9
of 64, at the 0.2 held-out split): the same path as the whole set (45 steps an epoch) at less
than half the cost, since the steps, not the compilation, take most of a run's time."""
SUBSET_MODELS = {"resnet": (160, 32), "lenet5": (SUBSET_ROWS, 64)}
"""Sample models whose shared run trains on fewer digits: (rows, batch size). The residual
sample takes about 1.7 s a step of 64 on this backend; 4 steps of 32 show that it learns (its
loss 2.4 -> 2.0 with seeds 0, 1 and 2). LeNet-5's 9 steps show it as well as the whole set's
23 (its accuracy is checked nowhere); the transformer's run is a docs example's (DOC_TRAINED)."""


@pytest.fixture(scope="session")
def trap_fp32_run(shared) -> Path:
    """The session's fp32 trapmlp run (``trap_training``)."""
    return trap_training(shared)


@pytest.fixture(scope="session")
def few_digits(shared) -> str:
    """The digits subset as a ``--data`` value (``npz:PATH``)."""
    return f"npz:{digits_subset(shared)}"


TINY_ROWS = 160
"""Rows of the digits subset (``tiny_digits``) that runs which need neither accuracy nor many
steps train on: 4 steps of 32 an epoch at the 0.2 held-out split."""


@pytest.fixture(scope="session")
def digits_rows(shared, few_digits):
    """``digits_rows(rows) -> --data value``: the first ``rows`` rows of the ``few_digits``
    subset as an npz, written once a session."""
    def get(rows: int) -> str:
        def make(folder: Path) -> Path:
            import numpy as np

            with np.load(few_digits.split(":", 1)[1]) as digits:
                np.savez(folder / "digits.npz", x=digits["x"][:rows], y=digits["y"][:rows])
            return folder / "digits.npz"

        return f"npz:{shared.get(f'digits-rows-{rows}', make)}"

    return get


@pytest.fixture(scope="session")
def tiny_digits(digits_rows) -> str:
    """The first TINY_ROWS rows of the ``few_digits`` subset as a ``--data`` value."""
    return digits_rows(TINY_ROWS)


@pytest.fixture(scope="session")
def sample_runs(shared) -> Runs:
    """One short training run per sample model, shared by every test that needs one."""
    return Runs(shared)


@pytest.fixture(scope="session")
def simplecnn_export(sample_runs, shared) -> dict:
    """(format, precision) -> path: the simplecnn run exported to MINDIR (and ONNX where
    onnx is installed) in fp32 and fp16, fixed batch, all in one folder."""
    def make(out: Path) -> dict:
        from amptool.artefact import onnx_installed
        from amptool.export.api import ExportConfig, export

        formats = ("MINDIR", "ONNX") if onnx_installed() else ("MINDIR",)
        results = export(ExportConfig(run=str(sample_runs.get("simplecnn")),
                                            formats=formats, out=str(out)))
        return {(r.format, r.precision): r.path for r in results}

    return shared.get("export-simplecnn-fixed", make)


@pytest.fixture(scope="session")
def doc_run(shared):
    """``doc_run(name) -> CliRun`` of the README's ``DOC_RUNS[name]``, once per session."""
    from docruns import DOC_RUNS, cli_run

    def get(name: str):
        run = cli_run(shared, DOC_RUNS[name])
        assert run.exit_code == 0, f"{DOC_RUNS[name]}\n{run.output[-3000:]}"
        return run

    return get


# -- every document written is held to its published schema ------------------------------

WRITTEN: Counter = Counter()
"""Documents this process wrote (or printed with --json), by kind, each checked as written."""
EVERY_KIND_AT_LEAST = 1
"""A whole run of the suite writes each kind of document at least this often: a check that
validated none of a kind proves nothing about it."""


def _held_to_schema(write_json):
    """``Door.json`` that also checks what it gives against the committed schema (the
    ``jsonschema`` library): a writer that writes what its schema does not say fails the
    test that made it write."""
    def checked(door, doc):
        from schemas import problems

        data = write_json(door, doc)
        kind = door.schema.replace(".schema.json", "")
        found = problems(data, kind)
        assert not found, f"amptool wrote a {door.what} its published schema refuses: {found[:5]}"
        WRITTEN[kind] += 1
        return data

    checked.unchecked = write_json
    return checked


def pytest_configure(config):
    from amptool.documents.door import Door

    if not hasattr(Door.json, "unchecked"):
        Door.json = _held_to_schema(Door.json)


def _tally_file(config) -> Path:
    base = config._tmp_path_factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return (base.parent if worker else base) / f"documents-{worker or 'main'}.json"


def pytest_sessionfinish(session):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker leaves its tally for the controller
        _tally_file(session.config).write_text(json.dumps(WRITTEN))
        return
    tally = Counter(WRITTEN)
    for path in _tally_file(session.config).parent.glob("documents-gw*.json"):
        tally.update(json.loads(path.read_text()))
    session.config.stash[_TALLY] = tally
    from schemas import KINDS

    short = [k for k in KINDS if tally[k] < EVERY_KIND_AT_LEAST]
    if _whole_suite(session.config) and short and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        session.config.stash[_SHORT] = short


_TALLY = pytest.StashKey[Counter]()
_SHORT = pytest.StashKey[list]()


def _whole_suite(config) -> bool:
    """Whether this run is the whole suite (no test left out by name, mark, file or
    earlier failures)."""
    opt = config.option
    return (not opt.keyword and not opt.markexpr and not getattr(opt, "lf", False)
            and not getattr(opt, "deselect", None)
            and [Path(a).resolve() for a in config.args] in ([], [Path(__file__).parent]))


def pytest_terminal_summary(terminalreporter, config):
    tally = config.stash.get(_TALLY, None)
    if tally is None:
        return
    terminalreporter.write_line("documents written and held to their published schemas: " + (
        ", ".join(f"{k} {n}" for k, n in sorted(tally.items())) or "none"))
    short = config.stash.get(_SHORT, None)
    if short:
        terminalreporter.write_line(f"FAILED: the whole suite wrote no {', '.join(short)} "
                                    "document: their schemas were not checked", red=True)


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    """What a worker holds when a module starts (MindSpore, the zoo's packages, the session's
    shared runs) is moved out of the collector's sight (``gc.freeze``), once collected.
    MindSpore runs a full ``gc.collect()`` before every graph it compiles; in a worker that
    has imported the whole stack each took 0.1-0.2 s: 186 of the suite's 870 CPU seconds."""
    import gc

    gc.collect()
    gc.freeze()
