"""The documents amptool writes are typed objects inside the code, not dicts: outside the
modules that read and write them, nothing reads one of them by key.

Counted as ``tests/test_sizes.py`` counts lines: over the core and the stages, every
``x["key"]`` and ``x.get("key")`` whose ``x`` is a name or attribute chain naming one of the
documents (``manifest``, ``self.manifest``, ``info["config"]``, ``event``). ``BUDGET`` holds
what is left for each, with why: a new read fails here, and so does a budget above the count.
Every document's is zero: each is typed from creation to file.
"""
import ast
from pathlib import Path

import pytest

from test_sizes import ROOT, modules

DOCUMENTS = {
    "manifest": {"manifest"},
    "run record": {"info", "run_info"},
    "progress event": {"event"},
    "candidate result": {"result", "results"},
    "finding": {"finding", "findings", "note", "notes", "culprit"},
}
"""Each document, by the names the code gives it (a candidate's result and its findings are
parts of the parity report, typed as they are made)."""
READERS = ("src/amptool/documents/",)
"""Where the documents are read and written: their keys are read there, once."""
OTHER_MEANING = {"run record": ("export/onnx.py", "src/amptool/files/fileio.py",
                                "src/amptool/runtime/jobwatch.py"),
                 "finding": ("export/cli.py", "train/overflow.py")}
"""Modules where a document's name holds something else (an ONNX tensor's external data, a
lock's owner, an msrun process; an export's precision audit notes, the cell a diverged run's
forensics name)."""
TYPED = "typed from creation to file: read by attribute"
BUDGET = {"manifest": (0, "typed from build_manifest to the file and back (read_manifest)"),
          "run record": (0, "typed from the training run that makes it to the file and back "
                            "(RunDir.read)"),
          "progress event": (0, "typed from creation to the printers (amptool.documents.events)"),
          "candidate result": (0, "typed from finish_candidate to parity.json: localization, "
                                  "the culprit and the fp16 label add theirs with replace"),
          "finding": (0, TYPED)}
"""Reads by key left, by document, with why."""


def _chain(node: ast.AST) -> set:
    """The names along ``a.b["c"].d``: {"a", "b", "d"}."""
    names: set = set()
    while True:
        if isinstance(node, ast.Name):
            return names | {node.id}
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return names


def _key_reads(tree: ast.AST):
    """(base expression, key) of every read by a string key in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, str):
            yield node.value, node.slice.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            yield node.func.value, node.args[0].value


def reads_in(text: str) -> dict:
    """Document -> ["line: base[key]"] of the reads by key in one module's ``text``."""
    found: dict = {doc: [] for doc in DOCUMENTS}
    for base, key in _key_reads(ast.parse(text)):
        names = _chain(base)
        for doc, words in DOCUMENTS.items():
            if names & words:
                found[doc].append(f"{base.lineno}: {ast.unparse(base)}[{key!r}]")
    return found


def counted() -> dict:
    every: dict = {doc: [] for doc in DOCUMENTS}
    for name, path in sorted(modules().items()):
        if name.startswith(READERS):
            continue
        for doc, reads in reads_in(path.read_text(encoding="utf-8")).items():
            if name not in OTHER_MEANING.get(doc, ()):
                every[doc] += [f"{name}:{r}" for r in reads]
    return every


def test_no_document_is_read_by_key_outside_its_readers():
    every = counted()
    over = {doc: reads for doc, reads in every.items() if len(reads) > BUDGET[doc][0]}
    assert not over, "read by key instead of by attribute: " + "; ".join(
        f"{doc} ({len(r)} > {BUDGET[doc][0]}): {r[:8]}" for doc, r in over.items())
    under = {doc: len(r) for doc, r in every.items() if len(r) < BUDGET[doc][0]}
    assert not under, f"lower BUDGET to the count: {under}"


def test_a_planted_read_by_key_is_counted():
    text = ("def precision(art, info, event, result):\n"
            "    return art.manifest['precision'], art.manifest.precision, info.get('device'),"
            " info.device, {'precision': 1}['precision'], event['kind'], event.kind,"
            " result.findings[0]['fix'], result.findings[0].fix\n")
    found = reads_in(text)
    assert found["manifest"] == ["2: art.manifest['precision']"]
    assert found["run record"] == ["2: info['device']"]
    assert found["progress event"] == ["2: event['kind']"]
    assert found["candidate result"] == found["finding"] == ["2: result.findings[0]['fix']"]
    assert ROOT.is_dir() and isinstance(ROOT, Path)


PLANTED = {"manifest": "manifest = {}\nprecision = manifest['precision']\n",
           "run record": "info = {}\nmodel = info.get('config')\n",
           "progress event": "def said(event):\n    return event['kind']\n",
           "candidate result": "def passed(results):\n    return results[0]['passed']\n",
           "finding": "def fix(finding):\n    return finding.get('fix')\n"}


def test_a_planted_read_in_the_tree_fails(monkeypatch):
    """A read by key of each document, planted in a stage module, puts that document (and
    only it) one over its budget, and the test above names each (one scan of the tree for
    all five)."""
    import test_document_reads as me

    real = Path.read_text

    def read_text(path, *args, **kwargs):
        text = real(path, *args, **kwargs)
        return text + "".join(PLANTED.values()) if path.name == "inspect.py" else text

    monkeypatch.setattr(Path, "read_text", read_text)
    counts = {doc: len(reads) for doc, reads in me.counted().items()}
    assert counts == {doc: BUDGET[doc][0] + 1 for doc in DOCUMENTS}
    with pytest.raises(AssertionError) as said:
        me.test_no_document_is_read_by_key_outside_its_readers()
    for doc in DOCUMENTS:
        assert f"{doc} (1 > 0)" in str(said.value)
