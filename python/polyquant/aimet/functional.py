"""AIMET's functional affine ops (``quantize``, ``quantize_dequantize``, ``dequantize`` and their
``*_grad`` forms) on numpy arrays or torch tensors (see ``polyquant.aimet``)."""

from __future__ import annotations

import math
import numbers
from itertools import chain, repeat
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from .. import _polyquant_ext as _ext
from .._common import operands
from .._common.args import strict_int
from .._common.device import DeviceTensor, as_device_operand, device_path
from . import _torch

__all__ = ["quantize", "quantize_dequantize", "dequantize", "quantize_grad", "quantize_dequantize_grad",
           "dequantize_grad", "TensorDtypeError", "GridTypeError"]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Integer bitwidths above this give AIMET's grid error from a small computation; far above it
# (2**40) the error is raised before computing 2**bitwidth.
_MAX_BITWIDTH_ARG = 4096


class TensorDtypeError(ValueError, NotImplementedError):
    """tensor of a non-float dtype: AIMET raises ValueError (quantize) or, through torch's fake
    quantization, NotImplementedError (quantize_dequantize); both classes catch it."""


class GridTypeError(TypeError, AttributeError):
    """A non-integer bitwidth / num_steps / qmin / qmax where AIMET's grid check needs integers
    (aimet-torch raises AttributeError from int.bit_length there): both classes catch it."""
_FLOAT_NAMES = ("float16", "float32", "float64", "bfloat16")


# ---- arguments ---------------------------------------------------------------------------------
def _derive_qmin_qmax(*, bitwidth=None, num_steps=None, signed):
    # aimet-torch's own arithmetic (Python's math.ceil / floor of a true division). An integer
    # bitwidth beyond any int64 grid is refused before 2**bitwidth is built (2**(2**40) would take
    # unbounded time and memory); up to that bound the grid check below gives AIMET's error.
    if bitwidth is not None:
        if _is_int(bitwidth) and bitwidth > _MAX_BITWIDTH_ARG:
            raise ValueError(f"bitwidth: {bitwidth} is out of range; a grid must fit int64 (bitwidth <= 64)")
        num_steps = 2**bitwidth - 1
    if signed:
        return -math.ceil(num_steps / 2), math.floor(num_steps / 2)
    return 0, num_steps


# The keywords of AIMET's three call forms.
_FORM_KEYWORDS = ("bitwidth", "signed", "num_steps", "qmin", "qmax", "block_size", "zero_point_shift")


def _check_keywords(function: str, kwargs) -> None:
    """aimet-torch reads the keywords it knows with kwargs.get and ignores the rest, so a
    misspelled one silently selects another form; polyquant names it instead."""
    unknown = [k for k in kwargs if k not in _FORM_KEYWORDS]
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}; "
                        f"expected: {', '.join(_FORM_KEYWORDS)}, out")


def _parse_args(args, kwargs):
    """AIMET's call forms -> (qmin, qmax, block_size, zero_point_shift), as aimet-torch parses them
    (num_steps= without signed= raises KeyError there, and here)."""
    if len(args) > 4:
        raise TypeError(f"expected at most 4 arguments after tensor, scale and offset, got {len(args)}")
    args = tuple(chain(args, repeat(None, 4 - len(args))))
    arg0 = kwargs.get("qmin", kwargs.get("bitwidth", args[0]))
    arg1 = kwargs.get("qmax", kwargs.get("signed", args[1]))
    block_size = kwargs.get("block_size", None) or args[2]
    zero_point_shift = args[3] or kwargs.get("zero_point_shift", 0.0)
    if arg0 is None:
        if "num_steps" not in kwargs:  # no bitwidth, qmin/qmax or num_steps: AIMET's KeyError
            raise KeyError("num_steps")
        if "signed" not in kwargs:
            raise KeyError("signed")  # aimet-torch 2.42.0 reads kwargs['signed'] unconditionally
        qmin, qmax = _derive_qmin_qmax(num_steps=kwargs["num_steps"], signed=kwargs["signed"])
    elif arg1 is None or isinstance(arg1, (bool, np.bool_)):
        qmin, qmax = _derive_qmin_qmax(bitwidth=arg0, signed=bool(arg1))
    else:
        qmin, qmax = arg0, arg1
    return qmin, qmax, block_size, zero_point_shift


