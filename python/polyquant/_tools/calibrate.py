"""`polyquant calibrate` / `polyquant.calibrate`: AIMET encodings of a float ONNX model from data.

The float model runs in onnxruntime over the batches. Every quantizable tensor feeds one of AIMET's
encoding analyzers (polyquant.aimet, bit-exact with aimet-torch 2.42.0):
- activations: the inputs of MatMul, Gemm and Conv and the model's outputs, one update per batch;
- weights: those inputs that are initializers, one update.
At the end, each analyzer's range becomes an AIMET QuantizeDequantize's range, and its encoding is
written in AIMET's file format. This is what AIMET's `compute_encodings` does at the end of a
calibration: `analyzer.compute_encodings(num_steps, symmetric)`, then `set_range`.

Engines and the same bits (engines.py): each batch is a task; a worker (one onnxruntime session)
turns a batch into partial statistics, and partial statistics merge exactly, associatively and
commutatively, so any split of the batches over workers and any merge order give the same bits:
- MinMax: min / max, one pass;
- histograms (Percentile, SQNR, TfEnhanced), `histograms="two-pass"` (the default): a first pass
  gathers each activation's finite min and max; the second starts every histogram over that fixed
  range (start_with_range: the edges AIMET gives a first batch with exactly that range), so every
  batch lies inside it and the float32 counts add exactly (below 2^24 per bin; beyond, a
  CountsInexactWarning). The result is bit for bit AIMET's analyzer fed all the data as one batch.
  `histograms="aimet"` keeps AIMET's streaming growth instead (each batch re-bins the histogram into
  the grown range: the result depends on the order of the batches), on the local engine only.

Streaming: one batch per worker is in memory at a time, with its intermediate outputs. Beyond that,
only the analyzers' statistics are kept:
- MinMax: 2 floats per channel;
- Percentile: a histogram of `num_bins` per channel;
- SQNR / TfEnhanced: a histogram of `num_bins` / 512 per channel.
So memory does not grow with the number of batches (an in-memory generator is held in memory for the
two-pass histograms, which read it twice; files are read again instead).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .common import CommandError, _NoBar, progress

ANALYZERS = ("minmax", "percentile", "sqnr", "tfenhanced")
ENCODING_VERSIONS = ("0.6.1", "1.0.0", "2.0.0", "2.1.0")
QUANTIZED_OPS = ("MatMul", "Gemm", "Conv")


@dataclass
class TensorCalibration:
    name: str
    kind: str            # "activation" or "param"
    shape: tuple         # the tensor's shape (the first batch's for activations)
    quantizer: Any       # polyquant.aimet.QuantizeDequantize with the calibrated range
    batches: int = 0
    analyzer: Any = None  # the analyzer holding the statistics the range was computed from

    def encoding(self, version: str) -> Any:
        return self.quantizer.get_encodings().to_qnn_encoding_dict(version, input_shape=self.shape)


@dataclass
class CalibrationResult:
    tensors: list = field(default_factory=list)
    batches: int = 0
    encoding_version: str = "2.1.0"
    settings: dict = field(default_factory=dict)
    model: Any = None            # the float model calibrated (onnx.ModelProto)
    engine: dict = field(default_factory=dict)  # how it ran (engine, workers, address); never changes the bits

    @property
    def encodings(self) -> dict:
        """The encodings file's contents in `encoding_version`'s format (AIMET's sim.export layout)."""
        v = self.encoding_version
        producer = {"package": "polyquant", "version": _version()}
        if v in ("2.0.0", "2.1.0"):
            return {"producer": producer, "version": v,
                    "encodings": [{"name": t.name, **t.encoding(v)} for t in self.tensors]}
        acts = [t for t in self.tensors if t.kind == "activation"]
        params = [t for t in self.tensors if t.kind == "param"]
        args = {"activation_bitwidth": self.settings["bits"], "param_bitwidth": self.settings["bits"],
                "dtype": "int", "is_symmetric": self.settings["symmetric"],
                "per_channel_quantization": self.settings["per_channel"],
                "quant_scheme": self.settings["analyzer"]}
        if v == "1.0.0":
            return {"producer": producer, "version": v,
                    "activation_encodings": [{"name": t.name, **t.encoding(v)} for t in acts],
                    "param_encodings": [{"name": t.name, **t.encoding(v)} for t in params],
                    "excluded_layers": [], "quantizer_args": args}
        return {"producer": producer, "version": v,
                "activation_encodings": {t.name: t.encoding(v) for t in acts},
                "param_encodings": {t.name: t.encoding(v) for t in params},
                "excluded_layers": [], "quantizer_args": args}

    def save(self, path, model_format: str = "qdq") -> None:
        """Writes the encodings (JSON) to `path`; a path ending in .onnx gets the quantized model
        instead, in `model_format`: "qdq" (QuantizeLinear / DequantizeLinear pairs) or "qonnx"
        (IntQuant nodes)."""
        if str(path).endswith(".onnx"):
            onnx.save(self.quantized_model(model_format), path)
            return
        with open(path, "w") as f:
            json.dump(self.encodings, f, indent=2)

    def quantized_model(self, model_format: str = "qdq") -> Any:
        """The calibrated model with a quantizer on every calibrated tensor, its parameters those of
        the 2.1.0 encodings (ONNX-aligned: y_scale, y_zero_point, axis, the output dtype), exactly as
        the encodings hold them; quantized_model.py's insert_quantizers:
        - "qdq": a QuantizeLinear / DequantizeLinear pair per tensor, a weight stored quantized (the
          integers QuantizeLinear gives for it) and dequantized. The model's standard opset must
          admit the types: 13 for per-axis 8-bit, 21 for 16-bit and 4-bit;
        - "qonnx": one QONNX IntQuant per tensor (ROUND, the bit width and signedness of the output
          dtype), weights kept in float: what FINN and hls4ml read. The same values as the pairs
          except the sign of zero and, with an odd zero point, ties (IntQuant adds the zero point
          before it rounds).
        An activation produced by a node is quantized for every consumer and for the graph output
        of that name (the producer's output is renamed NAME__float); a graph input is quantized for
        its consumers."""
        from .quantized_model import insert_quantizers
        if self.model is None:
            raise CommandError(f"{model_format}: the result holds no model")
        return insert_quantizers(self.model, [(t.name, t.kind, t.encoding("2.1.0")) for t in self.tensors], model_format)

    def qdq_model(self) -> Any:
        """quantized_model("qdq"): QuantizeLinear / DequantizeLinear pairs."""
        return self.quantized_model("qdq")

    def qonnx_model(self) -> Any:
        """quantized_model("qonnx"): QONNX IntQuant nodes."""
        return self.quantized_model("qonnx")

    def __str__(self) -> str:
        rows = [("tensor", "kind", "encoding")]
        for t in self.tensors:
            enc = t.quantizer.get_encodings()
            scale = np.asarray(enc.scale).reshape(-1)
            desc = (f"scale {scale[0]:.6g}" if scale.size == 1 else
                    f"{scale.size} channels, scale {scale.min():.4g}..{scale.max():.4g}")
            rows.append((t.name, t.kind, desc))
        w = [max(len(r[i]) for r in rows) for i in range(2)]
        lines = [f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]}" for r in rows]
        lines.insert(1, "-" * len(lines[0]))
        lines.append(f"{len(self.tensors)} tensors calibrated over {self.batches} batches "
                     f"({self.settings['analyzer']}, {self.settings['bits']} bits)")
        return "\n".join(lines)


