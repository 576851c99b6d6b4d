"""Every ``amptool`` command example in README.md and docs/**/*.md runs as written (the
generated pages under docs/reference/ hold synopses, no examples).

Examples are the commands of the fenced ``bash``, ``sh``, ``console`` and unlabeled blocks:
``amptool ...`` lines (``\\`` continuations joined, ``&&`` chains split, a trailing
``# comment`` dropped) and ``$ amptool ...`` prompt lines. They run in document order in one
working folder, in-process through typer's CliRunner (MindSpore is imported once), so each
document's chain (train, then export and parity on that run) uses its own training run. An
example expects exit 0, or the code its comment names (``# exits 1``). The pipelines other
tests check too (tests/docruns.py) run once per session, in their own folder, whose outputs
are then copied into the working folder; an ``amptool train`` example whose training such a
pipeline's train stage does (``TRAINED_BY``: the same settings, checked against its run.json)
gets a copy of that folder instead of training again.

A console example's output is a transcript the test produces: the command's real output
must match the document's line for line and word for word, with numbers (counts, metrics,
sizes, seconds, versions: another CPU trains and rounds differently) free to differ, a
``...`` line standing for any lines and a line ending in ``...`` for the rest of that line.
``AMPTOOL_WRITE_DOCS=1 python3 -m pytest -n 0 tests/test_docs.py`` writes
each transcript from the real output (keeping its ``...`` elisions).

Files the documents leave to the reader are written first: ``my_net.py`` (the docs'
factory example around a small network), ``images/`` (a tiny image folder), ``reg.npz`` (a
small regression set: ``x`` (N, 8), ``y`` (N, 3) floats) and every file a document shows in
a block whose first line is ``# <file name>`` (``train.yaml``, ``reg.py``).

The extraction is complete: a block with another label may hold no runnable command (a
``text`` block holds synopses and listings only), so a new example is a new test case here
without any list to update. Run this module whole: its examples depend on earlier ones.
"""
from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
from docruns import DOC_RUNS, TRAINED_BY, cli_run, copy_shared_training, train_settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md"] + sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")
                              if "reference" not in p.relative_to(ROOT / "docs").parts[:1])
RUN_LANGS = ("bash", "sh", "console", "")
"""Fenced blocks whose commands are examples (unlabeled blocks count, so none hides)."""
OTHER_LANGS = ("text", "python", "toml", "yaml", "json")
"""Blocks that are not commands: synopses and listings (text), code and files."""
EXCLUDED = {
    "--workers": "processes through msrun: tests/train/test_distributed.py runs a real "
                 "2-worker training job and tests/train/test_multinode.py a 2-node one on "
                 "this host, tests/parity/test_sharded.py a 2-worker parity check",
    "AIR": "AIR export needs an Ascend device with CANN (this project's CI has CPUs only); "
           "tests/export refuses it off Ascend and checks the one-line error",
    "model_name=resnet18": "mindcv's resnet18 trains for minutes on a CPU at 32x32: "
                           "tests/zoo/test_resnet18.py runs it through train, export and "
                           "parity on 128 images at 16x16",
}
"""Examples that contain the key are not run here, for the reason given."""
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
FILE_BLOCK = re.compile(r"# ([\w.-]+\.(?:ya?ml|toml|json|py))\n")


