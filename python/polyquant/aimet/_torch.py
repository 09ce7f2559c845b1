"""torch tensors through polyquant.aimet: CPU tensors cross to the core without a copy (DLPack;
bfloat16 as its int16 bits), results come back as tensors, and inputs that require grad get
AIMET's training-path gradients through a torch.autograd.Function. torch is imported only when a
torch tensor is passed; the package does not depend on it. No numerics here."""

from __future__ import annotations

from typing import Any, Callable

import ml_dtypes
import numpy as np


def is_tensor(value: Any) -> bool:
    """A torch.Tensor, recognised without importing torch."""
    return any(c.__module__ == "torch" and c.__name__ == "Tensor" for c in type(value).__mro__)


def any_tensor(*values: Any) -> bool:
    return any(is_tensor(v) for v in values)


def to_numpy(value: Any, name: str) -> Any:
    """A CPU tensor as a numpy array over the same memory (bfloat16 as ml_dtypes.bfloat16);
    anything else unchanged."""
    if not is_tensor(value):
        return value
    import torch

    t = value.detach()
    if t.device.type != "cpu":
        raise ValueError(f"{name}: only CPU tensors are supported (got a tensor on {t.device})")
    if t.dtype == torch.bfloat16:
        return np.from_dlpack(t.view(torch.int16)).view(ml_dtypes.bfloat16)
    return np.from_dlpack(t)


def to_tensor(array: np.ndarray):
    """A numpy result as a tensor over the same memory."""
    import torch

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

    if device.current_call() is not None:  # CUDA tensors: the forward on their device
        if wants_grad:
            raise TypeError("tensor: AIMET's gradients run on the host only for now (docs/cuda.md): on a CUDA device, "
                            "call this under torch.no_grad() or with tensors that do not require grad, or use CPU tensors")
        return forward(tensor, scale, offset, False)
    if not wants_grad:
        out = forward(to_numpy(tensor, "tensor"), to_numpy(scale, "scale"), to_numpy(offset, "offset"), False)
        return to_tensor(out) if is_tensor(tensor) else out
    training = training_if(_requires_grad(scale), _requires_grad(offset))
    tensors = [v if is_tensor(v) else torch.as_tensor(np.asarray(v)) for v in (tensor, scale, offset)]
    return _function().apply(forward, backward, training, *tensors)


_FUNCTION = None


def _function():
    """The autograd Function, defined on first use (it needs torch)."""
    global _FUNCTION
    if _FUNCTION is not None:
        return _FUNCTION
    import torch

    class AimetAffineFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, forward, backward, training, tensor, scale, offset):
            ctx.backward_fn = backward
            ctx.training = training
            ctx.save_for_backward(tensor, scale, offset)
            out = forward(to_numpy(tensor, "tensor"), to_numpy(scale, "scale"), to_numpy(offset, "offset"), training)
            return to_tensor(np.array(out, copy=True) if not out.flags.writeable else out)

        @staticmethod
        def backward(ctx, grad_output):
            tensor, scale, offset = ctx.saved_tensors
            g = to_numpy(grad_output.contiguous(), "grad_output")
            _, gx, gs, go = ctx.backward_fn(g, to_numpy(tensor, "tensor"), to_numpy(scale, "scale"),
                                            to_numpy(offset, "offset"), ctx.training)
            need = ctx.needs_input_grad
            return (None, None, None, to_tensor(gx) if need[3] else None, to_tensor(gs) if need[4] else None,
                    to_tensor(go) if need[5] else None)

    _FUNCTION = AimetAffineFunction
    return _FUNCTION
