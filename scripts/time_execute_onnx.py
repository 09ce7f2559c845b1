#!/usr/bin/env python3
"""Times polyquant.qonnx.execute_onnx against qonnx's own execute_onnx on QONNX models, and checks
that every output is bit-identical. Default models: the bundled example and the Brevitas exports
under tests/data/brevitas (their committed inputs).

    .venv/bin/python scripts/time_execute_onnx.py [--repeat N] [model.onnx ...]

Prints, per model, the median time of each (after one warm-up call: polyquant's first call builds
and caches its ONNX Runtime session) and the ratio. A model without a committed input gets random
standard-normal inputs of its declared shapes (seed 0)."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from qonnx.core import onnx_exec
from qonnx.core.modelwrapper import ModelWrapper
from qonnx.core.onnx_exec import execute_onnx as qonnx_execute_onnx
from qonnx.transformation.infer_shapes import InferShapes
from qonnx.util.basic import qonnx_make_model

import polyquant.qonnx as pq

ROOT = Path(__file__).resolve().parent.parent


def default_models() -> list[Path]:
    return [ROOT / "examples" / "qonnx_mlp.onnx", *sorted((ROOT / "tests" / "data" / "brevitas").glob("*.onnx"))]


def inputs_for(path: Path, model: ModelWrapper) -> dict[str, np.ndarray]:
    graph_inputs = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    committed = path.with_suffix("").with_suffix(".input.npy")
    if committed.exists() and len(graph_inputs) == 1:
        return {graph_inputs[0].name: np.load(committed)}
    rng = np.random.default_rng(0)
    feeds = {}
    for i in graph_inputs:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
        feeds[i.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _make_model_for_this_onnxruntime(graph, **kwargs):
    """qonnx builds one-node models at the installed onnx's IR version, which can be newer than the
    installed onnxruntime reads (the tests patch it the same way)."""
    model = qonnx_make_model(graph, **kwargs)
    model.ir_version = min(model.ir_version, 10)
    return model


def median_ms(fn, repeat: int) -> float:
    fn()  # warm-up (polyquant: session creation; both: imports and caches)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    onnx_exec.qonnx_make_model = _make_model_for_this_onnxruntime
    failures = 0
    print(f"{'model':<22} {'qonnx ms':>10} {'polyquant ms':>13} {'speedup':>8}  bit-exact")
    for path in args.models or default_models():
        model = ModelWrapper(str(path)).transform(InferShapes())  # qonnx needs every shape declared
        feeds = inputs_for(path, model)
        ref = qonnx_execute_onnx(model, dict(feeds))
        got = pq.execute_onnx(model, dict(feeds))
        exact = ref.keys() == got.keys() and all(
            np.asarray(ref[k]).dtype == np.asarray(got[k]).dtype
            and np.array_equal(np.asarray(ref[k]).view(np.uint8), np.asarray(got[k]).view(np.uint8)) for k in ref)
        failures += not exact
        t_ref = median_ms(lambda: qonnx_execute_onnx(model, dict(feeds)), args.repeat)
        t_pq = median_ms(lambda: pq.execute_onnx(model, dict(feeds)), args.repeat)
        print(f"{path.stem:<22} {t_ref:>10.3f} {t_pq:>13.3f} {t_ref / t_pq:>7.0f}x  {'yes' if exact else 'NO'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