@dataclass(frozen=True)
class Example:
    doc: str
    line: int
    command: str
    expect: int = 0
    shown: Optional[tuple] = None  # a console example's output lines, as the doc shows them

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def fenced_blocks(doc: str):
    """(language, first line number of the body, body) of every fenced block of ``doc``."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    for match in FENCE.finditer(text):
        yield match.group(1), text.count("\n", 0, match.start(2)) + 1, match.group(2)


def block_commands(body: str, lang: str, doc: str = "", first: int = 1) -> list:
    """The ``amptool`` commands of one block, as examples."""
    lines = body.splitlines()
    examples, i = [], 0
    while i < len(lines):
        start, line = i, lines[i]
        i += 1
        if lang == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        elif not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.rstrip().endswith("\\") and i < len(lines):
            line = line.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
        code, _, comment = line.partition(" #")
        exits = re.search(r"\bexits? (\d+)\b", comment)
        shown = None
        if lang == "console":
            end = i
            while end < len(lines) and not lines[end].startswith("$ "):
                end += 1
            shown = tuple(lines[i:end])
        for segment in re.split(r"\s&&\s|\s;\s", code):
            if segment.split()[:1] == ["amptool"]:
                examples.append(Example(doc, first + start, " ".join(segment.split()),
                                        int(exits.group(1)) if exits else 0, shown))
    return examples


def extract_examples() -> list:
    examples = []
    for doc in DOCS:
        for lang, first, body in fenced_blocks(doc):
            if lang in RUN_LANGS:
                examples += block_commands(body, lang, doc, first)
    return examples


def exclusion(example: Example) -> Optional[str]:
    return next((why for key, why in EXCLUDED.items() if key in example.command.split()), None)


EXAMPLES = extract_examples()
RUN = [e for e in EXAMPLES if exclusion(e) is None]


# ---------------------------------------------------------------- the extraction itself


def test_extraction_reads_continuations_chains_comments_and_prompts():
    bash = ("amptool train --epochs 1 \\\n    --out runs/a   # exits 1\n# a comment line\n"
            "python3 -m pip install . && amptool run --epochs 1\n")
    got = block_commands(bash, "bash", "x.md", 10)
    assert [(e.line, e.command, e.expect) for e in got] == [
        (10, "amptool train --epochs 1 --out runs/a", 1), (13, "amptool run --epochs 1", 0)]
    console = "$ amptool info\namptool 0.1.0  MindSpore\n$ amptool inspect a.mindir\n"
    got = block_commands(console, "console")
    assert [(e.command, e.shown) for e in got] == [
        ("amptool info", ("amptool 0.1.0  MindSpore",)), ("amptool inspect a.mindir", ())]


def test_a_transcript_matches_up_to_decimals_and_elisions():
    shown = ("search 7 candidate cells, cosine 0.999", "...", "7 trials in 4.8 s",
             "flushed in 16 entries: ...")
    real = ("search 6 candidate cells, cosine 0.998\ntrial 1\ntrial 2\n7 trials in 5.1 s\n"
            "flushed in 12 entries: b.bias, c.weight\n")
    assert transcript_mismatch(shown, real) is None
    assert transcript_mismatch(shown[:1] + shown[2:], real)  # the trial lines are not elided
    assert transcript_mismatch(shown, real.replace("trials", "trial"))
    assert transcript_mismatch(shown, real.replace("candidate", "kept"))
    assert transcript_mismatch(shown[:3] + ("flushed in 16 entries: a.weight",), real)
    assert transcript_mismatch(("a",), "a\nb\n")  # nothing left over
    assert written_transcript(shown, real) == (
        "search 6 candidate cells, cosine 0.998", "...", "7 trials in 5.1 s",
        "flushed in 12 entries: ...")


def test_every_block_is_an_example_block_or_holds_no_command():
    """A command cannot hide where the extraction does not look: every block is labeled as
    examples or as something else, and the others hold no prompt and no plain command
    (a text block's amptool lines are synopses with [options] or | choices, or listings)."""
    problems = []
    for doc in DOCS:
        for lang, first, body in fenced_blocks(doc):
            if lang not in RUN_LANGS + OTHER_LANGS:
                problems.append(f"{doc}:{first}: unknown block label '{lang}'")
                continue
            if lang in RUN_LANGS:
                continue
            for n, line in enumerate(body.splitlines(), first):
                text = line.strip()
                if text.startswith("$ amptool"):
                    problems.append(f"{doc}:{n}: a prompt in a {lang} block (use console)")
                if lang == "text" and text.startswith("amptool ") and not (
                        "[" in text or "|" in text or "   " in text):
                    problems.append(f"{doc}:{n}: a command in a text block (use bash)")
    assert not problems, "\n".join(problems)


def test_the_shared_pipelines_are_the_docs():
    """The pipelines other tests read (tests/docruns.py) are commands the docs show: they
    run once, in that test's example; so do the trainings that pipelines do (TRAINED_BY),
    each the training a shown ``amptool train`` command asks for."""
    shown = {e.command for e in RUN}
    assert set(DOC_RUNS.values()) <= shown, set(DOC_RUNS.values()) - shown
    assert set(TRAINED_BY) <= shown, set(TRAINED_BY) - shown
    assert all(e.shown is None and e.expect == 0 for e in RUN if e.command in TRAINED_BY)
    assert {name for name, _ in TRAINED_BY.values()} <= set(DOC_RUNS)
    cfg, out = train_settings("amptool train --model trapmlp --amp-level O0 --epochs 1")
    assert (cfg.model, cfg.amp_level, cfg.epochs, out) == ("trapmlp", "O0", 1, "runs/train")


def test_every_example_runs_or_is_excluded_with_a_reason():
    assert len(EXAMPLES) >= 20 and {e.doc for e in EXAMPLES} >= {
        "README.md", "docs/get-started.md", "docs/guides/train.md", "docs/guides/export.md",
        "docs/guides/parity-ci.md", "docs/guides/fp16-trouble.md", "docs/guides/distributed.md"}
    for key in EXCLUDED:  # no stale exclusion
        assert any(key in e.command.split() for e in EXAMPLES), key
    excluded = [e for e in EXAMPLES if exclusion(e)]
    assert len(excluded) <= 5  # a handful, each tested elsewhere (EXCLUDED says where)
    assert len(RUN) + len(excluded) == len(EXAMPLES)
    assert any(e.expect == 1 for e in RUN)  # the planted fault is among them


# ---------------------------------------------------------------- running them

MY_NET = '''"""The docs' factory example around two small networks."""
import mindspore as ms
from mindspore import nn, ops


class MyNet(nn.Cell):
    """3x32x32 images, 10 classes."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2)
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(8 * 16 * 16, 10)

    def construct(self, x):
        return self.fc(self.flatten(self.relu(self.conv(x))))


class MyTextNet(nn.Cell):
    """Token ids and their mask, 10 classes: a masked mean of embeddings."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(30522, 16)
        self.fc = nn.Dense(16, 10)

    def construct(self, ids, mask):
        weight = ops.expand_dims(ops.cast(mask, ms.float32), -1)
        pooled = (self.embed(ids) * weight).sum(axis=1) / ops.clamp(weight.sum(axis=1), 1.0)
        return self.fc(pooled)


'''


def readme_factory_example() -> str:
    """The docs' model factory example (``def build():``), shown in exactly one block."""
    blocks = [body for doc in DOCS for lang, _, body in fenced_blocks(doc)
              if lang == "python" and "def build():" in body]
    assert len(blocks) == 1, "the docs show no factory example (or several)"
    return blocks[0]


def write_fixtures(folder: Path) -> None:
    from PIL import Image

    (folder / "my_net.py").write_text(MY_NET + readme_factory_example(), encoding="utf-8")
    rng = np.random.default_rng(0)
    for label, level in (("dark", 60), ("light", 190)):  # 2 classes x 24 RGB images
        (folder / "images" / label).mkdir(parents=True)
        for i in range(24):
            pixels = np.clip(rng.normal(level, 40, (12, 12, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / "images" / label / f"{i}.png")
    x = rng.standard_normal((256, 8)).astype(np.float32)
    y = np.tanh(x @ rng.standard_normal((8, 3)).astype(np.float32) / 3) * 2
    np.savez(folder / "reg.npz", x=x, y=y.astype(np.float32))
    for doc in DOCS:
        for _, _, body in fenced_blocks(doc):
            name = FILE_BLOCK.match(body)
            if name:
                (folder / name.group(1)).write_text(body, encoding="utf-8")


def shell_words(command: str) -> list:
    """The arguments after ``amptool``, globs expanded as a shell does (sorted; a pattern
    that matches nothing stays as it is)."""
    args = []
    for word in shlex.split(command)[1:]:
        matches = sorted(glob.glob(word)) if any(c in word for c in "*?[") else []
        args += matches or [word]
    return args


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("docs")
    write_fixtures(folder)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("example", RUN, ids=[e.where for e in RUN])
def test_example_runs_as_written(example, workdir, monkeypatch, shared):
    from typer.testing import CliRunner

    from amptool.cli import app

    monkeypatch.chdir(workdir)
    if example.command in TRAINED_BY:  # the same training, done once by a shared pipeline
        copy_shared_training(shared, example.command, workdir, example.where)
        return
    if example.command in DOC_RUNS.values():  # run once, read here and by other tests
        result = cli_run(shared, example.command)
        shutil.copytree(result.cwd, workdir, dirs_exist_ok=True)
    else:
        result = CliRunner().invoke(app, shell_words(example.command))
    assert result.exit_code == example.expect, (
        f"{example.where}: {example.command}\nexit {result.exit_code}, "
        f"expected {example.expect}\n{result.output[-3000:]}")
    if example.shown is not None:
        if os.environ.get(WRITE_ENV) == "1":
            rewrite_transcript(example, result.output)
            return
        problem = transcript_mismatch(example.shown, result.output)
        assert problem is None, (f"{example.where}: the transcript is not what the command "
                                 f"prints ({problem}); {WRITE_ENV}=1 rewrites it")


WRITE_ENV = "AMPTOOL_WRITE_DOCS"
NUMBER = re.compile(r"-?\d+(?:\.\d+)*(?:e[-+]?\d+)?")
"""What may differ between a transcript and a run: numbers, decimals and dotted versions."""


def _masked(line: str) -> str:
    return NUMBER.sub("#", line.rstrip())


def _same(shown: str, real: str) -> bool:
    """``real`` is what ``shown`` shows, numbers aside; a trailing ``...`` takes any rest."""
    if shown.rstrip().endswith("...") and shown.strip() != "...":
        head = _masked(shown.rstrip()[:-3].rstrip())
        return _masked(real).startswith(head)
    return _masked(shown) == _masked(real)


def _align(shown: tuple, real: list):
    """For each shown line, the index of the real line it stands for (a ``...`` line: the
    real lines it skips as a range), or a text naming the first mismatch."""
    pairs, j = [], 0
    for k, line in enumerate(shown):
        if line.strip() == "...":
            rest = [s for s in shown[k + 1:] if s.strip() != "..."]
            nxt = rest[0] if rest else None
            start = j
            while j < len(real) and nxt is not None and not _same(nxt, real[j]):
                j += 1
            if nxt is None:
                j = len(real)
            pairs.append((start, j))
            continue
        if j >= len(real):
            return f"the output ends before '{line}'"
        if not _same(line, real[j]):
            return f"'{real[j].rstrip()}' where the doc shows '{line}'"
        pairs.append(j)
        j += 1
    if j < len(real):
        return f"the output goes on with '{real[j].rstrip()}'"
    return pairs


def transcript_mismatch(shown: tuple, output: str) -> Optional[str]:
    aligned = _align(shown, output.rstrip("\n").splitlines())
    return aligned if isinstance(aligned, str) else None


def written_transcript(shown: tuple, output: str) -> tuple:
    """The transcript as the real output writes it, the doc's ``...`` elisions kept where
    they still fit (else the whole output)."""
    real = output.rstrip("\n").splitlines()
    aligned = _align(shown, real)
    if isinstance(aligned, str):
        return tuple(real)
    out = []
    for line, at in zip(shown, aligned):
        if isinstance(at, tuple):
            out.append("...")
        elif line.rstrip().endswith("..."):  # keep the doc's elision, with the real numbers
            out.append(real[at][:len(line.rstrip()[:-3].rstrip())].rstrip() + " ...")
        else:
            out.append(real[at].rstrip())
    return tuple(out)


_SHIFT: dict = {}
"""Lines each document grew by in this rewriting run (examples run in document order)."""


def rewrite_transcript(example: Example, output: str) -> None:
    path = ROOT / example.doc
    lines = path.read_text(encoding="utf-8").split("\n")
    start = example.line + _SHIFT.get(example.doc, 0)  # the output's first line (0-based)
    assert lines[start - 1].startswith("$ "), f"{example.where}: not a prompt line"
    new = list(written_transcript(example.shown, output))
    lines[start:start + len(example.shown)] = new
    _SHIFT[example.doc] = _SHIFT.get(example.doc, 0) + len(new) - len(example.shown)
    path.write_text("\n".join(lines), encoding="utf-8")