def _qdq_model(model, entries) -> Any:
    """Q/DQ pairs on `entries` ((tensor with .name and .kind, its 2.1.0 encoding) pairs): the "qdq"
    form of quantized_model.insert_quantizers (convert's AIMET encodings use it)."""
    from .quantized_model import insert_quantizers
    return insert_quantizers(model, [(t.name, t.kind, enc) for t, enc in entries], "qdq")


def _version() -> str:
    from .. import __version__
    return __version__


def _make_analyzer(name: str, shape: tuple, num_bins: int | None, percentile: float | None):
    from .. import aimet
    if name == "minmax":
        return aimet.MinMaxEncodingAnalyzer(shape)
    if name == "percentile":
        return aimet.PercentileEncodingAnalyzer(shape, num_bins or 2048, 99.99 if percentile is None else percentile)
    if name == "sqnr":
        return aimet.SqnrEncodingAnalyzer(shape, num_bins or 2048)
    return aimet.TfEnhancedEncodingAnalyzer(shape)


def _weight_shape(op: str, index: int, shape: tuple, attrs: dict, per_channel: bool) -> tuple:
    """The quantizer's shape for a weight: per tensor (), or per output channel as AIMET's QuantSim
    quantizes weights: Conv weights (C_out, C_in, ...) along axis 0; MatMul's B (K, N) along N; Gemm's
    B along N (axis 0 when transB)."""
    if not per_channel or index != 1 or len(shape) < 2:
        return ()
    if op == "Conv":
        return (shape[0],) + (1,) * (len(shape) - 1)
    if op == "Gemm" and attrs.get("transB", 0):
        return (shape[0], 1)
    return (1,) * (len(shape) - 1) + (shape[-1],)


