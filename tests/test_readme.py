"""The README's Python API example runs as written."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def api_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- api-example -->\s*```python\n(.*?)```", text, re.S)
    assert match, "README has no api-example block"
    return match.group(1)


def test_example_uses_the_public_names_only():
    import amptool

    code = api_example()
    names = re.search(r"from amptool import (.*)", code).group(1).split(", ")
    assert all(hasattr(amptool, name.strip()) for name in names)


@pytest.mark.slow
def test_api_example_runs(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(api_example(), encoding="utf-8")
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-2000:]
    assert "fp16 parity passed" in run.stdout
    assert (tmp_path / "runs" / "api" / "run.json").is_file()
