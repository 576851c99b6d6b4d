"""The run folder of ``amptool train``: ``run.json`` plus the ``best``/``last`` checkpoints.

Every stage that reads a training run goes through ``RunDir``: one reader of run.json
(validated once, the same way everywhere) and one rule for finding checkpoints.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from amptool.documents.door import read_document
from amptool.documents.records import RUN, RunRecord
from amptool.errors import UsageError
from amptool.files.fileio import write_json
from amptool.network.trust import recorded_reference

CHECKPOINTS = ("best", "last")
CKPT_SUFFIXES = (".ckpt", ".safetensors")


class RunDir:
    """A training output folder."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    @property
    def info_path(self) -> Path:
        return self.path / "run.json"

    def has_info(self) -> bool:
        return self.info_path.is_file()

    def require(self) -> "RunDir":
        """This folder exists and holds a run.json, or a UsageError naming the fix."""
        if not self.path.is_dir():
            raise UsageError(f"run folder {self.path} does not exist",
                             "pass the --out folder of amptool train")
        if not self.has_info():
            raise UsageError(f"{self.path} has no run.json",
                             "pass the --out folder of amptool train")
        return self

    def read(self) -> RunRecord:
        """run.json, read into its ``RunRecord`` (a UsageError names the file and the field
        that does not fit): config, policy and data (its preprocess a mapping for image
        models, null for inputs fed as they are) at least."""
        self.require()
        try:
            return read_document(RUN, self.info_path.read_text(encoding="utf-8"),
                                 self.info_path)
        except (OSError, ValueError) as exc:  # unreadable, or no JSON
            raise UsageError(f"{self.info_path} cannot be read ({type(exc).__name__})",
                             RUN.fix) from None

    def read_optional(self) -> Optional[RunRecord]:
        """run.json when there is one (read as ``read`` does), else None."""
        return self.read() if self.has_info() else None

    def previous_config(self) -> dict:
        """The settings the run in this folder was started with (empty when none)."""
        if not self.has_info():
            return {}
        config = dict(self.read().config)
        config.pop("resume", None)
        return config

    def model_reference(self, info: Optional[RunRecord] = None) -> dict:
        """The model run.json names, as a reference ``resolve_model`` vets before running
        any of its code (see trust.vet_recorded)."""
        info = info if info is not None else self.read()
        kept = {"file": info.model.file, "sha256": info.model.sha256} if info.model else None
        return recorded_reference(info.settings.model_reference(), kept, self.info_path,
                                  self.path)

    def write(self, info: RunRecord) -> None:
        write_json(self.info_path, RUN.json(info))

    def trained_files(self) -> list:
        """The files that make this folder a trained run: its best/last checkpoints and the
        run.json beside them (empty for a new folder, and for one whose run stopped before
        its first checkpoint: it holds nothing trained, see ``unfinished_files``)."""
        checkpoints = [self.path / f"{w}{s}" for w in CHECKPOINTS for s in CKPT_SUFFIXES]
        found = [p for p in checkpoints if p.is_file()]
        return ([self.info_path] if found and self.has_info() else []) + found

    def unfinished_files(self) -> list:
        """The run.json of a run that stopped (killed) before its first checkpoint, when
        there is no checkpoint beside it; empty otherwise."""
        return [self.info_path] if self.has_info() and not self.trained_files() else []

    def checkpoint_path(self, which: str, fmt: str = "ckpt") -> Path:
        """Where ``which`` (best or last) is written in format ``fmt``."""
        return self.path / f"{which}.{'safetensors' if fmt == 'safetensors' else 'ckpt'}"

    def find_checkpoint(self, which: Optional[str] = None) -> Path:
        """``which`` (best or last) in either format; None means best, else last."""
        if which is not None and which not in CHECKPOINTS:
            raise UsageError(f"unknown checkpoint '{which}'", "use best or last")
        for name in ((which,) if which else CHECKPOINTS):
            for suffix in CKPT_SUFFIXES:
                candidate = self.path / f"{name}{suffix}"
                if candidate.is_file():
                    return candidate
        wanted = " or ".join(f"{w}{s}" for w in ((which,) if which else CHECKPOINTS)
                             for s in CKPT_SUFFIXES)
        raise UsageError(f"{self.path} holds no checkpoint ({wanted})",
                         "train into that folder first, or pass --ckpt FILE")


def is_checkpoint_file(path: str | os.PathLike) -> bool:
    return Path(path).suffix in CKPT_SUFFIXES
