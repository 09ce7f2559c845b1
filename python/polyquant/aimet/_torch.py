"""torch tensors through polyquant.aimet: CPU tensors cross to the core without a copy (DLPack;
bfloat16 as its int16 bits), results come back as tensors, and inputs that require grad get
AIMET's training-path gradients through a torch.autograd.Function. torch is imported only when a
torch tensor is passed; the package does not depend on it. No numerics here."""

from __future__ import annotations

import functools
from typing import Any, Callable

import ml_dtypes
import numpy as np

from .._common.torch_autograd import is_tensor


def any_tensor(*values: Any) -> bool:
    return any(is_tensor(v) for v in values)


def to_numpy(value: Any, name: str) -> Any:
    """A CPU tensor as a numpy array over the same memory (bfloat16 as ml_dtypes.bfloat16); in a
    device call (polyquant._common.device) a CUDA tensor detached, for the extension to read through
    DLPack on its device; anything else unchanged."""
    if not is_tensor(value):
        return value
    import torch

    from .._common import device

    t = value.detach()
    if t.device.type != "cpu":
        if t.device.type == "cuda" and device.current_call() is not None:
            return t
        raise ValueError(f"{name}: a tensor on {t.device} outside a device call: only CPU and CUDA tensors are "
                         "supported (CUDA ones through the functions with a device path, docs/cuda.md)")
    if t.dtype == torch.bfloat16:
        return np.from_dlpack(t.view(torch.int16)).view(ml_dtypes.bfloat16)
    return np.from_dlpack(t)


def to_tensor(array: Any):
    """A numpy result as a tensor over the same memory (a tensor, a device call's result, as it is)."""
    import torch

    if is_tensor(array):
        return array
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_dlpack(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_dlpack(array)


def _requires_grad(value: Any) -> bool:
    return is_tensor(value) and value.requires_grad


def call(forward: Callable, backward: Callable, tensor, scale, offset, *, training_if: Callable[[bool, bool], bool]):
    """Runs polyquant's `forward(x, s, o, training)` on tensors; with grad enabled and an input that
    requires grad, through an autograd Function whose backward is `backward(g, x, s, o, training)`
    -> (output, grad_tensor, grad_scale, grad_offset). `training_if(scale_rg, offset_rg)`: whether
    AIMET takes its training path (formula) rather than its no-grad shortcut."""
    import torch

    wants_grad = torch.is_grad_enabled() and any(_requires_grad(v) for v in (tensor, scale, offset))
    from .._common import device

    if device.current_call() is not None and not wants_grad:  # CUDA tensors: the forward on their device
        return forward(to_numpy(tensor, "tensor"), to_numpy(scale, "scale"), to_numpy(offset, "offset"), False)
    if not wants_grad:
        out = forward(to_numpy(tensor, "tensor"), to_numpy(scale, "scale"), to_numpy(offset, "offset"), False)
        return to_tensor(out) if is_tensor(tensor) else out
    training = training_if(_requires_grad(scale), _requires_grad(offset))
    tensors = [v if is_tensor(v) else torch.as_tensor(np.asarray(v)) for v in (tensor, scale, offset)]
    return _function().apply(forward, backward, training, *tensors)


def _run_backward(backward_fn: Callable, grad_output, tensor, scale, offset, training: bool):
    return backward_fn(to_numpy(grad_output, "grad_output"), to_numpy(tensor, "tensor"), to_numpy(scale, "scale"),
                       to_numpy(offset, "offset"), training)


def _backward_on_device(backward_fn: Callable, grad_output, tensor, scale, offset, training: bool):
    """The backward: CPU tensors as numpy arrays; CUDA tensors in a device call of their own (torch
    runs a backward on its autograd thread, outside the forward's call), on torch's current stream
    there, the gradients allocated by torch on the device."""
    return _device_backward()(backward_fn, grad_output, tensor, scale, offset, training)


@functools.cache
def _device_backward():
    from .._common import device

    return device.device_path(_run_backward)


@functools.cache
def _function():
    """The autograd Function, defined on first use (it needs torch)."""
    import torch

    class AimetAffineFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, forward, backward, training, tensor, scale, offset):
            ctx.backward_fn = backward
            ctx.training = training
            ctx.save_for_backward(tensor, scale, offset)
            out = forward(to_numpy(tensor, "tensor"), to_numpy(scale, "scale"), to_numpy(offset, "offset"), training)
            if is_tensor(out):  # a device call's result, allocated by torch on the tensors' device
                return out
            return to_tensor(np.array(out, copy=True) if not out.flags.writeable else out)

        @staticmethod
        def backward(ctx, grad_output):
            tensor, scale, offset = ctx.saved_tensors
            _, gx, gs, go = _backward_on_device(ctx.backward_fn, grad_output.contiguous(), tensor, scale, offset,
                                                ctx.training)
            need = ctx.needs_input_grad
            return (None, None, None, to_tensor(gx) if need[3] else None, to_tensor(gs) if need[4] else None,
                    to_tensor(go) if need[5] else None)

    return AimetAffineFunction
