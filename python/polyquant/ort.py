"""The ONNX Runtime custom-op library of polyquant.

Besides the QONNX ops below, the library registers AMD Quark's ``ExtendedQuantizeLinear`` /
``ExtendedDequantizeLinear`` in domain ``com.amd.quark`` (and ``VitisQuantizeLinear`` /
``VitisDequantizeLinear`` in ``com.vai.quantize``), bit-exact with Quark's CPU kernel (an absent
``axis`` attribute is axis 0 as there; the zero point is optional), and ONNX opset-28
``QuantizeLinear`` / ``DequantizeLinear`` in domain ``polyquant.onnx`` (see
``polyquant.onnx.upgrade_model``). See docs/ort.md for the types onnxruntime can carry.

``libpolyquant_ort.so`` implements the QONNX ops IntQuant (and its legacy name Quant),
BipolarQuant, Trunc and FloatQuant for ONNX Runtime's CPU execution provider, in the domains
``qonnx.custom_op.general``, ``finn.custom_op.general`` and ``onnx.brevitas``, bit-exact with
:mod:`polyquant.qonnx` (and so with qonnx's own execution)::

    import onnxruntime as ort
    import polyquant.ort

    session = ort.InferenceSession("model.onnx", polyquant.ort.session_options())

or, with options of your own, ``options.register_custom_ops_library(polyquant.ort.library_path())``.

Trunc runs version 1 for a node with 5 inputs and version 2 for one with 6: ONNX Runtime does not
tell a custom op which opset the model imports, and the input count is what tells the two versions
apart in every exporter's output.

The library loads in ONNX Runtime 1.17 and later. BipolarQuant and Trunc output numpy's promotion
of their input dtypes; ONNX Runtime 1.17 and 1.18 ignore the output type the library infers and
use the last input's, so there a node whose inputs differ in dtype fails with a clear error (inputs
of one dtype, the usual case, work everywhere).

Errors in a node (a missing required attribute, an unknown rounding mode, a rounding_mode that
is not a string or holds a NUL, shapes that do not broadcast, ...) fail the session creation or
the run with a message naming the node and the parameter.

:func:`session_options` also limits onnxruntime's log to errors: raw PyTorch/Brevitas exports list
their initializers as graph inputs, and onnxruntime warns once per initializer about that.

Numerics: onnxruntime's graph optimizations change the summation order of some standard ops
(Transpose+MatMul fused into FusedMatMul; MatMul weights prepacked once constant), so a fully
optimized session may differ from qonnx's node-by-node execution in the last bits of MatMul/Gemm
outputs, polyquant's ops being bit-exact. ``polyquant._execute.reference_session_options()``
gives the settings that equal qonnx (what ``polyquant.qonnx.execute_onnx`` and
``polyquant run --reference`` use).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["DOMAINS", "OPS", "QDQ_OPS", "QUIET_LOG_SEVERITY", "library_path", "session_options"]

DOMAINS: tuple[str, ...] = ("qonnx.custom_op.general", "finn.custom_op.general", "onnx.brevitas")
"""The ONNX domains the library registers its ops in."""

OPS: tuple[str, ...] = ("IntQuant", "Quant", "BipolarQuant", "Trunc", "FloatQuant")
"""The op types registered in each of :data:`DOMAINS`."""

QDQ_OPS: dict[str, tuple[str, ...]] = {
    "com.amd.quark": ("ExtendedQuantizeLinear", "ExtendedDequantizeLinear"),
    "com.vai.quantize": ("VitisQuantizeLinear", "VitisDequantizeLinear"),
    "polyquant.onnx": ("QuantizeLinear", "DequantizeLinear"),
}
"""The linear quantize / dequantize ops, by domain (opset 1 each)."""

if sys.platform == "win32":
    _NAMES = ("polyquant_ort.dll",)
elif sys.platform == "darwin":
    _NAMES = ("libpolyquant_ort.so", "libpolyquant_ort.dylib")
else:
    _NAMES = ("libpolyquant_ort.so",)


def _candidate_dirs() -> list[Path]:
    dirs = [Path(__file__).resolve().parent]
    # Editable installs keep compiled files apart from the sources: look next to the extension too.
    spec = importlib.util.find_spec("polyquant._polyquant_ext")
    if spec is not None and spec.origin:
        ext_dir = Path(spec.origin).resolve().parent
        if ext_dir not in dirs:
            dirs.append(ext_dir)
    return dirs


def library_path() -> str:
    """Absolute path of the custom-op library inside the installed package.

    ``POLYQUANT_ORT_LIBRARY`` (environment) overrides the search. Raises FileNotFoundError when
    the library is not there (a build with ``POLYQUANT_BUILD_ORT=OFF``)."""
    override = os.environ.get("POLYQUANT_ORT_LIBRARY")
    if override:
        path = Path(override)
        if not path.is_file():
            raise FileNotFoundError(f"POLYQUANT_ORT_LIBRARY={override!r} is not a file")
        return str(path.resolve())
    searched = []
    for directory in _candidate_dirs():
        for name in _NAMES:
            path = directory / name
            if path.is_file():
                return str(path)
            searched.append(str(path))
    raise FileNotFoundError(
        "polyquant's ONNX Runtime custom-op library was not found (looked for "
        + ", ".join(searched)
        + "); this polyquant was built without it (POLYQUANT_BUILD_ORT=OFF), or set "
        "POLYQUANT_ORT_LIBRARY to the library's path"
    )


QUIET_LOG_SEVERITY = 3
"""The log severity :func:`session_options` sets: errors only. onnxruntime's default (warnings)
prints one line per initializer that a raw PyTorch/Brevitas export also lists as a graph input,
hundreds for a real network, while nothing is wrong."""


def session_options(options: Any = None) -> Any:
    """An ``onnxruntime.SessionOptions`` with the custom-op library registered and onnxruntime's
    logging reduced to errors (:data:`QUIET_LOG_SEVERITY`).

    Pass ``options`` to register the library in options of your own (they are returned, their log
    severity untouched); register it only once per options object."""
    import onnxruntime

    if options is None:
        options = onnxruntime.SessionOptions()
        options.log_severity_level = QUIET_LOG_SEVERITY
    options.register_custom_ops_library(library_path())
    return options
