"""Run an ONNX model in ONNX Runtime with polyquant's QONNX custom ops, optionally against qonnx.

This is the library behind ``polyquant run``; every function is usable on its own:

    >>> from polyquant._tools import runner
    >>> session = runner.make_session("examples/qonnx_mlp.onnx")
    >>> inputs = runner.random_inputs(session, seed=0)
    >>> outputs, times = runner.run_session(session, inputs, repeat=10)
    >>> expected, _ = runner.run_reference("examples/qonnx_mlp.onnx", inputs)   # needs qonnx
    >>> all(runner.compare(outputs[k], expected[k]).exact for k in outputs)
    True
"""

from __future__ import annotations

import contextlib
import re
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from google.protobuf.message import DecodeError
from onnx.reference import ReferenceEvaluator

from .. import onnx as pq_onnx
from .. import ort as polyquant_ort
from ..qonnx import execute as qonnx_execute
from .common import DEFAULT_OUTPUT_DIR, CommandError, Comparison, _NoBar, compare, progress  # noqa: F401 (re-exported)


# ONNX Runtime's type strings for the tensor element types an input can be generated for.
_ORT_DTYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(int16)": np.int16,
    "tensor(uint16)": np.uint16, "tensor(int32)": np.int32, "tensor(uint32)": np.uint32,
    "tensor(int64)": np.int64, "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_,
}


# ------------------------------------------------------------------------------------------------
# ONNX Runtime side


# Graph optimizers that insert default-domain Q/DQ nodes at the model's opset: in a model whose Q/DQ
# ops were moved to polyquant.onnx because onnxruntime has no kernels at that opset, such a node
# cannot run (onnxruntime 1.32: MatMulAddFusion on DQ -> MatMul -> Add -> Q).
UPGRADED_MODEL_DISABLED_OPTIMIZERS = ["MatMulAddFusion"]


def make_session(model_path, reference_numerics=False, notes=None):
    """An onnxruntime.InferenceSession on the CPU with the polyquant custom-op library registered and
    onnxruntime's logging reduced to errors. By default fully optimized (the fast session); with
    `reference_numerics` under the settings whose standard-op numerics equal qonnx's node-by-node
    execution (polyquant.qonnx.execute.reference_session_options: no numerics-changing fusions, no weight
    prepacking), so that a comparison with qonnx sees only what polyquant's ops compute.

    Quark models (com.amd.quark / com.vai.quantize Extended Q/DQ) run as they are. A model whose
    QuantizeLinear / DequantizeLinear nodes are of an opset onnxruntime has no kernels for (28) is
    rewritten by polyquant.onnx.upgrade_model (its Q/DQ nodes move to the polyquant.onnx domain); a
    sentence saying so is appended to `notes` when given."""
    path = check_model_file(model_path)
    options = qonnx_execute.reference_session_options() if reference_numerics else polyquant_ort.session_options()
    model = str(path)
    disabled_optimizers = []
    if _has_trunc(path):
        # qonnx picks the Trunc version from the opset import, the custom-op library from the input
        # count: make the count say what qonnx would run (or refuse a Trunc qonnx cannot run either).
        proto = load_model(path)
        try:
            if qonnx_execute.reconcile_trunc_versions(proto):
                model = proto.SerializeToString()
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
    else:
        try:
            if pq_onnx.needs_upgrade(str(path)):
                model = pq_onnx.upgrade_model(str(path)).SerializeToString()
                # onnxruntime's MatMulAddFusion gives a fused bias a default-domain DequantizeLinear
                # at the model's opset, which it has no kernel for (the reason for the upgrade).
                disabled_optimizers = UPGRADED_MODEL_DISABLED_OPTIMIZERS
                if notes is not None:
                    notes.append(f"QuantizeLinear/DequantizeLinear of opset > {pq_onnx.onnxruntime_max_opset()} run as "
                                 f"polyquant.onnx ops (polyquant.onnx.upgrade_model)")
        except (onnx.onnx_cpp2py_export.checker.ValidationError, onnx.onnx_cpp2py_export.shape_inference.InferenceError,
                OSError, ValueError):
            pass  # not loadable here: onnxruntime's message below says why
        except Exception:  # a malformed protobuf: onnxruntime reports it
            pass
    try:
        return onnxruntime.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"],
                                            disabled_optimizers=disabled_optimizers)
    except Exception as exc:  # onnxruntime raises its own exception types for invalid models
        raise CommandError(f"onnxruntime cannot load {path}: {exc}") from exc


