"""The JSON documents amptool writes, one type per file, and the one door they pass.

Owns the types of the manifest, run.json, the parity report, summary.json, the training
summary, a golden file's meta, the diff of two reports and the provenance inside an
artefact, with their nested sections (figures, per-layer rows), the progress events the
stages hand ``on_event`` (JSON between a worker and its launcher), and
the door every document passes out and back in (``door``: pydantic, imported only there and
only when a document is read, written or described). May import ``amptool.stats`` (the
limits a report records), ``amptool.files`` and ``amptool.errors``.
"""