def _block_size(block_size) -> Optional[list]:
    if block_size is None or (isinstance(block_size, (tuple, list)) and not block_size):
        return None
    if isinstance(block_size, (str, bytes)) or not hasattr(block_size, "__iter__"):
        raise TypeError(f"block_size: expected a tuple of ints (or None), got {block_size!r}")
    # strict integers: 1.5 or "2" are errors, not truncated; -1 is "the whole dimension"
    return [strict_int(b, f"block_size[{i}]", minimum=_INT64_MIN, maximum=_INT64_MAX)
            for i, b in enumerate(block_size)]


def _affine_args(qmin: int, qmax: int, block: Optional[list]) -> Any:
    """The core's AffineArgs for an int64 grid and a block size from _block_size (None: no blocks)."""
    args = _ext.aimet.AffineArgs()
    args.grid = _ext.aimet.Grid(int(qmin), int(qmax))
    args.block_size = block or []
    return args


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def _native(a: np.ndarray) -> np.ndarray:
    """A big-endian (non-native byte order) array as the same values in native order."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _as_tensor(value: Any, name: str) -> Tuple[np.ndarray, int, Any]:
    """(array for the extension, dtype code, dtype to return). In a device call a CUDA tensor stays
    on its device (bfloat16 as its uint16 storage)."""
    device_tensor = as_device_operand(value, name)
    if device_tensor is not None:
        if device_tensor.dtype.name not in _FLOAT_NAMES:
            raise TensorDtypeError(f"{name}: expected dtype to be one of float32, float16, bfloat16, or float64; "
                                   f"got {device_tensor.dtype}")
        arr, code = operands.operand(value, name)
        return arr, code, device_tensor.dtype
    a = _native(np.asarray(value))
    if a.dtype.name not in _FLOAT_NAMES:  # AIMET's ValueError
        raise TensorDtypeError(f"{name}: expected dtype to be one of float32, float16, bfloat16, or float64; got {a.dtype}")
    arr, code = operands.operand(a, name)
    return arr, code, a.dtype


def _as_param(value: Any, name: str) -> Tuple[np.ndarray, int]:
    """A scale / offset: float arrays as they are, Python numbers as torch.tensor makes them (a
    float is float32), integer arrays as float64 (exact; AIMET casts them to the working dtype)."""
    device_tensor = as_device_operand(value, name)
    if device_tensor is not None:
        if device_tensor.dtype.name not in _FLOAT_NAMES:
            raise TypeError(f"{name}: dtype {device_tensor.dtype} is not supported on a device; expected a float tensor")
        return operands.operand(value, name)
    if isinstance(value, float):
        a = np.asarray(value, dtype=np.float32)
    else:
        a = _native(np.asarray(value))
    if a.dtype.kind in "iub":
        a = a.astype(np.float64)
    if a.dtype.name not in _FLOAT_NAMES:
        raise TypeError(f"{name}: dtype {a.dtype} is not supported; expected a float or integer array")
    return operands.operand(a, name)


def _prepared(tensor, scale, offset):
    x, xc, dtype = _as_tensor(tensor, "tensor")
    s, sc = _as_param(scale, "scale")
    o, oc = _as_param(offset, "offset")
    return (x, xc, s, sc, o, oc), dtype


def _grid_problem(op: str, qmin, qmax, ops, block) -> Optional[Exception]:
    """The error AIMET raises for a grid the core cannot take (non-integer or beyond int64), after
    its shape checks; None for an int64 grid."""
    if _is_int(qmin) and _is_int(qmax) and _INT64_MIN <= qmin <= qmax <= _INT64_MAX:
        return None
    # AIMET validates shapes first: run the core's checks with a harmless grid.
    _ext.aimet.takes_shortcut(*ops, _affine_args(0, 0, block))
    if qmin > qmax:
        return RuntimeError(f"qmin ({qmin}) must be smaller than or equal to qmax ({qmax})")
    non_integer = next((n for n, v in (("qmin", qmin), ("qmax", qmax)) if not _is_int(v)), None)
    if op == "quantize_dequantize":
        lo = max(_INT64_MIN, min(_INT64_MAX, int(np.floor(qmin))))
        hi = max(_INT64_MIN, min(_INT64_MAX, int(np.ceil(qmax))))
        if _ext.aimet.takes_shortcut(*ops, _affine_args(lo, hi, block)):
            if non_integer:
                return TypeError(f"{non_integer}: torch.fake_quantize needs integer bounds, got "
                                 f"{qmin!r}, {qmax!r} (bitwidth, num_steps, qmin and qmax must be integers)")
            return ValueError(f"qmin/qmax: [{qmin}, {qmax}] overflows int64 (Overflow when unpacking long long)")
    if non_integer:
        return GridTypeError(f"{non_integer}: {type(qmin if non_integer == 'qmin' else qmax).__name__} value "
                              f"{qmin if non_integer == 'qmin' else qmax!r} has no attribute 'bit_length'; "
                              "bitwidth, num_steps, qmin and qmax must be integers")
    dtype = "torch.float64" if op == "quantize_dequantize" else f"torch.{_dtype_of(ops[0], ops[1])}"
    return RuntimeError(f"{dtype} is unable to represent quantized output of range [{qmin}, {qmax}].")


def _dtype_of(arr: np.ndarray, code: int) -> str:
    return "bfloat16" if code >= 0 else arr.dtype.name


def _finish(pair, dtype):
    array, _ = pair
    if isinstance(array, DeviceTensor):  # allocated on the device by the inputs' framework
        return operands.result(pair)
    return array.view(dtype) if array.dtype != dtype else array


def _run_into(run, out, dtype):
    """`run(out_operand)` -> (array, dtype name): the result in a new array (out None) or in `out`
    (checked as in every family; the core checks its dtype and shape against the result's and
    buffers an overlap with the inputs)."""
    if out is None:
        return _finish(run(None), dtype)
    run(operands.out_operand(out))
    return out


def _no_out_with_tensors(out) -> None:
    if out is not None:
        raise TypeError("out: only supported with numpy arrays (torch tensors return a new tensor)")


# ---- functional ops ----------------------------------------------------------------------------
# Each takes numpy arrays (numpy out) or CPU torch tensors (tensors out; with an input that
# requires grad, AIMET's training path and its gradients through torch.autograd).


@device_path
def quantize(tensor, scale, offset, *args, out=None, **kwargs):
    """AIMET's quantize: clamp(round(tensor / scale) - offset, qmin, qmax), in tensor's dtype."""
    _check_keywords("quantize", kwargs)
    if _torch.any_tensor(tensor, scale, offset):
        _no_out_with_tensors(out)
        return _torch.call(
            lambda x, s, o, training: _quantize(x, s, o, args, kwargs),
            lambda g, x, s, o, training: _gradients_only(_ext.aimet.AffineOp.quantize, g, x, s, o, args, kwargs),
            tensor, scale, offset, training_if=lambda s_rg, o_rg: True)
    return _quantize(tensor, scale, offset, args, kwargs, out)


def _gradients_only(op: Any, grad_output, tensor, scale, offset, args, kwargs):
    """The autograd backward: (None, grad_tensor, grad_scale, grad_offset); the forward ran (and
    checked the arguments) in the forward pass."""
    qmin, qmax, block_size, _ = _parse_args(args, kwargs)
    return (None, *_grads(op, grad_output, tensor, scale, offset, qmin, qmax, _block_size(block_size)))


def _quantize_checked(tensor, scale, offset, args, kwargs):
    """quantize's argument checks: (qmin, qmax, block, operands, dtype)."""
    qmin, qmax, block_size, zero_point_shift = _parse_args(args, kwargs)
    if zero_point_shift:
        raise RuntimeError("Nonzero zero_point_shift not supported for quantize()")
    ops, dtype = _prepared(tensor, scale, offset)
    block = _block_size(block_size)
    problem = _grid_problem("quantize", qmin, qmax, ops, block)
    if problem is not None:
        raise problem
    return qmin, qmax, block, ops, dtype


