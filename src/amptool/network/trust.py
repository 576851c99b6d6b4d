"""Whose model code may run: the per-user trust store and the vetting of recorded references.

A model file named on the command line runs because the user named it, and its sha256 is
remembered in a trust store that belongs to the user, outside any project folder:
``$AMPTOOL_TRUST_STORE`` if set, else ``$XDG_CONFIG_HOME/amptool/trusted.json``, else
``~/.config/amptool/trusted.json``. A reference read from a file (run.json, a manifest, a
checkpoint's metadata) names code the user may never have seen: a ``file.py:factory``
runs only from the copy its folder keeps, with the recorded sha256, when that sha256 is in
the store; a ``package.module:factory`` only from a trusted package; a sample always.
A run folder keeps a copy of the code its user named (``keep_model_file``,
``keep_code_file``), remembered as trusted.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Iterator, Optional

from amptool.errors import UsageError
from amptool.files.fileio import sha256, write_bytes, write_json
from amptool.samples import NAMES

STORE_ENV = "AMPTOOL_TRUST_STORE"
"""The trust store's path, overriding the one under the user's configuration folder."""
CONFIG_HOME_ENV = "XDG_CONFIG_HOME"
"""The user's configuration folder (else ``~/.config``): the trust store is
``amptool/trusted.json`` in it unless ``AMPTOOL_TRUST_STORE`` names another file."""
PACKAGES_ENV = "AMPTOOL_TRUST_PACKAGES"
"""Comma-separated packages whose model factories a run.json or manifest may name."""
TRUSTED_PACKAGES = ("mindcv", "mindnlp", "mindocr", "mindone", "mindyolo")
"""Model zoos trusted by default (with the samples)."""
SAMPLE_CODE = "amptool.samples."
"""Losses and metrics shipped with the samples (``amptool.samples.losses:...``) run from a
run.json's word, as sample models do."""
KEPT_FOLDER = "model"
"""Where a run or export folder keeps a copy of the model file it was made with."""
TRUST_FLAG = "--trust-model"
"""The command-line flag that trusts the model code a folder keeps."""


def store_path() -> Path:
    """Where this user's trust store is (it need not exist yet)."""
    given = os.environ.get(STORE_ENV, "").strip()
    if given:
        return Path(given).expanduser()
    base = os.environ.get(CONFIG_HOME_ENV, "").strip()
    if not base:
        try:
            base = str(Path.home() / ".config")
        except RuntimeError:  # no home folder to be found
            raise UsageError("no home folder for the trust store of model code",
                             f"set {STORE_ENV} to a file of your own") from None
    return Path(base) / "amptool" / "trusted.json"


def read_store(path: Optional[Path] = None) -> dict:
    """The trusted code: sha256 -> {file, how, at}; empty when there is no store yet."""
    path = Path(path) if path is not None else store_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise UsageError(f"cannot read the trust store {path}: {exc.strerror}",
                         f"check its permissions, or set {STORE_ENV} to another file") from None
    try:
        data = json.loads(text)
        entries = data["sha256"]
        if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
            raise TypeError
    except (ValueError, TypeError, KeyError):
        raise UsageError(f"the trust store {path} is corrupt (not the JSON amptool writes)",
                         "delete it (the model code it trusted will ask for consent again) "
                         "or restore it") from None
    return entries


def is_trusted(digest: str) -> bool:
    """Whether this user has trusted the code with this sha256."""
    return digest in read_store()