def check_model_file(model_path):
    """The model's Path; CommandError when it does not exist or is a directory."""
    path = Path(model_path)
    if path.is_dir():
        raise CommandError(f"{path} is a directory, not an ONNX model file (give the .onnx file)")
    if path.exists() and not path.is_file():
        raise CommandError(f"{path} is not a regular file (an ONNX model file is expected)")
    if not path.is_file():
        raise CommandError(f"model file not found: {path}")
    return path


def load_model(model_path, load_external_data=True):
    """The onnx.ModelProto in the file; CommandError when it is missing, a directory, or does not parse
    as an ONNX model (instead of protobuf's traceback)."""
    path = check_model_file(model_path)
    try:
        return onnx.load(str(path), load_external_data=load_external_data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise CommandError(f"{path} is not an ONNX model: it does not parse as one ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else 'no details'})") from exc
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc}") from exc


def _has_trunc(path):
    """Whether the model file mentions a Trunc op (a cheap byte search before parsing it)."""
    try:
        return b"Trunc" in Path(path).read_bytes()
    except OSError:
        return False


def input_spec(node_arg):
    """(shape, dtype) of an ORT input; symbolic or unknown dimensions become 1."""
    dtype = _ORT_DTYPES.get(node_arg.type)
    shape = tuple(d if isinstance(d, int) and d >= 0 else 1 for d in (node_arg.shape or []))
    return shape, dtype


def random_inputs(session, seed=0, skip=()):
    """Random values for every session input not in `skip`: standard normal for floats, small integers
    (clipped to the dtype's range) for integers, fair coins for bool. Deterministic in `seed`."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for arg in session.get_inputs():
        if arg.name in skip:
            continue
        shape, dtype = input_spec(arg)
        if dtype is None:
            raise CommandError(f"cannot generate a random value for input {arg.name!r} of type {arg.type}; "
                               f"pass it with --input {arg.name}=FILE.npy")
        if np.issubdtype(dtype, np.floating):
            inputs[arg.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            inputs[arg.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            info = np.iinfo(dtype)
            inputs[arg.name] = rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True).astype(dtype)
    return inputs


def load_inputs(specs, session):
    """Parse ``NAME=FILE.npy`` specs (``FILE.npy`` alone when the model has a single input), load and check
    them against the session's inputs. Returns (inputs, notes): notes describe dtype conversions."""
    args = {arg.name: arg for arg in session.get_inputs()}
    inputs, notes = {}, []
    for spec in specs:
        name, sep, file_name = spec.partition("=")
        if not sep:
            if len(args) != 1:
                raise CommandError(f"--input {spec!r}: the model has {len(args)} inputs, use NAME=FILE.npy "
                                   f"(inputs: {', '.join(args)})")
            name, file_name = next(iter(args)), spec
        if name not in args:
            raise CommandError(f"--input {spec!r}: the model has no input {name!r} (inputs: {', '.join(args)})")
        if name in inputs:
            raise CommandError(f"--input {name!r} given twice")
        value = _load_array(spec, name, file_name)
        shape, dtype = input_spec(args[name])
        declared = args[name].shape or []
        if value.ndim != len(declared) or any(isinstance(d, int) and d >= 0 and d != n
                                              for d, n in zip(declared, value.shape)):
            raise CommandError(f"--input {name}: {file_name} has shape {value.shape}, the model expects "
                               f"{tuple(declared)}")
        if dtype is not None and value.dtype != dtype:
            if not np.can_cast(value.dtype, dtype, casting="same_kind"):
                raise CommandError(f"--input {name}: {file_name} has dtype {value.dtype}, the model expects "
                                   f"{np.dtype(dtype)}")
            notes.append(f"{name}: converted {value.dtype} to {np.dtype(dtype)}")
            value = value.astype(dtype)
        inputs[name] = np.ascontiguousarray(value)
    return inputs, notes


