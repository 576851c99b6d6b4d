"""Parity sharded across msrun's processes: the same report as one process, a rank that
dies fails the gate in one line with nothing half-written, mistakes refused before launch."""
from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
from typer.testing import CliRunner

from amptool.cli import app
from amptool.errors import UsageError
from amptool.parity.shard import rank_batch_size, shard_spans

STREAMED = '''
import os
import numpy as np


def top1(outputs, labels):
    return float(np.mean(np.argmax(outputs[0], 1) == labels))


def _update(state, outputs, labels):
    if os.environ.get("AMPTOOL_TEST_DIE_ON_RANK") == os.environ.get("RANK_ID", "none"):
        os._exit(7)
    return state[0] + int((np.argmax(outputs[0], 1) == labels).sum()), state[1] + len(labels)


top1.init = lambda: (0, 0)
top1.update = _update
top1.merge = lambda a, b: (a[0] + b[0], a[1] + b[1])
top1.result = lambda s: s[0] / s[1]


def whole(outputs, labels):
    return float(np.mean(np.argmax(outputs[0], 1) == labels))
'''


def test_shards_are_contiguous_on_batch_boundaries():
    assert shard_spans(300, 64, 2) == [(0, 128), (128, 300)]
    assert shard_spans(300, 64, 3) == [(0, 64), (64, 192), (192, 300)]
    with pytest.raises(UsageError, match="300 samples make 1 batch"):
        shard_spans(300, 512, 2)


def test_batches_shrink_until_every_rank_has_one():
    """The bundled digits' 359 held-out samples at parity's default batch of 512 are one
    batch: two ranks get one of 180 rows each; enough batches stay as they are."""
    assert rank_batch_size(359, 512, 2) == 180
    assert shard_spans(359, 180, 2) == [(0, 180), (180, 359)]
    assert rank_batch_size(359, 512, 3) == 120 and rank_batch_size(300, 64, 2) == 64
    assert rank_batch_size(2, 512, 2) == 1
    with pytest.raises(UsageError, match="1 samples are fewer than the 2 processes"):
        rank_batch_size(1, 512, 2)


@pytest.fixture(scope="module")
def metric(tmp_path_factory):
    path = tmp_path_factory.mktemp("metric") / "top1.py"
    path.write_text(STREAMED)
    (path.parent / "batches.toml").write_text("batch_size = 64\n")
    return path


def _parity(simplecnn, metric, *extra) -> tuple:
    args = ["parity", simplecnn["mindir_fp32"], simplecnn["mindir_fp16"], "--samples", "300",
            "--config", str(metric.parent / "batches.toml"), "--metric", f"{metric}:top1", *extra]
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.stderr.strip()


def _ours() -> set:
    """The shard and log folders of sharded checks in the temporary folder."""
    tmp = Path(tempfile.gettempdir())
    return set(tmp.glob("amptool-parity-shards-*")) | set(tmp.glob("amptool-parity-logs-*"))


@contextlib.contextmanager
def private_temp(folder: Path) -> Iterator[Path]:
    """This process's temporary folder (and its msrun workers') set to ``folder``, so the
    shard and log folders counted are this test's alone, whatever other tests run beside."""
    folder.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(folder))
        patch.setattr(tempfile, "tempdir", str(folder))
        yield folder


slow = pytest.mark.slow


@pytest.fixture(scope="module")
def one_and_two(simplecnn, metric, tmp_path_factory) -> Path:
    """A folder holding the one-process and the 2-worker parity of the same inputs: each
    one's report (one.json, two.json) and stored reference outputs (one.npz, two.npz)."""
    folder = tmp_path_factory.mktemp("sharded")
    with private_temp(folder / "tmp"):
        before = _ours()
        code_one, _ = _parity(simplecnn, metric, "--json-out", str(folder / "one.json"),
                              "--save-outputs", str(folder / "one.npz"))
        code_two, err = _parity(simplecnn, metric, "--workers", "2",
                                "--json-out", str(folder / "two.json"),
                                "--save-outputs", str(folder / "two.npz"))
        assert code_one == code_two and code_two in (0, 1), err
        assert _ours() == before  # the shards' states and the logs removed
    return folder


def _same_reports(folder: Path, one: str, two: str) -> dict:
    one_report, two_report = (json.loads((folder / n).read_text()) for n in (one, two))
    assert sorted(one_report) == sorted(two_report)
    for key in one_report:
        if key not in ("seconds", "golden_saved"):  # the time, the file each one named
            assert one_report[key] == two_report[key], key
    return one_report


@slow
def test_two_workers_make_the_one_process_report(one_and_two):
    one = _same_reports(one_and_two, "one.json", "two.json")
    assert one["inputs"]["samples"] == 300 and one["candidates"][0]["task"] is not None


