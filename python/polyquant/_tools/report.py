"""`polyquant report` / `polyquant.report`: what quantization does to each tensor of a float ONNX model,
as one self-contained HTML page (and JSON).

Three streaming passes over the same batches (docs/report.md):
1. `calibrate()` computes each tensor's quantization range (AIMET's analyzers and quantizers).
2. Statistics: onnxruntime runs the float model (every calibrated activation as an extra output) and
   the calibrated Q/DQ model (`result.qdq_model()`) on each batch. Per tensor, with x the float
   values and q(x) the calibrated AIMET QuantizeDequantize of them:
   - SQNR = 10 log10(sum x^2 / sum (x - q(x))^2), sums in float64 (+inf when q(x) == x everywhere);
   - clipped = the number of x that the grid's clamp moves: AIMET's round(x / scale) - offset lies
     outside [qmin, qmax] (per channel for per-channel weights); so x lies beyond the grid's range
     [min, max] = [scale * (offset + qmin), scale * (offset + qmax)] by more than half a step;
   - the data's finite min and max (the histogram's edges must cover them);
   - per activation, the model-level SQNR: x of the float model against the same tensor of the Q/DQ
     model, where every quantization upstream has accumulated.
3. Histograms: fixed edges over [min(data min, grid min), max(data max, grid max)], so the integer
   counts of the batches add exactly.

Memory holds one batch with its intermediate outputs, and per tensor a few sums and `bins` counts:
it does not grow with the number of batches. Weights are read once, outside the passes.
"""

from __future__ import annotations

import html as html_lib
import io
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .common import CommandError, _NoBar, progress

DEFAULT_BINS = 128
# The quantization grid's points are drawn over the histogram when there are at most this many:
# beyond that they merge into a solid band and say nothing the clipping range does not.
MAX_DRAWN_GRID_POINTS = 64


# ------------------------------------------------------------------------------------------------
# The figures of one tensor


@dataclass
class TensorReport:
    """What quantization does to one calibrated tensor over the data (see the module documentation)."""
    name: str
    kind: str                      # "activation" or "param"
    shape: tuple
    scale: np.ndarray              # the encoding's scale, float32, of the quantizer's shape
    zero_point: np.ndarray         # -offset: the integer that dequantizes to 0 (ONNX's y_zero_point)
    qmin: int
    qmax: int
    grid_min: np.ndarray           # scale * (offset + qmin), float32, of the quantizer's shape
    grid_max: np.ndarray           # scale * (offset + qmax)
    values: int = 0                # finite values seen
    nonfinite: int = 0             # NaN / inf values seen (left out of every figure)
    clipped: int = 0
    signal: float = 0.0            # sum x^2
    noise: float = 0.0             # sum (x - q(x))^2
    data_min: float = math.inf
    data_max: float = -math.inf
    edges: np.ndarray | None = None
    counts: np.ndarray | None = None
    model_signal: float | None = None   # activations: sum x^2 of the float model's tensor
    model_noise: float | None = None    # sum (x - x_qdq_model)^2

    @property
    def channels(self) -> int:
        return int(self.scale.size)

    @property
    def sqnr_db(self) -> float:
        """Quantize-dequantize of this tensor alone: 10 log10(sum x^2 / sum (x - q(x))^2)."""
        return _sqnr_db(self.signal, self.noise)

    @property
    def model_sqnr_db(self) -> float | None:
        """The Q/DQ model's value of this activation against the float model's; None for weights or
        when the Q/DQ model could not run."""
        if self.model_signal is None:
            return None
        return _sqnr_db(self.model_signal, self.model_noise)

    @property
    def clipped_fraction(self) -> float:
        return self.clipped / self.values if self.values else 0.0

    def encoding_text(self) -> str:
        if self.channels == 1:
            return f"scale {float(self.scale.reshape(-1)[0]):.6g}, zero point {int(self.zero_point.reshape(-1)[0])}"
        s = self.scale.reshape(-1)
        return f"{self.channels} channels, scale {s.min():.4g}..{s.max():.4g}"

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "shape": list(self.shape), "channels": self.channels,
                "scale": self.scale.reshape(-1).tolist(), "zero_point": self.zero_point.reshape(-1).tolist(),
                "qmin": self.qmin, "qmax": self.qmax,
                "grid_min": self.grid_min.reshape(-1).tolist(), "grid_max": self.grid_max.reshape(-1).tolist(),
                "values": self.values, "nonfinite": self.nonfinite, "clipped": self.clipped,
                "clipped_fraction": self.clipped_fraction, "signal": self.signal, "noise": self.noise,
                "sqnr_db": _json_float(self.sqnr_db), "model_signal": self.model_signal, "model_noise": self.model_noise,
                "model_sqnr_db": _json_float(self.model_sqnr_db),
                "data_min": _json_float(self.data_min), "data_max": _json_float(self.data_max),
                "histogram": {"edges": [] if self.edges is None else self.edges.tolist(),
                              "counts": [] if self.counts is None else self.counts.tolist()}}