_NPY_MAGIC, _ZIP_MAGIC = b"\x93NUMPY", b"PK\x03\x04"


def _load_array(spec, name, file_name):
    """The array in FILE.npy (or in a .npz archive: its only array, or the one named like the input);
    CommandError naming the file when it is missing, a directory, or not in numpy's format."""
    if not file_name:
        raise CommandError(f"--input {spec!r}: no file name given (NAME=FILE.npy)")
    path = Path(file_name)
    if path.is_dir():
        raise CommandError(f"--input {spec!r}: {file_name} is a directory, not a .npy file")
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError as exc:
        raise CommandError(f"--input {spec!r}: cannot read {file_name}: {exc.strerror or exc}") from exc
    if not magic.startswith((_NPY_MAGIC, _ZIP_MAGIC)):
        raise CommandError(f"--input {spec!r}: {file_name} is not a .npy or .npz file (numpy's format, as "
                           f"written by np.save / np.savez)")
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                keys = list(loaded.files)
                if name in keys:
                    return loaded[name]
                if len(keys) == 1:
                    return loaded[keys[0]]
                raise CommandError(f"--input {spec!r}: {file_name} holds {len(keys)} arrays "
                                   f"({', '.join(keys) or 'none'}) and none is named {name!r}")
        return loaded
    except CommandError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        raise CommandError(f"--input {spec!r}: cannot read {file_name}: {exc}") from exc


def run_session(session, inputs, repeat=1, show_progress=True):
    """Run `repeat` times after one untimed warm-up run. Returns ({output name: array}, [seconds per run])."""
    names = [arg.name for arg in session.get_outputs()]
    results = session.run(names, inputs)
    times = []
    runs = range(repeat)
    for _ in progress(runs, "polyquant") if show_progress else runs:
        start = time.perf_counter()
        results = session.run(names, inputs)
        times.append(time.perf_counter() - start)
    return dict(zip(names, results)), times


# ------------------------------------------------------------------------------------------------
# qonnx side


def reference_unavailable():
    """None when qonnx's execute_onnx can be imported, else a sentence saying why not."""
    try:
        import qonnx.core.modelwrapper  # noqa: F401
        import qonnx.core.onnx_exec  # noqa: F401
    except Exception as exc:  # not installed, or not importable (qonnx 1.0.0 needs Python >= 3.10)
        return f"qonnx cannot be imported ({type(exc).__name__}: {exc}); --reference needs qonnx"
    return None


@contextlib.contextmanager
def _single_node_models_at_ir(onnx_exec, ir_version):
    """execute_onnx runs every standard op in a one-node model built with onnx.helper.make_model, which stamps
    the newest IR version of the installed onnx package; an older onnxruntime then refuses it (onnx 1.23
    writes IR 14, onnxruntime 1.31 reads up to 13). Give those one-node models the IR version of the model
    being executed, which this onnxruntime has just loaded. Numerics are untouched."""
    make_model = onnx_exec.qonnx_make_model

    def make_model_at_ir(graph, **kwargs):
        model = make_model(graph, **kwargs)
        model.ir_version = min(model.ir_version, ir_version)
        return model

    onnx_exec.qonnx_make_model = make_model_at_ir
    try:
        yield
    finally:
        onnx_exec.qonnx_make_model = make_model


def _pin_input_shapes(graph, inputs):
    """execute_onnx allocates every tensor from its declared shape and insists that inputs match it. Replace
    symbolic input dimensions by those of the given arrays and drop the other shapes (to be inferred again).
    Returns whether anything changed."""
    changed = False
    for value_info in graph.input:
        if value_info.name not in inputs:
            continue
        dims = value_info.type.tensor_type.shape.dim
        for dim, size in zip(dims, inputs[value_info.name].shape):
            if not dim.HasField("dim_value"):
                dim.dim_value = size
                changed = True
    if changed:
        del graph.value_info[:]
        for value_info in graph.output:
            value_info.type.tensor_type.ClearField("shape")
    return changed


def _reference_model(model_path, inputs):
    from qonnx.core.modelwrapper import ModelWrapper

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ModelWrapper's notes on renamed domains and the like
        model = ModelWrapper(str(model_path))
        if _pin_input_shapes(model.model.graph, inputs) or not model.check_all_tensor_shapes_specified():
            from qonnx.transformation.infer_shapes import InferShapes

            model = model.transform(InferShapes())
    return model


