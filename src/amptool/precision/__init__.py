"""Precision: the policy that says which cells compute in fp16, and the passes that choose it.

Owns the policy as data and files (``policy``), applying it to a network (``apply``),
running a network eagerly with hooks (``eager``), the fp32 range pass (``ranges``,
``cellprobe``) and forward-overflow forensics (``forensics``). May import
``amptool.network``, ``amptool.runtime``, ``amptool.files`` and ``amptool.errors``.
"""
