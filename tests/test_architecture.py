"""docs/explanation/architecture.md maps the whole tree: every module has a row, every row a module,
and no module imports itself back through others (function-level imports included)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBTREES = ("train", "convert", "export", "parity", "gate", "samples")
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
            if "__pycache__" in parts or (prefix == "amptool.samples" and "data" in parts[:-1]):
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


def core_packages() -> list:
    """The core's packages: the folders of src/amptool that are packages, not the stages'
    links."""
    core = ROOT / "src" / "amptool"
    return sorted(p.name for p in core.iterdir()
                  if (p / "__init__.py").is_file() and not p.is_symlink())


def test_each_core_package_says_what_it_owns():
    import ast

    for name in core_packages():
        init = ROOT / "src" / "amptool" / name / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert "import" in doc.lower() and len(doc.splitlines()) <= 12, (
            f"amptool.{name}'s __init__ docstring should say in a few lines what the package "
            "owns and what it may import")


def test_the_core_map_follows_the_packages():
    """Each core package has its section in architecture.md, and each module row of the core
    stands in its package's section."""
    text = (ROOT / "docs" / "explanation" / "architecture.md").read_text(encoding="utf-8")
    core = text[text.index("### The core"):text.index("### The stages")]
    sections = re.split(r"^#### ", core, flags=re.MULTILINE)[1:]
    by_heading = {s.splitlines()[0].strip("` "): s for s in sections}
    for name in core_packages():
        package = f"amptool.{name}"
        assert package in by_heading, f"architecture.md has no section for {package}"
        rows = {m for cell in ROW.findall(by_heading[package]) for m in MODULE.findall(cell)}
        assert rows, f"{package}'s section lists no module"
        strays = [m for m in rows if m != package and not m.startswith(package + ".")]
        assert not strays, f"rows in {package}'s section that belong elsewhere: {strays}"
        modules = {m for m in tree_modules() if m.startswith(package + ".")}
        assert modules <= rows, f"modules of {package} outside its section: {modules - rows}"