def _sqnr_db(signal: float, noise: float) -> float:
    """10 log10(signal / noise), +inf for an exact result (noise 0), -inf for a zero signal with noise."""
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def _json_float(v: float | None) -> Any:
    """JSON has no infinities: +inf (an exact quantization) is written "inf", -inf "-inf"."""
    if v is None or math.isnan(v):
        return None
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


# ------------------------------------------------------------------------------------------------
# The report


@dataclass
class Report:
    """Per-tensor figures of a calibrated model (``tensors``: weights first, then the activations in
    graph order, as calibrate orders them); ``html()``, ``to_dict()``, ``to_json()``, ``save(path)``."""
    model_name: str
    tensors: list = field(default_factory=list)
    batches: int = 0
    settings: dict = field(default_factory=dict)
    model_note: str | None = None   # why the model-level comparison is missing, when it is

    @property
    def activations(self) -> list:
        return [t for t in self.tensors if t.kind == "activation"]

    def ranked(self) -> list:
        """The tensors by damage: SQNR ascending (the most damaged first), then by name."""
        return sorted(self.tensors, key=lambda t: (t.sqnr_db, t.name))

    def divergence(self) -> dict:
        """Where the quantized model departs from the float one: the activation of lowest model-level
        SQNR (``worst``), and the largest drop of it from one activation to the next along the graph
        (``largest_drop``: (previous, this, dB lost)); entries are None without a comparison."""
        acts = [t for t in self.activations if t.model_sqnr_db is not None]
        out = {"worst": None, "largest_drop": None}
        if not acts:
            return out
        worst = min(acts, key=lambda t: t.model_sqnr_db)
        out["worst"] = (worst.name, worst.model_sqnr_db)
        drops = [(a.name, b.name, a.model_sqnr_db - b.model_sqnr_db) for a, b in zip(acts, acts[1:])
                 if math.isfinite(a.model_sqnr_db) and math.isfinite(b.model_sqnr_db)]
        if drops:
            out["largest_drop"] = max(drops, key=lambda d: d[2])
        return out

    def to_dict(self) -> dict:
        div = self.divergence()
        return {"model": self.model_name, "batches": self.batches, "settings": dict(self.settings),
                "model_note": self.model_note,
                "divergence": {"worst": None if div["worst"] is None else
                               {"name": div["worst"][0], "model_sqnr_db": _json_float(div["worst"][1])},
                               "largest_drop": None if div["largest_drop"] is None else
                               {"from": div["largest_drop"][0], "to": div["largest_drop"][1],
                                "db": div["largest_drop"][2]}},
                "tensors": [t.to_dict() for t in self.tensors]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def save(self, path) -> None:
        """Writes the HTML page to `path`, or the JSON when `path` ends in .json."""
        text = self.to_json() if str(path).endswith(".json") else self.html()
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def html(self) -> str:
        """The self-contained page: no external resource of any kind (plots are inline SVG)."""
        return _render_html(self)

    def __str__(self) -> str:
        rows = [("tensor", "kind", "SQNR dB", "clipped %", "model SQNR dB")]
        for t in self.ranked():
            rows.append((t.name, t.kind, _db_text(t.sqnr_db), f"{100 * t.clipped_fraction:.3g}",
                         "-" if t.model_sqnr_db is None else _db_text(t.model_sqnr_db)))
        w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(f"{c:<{w[i]}}" if i < 2 else f"{c:>{w[i]}}" for i, c in enumerate(r)) for r in rows]
        lines.insert(1, "-" * len(lines[0]))
        s = self.settings
        lines.append(f"{len(self.tensors)} tensors over {self.batches} batches ({s.get('analyzer')}, {s.get('bits')} bits); "
                     f"ranked by SQNR, the most damaged first")
        if self.model_note:
            lines.append(f"model-level comparison: {self.model_note}")
        return "\n".join(lines)


def _db_text(v: float) -> str:
    if math.isinf(v):
        return "exact" if v > 0 else "-inf"
    return f"{v:.2f}"


# ------------------------------------------------------------------------------------------------
# Data


def _read_batches(data, input_names: list) -> Iterator[dict]:
    """Input dicts keyed by the model's input names from `data`: a dict (one batch), a .npz file
    (keyed by input name), a .npy file (a one-input model), a directory of them (name order), or an
    iterable of dicts."""
    if isinstance(data, dict):
        yield _check_batch(data, input_names, 0)
        return
    if isinstance(data, (str, os.PathLike)):
        for k, f in enumerate(_data_files(data)):
            if f.suffix == ".npz":
                with np.load(f) as z:
                    yield _check_batch({n: z[n] for n in z.files}, input_names, k)
            else:
                if len(input_names) != 1:
                    raise CommandError(f"--data: {f.name} (.npy) holds one array, but the model has {len(input_names)} "
                                       f"inputs ({', '.join(input_names)}): use .npz files keyed by input name")
                yield {input_names[0]: np.load(f)}
        return
    for k, batch in enumerate(data):
        if not isinstance(batch, dict):
            raise CommandError(f"data: each batch must be a dict of input arrays, got {type(batch).__name__}")
        yield _check_batch(batch, input_names, k)


