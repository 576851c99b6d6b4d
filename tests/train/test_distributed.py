"""Data-parallel training through msrun on CPU, two workers, real MindSpore.

One 2-worker run (planted: two images that overflow fp16 sit in rank 1's shard only)
is checked for bit-identical weights, an agreed overflow skip and the trajectory of a
single process with the same global batch. Three failures are planted: a worker that
crashes after the first checkpoint, one that never starts, a port already taken.
"""
from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from amptool.cli import app
from amptool.errors import UsageError, WorkerFailed
from amptool.runtime.msjob import python_shim
from amptool.train.config import TrainConfig
from amptool.train.launch import Layout, launch_workers, msrun_command

pytestmark = pytest.mark.slow  # trains or exports real networks

BATCH = 32
PLANTED_STEPS = (2, 5)  # 0-based steps whose rank-1 batch holds an fp16-overflowing image

GAIN_MODEL = '''
from mindspore import nn, ops
from amptool.network.models import sample_spec


class Planted(nn.Cell):
    """simplecnn behind a gain that is exactly 1 for real digits and overflows fp16
    for an all-white image (its standardized mean is ~1.8, real digits stay below 0.4)."""

    def __init__(self):
        super().__init__()
        self.body = sample_spec("simplecnn").build()

    def construct(self, x):
        excess = ops.relu(x.mean(axis=(1, 2, 3), keep_dims=True) - 1.0) * 1000.0
        return self.body(x * (1.0 + excess * excess * excess))  # every constant fits fp16


def build():
    return Planted()


build.input_shape = (1, 28, 28)
build.num_classes = 10
'''

CRASH_MODEL = '''
import os, threading, time
from pathlib import Path
from amptool.network.models import sample_spec

OUT = Path({out!r})


def _die_after_first_checkpoint():
    while not (OUT / "last.ckpt").exists():
        time.sleep(0.02)
    os._exit(7)


def build():
    if os.environ.get("RANK_ID") == "1" and os.environ.get("MS_ROLE") == "MS_WORKER":
        threading.Thread(target=_die_after_first_checkpoint, daemon=True).start()
    return sample_spec("simplecnn").build()


build.input_shape = (1, 28, 28)
build.num_classes = 10
'''

HANG_MODEL = '''
import os, time
if os.environ.get("RANK_ID") == "1" and os.environ.get("MS_ROLE") == "MS_WORKER":
    time.sleep(3600)
from amptool.network.models import sample_spec


def build():
    return sample_spec("simplecnn").build()


build.input_shape = (1, 28, 28)
build.num_classes = 10
'''


def _planted_digits(path: Path) -> None:
    """The bundled digits with all-white images at rank 1's first slot of PLANTED_STEPS."""
    from importlib import resources

    from amptool.data.dataset import split_indices

    with resources.as_file(resources.files("amptool.samples") / "data" / "digits.npz") as p:
        with np.load(p) as z:
            x, y = z["x"].astype(np.float32) / 16.0, z["y"].astype(np.int32)
    train_idx, _ = split_indices(len(x), 0.2)
    order = np.random.RandomState(0).permutation(len(train_idx))  # seed 0, epoch 0
    for step in PLANTED_STEPS:
        x[train_idx[order[(step * 2 + 1) * BATCH]]] = 1.0
    np.savez(path, x=x, y=y)


def _records(out: Path) -> list:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _steps(out: Path) -> list:
    return [r for r in _records(out) if "loss" in r]


def _rank_states(out: Path) -> list:
    return [json.loads((out / "logs" / f"rank_{r}.json").read_text()) for r in (0, 1)]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    base = tmp_path_factory.mktemp("dp")
    model = base / "planted.py"
    model.write_text(GAIN_MODEL)
    data = base / "digits.npz"
    _planted_digits(data)
    return base, f"{model}:build", f"npz:{data}"


@pytest.fixture(scope="module")
def two_workers(planted):
    base, model, data = planted
    out = base / "two"
    result = CliRunner().invoke(app, ["train", "--workers", "2", "--epochs", "1", "--model", model,
                                      "--data", data, "--batch-size", str(BATCH), "--out", str(out),
                                      "--log-every", "1", "--json"])
    assert result.exit_code == 0, result.stderr
    return out, json.loads(result.stdout)


