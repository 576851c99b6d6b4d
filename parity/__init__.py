"""Numerical parity between precisions and formats, per-layer localization, reports."""