def _data_files(data) -> list:
    path = Path(data)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".npz", ".npy"))
        if not files:
            raise CommandError(f"--data: {path} holds no .npz or .npy file")
        return files
    if not path.exists():
        raise CommandError(f"--data: no such file or directory: {path}")
    if path.suffix not in (".npz", ".npy"):
        raise CommandError(f"--data: {path} is not a .npz or .npy file")
    return [path]


def _check_batch(batch: dict, input_names: list, index: int) -> dict:
    missing = [n for n in input_names if n not in batch]
    if missing:
        raise CommandError(f"data: batch {index} lacks input(s) {', '.join(missing)} "
                           f"(the model's inputs: {', '.join(input_names)})")
    return {n: np.asarray(batch[n]) for n in input_names}


def _batch_count(data) -> int | None:
    if isinstance(data, dict):
        return 1
    if isinstance(data, (str, os.PathLike)):
        return len(_data_files(data))
    try:
        return len(data)
    except TypeError:
        return None


# ------------------------------------------------------------------------------------------------
# The passes


def _session(model) -> Any:
    """An onnxruntime session computing each op alone (convert's exact options: no fusions, no
    prepacking), so the float and the Q/DQ model run the same float kernels."""
    import onnxruntime as ort
    from .convert import exact_session_options
    try:
        return ort.InferenceSession(model.SerializeToString(), exact_session_options(),
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime's load errors have several types
        raise CommandError(f"model: onnxruntime cannot load it: {exc}") from None


def _with_outputs(model, names) -> Any:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    present = {o.name for o in m.graph.output}
    for n in names:
        if n not in present:
            m.graph.output.append(helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None))
    return m


def _quantized_names(qdq_model, names) -> dict:
    """Each activation's name in the Q/DQ model's graph after its QuantizeLinear / DequantizeLinear pair:
    the name itself when a DequantizeLinear produces it (a node's output), else the output of the
    DequantizeLinear after the QuantizeLinear that reads it (a graph input)."""
    nodes = list(qdq_model.graph.node)
    producer = {o: n for n in nodes for o in n.output}
    out = {}
    for name in names:
        p = producer.get(name)
        if p is not None and p.op_type == "DequantizeLinear":
            out[name] = name
            continue
        q = next((n for n in nodes if n.op_type == "QuantizeLinear" and n.input[0] == name), None)
        dq = q and next((n for n in nodes if n.op_type == "DequantizeLinear" and n.input[0] == q.output[0]), None)
        if dq is not None:
            out[name] = dq.output[0]
    return out


def _bar(show: bool, desc: str, total: int | None):
    return progress(None, desc, total=total, unit="batch") if show else _NoBar(())


# A grid wider than any quantizer's (16 bits at most): AIMET's quantize on it only clamps what is
# clipped on the real grid anyway. 2^24: every level below it is exact in float32.
_UNCLAMPED = 2 ** 24


def _accumulate(t: TensorReport, x: np.ndarray, quantizer) -> None:
    """Adds one batch of x to t's sums, clipped count and finite range (float64 sums)."""
    from ..aimet import quantize
    x = np.asarray(x, np.float32)
    finite = np.isfinite(x)
    all_finite = bool(finite.all())
    if not all_finite:
        t.nonfinite += int(x.size - finite.sum())
        # q(NaN) is NaN and q(inf) clamps: such values are left out; 0 stands in for them below.
        x = np.where(finite, x, np.float32(0))
    n = int(finite.sum()) if not all_finite else x.size
    if n == 0:
        return
    x64 = x.astype(np.float64)
    err = x64 - np.asarray(quantizer(x), np.float64)
    t.signal += float(np.dot(x64.reshape(-1), x64.reshape(-1)))
    t.noise += float(np.dot(err.reshape(-1), err.reshape(-1)))
    # Clipped: AIMET's round(x / scale) - offset, taken on a grid too wide to clamp any value that
    # matters, lies outside [qmin, qmax], so the clamp moves it. Values up to half a step beyond the
    # range [min, max] round onto its end and are not clipped.
    enc = quantizer.get_encodings()
    level = quantize(x, enc.scale, enc.offset, -_UNCLAMPED, _UNCLAMPED)
    outside = (level < t.qmin) | (level > t.qmax)
    if not all_finite:
        outside &= finite
    t.clipped += int(np.count_nonzero(outside))
    t.values += n
    if all_finite:
        t.data_min = min(t.data_min, float(x.min()))
        t.data_max = max(t.data_max, float(x.max()))
    else:
        t.data_min = min(t.data_min, float(np.min(x, where=finite, initial=np.inf)))
        t.data_max = max(t.data_max, float(np.max(x, where=finite, initial=-np.inf)))


