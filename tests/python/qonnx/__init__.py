"""polyquant.qonnx and its ONNX Runtime ops against qonnx 1.0.0."""
