"""Shared fixtures: real MindSpore on CPU, small real data."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("GLOG_v", "3")


def _device_present(name: str) -> bool:
    from amptool.device import available_devices

    return name in available_devices()


def pytest_collection_modifyitems(config, items):
    for item in items:
        for marker, device in (("ascend", "Ascend"), ("gpu", "GPU")):
            if marker in item.keywords and not _device_present(device):
                item.add_marker(pytest.mark.skip(reason=f"needs a {device} device"))
