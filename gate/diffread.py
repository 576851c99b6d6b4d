"""The two reports ``amptool diff`` compares: read from a parity report (``parity.json``,
``--json-out``), a run folder holding one (``amptool run --out``) or its ``summary.json``,
each held to its published type at the door; and the refusal of two reports that are not
of one model on the same inputs.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional, Tuple, Union

from amptool.documents.door import read_document
from amptool.documents.parity import PARITY_REPORT, ParityReport
from amptool.documents.summary import SUMMARY
from amptool.errors import UsageError

REPORT_NAME = "parity.json"
"""The parity report's name in a run folder (``amptool run --out``)."""
SUMMARY_NAME = "summary.json"
"""The pipeline's summary in a run folder, beside its parity report."""

Source = Union[str, Path, ParityReport]


def read_report(source: Source, role: str = "report") -> Tuple[ParityReport, str]:
    """(the typed report, the file it was read from) of ``source``: a parity report's JSON,
    a run folder holding ``parity.json``, or that folder's ``summary.json``; a
    ``ParityReport`` is taken as it is. ``role`` names it in errors (BASE, NEW)."""
    if isinstance(source, ParityReport):
        return source, f"{role} (in memory)"
    path = report_file(Path(source), role)
    report = read_document(PARITY_REPORT, _load(path, role), path)
    return _legacy(report), str(path)


def report_file(path: Path, role: str) -> Path:
    """The parity report ``path`` names: itself, or the one in (or beside) a run's folder
    (or summary)."""
    if not path.exists():
        raise UsageError(f"{role} {path} does not exist",
                         "give a parity report (parity.json) or an 'amptool run' folder")
    if path.is_dir():
        if (path / REPORT_NAME).is_file():
            return path / REPORT_NAME
        held = " (only summary.json)" if (path / SUMMARY_NAME).is_file() else ""
        raise UsageError(f"{role} {path} is a folder without {REPORT_NAME}{held}",
                         "give a parity report (amptool parity --json-out FILE) or an "
                         "'amptool run --out' folder")
    if path.name == SUMMARY_NAME or _is_summary(path):
        read_document(SUMMARY, _load(path, role), path)
        beside = path.parent / REPORT_NAME
        if not beside.is_file():
            raise UsageError(f"{role} {path} is a run summary without {REPORT_NAME} beside "
                             "it (the figures compared are in the parity report)",
                             "give the run's parity.json, or the run folder with it")
        return beside
    return path


def _is_summary(path: Path) -> bool:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and "artefacts" in doc and "train" in doc


def _load(path: Path, role: str) -> str:
    try:
        text = path.read_text(encoding="utf-8")
        json.loads(text)
        return text
    except UnicodeDecodeError:
        raise UsageError(f"{role} {path} is not a JSON text file",
                         "give a parity report (parity.json)") from None
    except ValueError as exc:
        raise UsageError(f"{role} {path} is not valid JSON ({exc})",
                         "give a parity report (parity.json) as amptool wrote it") from None
    except OSError as exc:
        raise UsageError(f"cannot read {role} {path}: {exc.strerror or exc}",
                         "check the path and its permissions") from None


def _legacy(report: ParityReport) -> ParityReport:
    """A report written before ``schema_version`` existed, with the keys added since: no
    targets."""
    if report.inputs.targets is not None:
        return report
    return replace(report, inputs=replace(report.inputs, targets=[]))


# -- what the two reports must share ---------------------------------------------------------

_FOLDERS = re.compile(r"(?:[^\s:;,()'\"/\\]*[/\\])+")


def without_folders(text: str) -> str:
    """``text`` with every path cut to its file name (checkouts and CI jobs differ in their
    folders, not in the data they name)."""
    return _FOLDERS.sub("", text)


def model_name(model: Any) -> Optional[str]:
    """The model a report's reference records, as a comparable name (None: not recorded)."""
    if isinstance(model, dict):
        model = model.get("model") or model.get("spec") or model.get("name")
    return without_folders(str(model)) if model else None


def inputs_identity(report: ParityReport) -> tuple:
    """What makes two reports' inputs the same: the samples counted, the labels and targets,
    and the data they came from (the description's words, folders left out)."""
    inputs = report.inputs
    words = without_folders(inputs.description)
    if words.startswith("golden "):  # the stored reference's outputs, on its inputs
        words = words[len("golden "):]
    return (inputs.samples, inputs.labels, inputs.labels_from, tuple(inputs.targets or ()),
            words)


def check_same_subject(base: ParityReport, new: ParityReport, base_path: str,
                       new_path: str) -> None:
    """Refuse two reports of different models or on different inputs (one UsageError)."""
    old_model, new_model = model_name(base.reference.model), model_name(new.reference.model)
    if old_model and new_model and old_model != new_model:
        raise UsageError(f"BASE {base_path} and NEW {new_path} are reports of different "
                         f"models ({old_model}, {new_model})",
                         "compare two reports of one model")
    old, now = inputs_identity(base), inputs_identity(new)
    if old != now:
        raise UsageError(f"BASE {base_path} and NEW {new_path} judged different inputs "
                         f"({_inputs_text(base)}; {_inputs_text(new)})",
                         "compare reports made on the same inputs (the same --data and "
                         "--samples)")


def _inputs_text(report: ParityReport) -> str:
    inputs = report.inputs
    labels = f", labels {inputs.labels_from}" if inputs.labels else ", no labels"
    return f"{without_folders(inputs.description)}{labels}"
