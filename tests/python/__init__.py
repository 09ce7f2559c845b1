"""The Python test suite, one package per family (qonnx, qkeras, onnx, quark, aimet) and tools (the
command line, runner, benchmarks, the example). The same file name means the same kind of test in
every family: test_api (the surface), test_reference (against the reference run live),
test_golden (against recorded reference outputs), test_upstream_vectors (the reference's own test
vectors), test_properties (property-based), test_robustness (bad input, threads, exit),
test_specials (NaN and signed zeros), test_ort (the ONNX Runtime custom ops)."""