@pytest.fixture(scope="module")
def one_process(planted):
    from amptool.train.run import run_training

    base, model, data = planted
    out = base / "one"
    summary = run_training(TrainConfig(model=model, data=data, epochs=1, batch_size=2 * BATCH,
                                       log_every=1, out=str(out)))
    return out, summary


def test_two_workers_end_bit_identical(two_workers):
    out, summary = two_workers
    states = _rank_states(out)
    assert [s["phase"] for s in states] == ["done", "done"]
    assert states[0]["summary"]["weights_sha256"] == states[1]["summary"]["weights_sha256"]
    assert summary["ranks_identical"] is True
    assert summary["workers"] == 2 and summary["global_batch"] == 2 * BATCH
    assert summary["samples_per_s"] > 0
    assert (out / "logs" / "worker_0.log").is_file() and (out / "logs" / "worker_1.log").is_file()
    run = json.loads((out / "run.json").read_text())
    assert run["workers"] == 2 and run["summary"]["weights_sha256"] == summary["weights_sha256"]
    # one writer: exactly one record per global step plus the epoch line
    assert len(_records(out)) == summary["steps"] + 1 == 1438 // (2 * BATCH) + 1


def test_the_lead_ranks_events_read_back_typed(two_workers):
    """Every ``amptool-event`` line rank 0 logged reads back as the typed event the launcher
    hands ``on_event``: the start, each logged step (its metrics.jsonl line), the epoch, the
    end with the run's summary."""
    from amptool.documents.events import Epoch, Step, TrainEnd, TrainStart, read_event

    out, summary = two_workers
    lines = (out / "logs" / "worker_0.log").read_text().splitlines()
    events = [read_event(json.loads(line.partition("amptool-event ")[2]))
              for line in lines if line.startswith("amptool-event ")]
    assert [type(e) for e in events] == [TrainStart] + [Step] * summary["steps"] \
        + [Epoch, TrainEnd]
    assert [e.record() for e in events if isinstance(e, Step)] == _steps(out)
    assert events[-1].summary.weights_sha256 == summary["weights_sha256"]


def test_overflow_on_one_rank_skips_the_step_on_all(two_workers):
    out, summary = two_workers
    steps = _steps(out)  # written by rank 0, whose own shard never overflows
    assert [r["step"] for r in steps if r["overflow"]] == [s + 1 for s in PLANTED_STEPS]
    assert summary["overflow_steps"] == len(PLANTED_STEPS)
    scales = {s["summary"]["loss_scale"] for s in _rank_states(out)}
    assert scales == {65536.0 / 2 ** len(PLANTED_STEPS)}


def test_loss_trajectory_matches_one_process_with_the_global_batch(two_workers, one_process):
    two, one = _steps(two_workers[0]), _steps(one_process[0])
    assert len(two) == len(one)
    assert [r["overflow"] for r in two] == [r["overflow"] for r in one]
    assert [r["loss_scale"] for r in two] == [r["loss_scale"] for r in one]
    a = np.array([r["loss"] for r in two if not r["overflow"]])
    b = np.array([r["loss"] for r in one if not r["overflow"]])
    # fp16 rounding: two half batches averaged vs one whole batch, carried on by Adam;
    # measured 1.3e-4 of the largest loss, bound ~10 fp16 roundings (docs/guides/distributed.md)
    assert np.all(np.isfinite(a)) and np.abs(a - b).max() < 5e-3 * max(1.0, np.abs(b).max())
    assert a[-1] < 0.5 * a[0]
    assert abs(two_workers[1]["val_acc"] - one_process[1].val_acc) <= 0.02


