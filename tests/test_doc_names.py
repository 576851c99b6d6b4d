"""What the docs name exists: every ``amptool.*`` dotted name in backticks imports, and
every ``--flag`` an ``amptool CMD ...`` example shows is an option of that command.

Read: README.md and docs/**/*.md (the generated reference included): inline code spans and
fenced blocks. A failure lists each name or flag as ``file:line: what``.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import re
import shlex
from pathlib import Path
from typing import Iterator, Optional

import pytest
import typer

from amptool.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md"] + sorted(p.relative_to(ROOT).as_posix()
                              for p in (ROOT / "docs").rglob("*.md"))
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
SPAN = re.compile(r"(`+)(.+?)\1")
DOTTED = re.compile(r"(?<![\w./-])amptool(?:\.[A-Za-z_]\w*)+")
"""``amptool.x.y``, not a file name such as ``.amptool.lock``."""
FROM_IMPORT = re.compile(r"^\s*from\s+(amptool(?:\.\w+)*)\s+import\s+\(?([\w\s,]+)\)?",
                         re.MULTILINE)
SEPARATORS = {"|", "||", "&&", ";", ">", ">>", "2>", "2>&1", "&"}


# -- reading the documents --------------------------------------------------------------------

def code_pieces(text: str) -> Iterator[tuple]:
    """(line number, code) for every fenced block's line (continuations joined) and every
    inline code span outside the blocks."""
    taken = []
    for block in FENCE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        taken.append(block.span())
        lines = block.group(1).split("\n")
        joined, start = "", None
        for number, line in enumerate(lines, first):
            start = number if start is None else start
            if line.rstrip().endswith("\\"):
                joined += line.rstrip()[:-1] + " "
                continue
            yield start, joined + line
            joined, start = "", None
    for span in SPAN.finditer(text):
        if not any(a <= span.start() < b for a, b in taken):
            yield text.count("\n", 0, span.start()) + 1, span.group(2)


def doc_pieces(docs: list = DOCS) -> Iterator[tuple]:
    for doc in docs:
        path = ROOT / doc
        if path.is_file():
            for number, code in code_pieces(path.read_text(encoding="utf-8")):
                yield f"{doc}:{number}", code


# -- dotted names -----------------------------------------------------------------------------

def resolves(name: str) -> bool:
    """Whether ``name`` is an importable module or an attribute of one (a dataclass field
    without a default counts)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            if cut == len(parts) and importlib.util.find_spec(module_name) is not None:
                return True  # a module (found, not run: amptool.__main__ would run the CLI)
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
                continue
            raise
        return _has_path(obj, parts[cut:])
    return False


def _has_path(obj, rest: list) -> bool:
    for attr in rest:
        if hasattr(obj, attr):
            obj = getattr(obj, attr)
        elif dataclasses.is_dataclass(obj) and attr in {f.name for f in dataclasses.fields(obj)}:
            return attr == rest[-1]
        else:
            return False
    return True


def named(code: str) -> Iterator[str]:
    """The ``amptool.*`` names a piece of code mentions (``from amptool.x import y`` gives
    ``amptool.x.y``)."""
    yield from DOTTED.findall(code)
    for module, names in FROM_IMPORT.findall(code):
        for name in re.split(r"[\s,]+", names.strip()):
            if name and name != "as":
                yield f"{module}.{name}"


def unresolved_names(pieces) -> list:
    seen, bad = {}, []
    for where, code in pieces:
        for name in named(code):
            if name not in seen:
                seen[name] = resolves(name)
            if not seen[name]:
                bad.append(f"{where}: {name} does not resolve")
    return bad


# -- flags of commands ------------------------------------------------------------------------

def command_tree():
    return typer.main.get_command(app)


def _flags(command) -> set:
    found = {"--help"}
    for param in command.params:
        found.update(o for o in list(param.opts) + list(param.secondary_opts)
                     if o.startswith("-"))
    return found


def _words(code: str) -> list:
    code = re.split(r"(?:^|\s)#", code, maxsplit=1)[0]
    try:
        return shlex.split(code, comments=False)
    except ValueError:
        return code.split()


def command_uses(code: str, root=None) -> Iterator[tuple]:
    """(``amptool CMD``, click command or None, flag) for each flag an ``amptool`` command
    line in ``code`` shows; None: the word after ``amptool`` names no command."""
    root = root or command_tree()
    words = _words(code)
    for at, word in enumerate(words):
        if word != "amptool" or (at and words[at - 1] in ("install", "from", "import")):
            continue
        command, path, rest = root, ["amptool"], words[at + 1:]
        while rest and getattr(command, "commands", None) and not rest[0].startswith("-"):
            if rest[0] not in command.commands:
                if re.fullmatch(r"[a-z][a-z-]*", rest[0]):
                    yield " ".join(path + [rest[0]]), None, ""
                break
            path.append(rest[0])
            command, rest = command.commands[rest[0]], rest[1:]
        if getattr(command, "commands", None) and path != ["amptool"]:
            continue  # a group named without its command: nothing to check
        for token in rest:
            if token in SEPARATORS or token.startswith(("|", ">", ";")):
                break
            if token.startswith("--") and len(token) > 2:
                yield " ".join(path), command, token.split("=", 1)[0]


