"""Quantizers in and out of an ONNX model: insert_quantizers writes AIMET 2.1.0 encodings into a
float model (as QONNX IntQuant nodes or standard Q/DQ pairs); float_model takes every quantizer out of
a quantized one (QONNX, Brevitas, Quark, QDQ) so it can be calibrated again.

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

from .common import CommandError

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


# The quantizers float_model removes: QONNX's (every domain qonnx, FINN and Brevitas export them
# under), Quark's Extended Q/DQ (and their Vitis names) and the standard Q/DQ.
QONNX_DOMAINS = ("qonnx.custom_op.general", "finn.custom_op.general", "onnx.brevitas")
QONNX_QUANTIZERS = ("IntQuant", "Quant", "BipolarQuant", "Trunc", "FloatQuant")
QUARK_DOMAINS = ("com.amd.quark", "com.vitis.ai")
STANDARD_QDQ = ("QuantizeLinear", "DequantizeLinear")


def _is_quantizer(node) -> bool:
    if node.domain in QONNX_DOMAINS:
        return node.op_type in QONNX_QUANTIZERS
    if node.domain in QUARK_DOMAINS:
        return node.op_type.replace("Extended", "") in STANDARD_QDQ or node.op_type in ("VitisQuantizeLinear", "VitisDequantizeLinear")
    return node.domain in ("", "ai.onnx") and node.op_type in STANDARD_QDQ


def float_model(model) -> tuple[Any, list[str]]:
    """The float model under a quantized one, and the names of the quantizers removed: each QONNX
    quantizer (IntQuant / Quant, BipolarQuant, Trunc, FloatQuant), Quark Extended Q/DQ and standard
    QuantizeLinear / DequantizeLinear node becomes an Identity of its first input, so every tensor
    keeps its name and the network computes in float; a quantizer of a float weight (an initializer)
    goes, its consumers reading the weight itself (so calibrate sees it as a weight), and a Transpose of
    a weight becomes the transposed weight (Brevitas transposes its MatMul weights). A DequantizeLinear of an integer weight (a
    weight stored quantized) becomes the dequantized float weight, computed by polyquant.onnx (ONNX's
    formula), and a QuantizeLinear whose output only such nodes read goes with it. What calibrate
    needs to re-calibrate a model exported already quantized (Brevitas, QONNX, Quark, QDQ)."""
    from .. import onnx as pqo
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    original_inits = set(inits)
    removed, nodes, weight_of = [], [], {}
    for node in g.node:
        if not _is_quantizer(node):
            nodes.append(node)
            continue
        removed.append(node.name or node.output[0])
        x = node.input[0]
        is_dq = node.op_type.endswith("DequantizeLinear")
        if is_dq and x in inits and inits[x].data_type != TensorProto.FLOAT:
            # A stored integer weight: the float weight is its dequantized value.
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            q = numpy_helper.to_array(inits[x])
            scale = numpy_helper.to_array(inits[node.input[1]])
            zero = numpy_helper.to_array(inits[node.input[2]]) if len(node.input) > 2 and node.input[2] else None
            w = pqo.dequantize_linear(q, scale, zero, axis=int(attrs.get("axis", 1)),
                                      block_size=int(attrs.get("block_size", 0)))
            g.initializer.append(numpy_helper.from_array(np.asarray(w, np.float32), node.output[0]))
            continue
        if x in inits:  # a float weight quantized at run time: its consumers read the weight itself
            weight_of[node.output[0]] = weight_of.get(x, x)
            continue
        nodes.append(helper.make_node("Identity", [x], [node.output[0]], name=node.name or None))
    for node in nodes:
        for i, name in enumerate(node.input):
            if name in weight_of:
                node.input[i] = weight_of[name]
    # A weight transposed at run time (Brevitas' MatMul weights) becomes the transposed initializer,
    # so the MatMul reads a weight again.
    inits = {t.name: t for t in g.initializer}
    folded = []
    for node in nodes:
        if node.op_type == "Transpose" and node.domain in ("", "ai.onnx") and node.input[0] in inits:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            w = numpy_helper.to_array(inits[node.input[0]])
            t = np.ascontiguousarray(np.transpose(w, attrs.get("perm")))
            g.initializer.append(numpy_helper.from_array(t, node.output[0]))
            continue
        folded.append(node)
    nodes = folded
    del g.node[:]
    g.node.extend(nodes)
    # Initializers nothing reads any more (a weight's integers and quantization parameters) go.
    read = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    kept = [t for t in g.initializer if t.name in read]
    del g.initializer[:]
    g.initializer.extend(kept)
    # Graph inputs that name an initializer (older exporters list weights so, as overridable inputs)
    # go: in the float model the weights are constants, which calibrate quantizes as weights.
    graph_inputs = [v for v in g.input if v.name not in original_inits]
    del g.input[:]
    g.input.extend(graph_inputs)
    # The custom domains are no longer imported.
    keep = [o for o in m.opset_import if o.domain not in QONNX_DOMAINS + QUARK_DOMAINS]
    del m.opset_import[:]
    m.opset_import.extend(keep)
    return m, removed


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