def _fix_edges(t: TensorReport, bins: int) -> None:
    """Edges covering the data and the grid's range, fixed before the counting pass."""
    lo = min(t.data_min, float(t.grid_min.min()))
    hi = max(t.data_max, float(t.grid_max.max()))
    if not lo < hi:  # one value and a degenerate grid: a unit-wide window around it
        lo, hi = lo - 0.5, hi + 0.5
    t.edges = np.linspace(lo, hi, bins + 1)
    t.counts = np.zeros(bins, np.int64)


def _count(t: TensorReport, x: np.ndarray) -> None:
    x = np.asarray(x).reshape(-1)
    if not np.isfinite(x).all():
        x = x[np.isfinite(x)]
    # Uniform bins over [lo, hi] (the last bin closed): every finite value of the data lies inside.
    counts, _ = np.histogram(x, bins=t.counts.size, range=(float(t.edges[0]), float(t.edges[-1])))
    t.counts += counts


def report(model: Any, data: Any, analyzer: str = "minmax", bits: int = 8, per_channel: bool = False,
           symmetric: bool = False, *, bins: int = DEFAULT_BINS, show_progress: bool = True,
           **calibrate_options: Any) -> Report:
    """What quantization does to each tensor of `model` (a float ONNX model: ModelProto, path or
    bytes) over `data` (a .npz / .npy file or a directory of them, a dict of inputs, or a re-iterable
    collection of such dicts, e.g. a list: the data is read three times). `analyzer`, `bits`,
    `per_channel`, `symmetric` and `calibrate_options` (e.g. ``percentile=``) go to calibrate();
    `bins` is the number of histogram bins per tensor. See the module documentation."""
    from .calibrate import calibrate
    if isinstance(bins, bool) or not isinstance(bins, int) or not 2 <= bins <= 100_000:
        raise CommandError(f"bins: expected an integer from 2 to 100000, got {bins!r}")
    if not isinstance(data, (dict, str, os.PathLike)):
        try:
            reiterable = iter(data) is not data
        except TypeError:
            raise CommandError(f"data: expected a path, a dict of inputs or a collection of them, got "
                               f"{type(data).__name__}") from None
        if not reiterable:
            raise CommandError("data: the report reads the batches three times (calibration, statistics, "
                               "histograms), and this iterator can be read once: pass a list, a path or another "
                               "re-iterable collection")
    from ..onnx.models import _load_model
    try:
        loaded = _load_model(model, copy=False)
    except (OSError, ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None
    initializers = {t.name for t in loaded.graph.initializer}
    input_names = [i.name for i in loaded.graph.input if i.name not in initializers]
    show = show_progress and sys.stderr.isatty()
    result = calibrate(loaded, _Batches(data, input_names), analyzer, bits, per_channel, symmetric,
                       show_progress=show_progress, **calibrate_options)
    float_model = result.model
    name = Path(os.fspath(model)).name if isinstance(model, (str, os.PathLike)) else (float_model.graph.name or "model")
    settings = {"analyzer": analyzer, "bits": bits, "per_channel": per_channel, "symmetric": symmetric, "bins": bins,
                "calibrate_options": {k: v for k, v in calibrate_options.items() if k != "encoding_version"}}
    rep = Report(name, batches=result.batches, settings=settings)
    quantizers = {}
    for cal in result.tensors:
        q = cal.quantizer
        enc = q.get_encodings()
        t = TensorReport(cal.name, cal.kind, tuple(cal.shape), np.asarray(enc.scale, np.float32),
                         -np.asarray(enc.offset).astype(np.int64), int(enc.qmin), int(enc.qmax),
                         np.asarray(enc.min, np.float32), np.asarray(enc.max, np.float32))
        rep.tensors.append(t)
        quantizers[t.name] = q
    by_name = {t.name: t for t in rep.tensors}
    inits = {i.name: i for i in float_model.graph.initializer}
    for t in rep.tensors:  # weights: read once, both passes at once
        if t.kind == "param":
            w = numpy_helper.to_array(inits[t.name])
            _accumulate(t, w, quantizers[t.name])
            _fix_edges(t, bins)
            _count(t, w)
    acts = [t.name for t in rep.activations]
    float_session = _session(_with_outputs(float_model, acts))

    qdq_session, qdq_names = None, {}
    try:
        qdq = result.qdq_model()
        qdq_names = _quantized_names(qdq, acts)
        qdq_session = _session(_with_outputs(qdq, list(qdq_names.values())))
    except CommandError as exc:
        rep.model_note = str(exc)
    if qdq_session is not None:
        for n in qdq_names:
            by_name[n].model_signal, by_name[n].model_noise = 0.0, 0.0

    total = _batch_count(data)
    with _bar(show, "report: statistics", total) as bar:
        for batch in _read_batches(data, input_names):
            values = dict(zip(acts, float_session.run(acts, batch)))
            for n in acts:
                _accumulate(by_name[n], values[n], quantizers[n])
            if qdq_session is not None:
                q_out = list(qdq_names.values())
                quantized = dict(zip(q_out, qdq_session.run(q_out, batch)))
                for n, qn in qdq_names.items():
                    x = np.asarray(values[n], np.float64)
                    y = np.asarray(quantized[qn], np.float64)
                    keep = np.isfinite(x)  # as for the tensor's own SQNR: NaN / inf in the float model are left out
                    with np.errstate(invalid="ignore"):  # a non-finite x - y is masked out right away
                        err = np.where(keep, x - y, 0.0).reshape(-1)
                    x = np.where(keep, x, 0.0).reshape(-1)
                    by_name[n].model_signal += float(np.dot(x, x))
                    by_name[n].model_noise += float(np.dot(err, err))
            bar.update(1)
    for n in acts:
        _fix_edges(by_name[n], bins)
    with _bar(show, "report: histograms", total) as bar:
        for batch in _read_batches(data, input_names):
            for n, v in zip(acts, float_session.run(acts, batch)):
                _count(by_name[n], v)
            bar.update(1)
    return rep


class _Batches:
    """The batches for calibrate(), read as the report's passes read them (by the model's input names;
    a bare .npy is the only input's), each time it is iterated."""

    def __init__(self, data, input_names):
        self.data, self.input_names = data, input_names

    def __iter__(self):
        return _read_batches(self.data, self.input_names)


# ------------------------------------------------------------------------------------------------
# The page


def _matplotlib():
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise CommandError("report: the HTML page's plots need matplotlib, which is not installed: "
                           "pip install .[report] (or write --json only)") from None
    return matplotlib, Figure


def _svg(fig, salt: str) -> str:
    """`fig` as an inline <svg> element: text drawn as paths (no font to fetch), no XML prologue or
    metadata, ids salted per figure so that the page's plots never share one."""
    matplotlib, _ = _matplotlib()
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    # matplotlib numbers its elements per figure (figure_1, patch_1, ...) and names glyphs by font
    # (DejaVuSans-31): prefixed, so that ids stay unique on a page of many plots.
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{salt}-{m.group(1)}"', text)
    return re.sub(r'(href="#|url\(#)([^")]+)', lambda m: f"{m.group(1)}{salt}-{m.group(2)}", text)


COLORS = {"hist": "#3b6ea8", "clip": "#c0392b", "range": "#e6a23c", "grid": "#1a1a1a", "own": "#888888",
          "model": "#3b6ea8", "worst": "#c0392b"}


def _histogram_svg(t: TensorReport, index: int) -> str:
    _, Figure = _matplotlib()
    from matplotlib.ticker import NullFormatter
    fig = Figure(figsize=(6.4, 2.6))
    # Fixed margins: one draw per figure (a "tight" box or a layout engine draws it twice).
    fig.subplots_adjust(left=0.11, right=0.98, bottom=0.19, top=0.96)
    ax = fig.add_subplot()
    counts = t.counts.astype(np.float64)
    # Log counts: an empty bin has no height; 0.5 is the floor the bars stand on.
    ax.stairs(np.maximum(counts, 0.5), t.edges, fill=True, baseline=0.5, color=COLORS["hist"], alpha=0.85,
              label="values")
    ax.set_yscale("log")
    ax.set_ylim(0.5, max(counts.max(), 1.0) * 2.0)
    lo_edge, hi_edge = float(t.edges[0]), float(t.edges[-1])
    ax.set_xlim(lo_edge, hi_edge)
    inner_lo, inner_hi = float(t.grid_min.max()), float(t.grid_max.min())   # every channel's range covers it
    outer_lo, outer_hi = float(t.grid_min.min()), float(t.grid_max.max())   # some channel's range covers it
    # Outside every channel's range: clipped; between the narrowest and the widest range (per channel):
    # clipped in some channels only.
    ax.axvspan(lo_edge, outer_lo, color=COLORS["clip"], alpha=0.12, lw=0)
    ax.axvspan(outer_hi, hi_edge, color=COLORS["clip"], alpha=0.12, lw=0)
    if t.channels > 1:
        ax.axvspan(outer_lo, inner_lo, color=COLORS["range"], alpha=0.15, lw=0)
        ax.axvspan(inner_hi, outer_hi, color=COLORS["range"], alpha=0.15, lw=0)
    for v in {outer_lo, outer_hi}:
        ax.axvline(v, color=COLORS["clip"], lw=1.2)
    levels = t.qmax - t.qmin + 1
    if t.channels == 1 and levels <= MAX_DRAWN_GRID_POINTS:
        s, zp = float(t.scale.reshape(-1)[0]), int(t.zero_point.reshape(-1)[0])
        grid = (np.arange(t.qmin, t.qmax + 1) - zp) * s
        ax.vlines(grid, 0, 0.1, transform=ax.get_xaxis_transform(), color=COLORS["grid"], lw=1.0, zorder=3)
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("value")
    ax.set_ylabel("count (log)")
    ax.grid(axis="y", alpha=0.25)
    return _svg(fig, f"t{index}")


def _divergence_svg(rep: Report) -> str | None:
    acts = [t for t in rep.activations if t.model_sqnr_db is not None]
    if not acts:
        return None
    _, Figure = _matplotlib()
    width = min(max(7.0, 0.45 * len(acts) + 2.0), 14.0)
    rotated = len(acts) > 6
    # Room under the axis for the names: a 9 pt character is ~5.4 pt wide, and a name turned by 30°
    # rises by half its length; 34 pt more for the tick marks and the axis label.
    longest = max(len(_short(t.name, 24)) for t in acts)
    height = 3.0 + (2.7 * longest / 72 if rotated else 0.0)
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=0.7 / width, right=1 - 0.15 / width, top=1 - 0.1 / height,
                        bottom=((2.7 * longest if rotated else 12) + 34) / (72 * height))
    ax = fig.add_subplot()
    xs = np.arange(len(acts))
    model = np.array([t.model_sqnr_db for t in acts], np.float64)
    own = np.array([t.sqnr_db for t in acts], np.float64)
    # An exact tensor (+inf dB) has no point on a dB axis; it is left out of the lines.
    model_finite = np.where(np.isfinite(model), model, np.nan)
    own_finite = np.where(np.isfinite(own), own, np.nan)
    ax.plot(xs, own_finite, "--", marker="s", ms=3, color=COLORS["own"], lw=1, label="this tensor quantized alone")
    ax.plot(xs, model_finite, "-", marker="o", ms=4, color=COLORS["model"], lw=1.5,
            label="quantized model vs float model")
    div = rep.divergence()
    if div["worst"] is not None and math.isfinite(div["worst"][1]):
        k = next(i for i, t in enumerate(acts) if t.name == div["worst"][0])
        ax.plot([k], [model[k]], "o", ms=9, mfc="none", mec=COLORS["worst"], mew=2, label="lowest")
    # At most ~40 names fit under the axis; beyond, every k-th is named (the table has them all).
    every = max(1, math.ceil(len(acts) / 40))
    ax.set_xticks(xs[::every], [_short(t.name, 24) for t in acts[::every]], rotation=30 if rotated else 0,
                  ha="right" if rotated else "center", fontsize=9)
    ax.set_ylabel("SQNR (dB)")
    ax.set_xlabel("calibrated activations, in graph order")
    ax.grid(alpha=0.25)
    ax.legend(fontsize=8, loc="best")
    return _svg(fig, "divergence")