@slow
def test_two_workers_store_the_one_process_outputs_and_compare_against_them(
        one_and_two, simplecnn, metric):
    """--save-outputs: the file the ranks' shards make holds what one process stores, array
    for array; --load-outputs: two workers against it give one process's report."""
    import numpy as np

    with np.load(one_and_two / "one.npz") as one, np.load(one_and_two / "two.npz") as two:
        assert sorted(one.files) == sorted(two.files) and "output_0" in one.files
        for name in one.files:
            assert np.array_equal(one[name], two[name]), name
    candidate = simplecnn["mindir_fp16"]
    for name, workers in (("one-loaded.json", ()), ("two-loaded.json", ("--workers", "2"))):
        args = ["parity", candidate, "--load-outputs", str(one_and_two / "two.npz"),
                "--config", str(metric.parent / "batches.toml"), "--metric", f"{metric}:top1",
                *workers, "--json-out", str(one_and_two / name)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code in (0, 1), result.stderr
    loaded = _same_reports(one_and_two, "one-loaded.json", "two-loaded.json")
    computed = json.loads((one_and_two / "one.json").read_text())
    assert loaded["candidates"] == computed["candidates"]


@slow
def test_a_rank_that_dies_fails_the_gate_in_one_line(simplecnn, metric, tmp_path, monkeypatch):
    import psutil

    monkeypatch.setenv("AMPTOOL_TEST_DIE_ON_RANK", "1")
    with private_temp(tmp_path / "tmp") as tmp:
        before = set(tmp.glob("amptool-parity-shards-*"))
        code, err = _parity(simplecnn, metric, "--workers", "2",
                            "--json-out", str(tmp_path / "r.json"))
        assert code == 1 and "\n" not in err and "Traceback" not in err, err
        assert "rank 1 of 2 exited with code 7" in err and "worker_1.log" in err
        assert not (tmp_path / "r.json").exists() and not (tmp_path / "r.html").exists()
        assert set(tmp.glob("amptool-parity-shards-*")) == before
    logs = Path(err.split("(log: ")[1].split(")")[0]).parent
    pids = json.loads((logs / "launch.json").read_text())["pids"]
    assert not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


@slow
def test_what_sharding_cannot_run_is_refused_before_launch(simplecnn, metric):
    code, err = _parity(simplecnn, metric, "--workers", "64")
    assert code == 2 and "--workers 64 is more than this host's" in err and "\n" not in err
    args = ["parity", simplecnn["mindir_fp32"], simplecnn["mindir_fp16"], "--workers", "2",
            "--metric", f"{metric}:whole"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "\n" not in result.stderr.strip()
    assert "is computed on every output at once" in result.stderr
    assert "init/update/merge/result" in result.stderr


class _Handed(Exception):
    """Raised by the stand-in parity with the config the pipeline handed it."""


def test_run_hands_its_workers_to_the_parity_step(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from amptool import pipeline

    def parity(cfg):
        raise _Handed(cfg)

    monkeypatch.setattr(pipeline, "run_training", lambda cfg, on_event=None: None)
    monkeypatch.setattr(pipeline, "export_artefacts", lambda *args: ([], []))
    monkeypatch.setattr(pipeline, "order_artefacts", lambda results: (
        SimpleNamespace(path="ref.mindir"), [SimpleNamespace(path="cand.mindir")]))
    monkeypatch.setattr(pipeline, "parity", parity)
    cfg = pipeline.PipelineConfig.from_file(None, workers=2, out=str(tmp_path / "p"))
    with pytest.raises(_Handed) as handed:
        pipeline.run_pipeline(cfg)
    assert handed.value.args[0].workers == 2 and handed.value.args[0].sharded
    result = CliRunner().invoke(app, ["run", "--workers", "0", "--out", str(tmp_path / "q")])
    assert result.exit_code == 2 and "workers must be a whole number >= 1" in result.stderr


@slow
def test_run_with_two_workers_on_the_default_data(tmp_path):
    """``amptool run --workers 2`` on the bundled digits (359 held-out samples, fewer than
    one batch of parity's 512): each msrun rank compares a batch of its own, and the report
    is the one a single process makes of the same artefacts."""
    out = tmp_path / "p"
    result = CliRunner().invoke(app, ["run", "--epochs", "1", "--workers", "2", "--onnx", "off",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "parity PASSED on 359 samples" in result.stdout
    one = CliRunner().invoke(app, ["parity", str(out / "export" / "simplecnn_fp32.mindir"),
                                   str(out / "export" / "simplecnn_fp16.mindir"),
                                   "--json-out", str(out / "one.json")])
    assert one.exit_code == 0, one.output
    _same_reports(out, "one.json", "parity.json")


@slow
def test_two_hosts_make_the_one_process_report(simplecnn, metric, tmp_path, monkeypatch):
    """Two nodes of one worker each, both on this host, from one folder."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("", 0))
        port = str(s.getsockname()[1])
    monkeypatch.chdir(tmp_path)
    args = [simplecnn["mindir_fp32"], simplecnn["mindir_fp16"], "--samples", "300", "--config",
            str(metric.parent / "batches.toml"), "--nodes", "2", "--master-port", port]
    node1 = subprocess.Popen([sys.executable, "-m", "amptool", "parity", *args,
                              "--node-rank", "1"], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    node0 = CliRunner().invoke(app, ["parity", *args, "--node-rank", "0",
                                     "--json-out", str(tmp_path / "two.json")])
    out1, err1 = node1.communicate(timeout=300)
    assert node0.exit_code in (0, 1) and node1.returncode == 0, (node0.stderr, err1)
    assert "node 1: its 1 rank(s) compared their shards" in out1
    one = CliRunner().invoke(app, ["parity", *args[:6], "--json-out", str(tmp_path / "one.json")])
    assert one.exit_code == node0.exit_code
    one, two = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("one", "two"))
    assert {k: v for k, v in one.items() if k != "seconds"} == {
        k: v for k, v in two.items() if k != "seconds"}
    assert not list(tmp_path.glob(".amptool-parity-shards-*"))
