"""The documented Python API type-checks in a user's file: every ```python block of README.md
and docs/ that imports amptool is written to a file of its own and checked with mypy, as a
user's type checker reads the installed package (its errors are not the user's: silent)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
USES_AMPTOOL = re.compile(r"^\s*(from|import) amptool\b", re.MULTILINE)

MYPY_INI = """[mypy]
mypy_path = {src}
cache_dir = {cache}

[mypy-amptool.*]
follow_imports = silent

[mypy-mindspore.*]
ignore_missing_imports = True
"""
"""A user's settings: MindSpore ships no types; amptool's own modules are not the user's."""
PLANTED = """from amptool import TrainConfig, train

summary = train(TrainConfig(epochs="one"))
print(summary.no_such_field)
"""
"""A user's file with two mistakes the API's types catch."""


def api_examples() -> dict:
    """file name -> code of each Python block of the docs that imports amptool."""
    found = {}
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in BLOCK.finditer(text):
            if USES_AMPTOOL.search(block.group(1)):
                line = text.count("\n", 0, block.start()) + 1
                stem = re.sub(r"\W", "_", doc.relative_to(ROOT).with_suffix("").as_posix())
                found[f"{stem}_{line}.py"] = block.group(1)
    return found


def mypy_errors(files: dict, folder: Path) -> dict:
    """file name -> mypy's error lines on it, each file checked as a user's module."""
    for name, code in files.items():
        (folder / name).write_text(code, encoding="utf-8")
    ini = folder / "mypy.ini"
    ini.write_text(MYPY_INI.format(src=ROOT / "src", cache=folder / ".mypy_cache"))
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ini),
                           *sorted(files)], cwd=folder, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, MYPYPATH=str(ROOT / "src")))
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: mypy itself failed
    errors: dict = {name: [] for name in files}
    for line in done.stdout.splitlines():
        name = line.partition(":")[0]
        if name in errors and ": error:" in line:
            errors[name].append(line)
    return errors


def test_the_docs_show_the_api():
    names = api_examples()
    assert any(n.startswith("docs_reference_api") for n in names), names
    assert any(n.startswith("docs_guides_own_loop") for n in names), names


@pytest.mark.slow
def test_the_documented_api_type_checks(tmp_path):
    examples = api_examples()
    errors = mypy_errors({**examples, "planted_user_file.py": PLANTED}, tmp_path)
    planted = errors.pop("planted_user_file.py")
    assert len(planted) == 2, planted  # the check sees a user's mistakes
    assert errors == {name: [] for name in examples}, "\n".join(
        line for lines in errors.values() for line in lines)


ENTRIES = """
import inspect, sys, types
import amptool
if "planted" in sys.argv:  # as Python does by itself: a loaded package rebinds its name
    type(amptool).__setattr__ = types.ModuleType.__setattr__
import amptool.export.api, amptool.parity.compare, amptool.train.run
from amptool import export, parity, train
import amptool.train.config as config
print(" ".join(type(getattr(f, "__wrapped__", f)).__name__ for f in (train, export, parity)),
      config.__name__)
"""


@pytest.mark.slow
def test_the_entries_stay_functions_once_their_packages_load():
    """``from amptool import train`` after ``amptool.train``'s modules loaded: the function,
    not the package Python binds under that name (which the planted run lets it do)."""
    def kinds(*args):
        done = subprocess.run([sys.executable, "-c", ENTRIES, *args], capture_output=True,
                              text=True, timeout=300, check=True)
        return done.stdout.split()

    assert kinds() == ["function"] * 3 + ["amptool.train.config"]
    assert kinds("planted")[:3] == ["module"] * 3


def test_the_entries_are_the_stage_functions():
    import amptool
    from amptool.export.api import export as export_entry
    from amptool.parity.compare import parity as parity_entry
    from amptool.train.run import run_training

    entries = (amptool.train, amptool.export, amptool.parity)
    assert [e.__wrapped__ for e in entries] == [run_training, export_entry, parity_entry]
    assert [e.__name__ for e in entries] == ["run_training", "export", "parity"]
    import amptool.train.config as config  # the package's modules, through the entry

    assert config.TrainConfig is amptool.TrainConfig
