"""Imports of amptool's own modules sit at module level, where the dependency graph shows them.

An import inside a function hides an edge of that graph. Each one that stays lazy is listed
in BUDGET with the reason it must: a new one fails here until it is moved up or listed, and
an entry whose import is gone fails until it is dropped.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"amptool": ROOT / "src" / "amptool", "amptool.train": ROOT / "train",
           "amptool.convert": ROOT / "convert", "amptool.export": ROOT / "export",
           "amptool.parity": ROOT / "parity", "amptool.gate": ROOT / "gate",
           "amptool.samples": ROOT / "samples"}

DISPATCH = ("the command's library, imported once when the command runs: the command line "
            "imports configs only, so `amptool --help` imports neither numpy nor MindSpore")
KEEPS_LIGHT = ("the importing module imports no numpy at module level and the target does: "
               "importing the module stays light")
KEEPS_MINDSPORE_OUT = ("the importing module imports no MindSpore at module level; the target "
                       "(a sample network) does")
SQLALCHEMY = ("imports SQLAlchemy, which only a check that names a ledger pays for (not "
              "--help, nor a parity check without --ledger)")
SCHEDULER = ("msrun starts this module as its scheduler too, which only serves the cluster: "
             "the work is imported by the ranks that do it")

_GROUPS: Dict[str, Tuple[str, ...]] = {
    DISPATCH: (
        "amptool.cli:pipeline_command -> amptool.pipeline",
        "amptool.train.cli:_train -> amptool.train.run",
        "amptool.export.cli:export_command -> amptool.export.api",
        "amptool.export.cli:inspect_command -> amptool.export.inspect",
        "amptool.parity.cli:parity_command -> amptool.parity.command",
        "amptool.convert.cli:policy_command -> amptool.convert.explain",
        "amptool.convert.cli:ckpt_command -> amptool.convert.ckpt",
        "amptool.convert.cli:search_command -> amptool.convert.search",
        "amptool.gate.diff_cli:diff_command -> amptool.gate.diffcommand",
        "amptool.gate.ledger_cli:_engine -> amptool.gate.ledgercommand",
        "amptool.gate.verify_cli:verify_command -> amptool.gate.verify",
    ),
    KEEPS_MINDSPORE_OUT: (
        "amptool.network.models:sample_spec -> amptool.samples.models",
        "amptool.network.models:resolve_model -> amptool.samples.models",
        "amptool.export.onnx_compat:_rewrite_function -> amptool.export.onnx_ops",
    ),
    SCHEDULER: (
        "amptool.train.worker:_train -> amptool.network.models",
        "amptool.train.worker:_train -> amptool.train.loop",
        "amptool.parity.shardworker:_work -> amptool.parity.compare",
        "amptool.parity.shardworker:_work -> amptool.parity.shard",
    ),
    KEEPS_LIGHT: (
        "amptool.documents.parity:CandidateVerdict.cosine -> amptool.stats.judge",
    ),
    SQLALCHEMY: (
        "amptool.parity.compare:record -> amptool.ledger.store",
    ),
}

LIMIT = 20
"""The most function-level imports of amptool's own modules the tree may hold."""

BUDGET: Dict[str, str] = {key: reason for reason, keys in _GROUPS.items() for key in keys}


def _modules() -> Iterator[Tuple[str, Path, bool]]:
    """(dotted name, file, is a package's __init__) of each source file, each once: the stage
    folders are walked where they live, not through the core folder's links to them."""
    for package, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if package == "amptool" and (folder / parts[0]).is_symlink():
                continue
            is_init = parts[-1] == "__init__"
            if is_init:
                parts = parts[:-1]
            yield ".".join([package, *parts]), path, is_init


def _targets(node, module: str, is_init: bool, known: set) -> List[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = module if is_init else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            anchor = anchor.rpartition(".")[0]
        base = f"{anchor}.{base}" if base else anchor
    subs = [f"{base}.{alias.name}" for alias in node.names]
    return subs if all(s in known for s in subs) else [base]


def _function_imports(tree) -> Iterator[Tuple[str, ast.AST]]:
    """(qualified function name, import statement) of each import inside a function."""
    def walk(node, name: str, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{name}.{child.name}" if name else child.name
                yield from walk(child, inner, in_function or not isinstance(child, ast.ClassDef))
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                if in_function:
                    yield name, child
            else:
                yield from walk(child, name, in_function)
    yield from walk(tree, "", False)


def lazy_imports() -> Tuple[List[str], int]:
    """(``module:function -> imported module`` of each function-level import of an amptool
    module, the number of function-level import statements of any module)."""
    modules = list(_modules())
    known = {name for name, _, _ in modules}
    own, statements = [], 0
    for name, path, is_init in modules:
        for function, node in _function_imports(ast.parse(path.read_text(), str(path))):
            statements += 1
            for target in _targets(node, name, is_init, known):
                if target == "amptool" or target.startswith("amptool."):
                    own.append(f"{name}:{function} -> {target}")
    return own, statements


def test_each_lazy_import_of_an_own_module_has_a_reason():
    found, _ = lazy_imports()
    unlisted = sorted(set(found) - set(BUDGET))
    gone = sorted(set(BUDGET) - set(found))
    assert not unlisted, ("imports of amptool modules inside functions: move them to module "
                          "level, or add them to BUDGET with the reason they must stay lazy:\n"
                          + "\n".join(unlisted))
    assert not gone, "BUDGET entries whose import is gone: drop them\n" + "\n".join(gone)


def test_the_budget_stays_small():
    assert len(BUDGET) <= LIMIT, (f"{len(BUDGET)} function-level imports of amptool's own "
                                  f"modules: at most {LIMIT}; move some to module level")


def test_each_budget_entry_is_listed_once():
    keys = [key for keys in _GROUPS.values() for key in keys]
    assert len(keys) == len(set(keys)), sorted({k for k in keys if keys.count(k) > 1})


CONFIGS = ("amptool.train.config", "amptool.export.config", "amptool.convert.config",
           "amptool.parity.config", "amptool.pipelineconfig")
"""Each stage's config module: the command line imports these and no engine."""
HEAVY = ("numpy", "mindspore")

_CHECK = """
import importlib, json, sys
found = {}
for name in sys.argv[1:]:
    importlib.import_module(name)
    found[name] = sorted(m for m in %r if m in sys.modules)
print(json.dumps(found))
""" % (HEAVY,)


def heavy_imports(modules, path=()) -> dict:
    """module -> the heavy packages in ``sys.modules`` once it is imported, in one fresh
    interpreter importing ``modules`` in turn (``path``: folders put first on its path)."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, path), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", _CHECK, *modules], capture_output=True,
                          text=True, env=env, timeout=120, check=True)
    return json.loads(done.stdout)


def test_config_modules_import_neither_numpy_nor_mindspore(tmp_path):
    (tmp_path / "planted_config.py").write_text("import numpy\n")
    found = heavy_imports(CONFIGS + ("planted_config",), [tmp_path])
    assert found.pop("planted_config") == ["numpy"]  # the check sees a config that does
    assert found == {name: [] for name in CONFIGS}
