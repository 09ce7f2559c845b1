"""polyquant.onnx (and the Q/DQ machinery polyquant.quark shares) against onnx's reference evaluator and onnxruntime."""
