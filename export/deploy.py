"""Deployment settings: the runtime options that keep an artefact's fp32 cells in fp32.

An fp16 graph that keeps cells in fp32 (a policy's ``fp32_cells``/``fp32_types``, O2's
BatchNorm/LayerNorm, ``--policy auto``) relies on the runtime computing them in fp32.
Ascend runtimes choose operator precision at run time: MindSpore Lite's ``[ascend_context]
precision_mode`` defaults to ``enforce_fp16`` and ATC's ``--precision_mode`` to
``force_fp16`` for inference, both of which compute an fp32 operator in fp16 where the
operator supports fp16. Beside such an artefact the export writes

- ``<artefact>.lite.ini``: a MindSpore Lite config file, ``[ascend_context]`` with
  ``precision_mode=enforce_origin`` (keep the dtypes of the graph);
- ``<artefact>.atc.txt``: the matching ATC/ACL option line,
  ``--precision_mode=must_keep_origin_dtype``.

Both keep every operator in the dtype the graph gives it, which is the mixed precision
parity checked: the fp16 cells stay fp16, the kept cells fp32. An artefact that keeps no
cell in fp32 gets no files; its manifest's ``deployment`` section says none are needed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from amptool.documents.manifest import Deployment

LITE_MODE = "enforce_origin"
"""MindSpore Lite ``[ascend_context] precision_mode``: keep the model's own dtypes."""
ACL_MODE = "must_keep_origin_dtype"
"""ATC/ACL ``--precision_mode`` (and MindSpore's Ascend ``precision_mode``): the same."""
LITE_DEFAULT = "enforce_fp16"
ATC_DEFAULT = "force_fp16"
LITE_SUFFIX = ".lite.ini"
ATC_SUFFIX = ".atc.txt"

WHY = (f"the graph computes in float16 except the cells kept in float32; Ascend runtimes pick "
       f"operator precision at run time and their defaults (MindSpore Lite {LITE_DEFAULT}, "
       f"ATC {ATC_DEFAULT} for inference) would compute the kept cells in float16; "
       f"{LITE_MODE} / {ACL_MODE} keep every operator in the dtype this graph gives it, the "
       "mixed precision parity checked (enforce_fp32 would lift the fp16 cells to fp32 too, "
       f"and ATC's allow_fp32_to_fp16 computes matrix operators in fp16 even in kept cells)")
NONE_FP16 = "every cell computes in float16: no cell relies on the runtime keeping it in float32"
NONE_FP32 = (f"float32 graph: no float16 cells beside kept ones (Ascend's defaults, MindSpore "
             f"Lite {LITE_DEFAULT} and ATC {ATC_DEFAULT}, would compute it in float16, which "
             "parity did not check: deploy the fp16 artefact, or this one under "
             f"{LITE_MODE} / {ACL_MODE})")


def settings_paths(artefact: str | Path) -> dict:
    """kind -> path of the settings files beside ``artefact`` (whether written or not)."""
    artefact = Path(artefact)
    return {"mindspore_lite_config": artefact.with_name(artefact.name + LITE_SUFFIX),
            "atc_options": artefact.with_name(artefact.name + ATC_SUFFIX)}


def settings_texts() -> dict:
    """kind -> the text of each settings file."""
    return {"mindspore_lite_config": f"[ascend_context]\nprecision_mode={LITE_MODE}\n",
            "atc_options": f"--precision_mode={ACL_MODE}\n"}


def deployment_section(precision: str, kept: list, files: dict) -> dict:
    """The manifest's ``deployment``: ``files`` is kind -> (file name, sha256) of the
    written settings (empty when none are needed)."""
    if not kept:
        return {"needed": False, "kept_fp32": [], "precision_mode": None, "files": [],
                "why": NONE_FP32 if precision == "fp32" else NONE_FP16}
    return {"needed": True, "kept_fp32": kept,
            "precision_mode": {"mindspore_lite": LITE_MODE, "acl": ACL_MODE},
            "files": [{"kind": kind, "name": name, "sha256": digest}
                      for kind, (name, digest) in files.items()],
            "why": WHY}


def kept_names(section: Optional[Deployment]) -> str:
    """'norm (L2Normalize), ...' of a deployment section ('' when none)."""
    cells = section.kept_fp32 if section else []
    return ", ".join(f"{c.path or '(network)'} ({c.type})" for c in cells)


def summary_line(section: Optional[Deployment]) -> str:
    """One line for the command line: the settings files and why, or that none are needed."""
    if not section:
        return "deployment settings: not recorded (exported before amptool wrote them)"
    if not section.needed:
        return "deployment settings: none needed"
    names = ", ".join(f.name for f in section.files)
    mode = section.precision_mode or {}
    return (f"deployment settings: {names} (Lite precision_mode={mode.get('mindspore_lite')}, "
            f"ATC --precision_mode={mode.get('acl')}) keep {kept_names(section)} in fp32")