def _quantize(tensor, scale, offset, args, kwargs, out=None):
    qmin, qmax, block, ops, dtype = _quantize_checked(tensor, scale, offset, args, kwargs)
    affine = _affine_args(qmin, qmax, block)
    return _run_into(lambda o: _ext.aimet.quantize(*ops, affine, o), out, dtype)


@device_path
def quantize_dequantize(tensor, scale, offset, *args, out=None, **kwargs):
    """AIMET's quantize_dequantize. numpy arrays (and tensors that do not require grad) get what
    AIMET returns without grad: its no-grad shortcut where AIMET takes it, else
    (clamp(round(tensor / scale) - offset, qmin, qmax) + offset) * scale. With a scale or offset
    tensor that requires grad, AIMET's training path (the formula) and its gradients."""
    _check_keywords("quantize_dequantize", kwargs)
    if _torch.any_tensor(tensor, scale, offset):
        _no_out_with_tensors(out)
        return _torch.call(
            lambda x, s, o, training: _qdq_forward(x, s, o, args, kwargs, training),
            lambda g, x, s, o, training: (_gradients_only(_ext.aimet.AffineOp.quantize_dequantize, g, x, s, o, args, kwargs)
                                          if training else _qdq_no_grad_backward(g, x, s, o, args, kwargs)),
            tensor, scale, offset, training_if=lambda s_rg, o_rg: s_rg or o_rg)
    return _qdq_forward(tensor, scale, offset, args, kwargs, training=False, out=out)


