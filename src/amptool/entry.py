"""Stage packages that are also the stage's function: ``from amptool import train`` gives
the ``amptool.train`` package, and ``train(cfg)`` runs a training.

The call is looked up lazily, so importing a package stays cheap.
"""
from __future__ import annotations

import importlib
import sys
import types


class _CallablePackage(types.ModuleType):
    _entry = ""

    def __call__(self, *args, **kwargs):
        module, _, function = self._entry.partition(":")
        return getattr(importlib.import_module(module), function)(*args, **kwargs)


def make_callable(package: str, entry: str) -> None:
    """Make the package ``package`` callable as the function ``entry`` ("module:function")."""
    module = sys.modules[package]
    module.__class__ = _CallablePackage
    assert isinstance(module, _CallablePackage)
    module._entry = entry
