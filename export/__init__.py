"""Export to MindIR, AIR and ONNX in fp32 and fp16, with manifests, provenance inside each
file and a precision audit of each graph; inspection.

The stage's entry is ``amptool.export.api.export``, also ``from amptool import export``.
"""
