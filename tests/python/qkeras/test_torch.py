"""QKeras' quantizers on torch tensors that require grad: the result is a tensor (on x's device)
whose backward gives x.grad = q.gradient(x, grad_output), the upstream gradient times the
straight-through derivative of QKeras' graph in one core pass (x86's float32 product under
TensorFlow's flush to zero), bit for bit; without grad (no requires_grad, torch.no_grad()) calls are
as before. The same on CUDA tensors is checked by scripts/gpu_check_python.py on a GPU."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the package works without torch; CI installs it

import polyquant.qkeras as qk  # noqa: E402


def quantizers():
    return [
        qk.quantized_bits(4, 0, alpha=1),
        qk.quantized_bits(6, 2, alpha="auto", use_ste=False),
        qk.quantized_bits(4, 0, alpha="auto_po2", scale_axis=0),
        qk.quantized_bits(8, 3, qnoise_factor=0.25, use_ste=False),
        qk.quantized_relu(3, 1, negative_slope=0.25),
        qk.quantized_relu(4, 2, relu_upper_bound=3.0, use_ste=False, qnoise_factor=0.5),
        qk.quantized_linear(4, alpha="auto"),
        qk.quantized_linear(5, 1, alpha="auto_po2", keep_negative=False),
    ]


def data(shape=(6, 10), seed=3):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2.5).astype(np.float32)
    x.flat[:6] = [0.0, -0.0, 0.5, -1.5, 3.0, -3.0]  # ties, zeros and the clip
    g = rng.standard_normal(shape).astype(np.float32)
    g.flat[6:9] = [np.inf, np.nan, 1e-40]  # the product's specials
    return x, g


def flushed(a: np.ndarray) -> np.ndarray:
    """TensorFlow's flush to zero (FTZ / DAZ) of float32 values: subnormals become zeros of their sign."""
    a = np.array(a, dtype=np.float32)
    tiny = np.abs(a) < np.finfo(np.float32).tiny
    a[tiny] = np.copysign(np.float32(0), a[tiny])
    return a


def product(g: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The backward's product as the core computes it: g * d in float32, g first, under the flush."""
    with np.errstate(invalid="ignore", over="ignore"):
        return flushed(flushed(g) * flushed(d))


@pytest.mark.parametrize("index", range(len(quantizers())))
def test_backward_is_grad_output_times_the_quantizers_gradient(index: int) -> None:
    x, g = data()
    q_grad, q_plain = quantizers()[index], quantizers()[index]
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    y = q_grad(xt)
    assert isinstance(y, torch.Tensor) and y.requires_grad and y.dtype == torch.float32
    want = q_plain(x)
    assert y.detach().numpy().tobytes() == want.tobytes(), "the forward is the plain call's bits"
    y.backward(torch.from_numpy(g))
    assert xt.grad.numpy().tobytes() == product(g, q_plain.gradient(x)).tobytes()
    assert xt.grad.numpy().tobytes() == q_plain.gradient(x, grad_output=g).tobytes()
    if isinstance(getattr(q_grad, "scale", None), np.ndarray):  # a searched scale is kept as on a plain call
        assert q_grad.scale.tobytes() == q_plain.scale.tobytes()


def test_gradient_through_a_graph_and_other_dtypes() -> None:
    x, g = data((4, 8), seed=5)
    q = qk.quantized_bits(4, 1, alpha=1, use_ste=False, qnoise_factor=0.5)
    w = torch.from_numpy(x.copy()).requires_grad_(True)
    loss = (q(w * 2.0) * torch.from_numpy(g)).sum()
    loss.backward()
    want = product(g, q.gradient(x * np.float32(2.0))) * np.float32(2.0)  # then torch's own backward of w * 2
    assert w.grad.numpy().tobytes() == want.astype(np.float32).tobytes()
    # bfloat16 and float16 x: QKeras computes in float32 (a float32 result); x.grad has x's dtype.
    for dtype in (torch.bfloat16, torch.float16):
        xt = torch.from_numpy(x.copy()).to(dtype).requires_grad_(True)
        y = q(xt)
        assert y.dtype == torch.float32
        y.backward(torch.from_numpy(g))
        assert xt.grad.dtype == dtype
        widened = xt.detach().float().numpy()
        want = torch.from_numpy(product(g, q.gradient(widened))).to(dtype)  # torch rounds the float32 gradient
        assert xt.grad.view(torch.int16).numpy().tobytes() == want.view(torch.int16).numpy().tobytes()


def test_training_calls_and_calls_without_grad() -> None:
    x, _ = data()
    q1, q2 = qk.quantized_bits(4, 0, alpha=1), qk.quantized_bits(4, 0, alpha=1)
    y = q1(torch.from_numpy(x.copy()).requires_grad_(True), training=True, seed=7)
    assert y.detach().numpy().tobytes() == q2(x, training=True, seed=7).tobytes(), "the same stochastic draw"
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    with torch.no_grad():
        plain = q1(xt)
    assert isinstance(plain, np.ndarray) and plain.tobytes() == q2(x).tobytes()
    assert isinstance(q1(torch.from_numpy(x)), np.ndarray), "a tensor without grad: a numpy result, as before"
    assert q1.gradient(xt).tobytes() == q2.gradient(x).tobytes()
    with pytest.raises(ValueError, match="out: not with an x that requires grad"):
        q1(xt, out=np.empty(x.shape, np.float32))


def test_grad_output_errors_name_the_parameter() -> None:
    x, g = data()
    q = qk.quantized_bits(4, 0, alpha=1)
    with pytest.raises(ValueError, match=r"grad_output: shape \(6, 9\) must equal the gradient's shape \(6, 10\)"):
        q.gradient(x, grad_output=g[:, :9])
    with pytest.raises(TypeError, match="grad_output: dtype float64 is not supported; float32, float16 or bfloat16"):
        q.gradient(x, grad_output=g.astype(np.float64))
    # float16 and bfloat16 upstream gradients are widened exactly
    for dtype in (np.float16, ml_dtypes.bfloat16):
        narrow = g.astype(dtype)
        assert q.gradient(x, grad_output=narrow).tobytes() == product(narrow.astype(np.float32), q.gradient(x)).tobytes()


def test_bfloat16_cpu_tensors_without_grad() -> None:
    x, _ = data()
    q = qk.quantized_linear(4, alpha="auto")
    xb = torch.from_numpy(x).bfloat16()
    want = qk.quantized_linear(4, alpha="auto")(x.astype(ml_dtypes.bfloat16))
    assert q(xb).tobytes() == want.tobytes()