def quantizable_tensors(model, ops=QUANTIZED_OPS, exclude=()) -> tuple[list, list]:
    """(activations, weights): the float inputs of the nodes of `ops` (default MatMul / Gemm / Conv;
    initializers are weights, with the op and input index they feed) and the model's outputs, each
    once, in graph order, without the tensors named in `exclude`."""
    inits = {t.name: t for t in model.graph.initializer}
    acts, weights, seen = [], [], set(exclude)
    for node in model.graph.node:
        if node.op_type not in ops or node.domain not in ("", "ai.onnx"):
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        for i, name in enumerate(node.input[:2]):  # data and weight (a Conv / Gemm bias is not quantized)
            if not name or name in seen:
                continue
            seen.add(name)
            if name in inits:
                if inits[name].data_type == TensorProto.FLOAT:
                    weights.append((name, node.op_type, i, attrs))
            else:
                acts.append(name)
    for out in model.graph.output:
        if out.name not in seen:
            seen.add(out.name)
            acts.append(out.name)
    return acts, weights


# ---- the data as tasks ------------------------------------------------------------------------------
def _tasks(data) -> Iterable[tuple]:
    """(index, source) per batch of `data`: source is a .npz / .npy path (each worker loads its own) or
    a dict of input arrays. `data`: an iterable of dicts, a dict (one batch), a .npz / .npy file or a
    directory of them (sorted by name). A generator is consumed lazily."""
    if isinstance(data, dict):
        return [(0, data)]
    if isinstance(data, (str, os.PathLike)):
        path = Path(data)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in (".npz", ".npy"))
            if not files:
                raise CommandError(f"--data: {path} holds no .npz or .npy file")
        elif path.exists():
            files = [path]
        else:
            raise CommandError(f"--data: no such file or directory: {path}")
        return [(i, str(f.resolve())) for i, f in enumerate(files)]  # absolute: a worker's directory may differ
    try:
        it = iter(data)
    except TypeError:
        raise CommandError(f"data: expected a path, a dict of inputs or an iterable of them, got "
                           f"{type(data).__name__}") from None

    def checked():
        for i, batch in enumerate(it):
            if not isinstance(batch, dict):
                raise CommandError(f"data: each batch must be a dict of input arrays, got {type(batch).__name__}")
            yield i, batch
    return checked()


def _load_batch(source) -> dict:
    if isinstance(source, dict):
        return source
    f = Path(source)
    if f.suffix == ".npz":
        with np.load(f) as z:
            return {k: z[k] for k in z.files}
    if f.suffix == ".npy":
        return {None: np.load(f)}
    raise CommandError(f"--data: {f} is not a .npz or .npy file")


# ---- what a worker does with one batch -------------------------------------------------------------
@dataclass
class _TensorPartial:
    """One activation's statistics over some batches: `first` is the index of the earliest batch seen
    and `shape` its shape (the result's shape, whatever the order of merging)."""
    first: int
    shape: tuple
    batches: int
    stat: Any   # an analyzer, or (min, max) float32 scalars in the ranges pass


@dataclass
class _Partial:
    batches: int = 0
    tensors: dict = field(default_factory=dict)


def _finite_range(value) -> tuple:
    """The finite min and max of `value` (float32 scalars; +inf / -inf when it has none), a zero extreme
    as +0.0: a function of the values alone, so merging ranges gives the same bits in any order (torch's
    min picks +0.0 or -0.0 by position instead; the histograms' edges and counts are the same)."""
    finite = np.isfinite(value)
    mn = np.min(value, initial=np.float32(np.inf), where=finite)
    mx = np.max(value, initial=np.float32(-np.inf), where=finite)
    return np.float32(mn) + np.float32(0), np.float32(mx) + np.float32(0)