QUARK_DOMAINS = ("com.amd.quark", "com.vai.quantize")


def reference_kind(model_path):
    """Which reference checks a model: "quark" (amd-quark's own CPU op in onnxruntime) when it has
    Quark's Extended Q/DQ nodes, "qonnx" (qonnx's execute_onnx) when it has QONNX ops, else "onnx"
    (onnx's reference evaluator: standard ops, the opset-28 QuantizeLinear / DequantizeLinear)."""
    try:
        proto = onnx.load(str(model_path), load_external_data=False)
    except Exception:
        return "qonnx"
    domains = {n.domain for n in proto.graph.node}
    if domains & set(QUARK_DOMAINS):
        return "quark"
    if domains & set(polyquant_ort.DOMAINS):
        return "qonnx"
    return "onnx"


def quark_reference_unavailable():
    """None when amd-quark's custom-op library can be built / found (it needs torch), else why not."""
    try:
        import torch  # noqa: F401  (Quark's library links against torch's; import it first)
        from quark.onnx.operators.custom_ops import get_library_path  # noqa: F401
    except Exception as exc:
        return (f"amd-quark cannot be imported ({type(exc).__name__}: {exc}); --reference on a Quark model needs "
                f"amd-quark and torch (see docs/golden-data.md#quark)")
    return None


def _run_quark_reference(model_path, inputs, repeat, show_progress):
    reason = quark_reference_unavailable()
    if reason:
        raise CommandError(reason)
    import torch  # noqa: F401  (optional: amd-quark's reference library links against torch's)
    from quark.onnx.operators.custom_ops import get_library_path

    # The checked session's settings, with Quark's library instead of polyquant's (both register
    # com.amd.quark: one session cannot hold the two).
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.add_session_config_entry("optimization.disable_specified_optimizers", ";".join(qonnx_execute.NUMERICS_CHANGING_OPTIMIZERS))
    options.add_session_config_entry("session.disable_prepacking", "1")
    options.register_custom_ops_library(get_library_path("CPU"))
    session = onnxruntime.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    outputs, times = run_session(session, inputs, repeat, show_progress)
    return outputs, times


def _run_onnx_reference(model_path, inputs, repeat, show_progress):
    evaluator = ReferenceEvaluator(onnx.load(str(model_path)))
    names = list(evaluator.output_names)
    outputs, times = {}, []
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for _ in progress(range(repeat), "onnx reference", total=repeat) if show_progress else range(repeat):
            start = time.perf_counter()
            results = evaluator.run(None, dict(inputs))
            times.append(time.perf_counter() - start)
            outputs = dict(zip(names, results))
    return {k: np.asarray(v) for k, v in outputs.items()}, times


def run_reference(model_path, inputs, repeat=1, show_progress=True, full_context=False):
    """Execute the model with its reference: qonnx's execute_onnx (node by node, numpy for the QONNX
    ops), amd-quark's own op for Quark models, onnx's reference evaluator for standard models (see
    reference_kind). Returns ({output name: array}, [seconds per run]); with `full_context` (qonnx only)
    the dict holds every tensor of qonnx's execution context (intermediates included)."""
    kind = reference_kind(model_path)
    if kind == "quark":
        return _run_quark_reference(model_path, inputs, repeat, show_progress)
    if kind == "onnx":
        return _run_onnx_reference(model_path, inputs, repeat, show_progress)
    reason = reference_unavailable()
    if reason:
        raise CommandError(reason)
    import qonnx.core.onnx_exec as onnx_exec

    model = _reference_model(model_path, inputs)
    outputs, times = {}, []
    with _single_node_models_at_ir(onnx_exec, model.model.ir_version), np.errstate(all="ignore"):
        for _ in progress(range(repeat), "qonnx reference", total=repeat) if show_progress else range(repeat):
            start = time.perf_counter()
            outputs = onnx_exec.execute_onnx(model, dict(inputs), return_full_exec_context=full_context)
            times.append(time.perf_counter() - start)
    return {name: np.asarray(value) for name, value in outputs.items() if name}, times


