#!/usr/bin/env bash
# The main job: install what it needs (scripts/setup.sh: the package and qonnx, no test extras), then
# run each example model of examples/ in ONNX Runtime with polyquant's custom ops and again with its
# reference, checking every output bit for bit:
#
#   qonnx_mlp.onnx     QONNX ops                       against qonnx's execute_onnx
#   onnx_qdq_mlp.onnx  opset-28 QuantizeLinear/Dequan. against onnx's reference evaluator
#   quark_mlp.onnx     Quark's Extended Q/DQ           against amd-quark's own CPU op when amd-quark
#                                                      and torch are installed (not by setup.sh: see
#                                                      docs/golden-data.md#quark), else run only
#
#   scripts/run_example.sh [MODEL.onnx] [polyquant run options]
#
# With a MODEL only that one runs; the options go to every `polyquant run` (e.g. --seed 3). Outputs
# go to build/example_out/<model>/. Exit status: the first failing run's (1: a mismatch).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

models=(examples/qonnx_mlp.onnx examples/onnx_qdq_mlp.onnx examples/quark_mlp.onnx)
if [ $# -gt 0 ] && [[ "$1" == *.onnx ]]; then
  models=("$1")
  shift
fi

quark_reference=yes
.venv/bin/python -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("torch", "quark"))))' ||
  quark_reference=no

for model in "${models[@]}"; do
  name=$(basename "$model" .onnx)
  reference=(--reference)
  if [ "$name" = quark_mlp ] && [ "$quark_reference" = no ]; then
    echo "== $model (amd-quark and torch are not installed: run without --reference)"
    reference=()
  else
    echo "== $model"
  fi
  .venv/bin/polyquant run "$model" "${reference[@]}" --repeat 5 --output-dir "build/example_out/$name" "$@"
done
