"""Helpers shared by the distributed-training tests."""
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
