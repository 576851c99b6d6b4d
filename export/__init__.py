"""Export to MindIR, AIR and ONNX in fp32 and fp16, manifests, inspection and runners."""
