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

__all__ = ["__version__", "aimet", "onnx", "ort", "qonnx", "quark", "runtime_info"]


def runtime_info() -> dict[str, Any]:
    """What the compiled core detected: ``version``, ``isa`` (kernel set in use: "avx512", "avx2"
    or "scalar"), ``supported`` (kernel sets this CPU can run, best first) and ``num_threads``.
    ``POLYQUANT_ISA`` and ``POLYQUANT_NUM_THREADS`` (environment, read once) override the choice."""
    return _ext.runtime_info()


def __getattr__(name: str) -> Any:
    # `polyquant.ort` is imported on first use: plain users of polyquant.qonnx never need it.
    if name in ("ort", "onnx", "quark", "qkeras", "aimet"):
        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"ort", "onnx", "quark", "qkeras", "aimet"})
