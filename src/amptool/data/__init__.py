"""Data: a ``--data`` spec made into a model's inputs and targets, a batch at a time.

Owns the sources (``sources``, the synthetic ``bundled`` tasks), rows read on demand
(``rows``), the batching pipeline (``feed``) and the split and preprocessing for a model
(``dataset``). May import ``amptool.network`` (a loss's targets), ``amptool.runtime``,
``amptool.documents`` (the manifest's ``Preprocess``), ``amptool.files`` and
``amptool.errors``.
"""
