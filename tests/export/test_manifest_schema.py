"""Every manifest export writes fits its types (``Manifest``, schema_version 1); a manifest
edited by hand is refused at the door by the real CLI, one line naming file and field."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amptool.cli import app
from schemas import assert_fits

from amptool.documents.manifest import MANIFEST, MANIFEST_VERSION, read_manifest

pytestmark = pytest.mark.slow  # exports a real network (once per session)

cli = CliRunner()


def test_every_exported_manifest_fits(simplecnn_export):
    for (fmt, precision), path in simplecnn_export.items():
        doc = json.loads(Path(path + ".json").read_text())
        assert doc["schema_version"] == MANIFEST_VERSION, (fmt, precision)
        assert_fits(doc, "manifest", f"{fmt} {precision}")
        assert MANIFEST.json(read_manifest(path)) == doc


def _copy(simplecnn_export, tmp_path: Path, edit) -> Path:
    """The fp16 MINDIR and its manifest in ``tmp_path``, the manifest passed through ``edit``."""
    src = Path(simplecnn_export[("MINDIR", "fp16")])
    dst = tmp_path / src.name
    shutil.copyfile(src, dst)
    doc = json.loads(Path(str(src) + ".json").read_text())
    edit(doc)
    Path(str(dst) + ".json").write_text(json.dumps(doc, indent=2))
    return dst


def _error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("amptool: error: manifest "), result.output
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("edit,said,fix", [
    (lambda d: d["params"].update(bytes="abc"),
     "field 'params.bytes' should be an integer, got 'abc'", "export the artefact again"),
    (lambda d: d["batch"].pop("dynamic"), "field 'batch.dynamic' is missing",
     "export the artefact again"),
    (lambda d: d.pop("files"), "field 'files' is missing", "export the artefact again"),
    (lambda d: d.update(schema_version=MANIFEST_VERSION + 1),
     f"field 'schema_version' is {MANIFEST_VERSION + 1}, newer than", "upgrade amptool"),
])
def test_inspect_refuses_a_hand_edited_manifest(simplecnn_export, tmp_path, edit, said, fix):
    artefact = _copy(simplecnn_export, tmp_path, edit)
    line = _error_line(cli.invoke(app, ["inspect", str(artefact)]))
    assert f"{artefact}.json: {said}" in line and line.endswith(f"; {fix}"), line


def test_parity_refuses_a_hand_edited_candidate_manifest(simplecnn_export, tmp_path):
    artefact = _copy(simplecnn_export, tmp_path, lambda d: d["model"].update(num_classes="ten"))
    line = _error_line(cli.invoke(app, ["parity", simplecnn_export[("MINDIR", "fp32")],
                                        str(artefact)]))
    assert "field 'model.num_classes' should be an integer, got 'ten'" in line, line


def test_a_manifest_from_before_schema_version_is_read(simplecnn_export, tmp_path):
    def older(doc):
        for key in ("schema_version", "files", "total_size", "deployment", "task"):
            del doc[key]
        for key in ("args", "input_spec", "inputs"):
            del doc["model"][key]

    artefact = _copy(simplecnn_export, tmp_path, older)
    result = cli.invoke(app, ["inspect", str(artefact)])
    assert result.exit_code == 0, result.output
    assert "not recorded" in result.output
