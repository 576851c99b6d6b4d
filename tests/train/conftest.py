"""Helpers shared by the training tests: the distributed tests' process checks and the default
model's runs on ``few_digits``, each trained once a session (the digits subsets themselves,
``few_digits``, ``digits_rows`` and ``tiny_digits``, are the whole suite's: tests/conftest.py)."""
import json
from pathlib import Path

import pytest


def _alive_pids(logs: Path) -> list:
    """Processes a launch recorded (launcher's list and each rank's status file) still alive."""
    import psutil

    pids = set(json.loads((logs / "launch.json").read_text())["pids"])
    for status in logs.glob("*.json"):
        pid = json.loads(status.read_text()).get("pid")
        if pid:
            pids.add(pid)
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.Error:
            pass
    return alive


@pytest.fixture
def left_alive():
    """``left_alive(logs_folder) -> list`` of a job's processes that are still running."""
    return _alive_pids


@pytest.fixture(scope="session")
def few_o2_run(trained, few_digits):
    """(folder, summary) of the default model (simplecnn, O2, adam, batch 32) trained two
    epochs on ``few_digits`` with the loss read back at every step, once a session: the
    uninterrupted run that resumed runs and an own loop of ``AmpStep`` must equal."""
    return trained("few-o2-2ep", epochs=2, log_every=1, data=few_digits)


@pytest.fixture(scope="session")
def first_epoch(shared, few_digits):
    """``first_epoch(fmt) -> folder`` of ``amptool train --epochs 1`` on ``few_digits`` (the
    first epoch of ``few_o2_run``) with checkpoints in ``fmt``, run once a session; tests copy
    it (``shutil.copytree``) before they resume or change it."""
    def get(fmt: str) -> Path:
        def make(folder: Path) -> Path:
            from typer.testing import CliRunner

            from amptool.cli import app

            out = folder / "run"
            result = CliRunner().invoke(app, ["train", "--epochs", "1", "--ckpt-format", fmt,
                                              "--log-every", "1", "--data", few_digits,
                                              "--out", str(out), "--quiet"])
            assert result.exit_code == 0, result.output
            return out

        return shared.get(f"train-few-o2-1ep-{fmt}", make)

    return get

