"""The docs' pipelines that other tests check too, each run once per session.

Tests import these by name (``from docruns import DOC_RUNS``): tests/conftest.py puts this
folder on ``sys.path`` and gives the ``doc_run`` fixture.
"""
from __future__ import annotations

import contextlib
import hashlib
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

DOC_RUNS = {
    "quickstart": "amptool run --epochs 1",
    "text": "amptool run --model textcls --data tokens --epochs 1 --out runs/text",
    "causallm": "amptool run --model causallm --data sequences:768 --loss token-cross-entropy "
                "--policy auto --epochs 1 --out runs/lm",
    "detector": "amptool run --model detector --data boxes:768 --loss "
                "amptool.samples.losses:BoxAndClassLoss --epochs 1 --out runs/det",
    "trap": "amptool run --model trapmlp --amp-level O0 --epochs 1 --out runs/ci-trap",
    "transformer": "amptool train --model transformer --data digits:512 --epochs 1 "
                   "--out runs/transformer",
    "baseline": "amptool run --epochs 1 --out runs/next --baseline runs/pipeline --quiet",
}
"""Pipelines (and a training) the docs show that other tests check too: each runs once per
session, as written, and both the docs test and the others read that one run (test_docs
checks that the docs still show each command; ``trap``, docs/guides/parity-ci.md's planted
fault, exits 1; ``transformer``, docs/guides/export.md's, is the export tests' transformer
run, tests/conftest.py ``DOC_TRAINED``; ``baseline``, docs/get-started.md's next run held to
the quickstart's, is the one ``amptool run --baseline`` the gate's tests read)."""
AFTER = {"baseline": "quickstart"}
"""Pipelines that read another's folder (name -> that pipeline's name): its working folder,
copied into theirs before they run, as the docs run one after the other."""


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

        before = [DOC_RUNS[after] for name, after in AFTER.items() if DOC_RUNS[name] == command]
        for earlier in before:
            shutil.copytree(cli_run(shared, earlier).cwd, cwd, dirs_exist_ok=True)

        with contextlib.chdir(cwd):
            result = CliRunner().invoke(app, shlex.split(command)[1:])
        return cwd, result.exit_code, result.output, result.stdout

    return CliRun(*shared.get("cli-" + hashlib.sha256(command.encode()).hexdigest()[:16],
                              make))


TRAINED_BY = {
    "amptool train --epochs 1": ("quickstart", "runs/pipeline/train"),
    "amptool train --epochs 1 --out runs/digits": ("quickstart", "runs/pipeline/train"),
    "amptool train --epochs 1 --out runs/ci": ("quickstart", "runs/pipeline/train"),
    "amptool train --model trapmlp --amp-level O0 --epochs 1 --out runs/trap":
        ("trap", "runs/ci-trap/train"),
}
"""Docs' training examples whose training a shared pipeline does in its train stage: (that
pipeline, its train folder). The folder is copied to the example's ``--out``
and its run.json must record the settings the example's own flags give."""


def train_settings(command: str) -> tuple:
    """(TrainConfig ``amptool train`` builds from ``command``'s ``--flag value`` pairs, the
    ``--out`` folder), through the command's own layering of flags over defaults."""
    from amptool.train.config import build_command_config

    words = shlex.split(command)[2:]
    assert shlex.split(command)[:2] == ["amptool", "train"] and len(words) % 2 == 0, command
    flags = {word[2:]: int(value) if value.isdigit() else value  # as a config file types it
             for word, value in zip(words[::2], words[1::2])}
    cfg = build_command_config({"out": "runs/train", **flags}, {}, source=command)[0]
    return cfg, cfg.out


def copy_shared_training(shared, command: str, workdir: Path, where: str) -> None:
    """``command``'s training, copied from the pipeline that does it (``TRAINED_BY``) into
    its ``--out`` under ``workdir``, once its run.json shows the settings ``command`` asks."""
    import dataclasses
    import json
    import shutil

    name, folder = TRAINED_BY[command]
    run = cli_run(shared, DOC_RUNS[name])
    cfg, out = train_settings(command)
    recorded = json.loads((run.cwd / folder / "run.json").read_text())["config"]
    asked = dataclasses.asdict(cfg)
    for key in ("out", "overwrite", "workers"):  # the pipeline's folder, claim and launch
        recorded.pop(key), asked.pop(key)
    assert recorded == asked, f"{where}: {DOC_RUNS[name]} trains otherwise"
    assert (run.cwd / folder / "best.ckpt").is_file(), run.output[-3000:]
    shutil.copytree(run.cwd / folder, workdir / out, dirs_exist_ok=True)
