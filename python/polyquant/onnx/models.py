"""Running opset-28 models in today's onnxruntime: ``upgrade_model`` moves a model's QuantizeLinear /
DequantizeLinear nodes onto polyquant's custom-op domain ``polyquant.onnx``; ``needs_upgrade`` and
``onnxruntime_max_opset`` tell when that is needed."""

from __future__ import annotations

import copy as copy_module
import os
from typing import Any

import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper

from .._common.args import strict_int

__all__ = ["upgrade_model", "needs_upgrade", "onnxruntime_max_opset", "POLYQUANT_DOMAIN"]

POLYQUANT_DOMAIN = "polyquant.onnx"
"""The custom-op domain (opset 1) of polyquant's ONNX Runtime library that implements QuantizeLinear /
DequantizeLinear with the semantics, attributes and types of ONNX opset 28."""

_ORT_MAX_OPSET: dict[str, int] = {}


def onnxruntime_max_opset(op: str = "QuantizeLinear") -> int:
    """The newest default-domain opset at which the installed onnxruntime runs a one-node model of
    `op` (probed once per op): for QuantizeLinear, onnxruntime 1.32 has kernels up to opset 25 while
    it loads other ops at 28."""
    if op not in _ORT_MAX_OPSET:
        # Imported here: polyquant.onnx's array functions do not load onnxruntime, only this probe does.
        import onnxruntime

        found = 0
        for opset in range(onnx.defs.onnx_opset_version(), 0, -1):
            inputs = ["x", "s"] if op in ("QuantizeLinear", "DequantizeLinear") else ["x"]
            x_type = TensorProto.UINT8 if op == "DequantizeLinear" else TensorProto.FLOAT
            y_type = TensorProto.UINT8 if op == "QuantizeLinear" else TensorProto.FLOAT
            graph = helper.make_graph([helper.make_node(op, inputs, ["y"])], "probe",
                                      [helper.make_tensor_value_info("x", x_type, [1])],
                                      [helper.make_tensor_value_info("y", y_type, [1])],
                                      [helper.make_tensor("s", TensorProto.FLOAT, [], [1.0])] if len(inputs) > 1 else [])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
            model.ir_version = 8
            options = onnxruntime.SessionOptions()
            options.log_severity_level = 4
            try:
                onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            except Exception:
                continue
            found = opset
            break
        _ORT_MAX_OPSET[op] = found
    return _ORT_MAX_OPSET[op]


def _load_model(model: Any, copy: bool, load_external_data: bool = True) -> Any:
    """The onnx.ModelProto of `model`: a ModelProto (copied when `copy`), a path (str or os.PathLike)
    or the serialized bytes onnx.load_model_from_string reads. Anything else is a TypeError; a path
    that is no file, or bytes / a file that do not parse as a model, a ValueError or OSError saying so."""
    if isinstance(model, onnx.ModelProto):
        return copy_module.deepcopy(model) if copy else model
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            return onnx.load_model_from_string(bytes(model))
        except (DecodeError, ValueError, RuntimeError) as e:
            raise ValueError(f"model: the {len(model)} bytes given are not a serialized ONNX model ({e})") from None
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model: expected an onnx.ModelProto, a path (str or os.PathLike) or the bytes of a "
                        f"serialized model, got {type(model).__name__}")
    path = os.fspath(model)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"model: {path} is a directory, not an ONNX model file")
    if not os.path.exists(path):
        raise FileNotFoundError(f"model: no such file: {path}")
    try:
        return onnx.load(path, load_external_data=load_external_data)
    except (DecodeError, RuntimeError) as e:
        raise ValueError(f"model: {path} is not an ONNX model file (it does not parse as one: {e})") from None


def upgrade_model(model: Any, *, opset: int | None = None) -> Any:
    """A copy of `model` (an onnx.ModelProto, a path or a serialized model's bytes) that today's
    onnxruntime runs with polyquant's custom-op library: every QuantizeLinear / DequantizeLinear node of the default domain moves to
    domain ``polyquant.onnx`` (same inputs, outputs and attributes; opset-28 semantics, every type
    and attribute) and the domain is imported. With `opset`, a newer default-domain opset import is
    lowered to it (only needed for an onnxruntime that does not load the model's opset at all; it is
    sound for models whose other ops are defined alike at both opsets, and onnxruntime checks every
    node when it loads the result). Types onnxruntime cannot hold at all (float6) cannot be carried
    between nodes. An `opset` outside 1 .. the installed onnx's newest opset is a ValueError."""
    if opset is not None:
        opset = strict_int(opset, "opset")
        newest = onnx.defs.onnx_opset_version()
        if not 1 <= opset <= newest:
            raise ValueError(f"opset: {opset} is not a default-domain opset version (1 .. {newest})")
    proto = _load_model(model, copy=True)
    if opset is not None:
        for imp in proto.opset_import:
            if imp.domain in ("", "ai.onnx") and imp.version > opset:
                imp.version = opset

    def move(graph):
        moved = False
        for node in graph.node:
            if node.domain in ("", "ai.onnx") and node.op_type in ("QuantizeLinear", "DequantizeLinear"):
                node.domain = POLYQUANT_DOMAIN
                moved = True
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    moved |= move(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    for g in attr.graphs:
                        moved |= move(g)
        return moved

    if move(proto.graph) and not any(o.domain == POLYQUANT_DOMAIN for o in proto.opset_import):
        proto.opset_import.append(onnx.helper.make_opsetid(POLYQUANT_DOMAIN, 1))
    return proto


def needs_upgrade(model: Any) -> bool:
    """Whether `model` has default-domain Q/DQ nodes at an opset onnxruntime has no kernels for."""
    proto = _load_model(model, copy=False, load_external_data=False)
    version = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    has_qdq = any(n.domain in ("", "ai.onnx") and n.op_type in ("QuantizeLinear", "DequantizeLinear")
                  for n in proto.graph.node)
    return has_qdq and version > onnxruntime_max_opset()
