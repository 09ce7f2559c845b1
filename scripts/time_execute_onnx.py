#!/usr/bin/env python3
"""Times polyquant.qonnx.execute_onnx against qonnx's own execute_onnx and checks that every output
is bit-identical, on the models the tests run: the bundled example, the QONNX models shipped in the
qonnx wheel (ESPCN nn_resize and subpixel, FloatQuant FP8, channels-last eltwise) and the Brevitas
exports in tests/data/brevitas (with their committed inputs).

    .venv/bin/python scripts/time_execute_onnx.py [--repeat N] [--reference-repeat M] [CASE ...]

Prints, per model, the median time of each after one warm-up call (polyquant's first call builds
and caches its ONNX Runtime session; qonnx builds a one-node model and session per node on every
call) and the ratio. Exit status 1 if any output differs."""
from __future__ import annotations

import argparse
import importlib.resources
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
import qonnx.core.onnx_exec as onnx_exec
from onnx import numpy_helper
from qonnx.core.modelwrapper import ModelWrapper
from qonnx.transformation.infer_shapes import InferShapes

import polyquant.qonnx as pq
from polyquant import runner

ROOT = Path(__file__).resolve().parent.parent
BREVITAS = ROOT / "tests" / "data" / "brevitas"
QONNX_DATA = importlib.resources.files("qonnx.data") / "onnx"
ESPCN_INPUT = "bsd300x3-espcn/test_data/input_0.pb"
QONNX_MODELS = {  # case: (model in the qonnx wheel, its input: a file, or None for random 0..255)
    "espcn-nn_resize": ("bsd300x3-espcn/nn_resize/quant_model.onnx", ESPCN_INPUT),
    "espcn-subpixel": ("bsd300x3-espcn/subpixel/quant_model.onnx", ESPCN_INPUT),
    "floatquant-fp8": ("floatquant_exec/qonnx_act_weight_fp8.onnx", "floatquant_exec/test_data/input.npy"),
    "eltwise-chanlast": ("eltwise_chanlast_testcase.onnx", None),
}
BREVITAS_MODELS = sorted(p.stem for p in BREVITAS.glob("*.onnx"))
CASES = ["example", *QONNX_MODELS, *BREVITAS_MODELS]


def data_input_name(model: Any) -> str:
    initializers = {t.name for t in model.graph.initializer}
    (name,) = [i.name for i in model.graph.input if i.name not in initializers]
    return name


def load_case(case: str, rng: np.random.Generator) -> tuple[Any, dict[str, np.ndarray]]:
    """(ModelProto, inputs) of a case, the same inputs the tests use."""
    if case == "example":
        model = onnx.load(str(ROOT / "examples" / "qonnx_mlp.onnx"))
        return model, {"x": rng.standard_normal((256, 64)).astype(np.float32)}
    if case in BREVITAS_MODELS:
        model = onnx.load(str(BREVITAS / f"{case}.onnx"))
        return model, {data_input_name(model): np.load(BREVITAS / f"{case}.input.npy")}
    path, source = QONNX_MODELS[case]
    model = onnx.load_from_string((QONNX_DATA / path).read_bytes())
    name = data_input_name(model)
    if source is None:  # eltwise_chanlast_testcase annotates its input as UINT8
        (graph_input,) = [i for i in model.graph.input if i.name == name]
        shape = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
        value = rng.integers(0, 256, shape).astype(np.float32)
    elif source.endswith(".npy"):
        value = np.load(QONNX_DATA / source)
    else:
        value = numpy_helper.to_array(onnx.load_tensor_from_string((QONNX_DATA / source).read_bytes()))
    return model, {name: value}


def qonnx_run(wrapper: ModelWrapper, inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    # qonnx builds its one-node models at the installed onnx's IR version, which can be newer than
    # the installed onnxruntime reads; the runner's helper caps it as the tests do.
    with runner._single_node_models_at_ir(onnx_exec, 10), np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return onnx_exec.execute_onnx(wrapper, dict(inputs))


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def identical(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", choices=[[], *CASES], default=[], metavar="CASE",
                        help=f"default: all of {', '.join(CASES)}")
    parser.add_argument("--repeat", type=int, default=21, help="timed polyquant calls (default 21)")
    parser.add_argument("--reference-repeat", type=int, default=5, help="timed qonnx calls (default 5)")
    args = parser.parse_args()
    failures = 0
    print(f"{'model':<18} {'qonnx ms':>10} {'polyquant ms':>13} {'speedup':>8}  bit-exact")
    for case in args.cases or CASES:
        model, inputs = load_case(case, np.random.default_rng(0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wrapper = ModelWrapper(onnx.ModelProto.FromString(model.SerializeToString())).transform(InferShapes())
        ref = qonnx_run(wrapper, inputs)
        got = pq.execute_onnx(wrapper, dict(inputs))
        exact = ref.keys() == got.keys() and all(identical(got[k], ref[k]) for k in ref)
        failures += not exact
        t_ref = median_ms(lambda: qonnx_run(wrapper, inputs), args.reference_repeat)
        t_pq = median_ms(lambda: pq.execute_onnx(wrapper, dict(inputs)), args.repeat)
        print(f"{case:<18} {t_ref:>10.3f} {t_pq:>13.3f} {t_ref / t_pq:>7.0f}x  {'yes' if exact else 'NO'}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