def _merge_stat(a, b):
    if isinstance(a, tuple):
        return np.minimum(a[0], b[0]), np.maximum(a[1], b[1])
    a.merge(b)
    return a


def _merge_partials(a: _Partial, b: _Partial) -> _Partial:
    """Exact, associative and commutative (the engines' contract): batch counts add, the earliest batch
    wins the shape, ranges take min / max, analyzers merge (MinMax: min / max; histograms started over
    the same range: counts add)."""
    a.batches += b.batches
    for name, tb in b.tensors.items():
        ta = a.tensors.get(name)
        if ta is None:
            a.tensors[name] = tb
            continue
        if tb.first < ta.first:
            ta.first, ta.shape = tb.first, tb.shape
        ta.batches += tb.batches
        ta.stat = _merge_stat(ta.stat, tb.stat)
    return a


@dataclass(frozen=True)
class _Job:
    """Everything a worker needs (pickled to Ray / Dask workers): the model with the activations as
    outputs, and what to gather. step: "ranges" (each activation's finite min / max), "stats" (an
    analyzer per activation; histograms over `ranges` when given)."""
    model: bytes
    acts: tuple
    step: str
    analyzer: str
    num_bins: int | None
    percentile: float | None
    ranges: dict | None = None


class _BatchWorker:
    """One onnxruntime session, run on one batch per call. One intra-op thread on every engine: the
    activations (and so the statistics) are then the same bits whichever engine runs them, as
    onnxruntime's kernels may split their sums by thread count."""

    def __init__(self, job: _Job):
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.job = job
        self.session = ort.InferenceSession(job.model, options, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]

    def activations(self, task) -> tuple:
        """(index, {activation: value}) of one batch; float32 activations only."""
        index, source = task
        batch = _load_batch(source)
        names = self.input_names
        if None in batch:  # a bare .npy: the model's only input
            if len(names) != 1:
                raise CommandError(f"--data: a .npy file holds one array, but the model has {len(names)} "
                                   f"inputs ({', '.join(names)}): use .npz files keyed by input name")
            batch = {names[0]: batch[None]}
        missing = [n for n in names if n not in batch]
        if missing:
            raise CommandError(f"data: batch {index} lacks input(s) {', '.join(missing)} "
                               f"(the model's inputs: {', '.join(names)})")
        values = self.session.run(list(self.job.acts), {n: np.asarray(batch[n]) for n in names})
        return index, {n: v for n, v in zip(self.job.acts, values) if v.dtype == np.float32}

    def __call__(self, task) -> _Partial:
        index, values = self.activations(task)
        job, part = self.job, _Partial(batches=1)
        for name, value in values.items():
            if job.step == "ranges":
                stat = _finite_range(value)
            else:
                stat = _make_analyzer(job.analyzer, (), job.num_bins, job.percentile)
                if job.ranges is not None:
                    stat.start_with_range(*job.ranges[name], dtype="float32")
                stat.update_stats(value)
            part.tensors[name] = _TensorPartial(index, tuple(value.shape), 1, stat)
        return part


class CountsInexactWarning(RuntimeWarning):
    """A histogram bin reached 2^24 values: its float32 count (AIMET's) may have rounded in a sum, so
    the statistics may depend on how the data were split and merged."""


HISTOGRAM_MODES = ("two-pass", "aimet")