def unknown_flags(pieces) -> list:
    root, bad = command_tree(), []
    for where, code in pieces:
        if "amptool" not in code:
            continue
        for path, command, flag in command_uses(code, root):
            if command is None:
                bad.append(f"{where}: `{path}` is no command")
            elif flag not in _flags(command):
                bad.append(f"{where}: `{path}` has no option {flag}")
    return bad


OTHER_TOOLS = {"python", "python3", "pytest", "pip", "msrun", "atc", "converter_lite",
               "benchmark"}
"""Programs whose command lines the docs show with their own flags."""
OTHER_FLAGS = {"--optimize": "converter_lite"}
"""Flags of other programs, in amptool's style, the docs name on their own, and whose."""
OWN_FLAGS_DOCS = {"docs/bench.md": "python -m bench's own flags"}
"""Pages whose bare flags belong to another program."""
BARE = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?![\w-])")
"""A flag in amptool's style (``--max-abs-scaled``; ``--precision_mode`` is another tool's)."""


def stray_flags(pieces, root=None) -> list:
    """Flags shown outside an ``amptool`` command line that no amptool command has (a flag
    renamed in the code and left in the prose)."""
    known = set(OTHER_FLAGS)
    for command in _commands(root or command_tree()):
        known |= _flags(command)
    bad = []
    for where, code in pieces:
        words = _words(code)
        if str(where).split(":")[0] in OWN_FLAGS_DOCS or "amptool" in words or (
                words and Path(words[0]).name in OTHER_TOOLS):
            continue
        bad += [f"{where}: {flag} is no option of any amptool command"
                for flag in BARE.findall(code) if flag not in known]
    return bad


def _commands(command) -> Iterator:
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from _commands(sub)


# -- the checks -------------------------------------------------------------------------------

PIECES = list(doc_pieces())


def test_the_docs_are_read_recursively():
    read = {where.split(":")[0] for where, _ in PIECES}
    assert "README.md" in read and any(d.startswith("docs/reference/") for d in read)


def test_every_dotted_name_in_the_docs_resolves():
    bad = unresolved_names(PIECES)
    assert not bad, "names the docs give that do not exist:\n" + "\n".join(bad)


def test_every_flag_in_the_docs_is_an_option_of_its_command():
    bad = unknown_flags(PIECES)
    assert not bad, "flags the docs show that the commands lack:\n" + "\n".join(bad)


def test_every_flag_named_alone_is_an_amptool_option():
    bad = stray_flags(PIECES)
    assert not bad, "flags the docs name that no command has:\n" + "\n".join(bad)


PLANTED = """# A page

Load it with `amptool.convert.ckpt.load_converted(path)`; `amptool.stats.limits.Thresholds` and
`amptool.convert.ckpt.CkptConfig.src` exist.

```bash
amptool train --epochs 2 \\
    --epoch 3   # exits 0
amptool convert search --samples 64 --max-abs-scaled off | tee log
amptool convrt ckpt a b
```

Then `amptool parity REF CAND --per-layers`, `pip install amptool --user`, `.amptool.lock`.
Add `--per-layer` or `--perlayer`; `pytest --durations=5` is pytest's.

```toml
# amptool precision policy
```

```python
from amptool import TrainConfig, trian
```
"""


def test_the_checks_catch_planted_names_and_flags():
    pieces = list(code_pieces(PLANTED))
    assert sorted(unresolved_names(pieces)) == [
        "21: amptool.trian does not resolve",
        "3: amptool.convert.ckpt.load_converted does not resolve"]
    assert unknown_flags(pieces) == ["7: `amptool train` has no option --epoch",
                                     "10: `amptool convrt` is no command",
                                     "13: `amptool parity` has no option --per-layers"]
    assert stray_flags(pieces) == ["14: --perlayer is no option of any amptool command"]


@pytest.mark.parametrize("name, ok", [("amptool.errors.UsageError", True),
                                      ("amptool.train.config.TrainConfig.epochs", True),
                                      ("amptool.nosuchmodule", False),
                                      ("amptool.errors.NoSuchError", False)])
def test_resolving_a_name(name: str, ok: Optional[bool]):
    assert resolves(name) is ok
