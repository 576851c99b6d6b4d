"""Two hosts of a data-parallel job played on this one machine, real MindSpore on CPU.

Two ``amptool train`` processes are started side by side as node 0 and node 1 of a
2-node job (one worker each, same --master-addr/--master-port), each with its own --out
as on two real hosts. Then node 1 is started alone and must give up at its start-up
limit with a clear message instead of waiting for a node 0 that never comes, and, stopped
by SIGTERM or Ctrl+C while it waits, end with exit 130 and nothing left running.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow  # trains or exports real networks

SMALL = ["--epochs", "1", "--batch-size", "64", "--workers", "1", "--nodes", "2",
         "--master-addr", "127.0.0.1", "--json"]
START_LIMIT_S = 15  # node 1 alone: how long it waits for a node 0 that never comes
JOIN_LIMIT_S = 120  # the real 2-node job: both on 2 shared cores, generous but bounded
RUN_LIMIT_S = 300


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _amptool(*args) -> subprocess.Popen:
    """``amptool`` run as its own process, the way a user on each host runs it."""
    return subprocess.Popen([sys.executable, "-m", "amptool", "train", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, env=dict(os.environ, COLUMNS="200"),
                            start_new_session=True)


def _finish(proc: subprocess.Popen, limit: float):
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.terminate()  # amptool stops its msrun job on SIGTERM; SIGKILL would orphan it
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        pytest.fail(f"amptool train did not end within {limit} s:\n{out}\n{err}")
    return proc.returncode, out, err


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    base = tmp_path_factory.mktemp("nodes")
    port = str(_free_port())
    outs = [base / "host0", base / "host1"]
    procs = [_amptool(*SMALL, "--node-rank", str(k), "--master-port", port,
                      "--start-timeout", str(JOIN_LIMIT_S), "--out", str(out))
             for k, out in enumerate(outs)]
    results = [_finish(p, RUN_LIMIT_S) for p in procs]
    return outs, results


def test_both_nodes_finish_and_agree_bit_for_bit(two_nodes):
    outs, results = two_nodes
    for rc, out, err in results:
        assert rc == 0, err
    summaries = [json.loads(out) for _, out, _ in results]
    for s in summaries:
        assert s["workers"] == 2 and s["nodes"] == 2 and s["global_batch"] == 128
        assert s["steps"] == 1438 // 128 and s["ranks_identical"] is True
    states = [json.loads((out / "logs" / f"rank_{k}.json").read_text())
              for k, out in enumerate(outs)]
    assert [s["phase"] for s in states] == ["done", "done"]
    assert [s["world"] for s in states] == [2, 2]
    digests = {s["summary"]["weights_sha256"] for s in states}
    digests |= {s["weights_sha256"] for s in summaries}
    assert len(digests) == 1 and None not in digests


def test_node_0_writes_the_run_and_each_node_its_own_logs(two_nodes, left_alive):
    (host0, host1), results = two_nodes
    summary = json.loads(results[0][1])
    run = json.loads((host0 / "run.json").read_text())
    assert run["workers"] == 2
    assert run["summary"]["weights_sha256"] == summary["weights_sha256"]
    records = [json.loads(line) for line in (host0 / "metrics.jsonl").read_text().splitlines()]
    logged = [r["step"] for r in records if "loss" in r]  # the first, every 10th, the last
    assert logged == [1, 10, summary["steps"]] and len(records) == len(logged) + 1
    from amptool.network.checkpoint import meta_of, read_checkpoint

    assert meta_of(read_checkpoint(host0 / "last.ckpt"))["epoch"] == 1
    assert (host0 / "best.ckpt").is_file() and (host0 / "report.html").is_file()
    # node 1 writes no checkpoint, metrics, run.json or report: only its own workers' logs
    assert [p.name for p in host1.iterdir()] == ["logs"]
    assert (host0 / "logs" / "worker_0.log").is_file()
    assert (host1 / "logs" / "worker_1.log").is_file()
    assert not (host0 / "logs" / "worker_1.log").exists()
    assert not (host1 / "logs" / "worker_0.log").exists()
    assert (host0 / "logs" / "scheduler.json").is_file()  # the scheduler served on node 0
    assert not (host1 / "logs" / "scheduler.json").exists()
    assert "amptool-event " in (host1 / "logs" / "worker_1.log").read_text()
    assert left_alive(host0 / "logs") == [] and left_alive(host1 / "logs") == []


def test_node_1_alone_gives_up_at_its_start_limit(tmp_path, left_alive):
    out = tmp_path / "alone"
    t0 = time.monotonic()
    proc = _amptool(*SMALL, "--node-rank", "1", "--master-port", str(_free_port()),
                    "--start-timeout", str(START_LIMIT_S), "--out", str(out))
    rc, stdout, stderr = _finish(proc, START_LIMIT_S + 120)
    elapsed = time.monotonic() - t0
    assert rc == 1, stderr
    message = stderr.strip()
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith(f"amptool: error: the cluster did not form within {START_LIMIT_S} s:"
                              " rank 1 of 2 still waits for the others")
    assert "check that every host started with the same --master-addr/--master-port" in message
    assert f"(log: {out / 'logs' / 'worker_1.log'})" in message
    assert message.endswith(f"see {out / 'logs' / 'msrun.log'}; no checkpoint had been written yet")
    assert stdout == ""
    assert START_LIMIT_S <= elapsed < START_LIMIT_S + 60
    assert not (out / "last.ckpt").exists()
    assert left_alive(out / "logs") == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_launch_exits_130_and_leaves_nothing_running(tmp_path, left_alive, sig):
    """Node 1 alone, waiting for its cluster, stopped by SIGTERM or Ctrl+C once its rank
    has started (its status file says it joins): one line, exit 130, msrun and the rank
    gone."""
    out = tmp_path / "stopped"
    proc = _amptool(*SMALL, "--node-rank", "1", "--master-port", str(_free_port()),
                    "--start-timeout", "120", "--out", str(out))
    status = out / "logs" / "rank_1.json"
    deadline = time.monotonic() + 60
    while not status.is_file() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert status.is_file(), "the rank never started"
    proc.send_signal(sig)
    rc, stdout, stderr = _finish(proc, 60)
    assert (rc, stderr, stdout) == (130, "amptool: error: interrupted\n", "")
    assert left_alive(out / "logs") == []


def test_a_start_timeout_not_above_zero_is_a_usage_error(tmp_path):
    from typer.testing import CliRunner

    from amptool.cli import app

    result = CliRunner().invoke(app, ["train", "--workers", "2", "--start-timeout", "0",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "start timeout must be > 0 seconds (got 0); pass a positive --start-timeout" \
        in result.stderr
    assert not (tmp_path / "logs").exists()
