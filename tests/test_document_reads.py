"""The documents amptool writes are typed objects inside the code, not dicts: outside the
modules that read and write them, nothing reads one of them by key.

Counted as ``tests/test_sizes.py`` counts lines: over the core and the stages, every
``x["key"]`` and ``x.get("key")`` whose ``x`` is a name or attribute chain naming one of the
documents (``manifest``, ``self.manifest``, ``info["config"]``, ``event``). ``BUDGET`` holds
what is left for each, with why: a new read fails here, and so does a budget above the count.
The manifest's is zero; run.json's and the progress events' are what remains to type.
"""
import ast
from pathlib import Path

from test_sizes import ROOT, modules

DOCUMENTS = {
    "manifest": {"manifest"},
    "run record": {"info", "run_info"},
    "progress event": {"event"},
}
"""Each document, by the names the code gives it."""
READERS = ("src/amptool/documents/",)
"""Where the documents are read and written: their keys are read there, once."""
OTHER_MEANING = {"run record": ("export/onnx.py", "src/amptool/files/fileio.py",
                                "src/amptool/runtime/jobwatch.py")}
"""Modules where a document's name holds something else (an ONNX tensor's external data, a
lock's owner, an msrun process)."""
STILL_A_DICT = "still a dict from creation to file: to be typed as the manifest is"
BUDGET = {"manifest": (0, "typed from build_manifest to the file and back (read_manifest)"),
          "run record": (0, "typed from the training run that makes it to the file and back "
                            "(RunDir.read)"),
          "progress event": (0, "typed from creation to the printers (amptool.documents.events)")}
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
    text = ("def precision(art, info):\n"
            "    return art.manifest['precision'], art.manifest.precision, info.get('device'),"
            " info.device, {'precision': 1}['precision']\n")
    found = reads_in(text)
    assert found["manifest"] == ["2: art.manifest['precision']"]
    assert found["run record"] == ["2: info['device']"]
    assert not found["progress event"]
    assert ROOT.is_dir() and isinstance(ROOT, Path)


def test_a_planted_read_in_the_tree_fails(monkeypatch):
    """``manifest["precision"]`` planted in a stage module is over the manifest's budget."""
    import test_document_reads as me

    real = Path.read_text
    planted = "manifest = {}\nprecision = manifest['precision']\n"

    def read_text(path, *args, **kwargs):
        text = real(path, *args, **kwargs)
        return text + planted if path.name == "inspect.py" else text

    monkeypatch.setattr(Path, "read_text", read_text)
    assert len(me.counted()["manifest"]) == BUDGET["manifest"][0] + 1
