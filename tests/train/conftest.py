"""Helpers shared by the training tests: the distributed tests' process checks, a tiny digits
subset and the default model's runs on ``few_digits``, each trained once a session."""
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

