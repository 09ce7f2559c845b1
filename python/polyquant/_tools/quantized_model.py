"""A float ONNX model with quantizers inserted on named tensors, from AIMET 2.1.0 encodings.

Two forms of the same parameters (the encodings' ONNX-aligned y_scale, y_zero_point, axis and
output dtype, written exactly as the encodings hold them):
- "qdq": a standard QuantizeLinear / DequantizeLinear pair per tensor, weights stored as the
  integers QuantizeLinear gives for them: runs in any onnxruntime;
- "qonnx": one QONNX IntQuant node per tensor (domain qonnx.custom_op.general), weights kept in
  float: what FINN and hls4ml read.

By the operators' definitions the two forms give the same values but for two cases:
- the sign of zero: IntQuant's (q - z) * s is -0 for a negative input that rounds to q = z, where
  DequantizeLinear's integer q - z gives +0;
- with a zero point z != 0, QuantizeLinear rounds x / s and then adds z, IntQuant rounds x / s + z:
  for an odd z every exact tie goes the other way (1.5 -> 2, but 1.5 + 3 = 4.5 -> 4), and the
  float32 addition can make a tie (0.49999997 + 3 = 3.5 -> 4, where 0.49999997 -> 0).

Graph surgery shared by both forms: an activation produced by a node is quantized for every consumer
and for the graph output of that name (the producer's output is renamed NAME__float); a graph input
is quantized for its consumers; a weight feeds its consumers through the quantizer.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .runner import CommandError

FORMS = ("qdq", "qonnx")
QONNX_DOMAIN = "qonnx.custom_op.general"

# Encoding output dtype -> (QuantizeLinear's TensorProto type, numpy type name, first standard opset
# that quantizes to it, IntQuant's bit width, IntQuant's signed).
_OUTPUT_DTYPES = {
    "uint8": (TensorProto.UINT8, "uint8", 13, 8, 0), "int8": (TensorProto.INT8, "int8", 13, 8, 1),
    "uint16": (TensorProto.UINT16, "uint16", 21, 16, 0), "int16": (TensorProto.INT16, "int16", 21, 16, 1),
    "uint4": (TensorProto.UINT4, "uint4", 21, 4, 0), "int4": (TensorProto.INT4, "int4", 21, 4, 1),
}


class _Names:
    """Fresh tensor / node names: base, base_1, base_2, ... avoiding every name in the graph."""

    def __init__(self, graph):
        self.used = {x for n in graph.node for x in list(n.input) + list(n.output) if x}
        self.used |= {t.name for t in graph.initializer} | {v.name for v in graph.input}
        self.used |= {n.name for n in graph.node if n.name}

    def __call__(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name


def insert_quantizers(model, entries: Iterable[tuple[str, str, dict]], form: str = "qdq") -> Any:
    """A copy of `model` (onnx.ModelProto) with a quantizer on each entry (tensor name, "param" or
    "activation", its AIMET 2.1.0 encoding dict); see the module documentation."""
    if form not in FORMS:
        raise CommandError(f"form: expected one of {', '.join(FORMS)}, got {form!r}")
    import ml_dtypes
    from .. import onnx as pqo
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)
    inits = {t.name: t for t in g.initializer}
    producers = {o: n for n in g.node for o in n.output}
    fresh = _Names(g)
    new_nodes, consumers_of, float_weights_replaced = [], {}, set()
    for name, kind, enc in entries:
        if "block_size" in enc:
            raise CommandError(f"{name}: blockwise encodings have no {form} form here")
        dtype = _OUTPUT_DTYPES.get(enc.get("output_dtype"))
        if dtype is None:
            raise CommandError(f"{name}: output dtype {enc.get('output_dtype')!r} is not one of "
                               f"{', '.join(_OUTPUT_DTYPES)}")
        proto, np_name, min_opset, bitwidth, signed = dtype
        scale = np.asarray(enc["y_scale"], np.float32)
        zero = np.asarray(enc.get("y_zero_point", np.zeros(scale.shape, np.int64)), np.int64)
        axis = enc.get("axis")
        if kind == "param" and name not in inits:
            raise CommandError(f"{name}: a weight of the encodings is not an initializer of the model")
        if form == "qdq":
            if opset < min_opset:
                raise CommandError(f"{name} needs QuantizeLinear of {enc['output_dtype']} (opset {min_opset}); "
                                   f"the model imports the standard opset {opset}")
            np_type = getattr(ml_dtypes, np_name) if np_name in ("int4", "uint4") else np.dtype(np_name)
            s_name, z_name = fresh(f"{name}__scale"), fresh(f"{name}__zero_point")
            g.initializer.extend([numpy_helper.from_array(scale, s_name),
                                  numpy_helper.from_array(zero.astype(np_type), z_name)])
            attrs = {} if axis is None else {"axis": int(axis)}
        else:
            # IntQuant's scale and zero point broadcast against x: a per-axis parameter becomes
            # (1, .., C, .., 1) with C on the axis of x's rank.
            if axis is not None:
                if kind != "param":
                    raise CommandError(f"{name}: a per-channel activation encoding has no IntQuant form here "
                                       f"(the activation's rank is not known)")
                rank = len(inits[name].dims)
                a = int(axis) % rank
                shape = [1] * rank
                shape[a] = scale.size
                scale, zero = scale.reshape(shape), zero.reshape(shape)
            s_name, z_name, b_name = fresh(f"{name}__scale"), fresh(f"{name}__zeropt"), fresh(f"{name}__bitwidth")
            g.initializer.extend([numpy_helper.from_array(scale, s_name),
                                  numpy_helper.from_array(zero.astype(np.float32), z_name),
                                  numpy_helper.from_array(np.float32(bitwidth), b_name)])
            attrs = {"signed": signed, "narrow": 0, "rounding_mode": "ROUND"}

        def quantizer(source: str, out: str) -> None:
            if form == "qdq":
                q = fresh(f"{name}__quantized")
                new_nodes.append(helper.make_node("QuantizeLinear", [source, s_name, z_name], [q],
                                                  name=fresh(f"{name}__QuantizeLinear"), **attrs))
                new_nodes.append(helper.make_node("DequantizeLinear", [q, s_name, z_name], [out],
                                                  name=fresh(f"{name}__DequantizeLinear"), **attrs))
            else:
                new_nodes.append(helper.make_node("IntQuant", [source, s_name, z_name, b_name], [out],
                                                  name=fresh(f"{name}__IntQuant"), domain=QONNX_DOMAIN, **attrs))

        if kind == "param":
            out = fresh(f"{name}__dequantized")
            if form == "qdq":  # stored as its integers, dequantized
                w = numpy_helper.to_array(inits[name])
                q = pqo.quantize_linear(w, scale, zero.astype(np_type), axis=1 if axis is None else int(axis))
                q_name = fresh(f"{name}__quantized")
                g.initializer.append(numpy_helper.from_array(q, q_name))
                new_nodes.append(helper.make_node("DequantizeLinear", [q_name, s_name, z_name], [out],
                                                  name=fresh(f"{name}__DequantizeLinear"), **attrs))
                float_weights_replaced.add(name)
            else:
                quantizer(name, out)
            consumers_of[name] = out
        elif name in producers:  # the producer's output is renamed; the quantizer gives the original name
            source = fresh(f"{name}__float")
            node = producers[name]
            node.output[list(node.output).index(name)] = source
            quantizer(source, name)
        else:  # a graph input: its consumers take the quantizer's output
            out = fresh(f"{name}__dequantized")
            quantizer(name, out)
            consumers_of[name] = out
    own = {id(n) for n in new_nodes}
    for node in g.node:
        if id(node) in own:
            continue
        for i, inp in enumerate(node.input):
            if inp in consumers_of:
                node.input[i] = consumers_of[inp]
    # QDQ stores weights as integers: their float initializers go unless something else reads them.
    still_used = {i for n in list(g.node) + new_nodes for i in n.input} | {o.name for o in g.output}
    kept = [t for t in g.initializer if t.name in still_used or t.name not in float_weights_replaced]
    del g.initializer[:]
    g.initializer.extend(kept)
    _topological_order(g, new_nodes)
    if form == "qonnx" and not any(o.domain == QONNX_DOMAIN for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid(QONNX_DOMAIN, 1))
    return m


def _topological_order(g, new_nodes) -> None:
    """The graph's nodes and `new_nodes` in an order where each node follows its inputs (ONNX
    requires it); the original order is kept wherever it is already valid."""
    ordered = []
    placed = {v.name for v in g.input} | {t.name for t in g.initializer} | {""}
    remaining = list(g.node) + list(new_nodes)
    while remaining:
        progress_made = False
        rest = []
        for node in remaining:
            if all(i in placed for i in node.input):
                ordered.append(node)
                placed.update(node.output)
                progress_made = True
            else:
                rest.append(node)
        if not progress_made:
            raise CommandError("the graph is not a DAG of its inputs")
        remaining = rest
    copies = [onnx.NodeProto() for _ in ordered]
    for c, n in zip(copies, ordered):
        c.CopyFrom(n)
    del g.node[:]
    g.node.extend(copies)
