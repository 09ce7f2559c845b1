#!/usr/bin/env bash
# The main job: install everything, then run the embedded QONNX example model in ONNX Runtime with
# polyquant's custom ops, and again the reference way (qonnx execute_onnx), checking bit-exactness.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/polyquant run examples/qonnx_mlp.onnx --reference --repeat 5 --output-dir build/example_out "$@"
