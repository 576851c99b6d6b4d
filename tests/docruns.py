"""The docs' pipelines that other tests check too, each run once per session.

Tests import these by name (``from docruns import DOC_RUNS``): tests/conftest.py puts this
folder on ``sys.path`` and gives the ``doc_run`` fixture.
"""
from __future__ import annotations

import contextlib
import hashlib
import shlex
from dataclasses import dataclass
from pathlib import Path

DOC_RUNS = {
    "quickstart": "amptool run --epochs 1",
    "text": "amptool run --model textcls --data tokens --epochs 1 --out runs/text",
    "causallm": "amptool run --model causallm --data sequences --loss token-cross-entropy "
                "--policy auto --epochs 1 --out runs/lm",
    "detector": "amptool run --model detector --data boxes --loss "
                "amptool.samples.losses:BoxAndClassLoss --epochs 1 --out runs/det",
    "trap": "amptool run --model trapmlp --amp-level O0 --epochs 1 --per-layer "
            "--out runs/ci-trap",
}
"""Pipelines the docs show that other tests check too: each runs once per session, as
written, and both the docs test and the others read that one run (test_docs checks that
the docs still show each command; ``trap``, docs/parity.md's planted fault, exits 1)."""


@dataclass(frozen=True)
class CliRun:
    """One ``amptool`` command run in-process from its own working folder ``cwd``."""

    cwd: Path
    exit_code: int
    output: str
    """stdout and stderr as the user sees them."""
    stdout: str


def cli_run(shared, command: str) -> CliRun:
    """``command`` (``amptool ...``, shell words) run once per session (``shared``: the
    session's ``Shared``) in a working folder of its own."""
    def make(cwd: Path) -> tuple:  # plain values: any worker unpickles them
        from typer.testing import CliRunner

        from amptool.cli import app

        with contextlib.chdir(cwd):
            result = CliRunner().invoke(app, shlex.split(command)[1:])
        return cwd, result.exit_code, result.output, result.stdout

    return CliRun(*shared.get("cli-" + hashlib.sha256(command.encode()).hexdigest()[:16],
                              make))
