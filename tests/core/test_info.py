"""``amptool info`` names the devices and which formats work here, with reasons."""
from typer.testing import CliRunner

from amptool.cli import app
from amptool.runtime.device import available_devices


def test_info_lists_devices_and_formats():
    result = CliRunner().invoke(app, ["info"])
    assert result.exit_code == 0, result.output
    devices = available_devices()
    assert f"devices usable here: {', '.join(devices)}" in result.output
    assert "MindSpore 2.10" in result.output
    air = next(line for line in result.output.splitlines() if line.startswith("export AIR"))
    if "Ascend" in devices:
        assert " yes " in air
    else:
        assert " no " in air and "needs an Ascend device" in air and "MINDIR" in air
    assert any(line.startswith("export MINDIR  yes") for line in result.output.splitlines())
