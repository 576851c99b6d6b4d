"""The wheel holds every subpackage and data file, and a regular install runs ``amptool train``."""
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUBTREES = ("train", "convert", "export", "parity", "gate", "samples")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    if not (ROOT / "pyproject.toml").is_file():
        pytest.skip("source tree not available")
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(dist)], check=True, timeout=300,
                   cwd=tmp_path_factory.mktemp("build-cwd"))
    wheels = list(dist.glob("amptool-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


def expected_members():
    members = {f"amptool/{p.relative_to(ROOT / 'src' / 'amptool')}"
               for p in (ROOT / "src" / "amptool").rglob("*.py")}
    for tree in SUBTREES:
        for path in (ROOT / tree).rglob("*.py"):
            members.add(f"amptool/{tree}/{path.relative_to(ROOT / tree)}")
    members.add("amptool/samples/data/digits.npz")
    members.add("amptool/samples/data/DIGITS.md")
    members.add("amptool/py.typed")  # PEP 561: the package's annotations are for its users
    return {m for m in members if "__pycache__" not in m}


@pytest.mark.slow
def test_wheel_contains_every_module_and_data_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(expected_members() - names)
    assert not missing, f"missing from the wheel: {missing}"
    assert not any(n.startswith(("train/", "export/", "convert/", "tests/")) for n in names)


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """A regular (non-editable) install of the wheel into a private folder."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, timeout=300)
    return target


@pytest.mark.slow
def test_regular_install_runs_train(installed, tmp_path):
    target = installed
    env = dict(os.environ, PYTHONPATH=str(target))
    where = subprocess.run([sys.executable, "-c",
                            "from amptool.train import loop as m; print(m.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert where.stdout.strip().startswith(str(target))
    out = tmp_path / "sub run+x"  # a folder name a shell would split or a parser mangle
    run = subprocess.run([sys.executable, "-m", "amptool", "train", "--epochs", "1", "--json",
                          "--data", "digits:720", "--out", str(out)], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    # the bundled digits read from the installed package (their first 720), one epoch
    assert summary["steps"] == 18 and summary["val_acc"] > 0.5
    assert (out / "best.ckpt").is_file()


def test_help_does_not_import_mindspore():
    code = ("import sys; from amptool.cli import app; import typer.testing as t; "
            "r = t.CliRunner().invoke(app, ['--help']); "
            "assert r.exit_code == 0, r.output; "
            "assert 'mindspore' not in sys.modules, 'mindspore imported by --help'; "
            "assert 'onnx' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _lint(site: Path, cwd: Path) -> subprocess.CompletedProcess:
    code = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"
    return subprocess.run([sys.executable, "-c", code, str(ROOT / "pyproject.toml")],
                          capture_output=True, text=True, cwd=cwd, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(site)))


@pytest.mark.slow
def test_layers_contract_holds_and_catches_a_back_arrow(installed, tmp_path):
    """core <- stages <- pipeline <- cli, no stage imports another, and the core's packages
    in their order: checked on the install."""
    pytest.importorskip("importlinter")
    kept = _lint(installed, tmp_path)
    assert kept.returncode == 0 and "1 kept, 0 broken" in kept.stdout, kept.stdout + kept.stderr
    planted = tmp_path / "planted"
    shutil.copytree(installed, planted)
    (planted / "amptool" / "files" / "fileio.py").open("a").write(
        "\nimport amptool.train.loop  # back-arrow\n")
    (planted / "amptool" / "stats" / "judge.py").open("a").write(
        "\nimport amptool.documents.parity  # a back-arrow inside the core\n")
    (planted / "amptool" / "export" / "writer.py").open("a").write(
        "\nimport amptool.parity.report\n")
    broken = _lint(planted, tmp_path)
    assert broken.returncode != 0, broken.stdout
    assert "amptool.files.fileio -> amptool.train.loop" in broken.stdout
    assert "amptool.export.writer -> amptool.parity.report" in broken.stdout
    assert "amptool.stats.judge -> amptool.documents.parity" in broken.stdout


def test_every_core_module_is_in_the_layers_contract():
    """A new core module must be placed in the contract, or it would escape the check."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    layers = config["tool"]["importlinter"]["contracts"][0]["layers"]
    named = {m.strip() for layer in layers for m in layer.replace("|", ":").split(":")}
    core = ROOT / "src" / "amptool"
    modules = {f"amptool.{p.stem}" for p in core.glob("*.py") if p.stem != "__init__"}
    modules |= {f"amptool.{p.name}" for p in core.iterdir() if (p / "__init__.py").is_file()}
    modules |= {f"amptool.{t}" for t in SUBTREES}
    assert modules <= named, f"not in any layer: {sorted(modules - named)}"


CYCLES = """
import sys, grimp
# every import statement that runs, function-level ones too (one under TYPE_CHECKING never
# runs: the package names its public API so for type checkers)
graph = grimp.build_graph("amptool", exclude_type_checking_imports=True)
edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
index, low, stack, on, found = {}, {}, [], set(), []
def visit(v):
    index[v] = low[v] = len(index); stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        part = []
        while True:
            w = stack.pop(); on.discard(w); part.append(w)
            if w == v:
                break
        if len(part) > 1:
            found.append(sorted(part))
sys.setrecursionlimit(10000)
for m in sorted(edges):
    if m not in index:
        visit(m)
print(len(edges)); print(found)
"""


def _cycles(site: Path, cwd: Path) -> tuple:
    """(modules seen, cycles among them) of the amptool package installed in ``site``."""
    import ast

    done = subprocess.run([sys.executable, "-c", CYCLES], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env=dict(os.environ, PYTHONPATH=str(site)),
                          check=True)
    count, cycles = done.stdout.strip().splitlines()
    return int(count), ast.literal_eval(cycles)


@pytest.mark.slow
def test_no_module_cycle_counting_function_level_imports(installed, tmp_path):
    pytest.importorskip("grimp")
    seen, cycles = _cycles(installed, tmp_path)
    assert seen >= 80, f"only {seen} modules seen: the stages are not in the graph"
    assert cycles == [], f"modules that import each other back: {cycles}"
    planted = tmp_path / "planted"
    shutil.copytree(installed, planted)
    # inside a function, as hidden
    with (planted / "amptool" / "files" / "fileio.py").open("a") as f:
        f.write("\n\ndef _planted():\n    import amptool.runs.rundir  # noqa\n")
    _, cycles = _cycles(planted, tmp_path)
    assert any({"amptool.files.fileio", "amptool.runs.rundir"} <= set(c) for c in cycles), cycles


def test_each_stage_is_linked_into_the_core_folder():
    """Tools that walk the package's folder (import-linter through an editable install's
    finder) see every stage: src/amptool/<stage> is a link to the stage's folder."""
    for tree in SUBTREES:
        link = ROOT / "src" / "amptool" / tree
        assert link.is_symlink(), f"{link} is not a link"
        assert link.resolve() == (ROOT / tree).resolve(), f"{link} -> {link.resolve()}"
