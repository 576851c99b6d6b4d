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

START_UP = ("on the CLI start-up path (--help, usage errors), which the target is not on: "
            "every `amptool --help` would pay its import")
START_UP_NUMPY = "on the CLI start-up path (--help, usage errors): would import numpy"
KEEPS_LIGHT = ("the importing module imports no numpy at module level and the target does: "
               "importing the module stays light")
KEEPS_MINDSPORE_OUT = ("the importing module imports no MindSpore at module level; the target "
                       "(a sample network) does")
PATCHED = ("read at call time: tests replace it on its module (monkeypatch.setattr), which a "
           "name bound at import would not see")
CYCLE = "cycle: amptool.parity.shard imports amptool.parity.compare at module level"
SQLALCHEMY = ("imports SQLAlchemy, which only a command that opens a ledger pays for (not "
              "--help, nor a parity check without --ledger)")

_GROUPS: Dict[str, Tuple[str, ...]] = {
    CYCLE: (
        "amptool.parity.compare:_compare_all -> amptool.parity.shard",
    ),
    SQLALCHEMY: (
        "amptool.parity.compare:record -> amptool.ledger.store",
        "amptool.gate.ledger_cli:_filter -> amptool.ledger.store",
        "amptool.gate.ledger_cli:show_command -> amptool.gate.ledgerview",
        "amptool.gate.ledger_cli:show_command -> amptool.ledger.store",
        "amptool.gate.ledger_cli:trend_command -> amptool.gate.ledgerview",
        "amptool.gate.ledger_cli:trend_command -> amptool.gate.trend",
        "amptool.gate.ledger_cli:trend_command -> amptool.gate.trendpage",
        "amptool.gate.verify:verify -> amptool.ledger.store",
    ),
    START_UP_NUMPY: (
        "amptool.artefact:availability -> amptool.artefact.onnx",
        "amptool.artefact:reader -> amptool.artefact.air",
        "amptool.artefact:reader -> amptool.artefact.mindir",
        "amptool.artefact:reader -> amptool.artefact.onnx",
        "amptool.cli:run_command -> amptool.network.models",
        "amptool.pipeline:_run_stages -> amptool.parity.compare",
        "amptool.pipeline:_run_stages -> amptool.train.run",
        "amptool.pipeline:export_artefacts -> amptool.export.onnx",
        "amptool.precision.apply:cast_outputs -> amptool.network.models",
        "amptool.train.checks:_value_problems -> amptool.data.dataset",
        "amptool.train.checks:_task_problems -> amptool.network.losses",
        "amptool.train.checks:_reference_problems -> amptool.network.models",
        "amptool.train.checks:_reference_problems -> amptool.network.signature",
        "amptool.train.checks:_reference_problems -> amptool.data.sources",
        "amptool.train.cli:train_command -> amptool.network.models",
        "amptool.train.cli:_train -> amptool.train.run",
        "amptool.convert.ckpt:_reference -> amptool.network.models",
        "amptool.convert.ckpt:_plan -> amptool.network.models",
        "amptool.convert.ckpt:_beyond_fp16 -> amptool.precision.ranges",
        "amptool.convert.cli:policy_command -> amptool.network.models",
        "amptool.convert.cli:ckpt_command -> amptool.network.models",
        "amptool.convert.cli:search_command -> amptool.network.models",
        "amptool.convert.cli:_print_event -> amptool.precision.ranges",
        "amptool.convert.explain:explain_policy -> amptool.network.models",
        "amptool.convert.search:__getattr__ -> amptool.convert.judge",
        "amptool.convert.search:Trials.evaluate -> amptool.convert.judge",
        "amptool.convert.search:search_policy -> amptool.convert.subject",
        "amptool.convert.search:_search -> amptool.precision.ranges",
        "amptool.convert.search:_search -> amptool.convert.judge",
        "amptool.convert.search:_search -> amptool.convert.trace",
        "amptool.convert.search:_search -> amptool.convert.plot",
        "amptool.convert.search:_range_pass -> amptool.precision.ranges",
        "amptool.convert.search:_run_search -> amptool.convert.judge",
        "amptool.export.cli:export_command -> amptool.network.models",
        "amptool.export.loader:load_trained -> amptool.runs.trained",
        "amptool.export.writer:format_module -> amptool.export.air",
        "amptool.export.writer:format_module -> amptool.export.mindir",
        "amptool.export.writer:format_module -> amptool.export.onnx",
        "amptool.export.writer:_audit -> amptool.artefact.audit",
        "amptool.parity.cli:parity_command -> amptool.network.models",
        "amptool.parity.cli:measured -> amptool.parity.compare",
        "amptool.gate.verify_cli:verify_command -> amptool.gate.verify",
        "amptool.parity.config:ParityConfig.user_model -> amptool.network.models",
        "amptool.gate.diff_cli:diff_command -> amptool.gate.diff",
    ),
    START_UP: (
        "amptool.cli:run_command -> amptool.parity.report",
        "amptool.cli:_write_report -> amptool.parity.report",
        "amptool.cli:_write_report -> amptool.report.html",
        "amptool.pipeline:claim_out_folder -> amptool.runs.rundir",
        "amptool.pipeline:_run_stages -> amptool.parity.report",
        "amptool.pipeline:output_rows -> amptool.parity.report",
        "amptool.pipeline:_fixed -> amptool.parity.report",
        "amptool.train.checks:_folder_problems -> amptool.runs.rundir",
        "amptool.train.cli:_write_report -> amptool.report.html",
        "amptool.train.config:merge_previous -> amptool.runs.rundir",
        "amptool.train.config:claim_out_folder -> amptool.runs.rundir",
        "amptool.convert.ckpt:_reference -> amptool.runs.rundir",
        "amptool.export.cli:inspect_command -> amptool.export.inspect",
        "amptool.export.writer:_manifest -> amptool.export.manifest",
        "amptool.export.writer:_provenance -> amptool.export.manifest",
        "amptool.export.writer:_provenance -> amptool.documents.provenance",
        "amptool.parity.cli:emit_report -> amptool.parity.report",
        "amptool.parity.cli:emit_report -> amptool.report.html",
        "amptool.gate.diff_cli:diff_command -> amptool.gate.difftext",
        "amptool.gate.diff_cli:diff_command -> amptool.report.diff",
    ),
    KEEPS_MINDSPORE_OUT: (
        "amptool.network.models:sample_spec -> amptool.samples.models",
        "amptool.network.models:resolve_model -> amptool.samples.models",
        "amptool.export.onnx_compat:_rewrite_function -> amptool.export.onnx_ops",
    ),
    KEEPS_LIGHT: (
        "amptool.report.training:policy_reasons -> amptool.precision.ranges",
        "amptool.documents.parity:CandidateVerdict.cosine -> amptool.stats.judge",
        "amptool.train.worker:_train -> amptool.network.models",
        "amptool.train.worker:_train -> amptool.train.loop",
        "amptool.export.inspect:inspect_artefact -> amptool.artefact.runners",
        "amptool.export.onnx_check:_session -> amptool.artefact.onnx",
        "amptool.artefact.provenance:read_provenance -> amptool.artefact.mindir",
        "amptool.artefact.provenance:_encrypted -> amptool.artefact.mindir",
        "amptool.parity.shardworker:_work -> amptool.parity.compare",
        "amptool.parity.shardworker:_work -> amptool.parity.shard",
    ),
    PATCHED: (
        "amptool.artefact.runners:MindIRRunner.close -> amptool.runtime.device",
        "amptool.network.ckptstream:iter_checkpoint -> amptool.network.checkpoint",
        "amptool.runs.trained:TrainedModel.fp32_weights -> amptool.network.checkpoint",
        "amptool.convert.ckpt:_plan -> amptool.precision.apply",
        "amptool.export.split:check_free_space -> amptool.files.fileio",
    ),
}

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


def test_each_budget_entry_is_listed_once():
    keys = [key for keys in _GROUPS.values() for key in keys]
    assert len(keys) == len(set(keys)), sorted({k for k in keys if keys.count(k) > 1})
