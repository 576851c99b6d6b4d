"""Size limits of the house style: no module of the core or a stage over MAX_LINES lines, no
function (a method, a typer command) over MAX_FUNCTION_LINES. ``KNOWN`` names the cases
being split, each by "folder/module.py:function" (or "folder/module.py" for a module)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("src/amptool", "train", "convert", "export", "parity", "gate", "samples")
MAX_LINES = 400
MAX_FUNCTION_LINES = 80
KNOWN: dict = {}
"""Known cases over a limit, each with why it is allowed for now, e.g.
``{"convert/cli.py:search_command": "being split"}``; an entry no longer over its limit
fails ``test_every_known_case_is_still_over`` until it is removed."""


def modules() -> dict:
    """Every Python file of the core and the stages by its path from the repository root,
    each once (the stage folders are linked into src/amptool: counted where they live)."""
    found = {}
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            real = path.resolve()
            if "__pycache__" not in real.parts and real.is_relative_to(ROOT):
                found.setdefault(real, real.relative_to(ROOT).as_posix())
    return {name: real for real, name in found.items()}


def functions(tree: ast.AST):
    """(qualified name, lines) of every function and method in ``tree``."""
    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                yield name, child.end_lineno - start + 1
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
            else:
                yield from walk(child, prefix)
    yield from walk(tree, "")


def oversized() -> list:
    """"path: N lines" and "path:function: N lines" of every case over a limit."""
    over = []
    for name, path in sorted(modules().items()):
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_LINES:
            over.append((name, lines))
        for function, length in functions(ast.parse(text)):
            if length > MAX_FUNCTION_LINES:
                over.append((f"{name}:{function}", length))
    return over


def test_no_module_or_function_is_over_its_limit():
    over = [f"{key}: {n} lines" for key, n in oversized() if key not in KNOWN]
    assert not over, (f"over {MAX_LINES} lines a module or {MAX_FUNCTION_LINES} a function: "
                      + "; ".join(over))


def test_every_known_case_is_still_over():
    still = {key for key, _ in oversized()}
    assert not set(KNOWN) - still, f"no longer over a limit, remove from KNOWN: " \
        f"{sorted(set(KNOWN) - still)}"


def test_the_walk_counts_each_module_once():
    names = modules()
    assert "train/loop.py" in names and "src/amptool/precision/ranges.py" in names
    assert not any(n.startswith("src/amptool/train/") for n in names)
