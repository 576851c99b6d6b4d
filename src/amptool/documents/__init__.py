"""The JSON documents amptool writes, one type per file, and the one door they pass.

Owns the types of the manifest, run.json, the parity report, summary.json, the training
summary and a golden file's meta, with their nested sections (figures, per-layer rows), and
the reader and writer that hold every document to its type (``door``). May import
``amptool.stats`` (the limits a report records), ``amptool.files`` and ``amptool.errors``.
"""
