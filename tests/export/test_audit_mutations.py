"""The mutation suite of the precision audit: demotions and promotions planted in real MindIR
and ONNX files amptool exported (fp16 graphs keeping cells in fp32: trapmlp's norm, the
residual sample's batch normalizations), one edit each, as a later tool or an exporter bug
would make them (``mutations``). Every one is caught.

Caught means the audit of the mutant has a finding its healthy original has not. A node's
dtype edited, or a weight stored in the other precision, is an error. A Cast retargeted is
one too wherever a node computes differently for it; where none does (a cast pair that
then cancels, or a cast written in the model's code that the policy says nothing about),
the casts that now do nothing are what the audit reports."""
from __future__ import annotations

from pathlib import Path

import pytest

from amptool.artefact.audit import audit_artefact
from amptool.artefact.provenance import read_provenance

from .mutations import _load, mindir_mutations, onnx_mutations, write_mutant

pytestmark = pytest.mark.slow  # trains and exports real networks

NETWORKS = ("trapmlp", "resnet")


def _mutations(path: Path) -> list:
    kept = read_provenance(path).kept_paths()
    model = _load(path)
    return mindir_mutations(model, kept) if path.suffix == ".mindir" else \
        onnx_mutations(model, kept)


def _texts(report) -> set:
    return {(f.kind, f.text) for f in report.findings}


@pytest.mark.parametrize("fmt", ["MINDIR", "ONNX"])
def test_every_planted_demotion_and_promotion_is_caught(fmt, exports, tmp_path):
    caught, missed, counts = [], [], {"demotion": 0, "promotion": 0}
    for name in NETWORKS:
        source = Path(exports.get(name)[(fmt, "fp16")].path)
        healthy = audit_artefact(source)
        assert healthy.findings == []
        for i, mutation in enumerate(_mutations(source)):
            mutant = write_mutant(source, tmp_path / f"{name}-{i}", mutation)
            report = audit_artefact(mutant)
            new = _texts(report) - _texts(healthy)
            counts[mutation.kind] += 1
            retarget = mutation.label.startswith("retarget Cast")
            if report.errors or (retarget and new):
                caught.append(mutation.label)
            else:
                missed.append((mutation.label, sorted(new)))
    assert not missed, missed
    assert counts["demotion"] >= 5 and counts["promotion"] >= 5, counts
    assert len(caught) >= 20, len(caught)


def test_the_kept_cells_demotions_are_errors_naming_node_and_cell(exports, tmp_path):
    """Each compute node of trapmlp's kept cell norm demoted in the MindIR: an error naming
    that node and the cell."""
    source = Path(exports.get("trapmlp")[("MINDIR", "fp16")].path)
    demotions = [m for m in _mutations(source) if m.label.startswith("demote ")]
    assert demotions and all(" of kept cell norm" in m.label for m in demotions)
    for i, mutation in enumerate(demotions):
        report = audit_artefact(write_mutant(source, tmp_path / str(i), mutation))
        node = mutation.label.split()[2]
        first = report.errors[0]
        assert (first.kind, first.node, first.cell) == ("demoted", node, "norm"), first
        assert first.text == f"node {node} ({mutation.label.split()[1]}) of cell norm " \
                             "(kept in fp32) computes in float16"