def _qdq_checked(tensor, scale, offset, args, kwargs):
    """quantize_dequantize's argument checks: (qmin, qmax, block, operands, dtype)."""
    qmin, qmax, block_size, zero_point_shift = _parse_args(args, kwargs)
    if zero_point_shift:
        raise ValueError(f"zero_point_shift: only 0 is supported (got {zero_point_shift!r})")
    ops, dtype = _prepared(tensor, scale, offset)
    block = _block_size(block_size)
    problem = _grid_problem("quantize_dequantize", qmin, qmax, ops, block)
    if problem is not None:
        raise problem
    return qmin, qmax, block, ops, dtype


def _qdq_forward(tensor, scale, offset, args, kwargs, training: bool, out=None):
    qmin, qmax, block, ops, dtype = _qdq_checked(tensor, scale, offset, args, kwargs)
    affine = _affine_args(qmin, qmax, block)
    path = _ext.aimet.QdqPath.training if training else _ext.aimet.QdqPath.no_grad
    return _run_into(lambda o: _ext.aimet.quantize_dequantize(*ops, affine, path, o), out, dtype)


@device_path
def dequantize(tensor, scale, offset, block_size=None, *, out=None):
    """AIMET's dequantize: (tensor + offset) * scale, in tensor's dtype."""
    if _torch.any_tensor(tensor, scale, offset):
        _no_out_with_tensors(out)
        return _torch.call(
            lambda x, s, o, training: _dequantize(x, s, o, block_size),
            lambda g, x, s, o, training: (None, *_grads(_ext.aimet.AffineOp.dequantize, g, x, s, o, 0, 0, _block_size(block_size))),
            tensor, scale, offset, training_if=lambda s_rg, o_rg: True)
    return _dequantize(tensor, scale, offset, block_size, out)


def _dequantize(tensor, scale, offset, block_size, out=None):
    ops, dtype = _prepared(tensor, scale, offset)
    block = _block_size(block_size)
    return _run_into(lambda o: _ext.aimet.dequantize(*ops, block or [], o), out, dtype)


