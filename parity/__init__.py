"""Numerical parity between precisions and formats, per-layer localization, reports.

Callable: ``amptool.parity(ParityConfig(...))`` is ``amptool.parity.compare.parity``.
"""
from amptool.entry import make_callable

make_callable(__name__, "amptool.parity.compare:parity")
