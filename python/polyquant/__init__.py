"""polyquant: bit-exact, fast quantization operators.

``polyquant.qonnx`` holds the QONNX operators (``int_quant``/``quant``, ``bipolar_quant``,
``trunc``, ``trunc_v2``, ``float_quant``) with qonnx's names and semantics; ``polyquant.qkeras``
the QKeras quantizers; ``polyquant.onnx`` ONNX's QuantizeLinear / DequantizeLinear (opset 28) and
``polyquant.quark`` Quark's Extended Q/DQ ops; ``polyquant.aimet`` AIMET's affine quantization
(functional ops, gradients, encoding analyzers; numpy arrays or torch tensors). ``polyquant.ort``
locates the ONNX Runtime custom-op library (imported on first use).
"""

from __future__ import annotations

import importlib
from typing import Any

from . import _polyquant_ext as _ext
from . import qonnx

__version__: str = _ext.version()

__all__ = ["__version__", "aimet", "buffer_cache_info", "calibrate", "convert", "diff", "empty_cache", "onnx", "ort", "qonnx",
           "quark", "report", "runtime_info"]


def runtime_info() -> dict[str, Any]:
    """What the compiled core detected: ``version``, ``isa`` (kernel set in use: "avx512", "avx2"
    or "scalar"), ``supported`` (kernel sets this CPU can run, best first), ``num_threads`` and
    ``backends``: ``{"cpu": ..., "cuda": {"available", "library", "devices", "reason"}}`` (the CUDA
    backend is a separately loaded library; without it, a driver or a GPU it is unavailable, with the
    reason, and nothing else changes; docs/cuda.md). ``POLYQUANT_ISA`` and ``POLYQUANT_NUM_THREADS``
    (environment, read once) override the choice of kernel set and threads."""
    return _ext.runtime_info()


def empty_cache() -> None:
    """Frees the idle output buffers polyquant keeps for reuse. Allocating calls (no ``out=``) take
    results of 1 MiB or more from a cache of buffers whose arrays were freed, so a loop does not
    fault fresh pages in on every call; buffers of arrays still alive are untouched (they return to
    the cache when freed). ``POLYQUANT_BUFFER_CACHE=<bytes>`` (suffix K, M or G allowed; read at
    first use) caps the idle bytes kept, ``0`` turns the cache off; default min(2 GiB, RAM / 8)."""
    _ext.empty_cache()


def buffer_cache_info() -> dict[str, int]:
    """The output buffer cache (see ``empty_cache``): ``cached_bytes`` and ``cached_buffers`` (idle,
    kept for reuse), ``limit_bytes`` (the cap on idle bytes; 0: off), ``min_buffer_bytes`` (smaller
    results are numpy's own), ``hits`` and ``misses`` (allocations served from the cache or newly
    mapped)."""
    return _ext.buffer_cache_info()


def diff(a: str, b: str, *, dtype: str = "float32", patterns: tuple[int, int] | None = None,
         show_progress: bool = True) -> Any:
    """Whether the quantizers of specs `a` and `b` (e.g. ``"qkeras:quantized_bits(8, 0, alpha=1)"`` and
    ``"qonnx:IntQuant(scale=0.0078125, bitwidth=8)"``) give the same bits on every input of `dtype`
    (all 2^32 float32 patterns, or all 2^16 float16 / bfloat16 ones; ``patterns=(start, stop)``: those
    only): a result with ``identical``, ``differing``, the counts per kind of difference and the
    smallest example of each (docs/diff.md)."""
    from ._tools.diff import diff as _diff
    return _diff(a, b, dtype=dtype, patterns=patterns, show_progress=show_progress)


def calibrate(model: Any, data: Any, analyzer: str = "minmax", bits: int = 8, per_channel: bool = False,
              symmetric: bool = False, engine: str | None = None, workers: int | None = None, **kwargs: Any) -> Any:
    """AIMET encodings of the float ONNX `model` from `data` (a .npz / .npy file or a directory of them, a
    dict of inputs or an iterable of such dicts): the inputs of MatMul / Gemm / Conv and the model's
    outputs feed AIMET's encoding analyzer (minmax, percentile, sqnr, tfenhanced), streaming; returns a
    result with ``encodings`` (AIMET's file format, ``encoding_version=`` "2.1.0" by default) and
    ``save(path)`` (docs/calibrate.md)."""
    from ._tools.calibrate import calibrate as _calibrate
    return _calibrate(model, data, analyzer, bits, per_channel, symmetric, engine, workers, **kwargs)


def report(model: Any, data: Any, analyzer: str = "minmax", bits: int = 8, per_channel: bool = False,
           symmetric: bool = False, **kwargs: Any) -> Any:
    """What quantization does to each tensor of the float ONNX `model` over `data` (as calibrate takes it,
    read three times: a path, a dict or a list of dicts): calibrates it, then per tensor the histogram,
    the SQNR of quantize-dequantize and the clipped share, and per activation the SQNR of the Q/DQ
    model's tensor against the float model's. Returns a report with ``html()`` (one self-contained
    page; matplotlib, ``pip install .[report]``), ``to_dict()``, ``to_json()`` and ``save(path)``
    (docs/report.md)."""
    from ._tools.report import report as _report
    return _report(model, data, analyzer, bits, per_channel, symmetric, **kwargs)


def convert(model: Any, to: str = "onnx", *, check: str = "sample", seed: int = 0, allow_inexact: bool = False,
            encodings: Any = None, encoding_version: str = "2.1.0") -> Any:
    """`model` (an onnx.ModelProto, a path or serialized bytes) converted exactly, each converted node
    checked in onnxruntime against the original (``check``: "sample", "exhaustive" or "none"):
    ``to="onnx"`` replaces QONNX IntQuant / Quant, BipolarQuant, Trunc (and float8-format FloatQuant)
    and Quark's Extended Q/DQ by standard ONNX ops with the original's bits; ``to="qonnx"`` replaces
    standard QuantizeLinear / DequantizeLinear pairs by QONNX Quant / FloatQuant on the same grid;
    ``encodings=`` (an AIMET 2.0.0 / 2.1.0 / 1.0.0 / 0.6.1 file or dict) writes a float model's QDQ form
    with those parameters and reports where ONNX's division differs from AIMET's reciprocal;
    ``to="aimet"`` gives a QDQ model's encodings (``encoding_version`` "2.1.0", "1.0.0" or "0.6.1"). ``allow_inexact=True`` emits nodes that are not exact, with their
    differing inputs counted. Returns a result with the converted ``model`` and a report per node
    (``nodes``; ``refused`` with the reasons); docs/convert.md."""
    from ._tools.convert import convert as _convert
    return _convert(model, to, check=check, seed=seed, allow_inexact=allow_inexact, encodings=encodings,
                    encoding_version=encoding_version)


def __getattr__(name: str) -> Any:
    # `polyquant.ort` is imported on first use: plain users of polyquant.qonnx never need it.
    if name in ("ort", "onnx", "quark", "qkeras", "aimet"):
        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"ort", "onnx", "quark", "qkeras", "aimet"})