@dataclass
class Divergence:
    """The first node (in graph order, which ONNX requires to be topological) whose output differs."""
    node_name: str
    op_type: str
    domain: str
    output: str
    comparison: "Comparison"
    polyquant_op: bool
    index: int

    def describe(self):
        domain = self.domain or "ai.onnx"
        name = f"'{self.node_name}'" if self.node_name else f"#{self.index} (unnamed)"
        kind = ("a polyquant op (custom-op library)" if self.polyquant_op
                else "a standard op run by onnxruntime, not polyquant; its inputs are bit-exact, so onnxruntime's "
                     "kernel for it computes other bits than the one qonnx ran")
        return (f"first differing node: {name}, {self.op_type} (domain {domain}), output {self.output!r}: "
                f"{self.comparison.describe()}; {kind}")


def first_divergence(model_path, inputs):
    """Run the model through polyquant (polyquant.qonnx.execute_onnx: one session with qonnx's
    standard-op numerics) and through qonnx, both keeping every intermediate tensor, and return the
    first node whose output differs (a Divergence), or None when every node agrees."""
    model = onnx.load(str(model_path))
    ours = qonnx_execute.execute_onnx(model, dict(inputs), return_full_exec_context=True)
    theirs, _ = run_reference(model_path, inputs, show_progress=False, full_context=True)
    for index, node in enumerate(model.graph.node):
        for output in node.output:
            if not output or output not in ours or output not in theirs:
                continue
            result = compare(np.asarray(ours[output]), theirs[output])
            if not result.exact:
                polyquant_op = node.domain in polyquant_ort.DOMAINS and node.op_type in polyquant_ort.OPS
                return Divergence(node.name, node.op_type, node.domain, output, result, polyquant_op, index)
    return None


# ------------------------------------------------------------------------------------------------
# Comparison


# ------------------------------------------------------------------------------------------------
# `polyquant run`