def test_a_crashing_worker_stops_the_job_and_keeps_the_checkpoint(tmp_path, left_alive,
                                                                  few_digits):
    out = tmp_path / "crash"
    model = tmp_path / "crash.py"
    model.write_text(CRASH_MODEL.format(out=str(out)))
    result = CliRunner().invoke(app, ["train", "--workers", "2", "--epochs", "3", "--model",
                                      f"{model}:build", "--data", few_digits, "--out", str(out),
                                      "-q"])
    assert result.exit_code == 1
    message = result.stderr.strip()
    assert "\n" not in message and "Traceback" not in message
    assert "rank 1 of 2 exited with code 7" in message
    assert str(out / "logs" / "worker_1.log") in message
    assert f"last good checkpoint kept: {out / 'last.ckpt'}" in message
    from amptool.network.checkpoint import meta_of, read_checkpoint

    assert meta_of(read_checkpoint(out / "last.ckpt"))["epoch"] >= 1
    assert not list(out.glob(".amptool-tmp-*"))
    assert left_alive(out / "logs") == []


def test_a_worker_that_never_starts_times_out(tmp_path, left_alive):
    out = tmp_path / "hang"
    model = tmp_path / "hang.py"
    model.write_text(HANG_MODEL)
    cfg = TrainConfig(model=f"{model}:build", epochs=1, workers=2, out=str(out))
    with pytest.raises(WorkerFailed) as err:
        launch_workers(cfg, start_timeout=20)
    assert err.value.exit_code == 1
    assert "rank 1 of 2 did not start within 20 s" in str(err.value)
    assert str(out / "logs" / "worker_1.log") in str(err.value)
    assert "no checkpoint had been written yet" in str(err.value)
    assert left_alive(out / "logs") == []


def test_a_ranks_own_error_keeps_its_class_and_exit_code(tmp_path, left_alive):
    out = tmp_path / "usage"
    result = CliRunner().invoke(app, ["train", "--workers", "2", "--batch-size", "1000",
                                      "--out", str(out), "-q"])
    assert result.exit_code == 2
    assert "exceeds the 1438 training samples; lower --batch-size" in result.stderr
    assert result.stderr.startswith("amptool: error: rank ") and result.stderr.count("\n") == 1
    assert left_alive(out / "logs") == []


def test_a_port_in_use_fails_before_launching(tmp_path):
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(app, ["train", "--workers", "2", "--master-port", str(port),
                                          "--out", str(tmp_path / "port")])
    assert result.exit_code == 1
    assert f"master port {port} is already in use" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("args, text", [
    (["--nodes", "2", "--node-rank", "2"], "node rank must be in 0..1"),
    (["--master-port", "80"], "master port must be 0 or in 1024..65535"),
    (["--nodes", "2"], "several nodes need one --master-port"),
    (["--workers", "0", "--nodes", "2"], "workers must be >= 1"),
    (["--resume"], "no checkpoint last.ckpt"),
])
def test_layout_mistakes_are_usage_errors(tmp_path, args, text):
    result = CliRunner().invoke(app, ["train", "--workers", "2", "--out", str(tmp_path)] + args)
    assert result.exit_code == 2 and text in result.stderr
    assert not (tmp_path / "logs").exists()


def test_msrun_command_for_the_second_of_two_hosts(tmp_path):
    layout = Layout(workers=2, nodes=2, node_rank=1, master_addr="10.0.0.1", master_port=8118)
    assert layout.world == 4 and layout.local_ranks == [2, 3]
    cmd = msrun_command(layout, tmp_path, tmp_path / "config.json", 60)
    for flag in ("--worker_num=4", "--local_worker_num=2", "--node_rank=1",
                 "--master_addr=10.0.0.1", "--master_port=8118", "--join=True"):
        assert flag in cmd
    assert cmd[-4:] == ["python", "-m", "amptool.train.worker", str(tmp_path / "config.json")]


def test_the_python_msrun_finds_is_this_interpreter(tmp_path):
    import sys

    shim = python_shim(tmp_path)
    found = subprocess.run(["sh", "-c", "python -c 'import sys; print(sys.prefix)'"],
                           env={"PATH": f"{shim}:/usr/bin:/bin"}, capture_output=True, text=True)
    assert found.stdout.strip() == sys.prefix


def test_launch_refuses_a_bad_layout_without_starting_anything(tmp_path):
    with pytest.raises(UsageError):
        launch_workers(TrainConfig(workers=2, out=str(tmp_path)), nodes=1, node_rank=1)
