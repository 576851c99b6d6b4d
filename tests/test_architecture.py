"""docs/explanation/architecture.md maps the whole tree: every module has a row, every row a module,
and no module imports itself back through others (function-level imports included)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBTREES = ("train", "convert", "export", "parity", "samples")
ROW = re.compile(r"^\|\s*([^|]*?)\s*\|", re.MULTILINE)
MODULE = re.compile(r"`(amptool(?:\.\w+)*)`")


def tree_modules() -> set:
    """Every module of the installed namespace, by its import name (packages by their
    __init__: a package with code of its own is a module too)."""
    found = set()
    roots = [(ROOT / "src" / "amptool", "amptool")] + [(ROOT / t, f"amptool.{t}")
                                                         for t in SUBTREES]
    for folder, prefix in roots:
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if "__pycache__" in parts or "data" in parts[:-1]:  # samples/data: bundled files
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
                if not _has_code(path):
                    continue
            found.add(".".join((prefix,) + parts))
    return found


def _has_code(path: Path) -> bool:
    """More than a docstring and imports."""
    import ast

    body = ast.parse(path.read_text(encoding="utf-8")).body
    return any(not isinstance(n, (ast.Import, ast.ImportFrom, ast.Expr)) for n in body)


def documented_modules() -> set:
    text = (ROOT / "docs" / "explanation" / "architecture.md").read_text(encoding="utf-8")
    return {m for cell in ROW.findall(text) for m in MODULE.findall(cell)}


def test_every_module_has_a_row_and_every_row_a_module():
    tree, rows = tree_modules(), documented_modules()
    assert not tree - rows, ("modules without a row in docs/explanation/architecture.md: "
                             f"{sorted(tree - rows)}")
    assert not rows - tree, f"rows naming no module of the tree: {sorted(rows - tree)}"