def _file_name(tensor_name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", tensor_name) + ".npy"


def _save(arrays, directory):
    paths = {}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, value in arrays.items():
            paths[name] = directory / _file_name(name)
            np.save(paths[name], value)
    except OSError as exc:
        raise CommandError(f"--output-dir: cannot write into {directory}: {exc.strerror or exc}") from exc
    return paths


def _ms(seconds):
    return f"{seconds * 1e3:.3f} ms"


def _describe(value):
    return f"{value.dtype}{list(value.shape)}"


def _compare_with_model(model, original, inputs, outputs, out_dir, args, say):
    """`polyquant run MODEL --reference-model ORIGINAL`: both models on the same inputs, each in a
    session with qonnx's standard-op numerics (so that onnxruntime's fusions cannot make two equal
    graphs differ), every output of MODEL compared bit for bit with ORIGINAL's output of the same name.
    Returns the exit status (0 every output equal, 1 otherwise)."""
    checked_session = make_session(model, reference_numerics=True)
    checked, _ = run_session(checked_session, inputs, 1, show_progress=False)
    ref_session = make_session(original, reference_numerics=True)
    wanted = [arg.name for arg in ref_session.get_inputs()]
    missing = [name for name in wanted if name not in inputs]
    if missing:
        raise CommandError(f"--reference-model: {original} takes inputs {missing} that {model} does not "
                           f"(it takes {list(inputs)}); the two models must have the same inputs")
    ref_repeat = min(args.repeat, args.reference_repeat)
    expected, ref_times = run_session(ref_session, {name: inputs[name] for name in wanted}, ref_repeat,
                                      show_progress=False)
    _save({k: v for k, v in expected.items() if k in outputs}, out_dir / "reference")
    say(f"reference  {_ms(statistics.median(ref_times))} per run ({original} with polyquant's ops, median of "
        f"{len(ref_times)} runs)")
    failed = 0
    for name, value in checked.items():
        result = (compare(value, expected[name]) if name in expected
                  else Comparison(False, problem=f"no output {name!r} in {original}"))
        failed += not result.exact
        say(f"check      {name}: {result.describe()}")
    verdict = "bit-exact" if not failed else f"MISMATCH in {failed} of {len(checked)} outputs"
    say(f"result     {verdict} against {original}")
    return 1 if failed else 0


def run_command(args, out=sys.stdout):
    """`polyquant run`: returns the exit status (0 ok, 1 reference mismatch)."""
    load_model(args.model, load_external_data=False)  # a clear error for a file that is no model
    reference_model = getattr(args, "reference_model", None)
    if reference_model is not None:
        if args.reference:
            raise CommandError("--reference and --reference-model: give one (the first checks MODEL against its "
                               "framework, the second against another model)")
        load_model(reference_model, load_external_data=False)
    kind = reference_kind(args.model) if args.reference else None
    reason = args.reference and (reference_unavailable() if kind == "qonnx" else
                                 quark_reference_unavailable() if kind == "quark" else None)
    if reason:
        raise CommandError(reason)
    start = time.perf_counter()
    session_notes = []
    session = make_session(args.model, notes=session_notes)
    load_s = time.perf_counter() - start
    given, notes = load_inputs(args.input or [], session)
    inputs = {**given, **random_inputs(session, args.seed, skip=given)}
    inputs = {arg.name: inputs[arg.name] for arg in session.get_inputs()}

    def say(text=""):
        print(text, file=out, flush=True)

    say(f"model      {args.model}  (session created in {_ms(load_s)})")
    for name, value in inputs.items():
        origin = "from file" if name in given else f"random, seed {args.seed}"
        say(f"input      {name}: {_describe(value)}  {origin}")
    for note in session_notes + notes:
        say(f"note       {note}")

    outputs, times = run_session(session, inputs, args.repeat)
    out_dir = Path(args.output_dir)
    paths = _save(outputs, out_dir)
    _save(inputs, out_dir / "inputs")
    for name, value in outputs.items():
        say(f"output     {name}: {_describe(value)}  -> {paths[name]}")
    pq_time = statistics.median(times)
    say(f"polyquant  {_ms(pq_time)} per run (onnxruntime + polyquant ops, median of {len(times)} runs)")
    if reference_model is not None:
        return _compare_with_model(args.model, reference_model, inputs, outputs, out_dir, args, say)
    if not args.reference:
        return 0

    # The fast session above may compute standard ops (MatMul, Gemm, Conv) in another summation
    # order than qonnx, which runs each alone (fusions such as Transpose+MatMul -> FusedMatMul,
    # prepacked constant weights): compare from a session with qonnx's standard-op numerics, so a
    # mismatch can only come from polyquant's ops.
    ref_name = {"qonnx": "qonnx execute_onnx", "quark": "amd-quark's CPU op in onnxruntime",
                "onnx": "onnx's reference evaluator"}[kind]
    ref_session = make_session(args.model, reference_numerics=True)
    checked, checked_times = run_session(ref_session, inputs, args.repeat, show_progress=False)
    say(f"polyquant  {_ms(statistics.median(checked_times))} per run in the session checked against {ref_name} "
        f"(basic optimizations without fusions or weight prepacking)")
    ref_repeat = min(args.repeat, args.reference_repeat)
    expected, ref_times = run_reference(args.model, inputs, ref_repeat)
    _save({k: v for k, v in expected.items() if k in outputs}, out_dir / "reference")
    ref_time = statistics.median(ref_times)
    say(f"reference  {_ms(ref_time)} per run ({ref_name}, median of {len(ref_times)} runs)")
    failed = 0
    for name, value in checked.items():
        result = (compare(value, expected[name]) if name in expected
                  else Comparison(False, problem="missing in reference"))
        failed += not result.exact
        say(f"check      {name}: {result.describe()}")
        fast = compare(outputs[name], value)
        if result.exact and not fast.exact:
            say(f"note       {name}: the fully optimized session differs ({fast.describe()}): onnxruntime's fusions "
                f"change standard ops' summation order; polyquant's ops are not involved")
    verdict = "bit-exact" if not failed else f"MISMATCH in {failed} of {len(checked)} outputs"
    say(f"result     {verdict}; speedup {ref_time / pq_time:.1f}x over {ref_name} (median / median)")
    if failed and kind == "qonnx":
        divergence = first_divergence(args.model, inputs)
        say("where      " + (divergence.describe() if divergence else
                              "every node's output agrees when intermediates are kept (the difference needs "
                              "the fused graph)"))
    return 1 if failed else 0
