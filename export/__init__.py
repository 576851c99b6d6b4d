"""Export to MindIR, AIR and ONNX in fp32 and fp16, with manifests; inspection.

Callable: ``amptool.export(ExportConfig(...))`` is ``amptool.export.api.export``.
"""
from amptool.entry import make_callable

make_callable(__name__, "amptool.export.api:export")
