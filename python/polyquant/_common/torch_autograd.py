"""torch autograd for ops of one tensor whose backward is elementwise (QKeras' quantizers: straight-
through estimators): y = f(x) and x.grad = backward(x, grad_output), both computed by polyquant's
core on the tensor's device (CPU, or CUDA through the device path), so CPU and CUDA gradients are the
same bits. torch is imported only when a tensor that requires grad is passed. No numerics here."""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np


def is_tensor(value: Any) -> bool:
    """A torch.Tensor, recognised without importing torch."""
    return any(c.__module__ == "torch" and c.__name__ == "Tensor" for c in type(value).__mro__)


def requires_grad(value: Any) -> bool:
    """A torch tensor that requires grad, with grad enabled: the call goes through autograd."""
    if not (is_tensor(value) and value.requires_grad):
        return False
    import torch

    return torch.is_grad_enabled()


def _as_tensor(result: Any, like):
    """polyquant's result (a numpy array on the host, a tensor from a device call) as a tensor on
    `like`'s device."""
    if is_tensor(result):
        return result
    import torch

    return torch.from_numpy(np.ascontiguousarray(result)).to(like.device)


@functools.cache
def _function():
    """The autograd Function, defined on first use (it needs torch)."""
    import torch

    class ElementwiseBackwardFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, forward: Callable, backward: Callable, x):
            ctx.backward_fn = backward
            ctx.save_for_backward(x)
            return _as_tensor(forward(x.detach()), x)

        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            grad = _as_tensor(ctx.backward_fn(x.detach(), grad_output.detach().contiguous()), x)
            return None, None, grad if grad.dtype == x.dtype else grad.to(x.dtype)

    return ElementwiseBackwardFunction


def elementwise(forward: Callable[[Any], Any], backward: Callable[[Any, Any], Any], x):
    """forward(x) as a tensor on x's device whose backward returns backward(x, grad_output) (as x's
    dtype: a float32 gradient of a bfloat16 x rounds as torch rounds it); both callables receive
    detached tensors (CUDA ones run their device paths)."""
    return _function().apply(forward, backward, x)
