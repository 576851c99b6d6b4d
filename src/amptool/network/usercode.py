"""Code a user names: a module (``package.module``) or a Python file imported, a factory
called with the user's keyword arguments (``parse_model_args``: them from ``--model-arg
KEY=VALUE``); whatever fails there becomes one UsageError line naming the fix. Imports no
numpy: the command line reads the arguments with it."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from amptool.errors import UsageError, first_line


def import_module(dotted: str, what: str = "model"):
    """Import the module a ``package.module:factory`` reference names (a ``what``: model,
    loss); its import errors become one UsageError line."""
    try:
        return importlib.import_module(dotted)
    except Exception as exc:
        raise UsageError(f"{what} module {dotted} failed to import: {type(exc).__name__}: "
                         f"{first_line(exc)}",
                         "install the package or fix the module name") from None


def import_user_file(path: Path, what: str, after: str):
    """Execute the Python file a user named on the command line (a ``what`` file: model,
    metric); its import errors become one UsageError line."""
    if not path.is_file():
        raise UsageError(f"{what} file {path} does not exist", f"check the path before {after}")
    module_name = f"amptool_user_{what}_{abs(hash(str(path.resolve())))}"
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"no Python module loader for {path.name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise UsageError(f"{what} file {path} failed to import: {type(exc).__name__}: "
                         f"{first_line(exc)}", "fix the error in that file") from None
    return module


def call_factory(factory, where, args: dict):
    """The network ``factory(**args)`` returns (``where`` names the factory); arguments it
    does not take, an exception it raises and anything but an ``nn.Cell`` become one
    UsageError line."""
    import inspect

    from mindspore import nn

    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: let the call decide
        signature = None
    try:
        if signature is not None:
            signature.bind(**args)
    except TypeError as exc:
        assert signature is not None  # only bind raises TypeError here
        missing = [n for n, p in signature.parameters.items() if p.default is p.empty
                   and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in args]
        unknown = sorted(set(args) - set(signature.parameters))
        if missing:
            extra = f" (and does not take {', '.join(unknown)})" if unknown else ""
            raise UsageError(f"{where} needs the model argument(s) {', '.join(missing)}{extra}",
                             f"pass --model-arg {missing[0]}=VALUE") from None
        raise UsageError(f"{where} does not take the model argument(s) "
                         f"{', '.join(sorted(args))} ({exc})",
                         "pass only --model-arg keys the factory accepts") from None
    try:
        cell = factory(**args)
    except Exception as exc:
        raise UsageError(f"{where}() raised {type(exc).__name__}: {first_line(exc)}",
                         "fix the factory or its --model-arg values") from None
    if not isinstance(cell, nn.Cell):
        raise UsageError(f"{where}() returned {type(cell).__name__}, not an nn.Cell",
                         "return a mindspore.nn.Cell from the factory")
    return cell


def parse_model_args(items) -> dict:
    """``KEY=VALUE`` strings into a dict; values parsed as int, float, bool or str."""
    out = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip().isidentifier():
            raise UsageError(f"bad --model-arg '{item}'", "write KEY=VALUE, e.g. num_classes=10")
        out[key.strip()] = _parse_value(value.strip())
    return out


def _parse_value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
