"""The docs' Python API examples run as written: the stages (docs/get-started.md), and a
training loop of one's own around ``AmpStep`` (docs/guides/own-loop.md)."""
import contextlib
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


PAGES = {"api-example": "docs/get-started.md", "loop-example": "docs/guides/own-loop.md"}
"""The page that shows each example, after a ``<!-- marker -->`` line."""


def api_example(marker: str = "api-example") -> str:
    text = (ROOT / PAGES[marker]).read_text(encoding="utf-8")
    match = re.search(rf"<!-- {marker} -->\s*```python\n(.*?)```", text, re.S)
    assert match, f"{PAGES[marker]} has no {marker} block"
    return match.group(1)


@pytest.mark.parametrize("marker", ["api-example", "loop-example"])
def test_example_uses_the_public_names_only(marker):
    import amptool

    code = api_example(marker)
    names = re.search(r"from amptool import (.*)", code).group(1).split(", ")
    assert all(hasattr(amptool, name.strip()) for name in names)


@pytest.mark.slow
def test_api_example_runs(tmp_path, capsys):
    """In this process (the stages are plain calls; the loop below is the one that needs a
    fresh interpreter), from its own working folder."""
    script = tmp_path / "example.py"
    script.write_text(api_example(), encoding="utf-8")
    with contextlib.chdir(tmp_path):
        runpy.run_path(str(script), run_name="__main__")
    assert "fp16 parity passed" in capsys.readouterr().out
    assert (tmp_path / "runs" / "api" / "run.json").is_file()


@pytest.mark.slow  # trains the README's own loop for 5 epochs in a fresh interpreter
def test_loop_example_runs(tmp_path):
    """The custom loop trains (its last epoch's loss well under the first's) without a
    skipped step, as a user runs it: a fresh interpreter, MindSpore's default mode."""
    script = tmp_path / "loop.py"
    script.write_text(api_example("loop-example"), encoding="utf-8")
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[0] == "cells to keep in fp32: []", lines
    losses = [float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("epoch ")]
    assert len(losses) == 5 and losses[-1] < 0.5 * losses[0], lines
    assert lines[-1] == "0 step(s) skipped, loss scale 65536", lines


def _anchors(page: Path) -> set:
    """The heading anchors of a Markdown page, as the docs site's table of contents makes
    them (lower case, punctuation dropped, spaces to hyphens)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", h.replace("`", "")).strip().lower())
            for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_readme_is_a_landing_page_whose_links_resolve():
    """A short page (the site holds the rest), and every link it gives reaches a file and,
    where it names one, a heading of that file (the site's strict build checks the docs'
    own links, not the README's)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        target, _, anchor = link.partition("#")
        path = ROOT / target
        assert path.is_file(), f"README links {link}: no such file"
        if anchor:
            assert anchor in _anchors(path), f"README links {link}: no such heading"