def trust_code(digest: str, file, how: str) -> None:
    """Remember the code with sha256 ``digest`` (read from ``file``) as trusted; ``how``:
    what the user did to consent. Concurrent writers keep every entry."""
    path = store_path()
    if digest in read_store(path):
        return
    with _locked(path):
        entries = read_store(path)
        if digest in entries:
            return
        entries[digest] = {"file": str(Path(file).resolve()), "how": how,
                           "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        try:
            write_json(path, {"version": 1, "sha256": entries})
        except OSError as exc:
            raise _unwritable(path, exc) from None


def trust_file(path, how: str) -> str:
    """Trust the code in ``path`` (a model file the user named); its sha256."""
    digest = sha256(path)
    trust_code(digest, path, how)
    return digest


def trust_folder(folder) -> list:
    """Trust the model files ``folder`` keeps (``folder``/model/*.py): the user's consent
    to a run or artefact folder made elsewhere. The files trusted."""
    folder = Path(folder)
    kept = sorted((folder / KEPT_FOLDER).glob("*.py")) if folder.is_dir() else []
    if not kept:
        raise UsageError(f"{TRUST_FLAG} {folder}: the folder keeps no model file "
                         f"({KEPT_FOLDER}/*.py)", "name the run or artefact folder whose "
                         "model code the command refused")
    for file in kept:
        trust_file(file, f"{TRUST_FLAG} {folder}")
    return kept


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock beside the store for one read-modify-write."""
    lock = path.with_name(path.name + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock.touch()
    except OSError as exc:
        raise _unwritable(path, exc) from None
    with open(lock, "a") as handle:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - no POSIX locks: the rename still is atomic
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _unwritable(path: Path, exc: OSError) -> UsageError:
    return UsageError(f"cannot write the trust store {path}: {exc.strerror or exc}",
                      f"make its folder writable, or set {STORE_ENV} to a writable file")


def trusted_packages() -> set:
    extra = os.environ.get(PACKAGES_ENV, "")
    return set(TRUSTED_PACKAGES) | {p.strip() for p in extra.split(",") if p.strip()}


def user_reference(model: Optional[str], args: Optional[dict] = None,
                   input_spec: Optional[str] = None) -> Optional[dict]:
    """The reference a user gave with ``--model``/``--model-arg``/``--input-spec`` (it runs
    as given, unvetted: the user chose it), or None without ``--model``."""
    if not model:
        if args or input_spec:
            raise UsageError(f"{'--model-arg' if args else '--input-spec'} is given without "
                             "--model", "name the model it is for with --model")
        return None
    return {"model": model, "model_args": dict(args) if args else None, "input_spec": input_spec}


def recorded_reference(ref: dict, kept: Optional[dict], where, folder) -> dict:
    """A model reference read from a file (``where``, in ``folder``), to be vetted by
    ``resolve_model`` before any of its code runs; ``kept`` is what ``keep_model_file``
    recorded."""
    return {**ref, "recorded_in": str(where), "folder": str(folder),
            "file": (kept or {}).get("file"), "sha256": (kept or {}).get("sha256")}


def vet_recorded(ref: dict) -> dict:
    """The reference to run for one read from a file, or a UsageError: only code the user
    chose runs. A sample always; a model file only from the copy kept in the run or
    artefact folder, with its recorded sha256, trusted by this user; a package factory only
    from a trusted package."""
    name, where = ref.get("model"), ref["recorded_in"]
    clean = {k: ref.get(k) for k in ("model_args", "input_spec")}
    if not isinstance(name, str) or not name:
        raise UsageError(f"{where} names no model", "pass --model NAME or path/to/file.py:factory")
    if name in NAMES:
        return {"model": name, **clean}
    target, _, factory = name.rpartition(":")
    if target.endswith(".py"):
        return {"model": f"{_vet_file(ref, name, target)}:{factory}", **clean}
    package = target.partition(".")[0]
    if package in trusted_packages():
        return {"model": name, **clean}
    raise UsageError(f"{where} names the model {name} from package {package}, which is not "
                     f"trusted", f"pass --model {name} to run it, or add {package} to "
                     f"{PACKAGES_ENV}")


def vet_recorded_code(name: str, kept: Optional[dict], where, folder, what: str) -> str:
    """The reference to run for a loss or metric (``what``) that a run.json names: a
    built-in name (no ':') as it is; a ``file.py:fn`` only from the copy the folder keeps
    (``kept``: its recorded file and sha256), trusted by this user; a ``package.module:fn``
    only from a trusted package or the samples. Anything else is a UsageError, as for a
    model."""
    target, _, fn = name.rpartition(":")
    if not target:
        return name
    if target.endswith(".py"):
        ref = {"recorded_in": str(where), "folder": str(folder), **(kept or {})}
        return f"{_vet_file(ref, name, target, what)}:{fn}"
    package = target.partition(".")[0]
    if package in trusted_packages() or target.startswith(SAMPLE_CODE):
        return name
    raise UsageError(f"{where} names the {what} {name} from package {package}, which is not "
                     f"trusted", f"pass --{what} {name} to run it, or add {package} to "
                     f"{PACKAGES_ENV}")


def _vet_file(ref: dict, name: str, target: str, what: str = "model") -> Path:
    """The kept copy of a recorded model (loss, metric) file, once it is the recorded code
    and trusted."""
    where, folder = ref["recorded_in"], Path(ref["folder"]).resolve()
    kept = (folder / ref["file"]).resolve() if ref.get("file") else None
    problem = f"{where} names the {what} file {target}, which amptool does not run on a file's word"
    if kept is None or folder not in kept.parents or not kept.is_file():
        raise UsageError(f"{problem} (the folder holds no copy of it with a recorded sha256)",
                         f"pass --{what} {name} if you trust that file")
    digest = sha256(kept)
    if digest != ref.get("sha256"):
        raise UsageError(f"{problem} (its copy in the folder does not match the recorded "
                         f"sha256)", f"pass --{what} {name} if you trust that file")
    if not is_trusted(digest):
        raise UsageError(f"{problem} (its copy {kept}, sha256 {digest[:12]}, is not code you "
                         f"have trusted on this machine)", f"pass {TRUST_FLAG} {ref['folder']} "
                         f"if you trust it, or --model naming the code to run")
    return kept


def model_copy(spec, folder) -> Optional[tuple]:
    """(where in ``folder`` the file of a ``file.py:factory`` model (``spec``, its
    ``ModelSpec``) is kept, its bytes, what to record beside the reference: ``file``
    relative to ``folder`` and its ``sha256``); None for other models. The kept code is the
    user's own: it is remembered as trusted."""
    import hashlib

    if not spec.file:
        return None
    data = Path(spec.file).read_bytes()
    target = Path(folder) / KEPT_FOLDER / Path(spec.file).name
    facts = {"file": f"{KEPT_FOLDER}/{target.name}", "sha256": hashlib.sha256(data).hexdigest()}
    trust_code(facts["sha256"], spec.file, "--model")
    return target, data, facts


def keep_code_file(file, folder, what: str) -> dict:
    """Copy a user's ``what`` file (a loss, a metric: code a run runs) into
    ``folder``/model/``what``_NAME.py, remember it as trusted (the user named it) and return
    the facts to record: ``file`` relative to ``folder`` and its ``sha256``."""
    import hashlib

    data = Path(file).read_bytes()
    kept = Path(folder) / KEPT_FOLDER
    own = Path(file).resolve().parent == kept.resolve()  # a resumed run's copy: kept as it is
    target = kept / (Path(file).name if own else f"{what}_{Path(file).name}")
    facts = {"file": f"{KEPT_FOLDER}/{target.name}", "sha256": hashlib.sha256(data).hexdigest()}
    trust_code(facts["sha256"], file, f"--{what}")
    if not (target.is_file() and target.read_bytes() == data):
        target.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(target, data)
    return facts


def keep_model_file(spec, folder) -> dict:
    """Copy the model's file into ``folder``/model/ (a run folder carries the code it was
    trained with) and return the facts to record; nothing for other models."""
    copy = model_copy(spec, folder)
    if copy is None:
        return {}
    target, data, facts = copy
    if not (target.is_file() and target.read_bytes() == data):
        target.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(target, data)
    return facts