def _short(name: str, n: int) -> str:
    return name if len(name) <= n else name[: n - 1] + "\u2026"


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 72rem;
       padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
h3 { font-size: 1rem; margin: 1.4rem 0 .3rem; font-family: ui-monospace, monospace; }
.muted { color: #666; } .bad { color: #b03a2e; font-weight: 600; }
ul.summary li { margin: .2rem 0; }
table { border-collapse: collapse; width: 100%; font-size: .9rem; }
th, td { padding: .3rem .6rem; border-bottom: 1px solid #ddd; text-align: right; white-space: nowrap; }
th:first-child, td:first-child, th:nth-child(2), td:nth-child(2), th:nth-child(3), td:nth-child(3),
th:nth-child(4), td:nth-child(4) { text-align: left; }
td:first-child { font-family: ui-monospace, monospace; }
th { cursor: pointer; user-select: none; background: #f3f5f8; position: sticky; top: 0; }
th:hover { background: #e4e9f0; }
th[aria-sort="ascending"]::after { content: " \\25B2"; } th[aria-sort="descending"]::after { content: " \\25BC"; }
tbody tr:hover { background: #fafbfd; }
.plot svg { max-width: 100%; height: auto; display: block; }
.tensor { border-top: 1px solid #eee; padding-top: .3rem; display: grid; grid-template-columns: minmax(18rem, 1fr) 2fr;
          gap: 0 1.5rem; align-items: start; }
.tensor h3 { grid-column: 1 / -1; }
@media (max-width: 60rem) { .tensor { grid-template-columns: 1fr; } }
dl.figures { display: grid; grid-template-columns: max-content auto; gap: .1rem 1rem; margin: .3rem 0; font-size: .9rem; }
dl.figures dt { color: #666; } dl.figures dd { margin: 0; }
"""

# Sorting: a header click orders the rows by that column's data-sort values (numbers compare as
# numbers, empty ones last), ascending first, descending on a second click.
_JS = """
document.querySelectorAll("table.sortable th").forEach(function (th, col) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0];
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    var numeric = th.dataset.type === "number";
    var rows = Array.prototype.slice.call(body.rows);
    function key(row) {
      var v = row.cells[col].dataset.sort;
      if (v === undefined) v = row.cells[col].textContent;
      return numeric ? (v === "" ? NaN : parseFloat(v)) : v.toLowerCase();
    }
    rows.sort(function (a, b) {
      var x = key(a), y = key(b);
      if (numeric) {
        if (isNaN(x) || isNaN(y)) return isNaN(x) - isNaN(y);
        return ascending ? x - y : y - x;
      }
      return ascending ? (x < y ? -1 : x > y ? 1 : 0) : (x < y ? 1 : x > y ? -1 : 0);
    });
    table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""


def _num_attr(v: float | None) -> str:
    if v is None or math.isnan(v):
        return ""
    return "Infinity" if v == math.inf else "-Infinity" if v == -math.inf else repr(float(v))


def _render_html(rep: Report) -> str:
    _matplotlib()
    e = html_lib.escape
    ranked = rep.ranked()
    index = {t.name: i for i, t in enumerate(rep.tensors)}
    s = rep.settings
    acts, params = rep.activations, [t for t in rep.tensors if t.kind == "param"]
    div = rep.divergence()
    worst_own = ranked[0] if ranked else None
    most_clipped = max(rep.tensors, key=lambda t: t.clipped_fraction, default=None)

    options = "".join(f", {k}={v}" for k, v in s.get("calibrate_options", {}).items())
    summary = [f"<li>{len(rep.tensors)} tensors quantized ({len(acts)} activations, {len(params)} weights), "
               f"{s['analyzer']} analyzer{e(options)}, {s['bits']} bits, {'symmetric' if s['symmetric'] else 'asymmetric'}, "
               f"weights {'per channel' if s['per_channel'] else 'per tensor'}; {rep.batches} batches.</li>"]
    if worst_own is not None:
        summary.append(f"<li>Most damaged by its own quantization: <a href=\"#tensor-{index[worst_own.name]}\">"
                       f"<code>{e(worst_own.name)}</code></a>, SQNR <span class=\"bad\">{_db_text(worst_own.sqnr_db)} dB"
                       f"</span>.</li>")
    if most_clipped is not None and most_clipped.clipped:
        summary.append(f"<li>Most clipped: <code>{e(most_clipped.name)}</code>, "
                       f"{100 * most_clipped.clipped_fraction:.3g}% of its values clipped (beyond the grid's range).</li>")
    if div["worst"] is not None:
        summary.append(f"<li>The quantized model diverges most from the float model at "
                       f"<code>{e(div['worst'][0])}</code> (SQNR {_db_text(div['worst'][1])} dB).</li>")
    if div["largest_drop"] is not None:
        a, b, d = div["largest_drop"]
        summary.append(f"<li>Largest loss along the graph: {d:.2f} dB from <code>{e(a)}</code> to "
                       f"<code>{e(b)}</code>.</li>")
    if rep.model_note:
        summary.append(f"<li class=\"muted\">No model-level comparison: {e(rep.model_note)}</li>")

    rows = []
    for t in ranked:
        msq = t.model_sqnr_db
        rows.append(
            "<tr>"
            f"<td data-sort=\"{e(t.name)}\"><a href=\"#tensor-{index[t.name]}\">{e(t.name)}</a></td>"
            f"<td>{t.kind}</td><td>{e(' x '.join(map(str, t.shape)) or 'scalar')}</td>"
            f"<td data-sort=\"{_num_attr(float(t.scale.reshape(-1).min()))}\">{e(t.encoding_text())}</td>"
            f"<td data-sort=\"{_num_attr(t.sqnr_db)}\">{_db_text(t.sqnr_db)}</td>"
            f"<td data-sort=\"{_num_attr(t.clipped_fraction)}\">{100 * t.clipped_fraction:.3g}</td>"
            f"<td data-sort=\"{_num_attr(msq)}\">{'&ndash;' if msq is None else _db_text(msq)}</td>"
            "</tr>")
    head = ("<tr><th>tensor</th><th>kind</th><th>shape</th><th>scale / zero point or channels</th>"
            "<th data-type=\"number\" aria-sort=\"ascending\">SQNR dB</th><th data-type=\"number\">clipped %</th>"
            "<th data-type=\"number\">model SQNR dB</th></tr>")

    sections = []
    for i, t in enumerate(rep.tensors):
        msq = t.model_sqnr_db
        figures = [("kind", t.kind), ("shape", " x ".join(map(str, t.shape)) or "scalar"),
                   ("encoding", t.encoding_text()),
                   ("grid range", f"[{float(t.grid_min.min()):.6g}, {float(t.grid_max.max()):.6g}]"
                    if t.channels == 1 else f"per channel, [{float(t.grid_min.min()):.6g}, {float(t.grid_max.max()):.6g}] "
                    f"at the widest"),
                   ("data range", f"[{t.data_min:.6g}, {t.data_max:.6g}] over {t.values:,} values"
                    + (f" ({t.nonfinite:,} NaN / inf left out)" if t.nonfinite else "")),
                   ("SQNR", f"{_db_text(t.sqnr_db)} dB (this tensor quantized alone)"),
                   ("clipped", f"{t.clipped:,} value{'' if t.clipped == 1 else 's'}, {100 * t.clipped_fraction:.3g}%")]
        if msq is not None:
            figures.append(("model SQNR", f"{_db_text(msq)} dB (quantized model vs float model)"))
        dl = "".join(f"<dt>{k}</dt><dd>{e(v)}</dd>" for k, v in figures)
        sections.append(f"<section class=\"tensor\" id=\"tensor-{i}\"><h3>{e(t.name)}</h3>"
                        f"<dl class=\"figures\">{dl}</dl><div class=\"plot\">{_histogram_svg(t, i)}</div></section>")

    divergence = _divergence_svg(rep)
    divergence_html = (f"<div class=\"plot\">{divergence}</div><p class=\"muted\">Per calibrated activation, in graph order: "
                       "the SQNR of the quantized model's tensor against the float model's (every quantization "
                       "upstream included), and of the tensor quantized alone. Where the solid line falls, "
                       "the quantized model departs from the float one.</p>"
                       if divergence else "<p class=\"muted\">No model-level comparison.</p>")
    title = f"polyquant report: {rep.model_name}"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>{e(title)}</h1>
<p class="muted">What quantization does to each tensor, on the calibration data. SQNR = 10 log10(&Sigma;x&sup2; / &Sigma;(x &minus; q(x))&sup2;);
higher is better, &ldquo;exact&rdquo; means no error. Computed by polyquant (docs/report.md).</p>
<h2>Summary</h2>
<ul class="summary">{''.join(summary)}</ul>
<h2>Divergence along the graph</h2>
{divergence_html}
<h2>Tensors by damage</h2>
<p class="muted">Ranked by SQNR, the most damaged first; click a header to sort by it.</p>
<table class="sortable" id="tensors"><thead>{head}</thead><tbody>
{chr(10).join(rows)}
</tbody></table>
<h2>Histograms</h2>
<p class="muted">Counts on a log scale; red lines: the grid's range [min, max], red areas: values clipped onto it;
orange areas (per-channel weights): clipped in some channels only; ticks at the bottom: the grid's points, when at
most {MAX_DRAWN_GRID_POINTS}.</p>
{chr(10).join(sections)}
<script>{_JS}</script>
</body>
</html>
"""


# ------------------------------------------------------------------------------------------------
# Command line


def report_command(args, out=sys.stdout) -> int:
    if args.output and not str(args.output).endswith(".json"):
        _matplotlib()  # say it before the passes, not after them
    r = report(args.model, args.data, args.analyzer, args.bits, args.per_channel, args.symmetric, bins=args.bins)
    print(r, file=out)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(r.html())
        print(f"written: {args.output} (HTML page)", file=out)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(r.to_json())
        print(f"written: {args.json} (JSON)", file=out)
    if not args.output and not args.json:
        print("nothing written: give -o report.html and/or --json OUT.json", file=out)
    return 0


def add_parser(sub, epilog: str) -> None:
    from .calibrate import ANALYZERS
    p = sub.add_parser(
        "report", epilog=epilog, help="an HTML page of what quantization does to each tensor of a float ONNX model",
        description="Calibrate MODEL on --data (as polyquant calibrate does), then, per quantized tensor, the "
                    "histogram of its values with the quantization grid's range over it, the SQNR of its "
                    "quantize-dequantize and the share of clipped values, and per activation the SQNR of the "
                    "quantized (Q/DQ) model's tensor against the float model's, both run in onnxruntime on the "
                    "same batches. Writes one self-contained HTML page (-o) and/or JSON (--json). The data is "
                    "read three times; memory holds one batch and the statistics. docs/report.md")
    p.add_argument("model", metavar="MODEL.onnx")
    p.add_argument("--data", required=True, metavar="DIR|FILE", help="a .npz / .npy file or a directory of them")
    p.add_argument("-o", "--output", metavar="REPORT.html", help="the HTML page")
    p.add_argument("--json", metavar="OUT.json", help="the figures as JSON")
    p.add_argument("--analyzer", choices=ANALYZERS, default="minmax", help="default: %(default)s")
    p.add_argument("--bits", type=int, default=8, help="bit width, 2..16 (default: %(default)s)")
    p.add_argument("--per-channel", action="store_true", help="weights per output channel")
    p.add_argument("--symmetric", action="store_true", help="symmetric grids")
    p.add_argument("--bins", type=int, default=DEFAULT_BINS, help="histogram bins per tensor (default: %(default)s)")
    p.set_defaults(func=report_command)
