"""polyquant.aimet on torch tensors: CPU tensors in, tensors out, no copies at the boundary, and,
for inputs that require grad, AIMET's training path and gradients through torch.autograd — checked
against the aimet-torch 2.42.0 golden data (tests/data/aimet), so polyquant can stand in for
AIMET's functional ops inside a QAT loop. torch is an optional dependency of the package; CI
installs it for these tests."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the package works without torch; CI installs it

import polyquant.aimet as pa  # noqa: E402

from . import test_golden as golden  # noqa: E402


def to_torch(a: np.ndarray) -> "torch.Tensor":
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(a, copy=True))


def to_numpy(t: "torch.Tensor") -> np.ndarray:
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


GRAD_CASES = [c for c in golden.CASES if c["group"] == "grad" and c["outcome"] == "ok"]


@pytest.mark.parametrize("case", GRAD_CASES, ids=[c["id"] for c in GRAD_CASES])
def test_training_path_through_autograd(case):
    """x, scale and offset require grad: the forward is AIMET's formula, backward its gradients."""
    args, kwargs = golden._args(case)
    x, s, o = (to_torch(np.asarray(v)).requires_grad_() for v in golden._inputs(case))
    fn = getattr(pa, case["op"])
    y = fn(x, s, o, *args, **kwargs)
    assert isinstance(y, torch.Tensor) and y.dtype == x.dtype and y.shape == x.shape
    y.backward(to_torch(golden.arr(case["grad_output"])))
    golden.check(case["id"], "output", to_numpy(y), case["output"])
    golden.check(case["id"], "grad_tensor", to_numpy(x.grad), case["grad_tensor"])
    dtype = case["inputs"]["tensor"][0]
    golden.check_sum(case["id"], "grad_scale", to_numpy(s.grad), case["grad_scale"], dtype)
    golden.check_sum(case["id"], "grad_offset", to_numpy(o.grad), case["grad_offset"], dtype)


FUNCTIONAL = [c for c in golden.CASES if c["group"] == "functional" and c["outcome"] == "ok"][::7]


@pytest.mark.parametrize("case", FUNCTIONAL, ids=[c["id"] for c in FUNCTIONAL])
def test_tensors_without_grad(case):
    """Tensors that do not require grad (and the same under no_grad) give AIMET's no-grad result."""
    args, kwargs = golden._args(case)
    x, s, o = (to_torch(np.asarray(v)) for v in golden._inputs(case))
    y = getattr(pa, case["op"])(x, s, o, *args, **kwargs)
    assert isinstance(y, torch.Tensor) and y.dtype == x.dtype
    golden.check(case["id"], "output", to_numpy(y), case["output"])


def test_zero_copy_views_and_layouts():
    """Inputs are read in place (strided, transposed, expanded) and the result is a fresh tensor
    over polyquant's output buffer; numpy in still gives numpy out."""
    base = torch.randn(64, 48)
    s, o = torch.tensor(0.05), torch.tensor(-3.0)
    for x in (base, base.t(), base[::2, ::3], base[:1].expand(64, 48)):
        want = pa.quantize_dequantize(np.ascontiguousarray(x.numpy()), s.numpy(), o.numpy(), 8)
        got = pa.quantize_dequantize(x, s, o, 8)
        assert isinstance(got, torch.Tensor) and got.shape == x.shape
        np.testing.assert_array_equal(got.numpy().view(np.uint32), want.view(np.uint32))
    assert isinstance(pa.quantize_dequantize(base.numpy(), 0.05, -3.0, 8), np.ndarray)


def test_only_tensor_requires_grad_takes_the_no_grad_forward():
    """AIMET's shortcut runs whenever scale and offset need no grad: the output equals the
    no-grad one and x still gets a gradient."""
    x = (torch.randn(257) * 4).requires_grad_()
    s, o = torch.tensor(0.1), torch.tensor(-7.0)
    y = pa.quantize_dequantize(x, s, o, 8)
    with torch.no_grad():
        want = pa.quantize_dequantize(x, s, o, 8)
    assert torch.equal(y.detach(), want)
    g = torch.randn(257)
    y.backward(g)
    # torch.fake_quantize's gradient: g * mask (a masked negative gradient is -0.0), the mask from
    # the shortcut's own rounding x * (1/s)
    inv = np.float32(1.0) / np.float32(0.1)
    q = np.float32(7.0) + np.rint(x.detach().numpy() * inv)
    mask = (q >= 0) & (q <= 255)
    want = g.numpy() * mask.astype(np.float32)
    np.testing.assert_array_equal(x.grad.numpy().view(np.uint32), want.view(np.uint32))


def test_qat_step_learns_scale_and_offset():
    """A few SGD steps through polyquant's op move the scale and offset and lower the loss."""
    torch.manual_seed(0)
    w = torch.randn(16, 32)
    scale = torch.full((16, 1), 0.2, requires_grad=True)
    offset = torch.zeros(16, 1, requires_grad=True)
    opt = torch.optim.SGD([scale, offset], lr=1e-3)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = ((pa.quantize_dequantize(w, scale, offset, 4, True) - w) ** 2).sum()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert not torch.equal(scale.detach(), torch.full((16, 1), 0.2))


def test_dequantize_and_quantize_grads_match_the_array_api():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 10)).astype(np.float32) * 3
    s = rng.random((6, 1)).astype(np.float32) * 0.1 + 0.02
    o = np.round(rng.standard_normal((6, 1)) * 2).astype(np.float32)
    g = rng.standard_normal((6, 10)).astype(np.float32)
    for name in ("quantize", "dequantize"):
        extra = (8, True) if name == "quantize" else ()
        want = getattr(pa, name + "_grad")(g, x, s, o, *extra)
        xt, st, ot = (torch.from_numpy(v.copy()).requires_grad_() for v in (x, s, o))
        y = getattr(pa, name)(xt, st, ot, *extra)
        y.backward(torch.from_numpy(g))
        for got, exp in zip((y, xt.grad, st.grad, ot.grad), want):
            np.testing.assert_array_equal(got.detach().numpy().view(np.uint32), exp.view(np.uint32))


def test_cpu_only():
    x = torch.randn(4)
    if not hasattr(torch, "device"):
        pytest.skip("torch without devices")
    meta = x.to("meta")
    with pytest.raises((ValueError, RuntimeError, TypeError)):
        pa.quantize_dequantize(meta, 0.1, 0.0, 8)
