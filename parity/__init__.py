"""Numerical parity between precisions and formats, per-layer localization, reports.

The stage's entry is ``amptool.parity.compare.parity``, also ``from amptool import parity``.
"""