def calibrate(model: Any, data: Any, analyzer: str = "minmax", bits: int = 8, per_channel: bool = False,
              symmetric: bool = False, engine: str | None = None, workers: int | None = None, *,
              address: str | None = None, histograms: str = "two-pass", encoding_version: str = "2.1.0",
              num_bins: int | None = None, percentile: float | None = None, ops: Iterable[str] | None = None,
              exclude: Iterable[str] = (), from_quantized: bool = False,
              show_progress: bool = True) -> CalibrationResult:
    """AIMET encodings of `model` (a float ONNX model: ModelProto, path or bytes) from `data` (a path
    to a .npz / .npy file or a directory of them, a dict of inputs, or an iterable of such dicts);
    see the module documentation.

    engine: None / "local" (this process), "ray" or "dask" (map_reduce in engines.py), with `workers`
    and `address` (an existing cluster). histograms: "two-pass" (the default: a ranges pass, then
    histograms over the fixed ranges; the statistics of AIMET's analyzer fed all the data as one batch,
    whatever the engine, split or order) or "aimet" (AIMET's streaming growth, batch after batch in
    order; local engine only). The encodings never depend on the engine.

    ops: the op types whose float inputs are calibrated (default MatMul, Gemm, Conv; the model's
    outputs always are); exclude: tensor names left out. from_quantized: `model` is already
    quantized (QONNX / Brevitas, Quark, standard Q/DQ): its float network is calibrated, every
    quantizer taken out first (quantized_model.float_model), and the result's model is that float
    network."""
    from ..onnx.models import _load_model
    from . import engines
    if analyzer not in ANALYZERS:
        raise CommandError(f"analyzer: expected one of {', '.join(ANALYZERS)}, got {analyzer!r}")
    if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 16:
        raise CommandError(f"bits: expected an integer from 2 to 16, got {bits!r}")
    if encoding_version not in ENCODING_VERSIONS:
        raise CommandError(f"encoding_version: expected one of {', '.join(ENCODING_VERSIONS)}, got {encoding_version!r}")
    if engine not in (None,) + engines.ENGINES:
        raise CommandError(f"engine: expected one of {', '.join(engines.ENGINES)} (or None: local), got {engine!r}")
    engine = engine or "local"
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise CommandError(f"workers: expected a positive integer, got {workers!r}")
    if engine == "local" and workers not in (None, 1):
        raise CommandError(f"workers: the local engine runs one worker, got {workers}; use engine='ray' or 'dask'")
    if engine == "local" and address is not None:
        raise CommandError("address: an existing cluster is for engine='ray' or 'dask', not the local engine")
    if histograms not in HISTOGRAM_MODES:
        raise CommandError(f"histograms: expected one of {', '.join(HISTOGRAM_MODES)}, got {histograms!r}")
    if histograms == "aimet" and engine != "local":
        raise CommandError(f"histograms: 'aimet' (AIMET's streaming growth, which depends on the order of the batches) "
                           f"runs on the local engine only, got engine={engine!r}; use histograms='two-pass'")
    ops = QUANTIZED_OPS if ops is None else (ops,) if isinstance(ops, str) else tuple(ops)
    if not ops or not all(isinstance(o, str) and o.isidentifier() for o in ops):
        raise CommandError(f"ops: expected op type names (e.g. MatMul, Gemm, Conv), got {ops!r}")
    exclude = (exclude,) if isinstance(exclude, str) else tuple(exclude)
    if not all(isinstance(e, str) for e in exclude):
        raise CommandError(f"exclude: expected tensor names, got {exclude!r}")
    try:
        original = _load_model(model, copy=True)
    except (OSError, ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None
    if from_quantized:
        from .quantized_model import float_model
        original, removed = float_model(original)
        if not removed:
            raise CommandError("from_quantized: the model has no quantizer (QONNX, Quark or QuantizeLinear / "
                               "DequantizeLinear) to take out; calibrate it as it is")
    m = onnx.ModelProto()  # the session's copy, with the activations added as outputs
    m.CopyFrom(original)
    custom = sorted({n.domain for n in m.graph.node if n.domain not in ("", "ai.onnx")})
    if custom:
        raise CommandError(f"model: calibrate takes a float model of standard ONNX ops; this one has nodes of "
                           f"{', '.join(custom)} (an already quantized model? from_quantized=True / "
                           f"--from-quantized calibrates its float network)")
    qdq = sorted({n.op_type for n in m.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")})
    if qdq:
        raise CommandError(f"model: calibrate takes a float model; this one has {' and '.join(qdq)} nodes (already "
                           f"quantized: from_quantized=True / --from-quantized calibrates its float network)")
    acts, weights = quantizable_tensors(m, ops, exclude)
    graph_outputs = {o.name for o in m.graph.output}
    for name in acts:  # every activation becomes an output of the session
        if name not in graph_outputs:
            m.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    job = _Job(m.SerializeToString(), tuple(acts), "stats", analyzer, num_bins, percentile)
    try:
        driver = _BatchWorker(job)  # loads the model here first, so a bad model fails before any cluster starts
    except Exception as exc:  # noqa: BLE001 - onnxruntime's load errors have several types
        raise CommandError(f"model: onnxruntime cannot load it: {exc}") from None

    from .. import aimet
    settings = {"analyzer": analyzer, "bits": bits, "symmetric": symmetric, "per_channel": per_channel,
                "histograms": histograms, "ops": list(ops), "exclude": list(exclude), "from_quantized": from_quantized}
    result = CalibrationResult(encoding_version=encoding_version, settings=settings, model=original,
                               engine={"engine": engine, "workers": workers, "address": address})
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}

    def new_quantizer(name, kind, shape, qshape):
        return TensorCalibration(name, kind, tuple(shape), aimet.QuantizeDequantize(qshape, bits, symmetric))

    stats = []
    for name, op, index, attrs in weights:  # one batch each, in this process
        w = inits[name]
        qshape = _weight_shape(op, index, w.shape, attrs, per_channel)
        t, an = new_quantizer(name, "param", w.shape, qshape), _make_analyzer(analyzer, qshape, num_bins, percentile)
        an.update_stats(w)
        t.batches = 1
        stats.append((t, an))

    tasks = _tasks(data)
    histogram = analyzer != "minmax"
    two_pass = histogram and histograms == "two-pass"
    second_tasks = tasks
    if two_pass and not isinstance(tasks, list):
        if iter(data) is data:  # a one-shot iterator (a generator) is read twice: held in memory
            tasks = second_tasks = list(tasks)
        else:  # a re-iterable object is iterated again for the second pass
            second_tasks = _tasks(data)
    show_progress = show_progress and sys.stderr.isatty()

    def run(step_job, desc, tasks):
        total = len(tasks) if isinstance(tasks, list) else None
        with (progress(None, desc, total=total, unit="batch") if show_progress else _NoBar(())) as bar:
            if histograms == "aimet" and histogram:
                return _streaming(driver, tasks, step_job, bar)
            factory = functools.partial(_BatchWorker, step_job)
            if engine == "local":  # this process's session serves the local engine
                factory = functools.partial(_reuse_worker, driver, step_job)
            return engines.map_reduce(engine, tasks, factory, _merge_partials, workers=workers, address=address,
                                      on_done=lambda: bar.update(1))

    ranges = None
    if two_pass:
        found = run(dataclasses.replace(job, step="ranges"), "calibrate: ranges (1/2)", tasks)
        if found is not None:
            ranges = {}
            for name, t in found.tensors.items():
                lo, hi = t.stat
                if not np.isfinite(lo):
                    raise CommandError(f"data: activation {name} has no finite value in any batch; "
                                       f"the {analyzer} analyzer needs one")
                ranges[name] = (lo, hi)
    total = run(dataclasses.replace(job, ranges=ranges), "calibrate: histograms (2/2)" if two_pass else "calibrate",
                second_tasks)
    if total is None or total.batches == 0:
        raise CommandError("data: no batch was given")
    result.batches = total.batches
    for name in acts:
        if name not in total.tensors:
            continue
        tp = total.tensors[name]
        t = new_quantizer(name, "activation", tp.shape, ())
        t.batches = tp.batches
        stats.append((t, tp.stat))
        if two_pass and not tp.stat.counts_exact():
            warnings.warn(f"calibrate: a bin of {name}'s histogram holds 2^24 values or more; float32 counts (AIMET's) "
                          f"may round when added, so the statistics may depend on the split and order of the batches",
                          CountsInexactWarning, stacklevel=2)
    num_steps = 2 ** bits - 1
    for t, an in stats:
        enc_min, enc_max = an.compute_encodings(num_steps, symmetric)
        t.quantizer.set_range(np.asarray(enc_min).reshape(t.quantizer.shape), np.asarray(enc_max).reshape(t.quantizer.shape))
        t.analyzer = an
        result.tensors.append(t)
    return result


def _reuse_worker(worker: _BatchWorker, job: _Job) -> _BatchWorker:
    """The local engine's worker: this process's session, with the step's job."""
    worker.job = job
    return worker


def _streaming(worker: _BatchWorker, tasks, job: _Job, bar) -> _Partial:
    """histograms="aimet": one analyzer per activation fed the batches in order (AIMET's growth)."""
    worker.job = job
    total = _Partial()
    for task in tasks:
        index, values = worker.activations(task)
        for name, value in values.items():
            if name not in total.tensors:
                total.tensors[name] = _TensorPartial(index, tuple(value.shape), 0,
                                                     _make_analyzer(job.analyzer, (), job.num_bins, job.percentile))
            t = total.tensors[name]
            t.stat.update_stats(value)
            t.batches += 1
        total.batches += 1
        bar.update(1)
    return total


def calibrate_command(args, out=sys.stdout) -> int:
    r = calibrate(args.model, args.data, args.analyzer, args.bits, args.per_channel, args.symmetric, args.engine,
                  args.workers, address=getattr(args, "address", None),
                  histograms=getattr(args, "histograms", "two-pass"), encoding_version=args.encoding_version,
                  ops=args.ops.split(",") if getattr(args, "ops", None) else None,
                  exclude=getattr(args, "exclude", None) or (), from_quantized=getattr(args, "from_quantized", False))
    print(r, file=out)
    if args.output:
        form = getattr(args, "model_format", "qdq")
        r.save(args.output, form)
        what = ({"qdq": "the model with Q/DQ pairs", "qonnx": "the model with QONNX IntQuant nodes"}[form]
                if str(args.output).endswith(".onnx") else f"AIMET encodings {args.encoding_version}")
        print(f"written: {args.output} ({what})", file=out)
    return 0


def add_parser(sub, epilog: str) -> None:
    p = sub.add_parser(
        "calibrate", epilog=epilog, help="AIMET encodings of a float ONNX model from calibration data",
        description="Run the float MODEL in onnxruntime over the batches of --data (a .npz file keyed by input "
                    "name, a .npy file for a one-input model, or a directory of them, taken in name order), feed "
                    "the inputs of every MatMul / Gemm / Conv and the model's outputs (weights: once) to AIMET's "
                    "encoding analyzer, and write AIMET's encodings (bit-exact with aimet-torch 2.42.0's "
                    "analyzers and quantizers). Memory holds one batch and the statistics. The same bits on every "
                    "engine and any number of workers. docs/calibrate.md")
    p.add_argument("model", metavar="MODEL.onnx")
    p.add_argument("--data", required=True, metavar="DIR|FILE", help="a .npz / .npy file or a directory of them")
    p.add_argument("--analyzer", choices=ANALYZERS, default="minmax", help="default: %(default)s")
    p.add_argument("--bits", type=int, default=8, help="bit width, 2..16 (default: %(default)s)")
    p.add_argument("--per-channel", action="store_true", help="weights per output channel")
    p.add_argument("--symmetric", action="store_true", help="symmetric grids")
    p.add_argument("--engine", choices=["local", "ray", "dask"], default=None,
                   help="local: this process (default); ray / dask: a cluster (pip install .[ray] / .[dask])")
    p.add_argument("--workers", type=int, default=None,
                   help="workers of a ray / dask cluster (default: the CPU count, or the existing cluster's)")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="an existing cluster: Ray's address (ray://host:10001, auto) or Dask's scheduler (tcp://host:8786)")
    p.add_argument("--histograms", choices=HISTOGRAM_MODES, default="two-pass",
                   help="two-pass (default): a ranges pass fixes each histogram's edges, then counts add: AIMET's "
                        "analyzer fed all the data as one batch, on any engine; aimet: AIMET's streaming growth "
                        "(depends on the order of the batches; local engine only)")
    p.add_argument("--ops", default=None, metavar="OP,OP",
                   help="op types whose float inputs are calibrated (default: MatMul,Gemm,Conv; the model's outputs always are)")
    p.add_argument("--exclude", action="append", metavar="TENSOR", help="leave this tensor out (repeatable)")
    p.add_argument("--from-quantized", action="store_true",
                   help="MODEL is already quantized (QONNX / Brevitas, Quark, Q/DQ): calibrate its float network, "
                        "every quantizer taken out")
    p.add_argument("--encoding-version", choices=ENCODING_VERSIONS, default="2.1.0", help="default: %(default)s")
    p.add_argument("-o", "--output", metavar="OUT.json|OUT.onnx",
                   help="where to write the encodings (JSON), or the quantized model (a path ending in .onnx; "
                        "--model-format)")
    p.add_argument("--model-format", choices=("qdq", "qonnx"), default="qdq",
                   help="the .onnx output: qdq (QuantizeLinear / DequantizeLinear pairs, default) or qonnx (IntQuant "
                        "nodes, for FINN / hls4ml)")
    p.set_defaults(func=calibrate_command)
