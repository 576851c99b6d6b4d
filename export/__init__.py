"""Export to MindIR, AIR and ONNX in fp32 and fp16, with manifests; inspection.

The stage's entry is ``amptool.export.api.export``, also ``from amptool import export``.
"""