def _grads(op: Any, grad_output, tensor, scale, offset, qmin, qmax, block, with_output: bool = False):
    """(grad_tensor, grad_scale, grad_offset), preceded by the op's forward output with
    `with_output` (computed in the same pass over the tensor)."""
    g, gc, _ = _as_tensor(grad_output, "grad_output")
    ops, dtype = _prepared(tensor, scale, offset)
    gx, gs, go, out = _ext.aimet.backward(op, g, gc, *ops, _affine_args(qmin, qmax, block), True, True, True, with_output)
    grads = (operands.result((gx, _dtype_of(*ops[0:2]))), operands.result((gs, _dtype_of(*ops[2:4]))),
             operands.result((go, _dtype_of(*ops[4:6]))))
    return ((operands.result((out, _dtype_of(*ops[0:2]))),) + grads) if with_output else grads


def _qdq_no_grad_backward(grad_output, tensor, scale, offset, args, kwargs):
    """Only the tensor requires grad: AIMET's forward was its no-grad path, and so is the gradient
    (torch's fake-quantization mask where the shortcut ran, the formula's elsewhere)."""
    qmin, qmax, block_size, _ = _parse_args(args, kwargs)
    g, gc, _ = _as_tensor(grad_output, "grad_output")
    ops, _ = _prepared(tensor, scale, offset)
    gx, _, _, _ = _ext.aimet.backward(_ext.aimet.AffineOp.quantize_dequantize_no_grad, g, gc, *ops,
                                      _affine_args(qmin, qmax, _block_size(block_size)), True, False, False)
    return None, operands.result((gx, _dtype_of(*ops[0:2]))), None, None


@device_path
def quantize_dequantize_grad(grad_output, tensor, scale, offset, *args, **kwargs):
    """AIMET's training path of quantize_dequantize (tensor, scale and offset requiring grad):
    (output, grad_tensor, grad_scale, grad_offset) for the upstream gradient grad_output."""
    _check_keywords("quantize_dequantize_grad", kwargs)
    tensor, scale, offset, grad_output = (_torch.to_numpy(v, n) for v, n in (
        (tensor, "tensor"), (scale, "scale"), (offset, "offset"), (grad_output, "grad_output")))
    qmin, qmax, block, _, _ = _qdq_checked(tensor, scale, offset, args, kwargs)
    # the training forward and the three gradients from one pass over the tensor
    return _grads(_ext.aimet.AffineOp.quantize_dequantize, grad_output, tensor, scale, offset, qmin, qmax, block, with_output=True)


@device_path
def quantize_grad(grad_output, tensor, scale, offset, *args, **kwargs):
    """AIMET's quantize with tensor, scale and offset requiring grad:
    (output, grad_tensor, grad_scale, grad_offset)."""
    _check_keywords("quantize_grad", kwargs)
    tensor, scale, offset, grad_output = (_torch.to_numpy(v, n) for v, n in (
        (tensor, "tensor"), (scale, "scale"), (offset, "offset"), (grad_output, "grad_output")))
    qmin, qmax, block, _, _ = _quantize_checked(tensor, scale, offset, args, kwargs)
    return _grads(_ext.aimet.AffineOp.quantize, grad_output, tensor, scale, offset, qmin, qmax, block, with_output=True)


@device_path
def dequantize_grad(grad_output, tensor, scale, offset, block_size=None):
    """AIMET's dequantize with tensor, scale and offset requiring grad:
    (output, grad_tensor, grad_scale, grad_offset)."""
    tensor, scale, offset, grad_output = (_torch.to_numpy(v, n) for v, n in (
        (tensor, "tensor"), (scale, "scale"), (offset, "offset"), (grad_output, "grad_output")))
    return _grads(_ext.aimet.AffineOp.dequantize, grad_output, tensor, scale, offset, 0, 0, _block_size(block_size), with_output=True)
