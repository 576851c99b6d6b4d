"""Encryption keys for MindIR (AES-GCM): read from a file or an environment variable.

A key is 16, 24 or 32 bytes. A key file or variable holds it as hex (32, 48 or 64 hex
digits) or, in a file, as the raw bytes. Keys are never printed, logged or written.
"""
from __future__ import annotations

import os
import string
from pathlib import Path

from amptool.errors import UsageError

KEY_LENGTHS = (16, 24, 32)
ENV_VAR = "AMPTOOL_MINDIR_KEY"
"""Default environment variable read by runners and ``inspect`` for an encrypted MindIR."""


def parse_key(raw: bytes | str, source: str) -> bytes:
    """Hex text of 32/48/64 digits or raw 16/24/32 bytes -> key bytes."""
    data = raw.encode() if isinstance(raw, str) else bytes(raw)
    text = data.strip()
    if len(text) in (32, 48, 64) and all(chr(c) in string.hexdigits for c in text):
        return bytes.fromhex(text.decode())
    if len(data) in KEY_LENGTHS:
        return data
    if len(text) in KEY_LENGTHS:
        return text
    raise UsageError(f"{source} does not hold a valid AES-GCM key",
                     "give 32, 48 or 64 hex digits (or exactly 16, 24 or 32 raw bytes), "
                     "e.g. from: python -c \"import secrets; print(secrets.token_hex(16))\"")


def key_from_file(path: str | os.PathLike) -> bytes:
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"key file {path} does not exist", "check the --key-file path")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"key file {path} cannot be read ({exc.strerror})",
                         "make it readable") from None
    return parse_key(raw, f"key file {path}")


def key_from_env(name: str = ENV_VAR, required: bool = True) -> bytes | None:
    value = os.environ.get(name)
    if not value:
        if required:
            raise UsageError(f"environment variable {name} is not set",
                             "export it with the key as hex digits, or pass a key file")
        return None
    return parse_key(value, f"environment variable {name}")


def resolve_key(key_file: str | None = None, key_env: str | None = None) -> bytes | None:
    """The key from a file or a named variable (at most one of them), or None."""
    if key_file and key_env:
        raise UsageError("both a key file and a key variable were given", "pass only one of them")
    if key_file:
        return key_from_file(key_file)
    if key_env:
        return key_from_env(key_env)
    return None


def coerce_key(key) -> bytes | None:
    """Accept key bytes, key text (hex) or None, as runners do."""
    if key is None:
        return None
    return parse_key(key, "the given key")
