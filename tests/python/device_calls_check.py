"""The Python package's device calls, end to end, on the host stand-in for the CUDA library
(tests/cpp/core/fake_cuda_library.cc, loaded through POLYQUANT_CUDA_LIBRARY): run by
test_device_calls.py in a fresh interpreter (the backend is loaded once per process).

FakeCudaTensor is a DLPack producer on "cuda:N" whose memory is the stand-in's device memory: the
package must hand it to the core through DLPack with the stream protocol (on the stream its
framework reports), allocate outputs through its framework, and give the host's bits. Prints
"ok" and exits 0 when every check passes; an AssertionError otherwise."""

from __future__ import annotations

import ctypes
import os
import pathlib
import sys

# This directory holds test packages named like real ones (tests/python/onnx): import the real ones.
sys.path = [p for p in sys.path if pathlib.Path(p or ".").resolve() != pathlib.Path(__file__).resolve().parent]

import ml_dtypes
import numpy as np

import polyquant
import polyquant.aimet as pa
import polyquant.onnx as po
import polyquant.qkeras as qk
import polyquant.qonnx as pq
import polyquant.quark as pqk
from polyquant._common import device as pq_device

LIBRARY = os.environ["POLYQUANT_CUDA_LIBRARY"]
lib = ctypes.CDLL(LIBRARY)  # the same handle the core opened: one stand-in
lib.polyquant_fake_cuda_allocate.restype = ctypes.c_void_p
lib.polyquant_fake_cuda_allocate.argtypes = [ctypes.c_size_t, ctypes.c_int]
lib.polyquant_fake_cuda_last_stream.restype = ctypes.c_void_p
STREAM = 0x5EED  # the fake framework's "current stream" (a cudaStream_t value the stand-in records)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]
NO_DELETE = DELETER(lambda _: None)  # the memory belongs to the stand-in
ctypes.pythonapi.PyCapsule_New.restype = ctypes.py_object
ctypes.pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
DL_CODES = {"f": 2, "i": 0, "u": 1, "b": 6}


class FakeCudaTensor:
    """An array in the stand-in's memory of device `device`, with element strides (any sign)."""

    def __init__(self, host: np.ndarray, device: int = 0):
        host = np.ascontiguousarray(host).reshape(np.shape(host))  # (ascontiguousarray makes a 0-d array 1-d)
        self.dtype, self.shape, self.device = host.dtype, host.shape, device
        self.offset, self.strides = 0, tuple(s // host.itemsize for s in host.strides)
        self.ptr = lib.polyquant_fake_cuda_allocate(max(host.nbytes, 1), device)
        ctypes.memmove(self.ptr, host.ctypes.data, host.nbytes)
        self.streams: list = []
        self._keep: list = []

    @classmethod
    def empty(cls, shape: tuple, dtype: str, device: int) -> "FakeCudaTensor":
        return cls(np.zeros(shape, dtype), device)

    def view(self, dtype: str) -> "FakeCudaTensor":  # the same memory as another dtype of the same size
        v = FakeCudaTensor.__new__(FakeCudaTensor)
        v.__dict__.update(self.__dict__)
        v.streams, v._keep = [], []
        v.dtype = np.dtype(getattr(ml_dtypes, dtype)) if hasattr(ml_dtypes, dtype) and not hasattr(np, dtype) else np.dtype(dtype)
        assert v.dtype.itemsize == self.dtype.itemsize
        return v

    def reversed(self) -> "FakeCudaTensor":  # x[::-1] along the first axis, sharing memory
        v = FakeCudaTensor.__new__(FakeCudaTensor)
        v.__dict__.update(self.__dict__)
        v.streams, v._keep = [], []
        v.offset = self.offset + (self.shape[0] - 1) * self.strides[0]
        v.strides = (-self.strides[0],) + self.strides[1:]
        return v

    def numpy(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        size = self.dtype.itemsize
        for k, index in enumerate(np.ndindex(*self.shape)):
            element = self.offset + sum(i * s for i, s in zip(index, self.strides))
            ctypes.memmove(out.ctypes.data + k * size, self.ptr + element * size, size)
        return out

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.device)

    def __dlpack__(self, *, stream=None, max_version=None, **kwargs):
        self.streams.append(stream)
        ndim = len(self.shape)
        shape = (ctypes.c_int64 * max(ndim, 1))(*self.shape)
        strides = (ctypes.c_int64 * max(ndim, 1))(*self.strides)
        t = DLManagedTensor()
        t.dl_tensor.data = self.ptr
        t.dl_tensor.device = DLDevice(2, self.device)
        t.dl_tensor.ndim = ndim
        t.dl_tensor.dtype = DLDataType(DL_CODES[self.dtype.kind], 8 * self.dtype.itemsize, 1)
        t.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        t.dl_tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        t.dl_tensor.byte_offset = self.offset * self.dtype.itemsize
        t.deleter = NO_DELETE
        self._keep.append((t, shape, strides))
        return ctypes.pythonapi.PyCapsule_New(ctypes.addressof(t), b"dltensor", None)


class FakeImmutableTensor(FakeCudaTensor):
    """A producer that cannot allocate (as JAX): its outputs are memory polyquant owns, taken over
    through DLPack (from_dlpack keeps the capsule, and so the memory, alive)."""

    CONSUMER_STREAM = 0xC0DE  # the stream it reads its inputs on (JAX's are its own, non-blocking)

    @classmethod
    def from_dlpack(cls, producer) -> "FakeImmutableTensor":
        capsule = producer.__dlpack__(stream=cls.CONSUMER_STREAM)
        ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
        ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
        managed = DLManagedTensor.from_address(ctypes.pythonapi.PyCapsule_GetPointer(capsule, b"dltensor"))
        t = managed.dl_tensor
        assert t.device.device_type == 2, "polyquant's output is device memory"
        v = cls.__new__(cls)
        v.shape = tuple(t.shape[i] for i in range(t.ndim))
        kind = {2: "f", 0: "i", 1: "u", 6: "b"}[t.dtype.code]
        v.dtype = np.dtype(f"{kind}{t.dtype.bits // 8}") if kind != "b" else np.dtype(bool)
        v.device, v.ptr, v.offset = t.device.device_id, t.data, 0
        v.strides = tuple(np.cumprod((1,) + v.shape[::-1][:-1])[::-1].tolist()) if v.shape else ()
        v.streams, v._keep = [], [producer, capsule]
        return v


pq_device.register_framework(FakeImmutableTensor, stream=lambda index: 0, empty=pq_device.polyquant_empty,
                             name="fake-immutable", finish=FakeImmutableTensor.from_dlpack)
pq_device.register_framework(FakeCudaTensor, stream=lambda index: STREAM, empty=FakeCudaTensor.empty, name="fake",
                             view=FakeCudaTensor.view, from_host=lambda a, index: FakeCudaTensor(a, device=index))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def main() -> None:
    info = polyquant.runtime_info()["backends"]["cuda"]
    assert info["available"], info
    assert info["devices"][0].startswith("polyquant fake device 0"), info

    rng = np.random.default_rng(7)
    x = (rng.standard_normal((6, 32)) * 4).astype(np.float32)
    x[0, :8] = [np.nan, -np.inf, np.inf, -0.0, 0.0, 0.25, 0.75, -1.25]  # specials and ties at scale 0.5
    scale = np.linspace(0.125, 1.0, 32, dtype=np.float32)

    # IntQuant: per-channel device scale, Python-scalar zero point and bit width; the output is
    # allocated by the inputs' framework on their device.
    dx, dscale = FakeCudaTensor(x), FakeCudaTensor(scale)
    lib.polyquant_fake_cuda_reset_stats()
    y = pq.int_quant(dx, dscale, 0.0, 8, 1, 0, "ROUND")
    assert isinstance(y, FakeCudaTensor) and y.device == 0, type(y)
    assert same_bits(y.numpy(), pq.int_quant(x, scale, 0.0, 8, 1, 0, "ROUND"))
    assert lib.polyquant_fake_cuda_launches() == 1
    assert lib.polyquant_fake_cuda_last_stream() == STREAM, "work is queued on the framework's current stream"
    assert dx.streams and all(s == STREAM for s in dx.streams), f"__dlpack__(stream=...) got {dx.streams}"
    assert lib.polyquant_fake_cuda_faults() == 0 and lib.polyquant_fake_cuda_outstanding_temporaries() == 0

    # out= on the device, a Python-float scale, each rounding mode; BipolarQuant; Trunc; FloatQuant.
    for mode in ("ROUND", "FLOOR", "CEIL", "UP", "DOWN", "HALF_UP", "HALF_DOWN"):
        out = FakeCudaTensor(np.zeros_like(x))
        r = pq.int_quant(dx, 0.375, 1.0, 4, 0, 1, mode, out=out)
        assert r is out
        assert same_bits(out.numpy(), pq.int_quant(x, 0.375, 1.0, 4, 0, 1, mode)), mode
    assert same_bits(pq.binary_quant(dx, dscale).numpy(), pq.binary_quant(x, scale))
    assert same_bits(pq.trunc_v1(dx, dscale, 0.0, 8, 4, "FLOOR").numpy(), pq.trunc_v1(x, scale, 0.0, 8, 4, "FLOOR"))
    assert same_bits(pq.float_quant(dx, 1.0, 4, 3).numpy(), pq.float_quant(x, 1.0, 4, 3))
    assert same_bits(pq.trunc_v2(dx, dscale, 0.0, 8, 0, 1, 1.0, 4, "ROUND").numpy(),
                     pq.trunc_v2(x, scale, 0.0, 8, 0, 1, 1.0, 4, "ROUND"))
    # A bit width on the device (read back: it decides the bounds), and float16 x.
    dbits = FakeCudaTensor(np.array(6.0, np.float32))
    assert same_bits(pq.int_quant(dx, 0.5, 0.0, dbits, 1, 0, "ROUND").numpy(), pq.int_quant(x, 0.5, 0.0, np.float32(6.0), 1, 0, "ROUND"))
    x16 = x.astype(np.float16)
    assert same_bits(pq.int_quant(FakeCudaTensor(x16), 0.25, 0.0, 8, 1, 0, "ROUND").numpy(), pq.int_quant(x16, 0.25, 0.0, 8, 1, 0, "ROUND"))
    # A strided (reversed) device view of x, and x on device 1.
    assert same_bits(pq.int_quant(dx.reversed(), dscale, 0.0, 8, 1, 0, "ROUND").numpy(),
                     pq.int_quant(x[::-1], scale, 0.0, 8, 1, 0, "ROUND"))
    x1 = FakeCudaTensor(x, device=1)
    y1 = pq.int_quant(x1, 0.5, 0.0, 8, 1, 0, "ROUND")
    assert y1.device == 1 and same_bits(y1.numpy(), pq.int_quant(x, 0.5, 0.0, 8, 1, 0, "ROUND"))
    assert lib.polyquant_fake_cuda_faults() == 0 and lib.polyquant_fake_cuda_outstanding_temporaries() == 0

    # ONNX QuantizeLinear / DequantizeLinear: float8 (an ml_dtypes type: its uint8 storage travels,
    # the output comes back as the framework's float8 tensor), int8 with a zero point, blocked, and
    # back to float32 and bfloat16.
    e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
    zp8 = np.arange(32, dtype=np.int8) % 5
    for kwargs in ({"axis": 1}, {"axis": 1, "block_size": 8}):
        s_q = scale if "block_size" not in kwargs else np.linspace(0.1, 2.0, 6 * 4, dtype=np.float32).reshape(6, 4)
        zp_q = zp8 if "block_size" not in kwargs else (np.arange(24, dtype=np.int8) % 3).reshape(6, 4)
        ds_q, dzp_q = FakeCudaTensor(s_q), FakeCudaTensor(zp_q)
        q = po.quantize_linear(dx, ds_q, FakeCudaTensor(np.zeros(s_q.shape, e4m3).view(np.uint8)).view("float8_e4m3fn"), **kwargs)
        want = po.quantize_linear(x, s_q, np.zeros(s_q.shape, e4m3), **kwargs)
        assert isinstance(q, FakeCudaTensor) and q.dtype == e4m3 and same_bits(q.numpy(), want), kwargs
        q8 = po.quantize_linear(dx, ds_q, dzp_q, **kwargs)
        want8 = po.quantize_linear(x, s_q, zp_q, **kwargs)
        assert same_bits(q8.numpy(), want8), kwargs
        for output_dtype in (None, 16):  # float32 (the scale's), bfloat16
            d = po.dequantize_linear(q8, ds_q, dzp_q, output_dtype=output_dtype, **kwargs)
            assert same_bits(d.numpy(), po.dequantize_linear(want8, s_q, zp_q, output_dtype=output_dtype, **kwargs)), output_dtype
    assert lib.polyquant_fake_cuda_faults() == 0 and lib.polyquant_fake_cuda_outstanding_temporaries() == 0

    # QKeras' quantizers without a scale search: a per-channel alpha (host configuration, copied
    # over), stochastic rounding in training (the same draws), quantized_relu, gradients.
    alpha = list(np.linspace(0.5, 2.0, 32))
    # (two instances each: a quantizer advances its random stream per call)
    makers = (lambda: qk.quantized_bits(4, 1, alpha=alpha), lambda: qk.quantized_bits(6, 2, use_stochastic_rounding=True),
              lambda: qk.quantized_relu(4, 1, negative_slope=0.25, use_stochastic_rounding=True),
              lambda: qk.quantized_linear(5, alpha=alpha, use_stochastic_rounding=True))
    for make in makers:
        on_device, on_host = make(), make()
        for training in (False, True, True):
            got = on_device(dx, training, seed=11)
            want = on_host(x, training, seed=11)
            assert isinstance(got, FakeCudaTensor) and same_bits(got.numpy(), want), (str(on_host), training)
        assert same_bits(on_device.gradient(dx).numpy(), on_host.gradient(x)), str(on_host)
    # alpha="auto": the maximum pass on the device, the scale (a host array, as the quantizer keeps
    # it) derived on the host; alpha="auto_po2": the least-squares rounds on a host copy of x, the
    # quantizing pass on the device; the host's bits.
    for make in (lambda: qk.quantized_bits(6, 1, alpha="auto"), lambda: qk.quantized_bits(6, 1, alpha="auto", scale_axis=0),
                 lambda: qk.quantized_linear(5, alpha="auto"), lambda: qk.quantized_linear(4, alpha="auto", keep_negative=False),
                 lambda: qk.quantized_bits(4, 0, alpha="auto_po2"), lambda: qk.quantized_bits(8, 2, alpha="auto_po2", scale_axis=0),
                 lambda: qk.quantized_linear(6, alpha="auto_po2")):
        on_device, on_host = make(), make()
        got, want = on_device(dx), on_host(x)
        assert isinstance(got, FakeCudaTensor) and same_bits(got.numpy(), want), str(on_host)
        for attr in ("scale", "quantization_scale"):
            if hasattr(on_host, attr) and isinstance(getattr(on_host, attr), np.ndarray):
                assert same_bits(np.asarray(getattr(on_device, attr)), getattr(on_host, attr)), (str(on_host), attr)

    # Quark's Extended ops (per channel, int8 zero point).
    q_host = pqk.extended_quantize_linear(x, scale, zp8, axis=1)
    q_dev = pqk.extended_quantize_linear(dx, dscale, FakeCudaTensor(zp8), axis=1)
    assert same_bits(q_dev.numpy(), q_host)
    assert same_bits(pqk.extended_dequantize_linear(q_dev, dscale, FakeCudaTensor(zp8), axis=1).numpy(),
                     pqk.extended_dequantize_linear(q_host, scale, zp8, axis=1))

    # AIMET's quantize, quantize_dequantize (no grad) and dequantize: per tensor and per channel,
    # float32 and bfloat16 (its uint16 storage travels; the output comes back as bfloat16).
    bf16 = np.dtype(ml_dtypes.bfloat16)
    offset = -(np.arange(32) % 4).astype(np.float32)
    for dtype in (np.dtype(np.float32), bf16):
        xa, sa, oa = x.astype(dtype), scale.astype(dtype), offset.astype(dtype)
        if dtype == bf16:
            dxa, dsa, doa = (FakeCudaTensor(a.view(np.uint16)).view("bfloat16") for a in (xa, sa, oa))
        else:
            dxa, dsa, doa = FakeCudaTensor(xa), FakeCudaTensor(sa), FakeCudaTensor(oa)
        for name, f in (("quantize", pa.quantize), ("quantize_dequantize", pa.quantize_dequantize)):
            got = f(dxa, dsa, doa, 4, True)
            assert isinstance(got, FakeCudaTensor) and same_bits(got.numpy(), f(xa, sa, oa, 4, True)), (name, dtype)
            got = f(dxa, 0.25, -1.0, 8, False)
            assert same_bits(got.numpy(), f(xa, 0.25, -1.0, 8, False)), (name, dtype, "scalars")
        q = pa.quantize(xa, sa, oa, 4, True)
        dq = FakeCudaTensor(q.view(np.uint16)).view("bfloat16") if dtype == bf16 else FakeCudaTensor(q)
        assert same_bits(pa.dequantize(dq, dsa, doa).numpy(), pa.dequantize(q, sa, oa)), ("dequantize", dtype)
        # The gradients (output, grad_tensor, grad_scale, grad_offset), every one on the device with
        # the host's bits: grad_scale / grad_offset are summed exactly on the device (per channel
        # here, and per tensor with scalar parameters).
        g = (np.sin(np.arange(x.size, dtype=np.float64)).reshape(x.shape) * 3).astype(dtype)
        dg = FakeCudaTensor(g.view(np.uint16)).view("bfloat16") if dtype == bf16 else FakeCudaTensor(g)
        for name, f in (("quantize_dequantize_grad", pa.quantize_dequantize_grad), ("quantize_grad", pa.quantize_grad)):
            for got, want in zip(f(dg, dxa, dsa, doa, 4, True), f(g, xa, sa, oa, 4, True)):
                assert isinstance(got, FakeCudaTensor) and same_bits(got.numpy(), want), (name, dtype)
            one = np.asarray(0.25, dtype)
            for got, want in zip(f(dg, dxa, FakeCudaTensor(one.view(np.uint16)).view("bfloat16") if dtype == bf16
                                   else FakeCudaTensor(one), 0.0, 8, False), f(g, xa, one, 0.0, 8, False)):
                assert same_bits(got.numpy(), want), (name, dtype, "per tensor")
        for got, want in zip(pa.dequantize_grad(dg, dq, dsa, doa), pa.dequantize_grad(g, q, sa, oa)):
            assert same_bits(got.numpy(), want), ("dequantize_grad", dtype)
    assert lib.polyquant_fake_cuda_faults() == 0 and lib.polyquant_fake_cuda_outstanding_temporaries() == 0

    # A framework that cannot allocate (as JAX): the output is memory polyquant owns, handed over
    # through DLPack and freed when the last holder lets it go.
    import gc

    ix = FakeImmutableTensor(x)
    lib.polyquant_fake_cuda_reset_stats()
    got = pq.int_quant(ix, 0.5, 0.0, 8, 1, 0, "ROUND")
    assert isinstance(got, FakeImmutableTensor) and same_bits(got.numpy(), pq.int_quant(x, 0.5, 0.0, 8, 1, 0, "ROUND"))
    assert lib.polyquant_fake_cuda_outstanding_temporaries() == 1, "the output is alive"
    # DLPack's stream protocol on the hand-over: the stream the consumer named waits for the
    # call's (the framework's current stream, 0: the legacy default), once.
    waiting, producer = ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.polyquant_fake_cuda_orderings(ctypes.byref(waiting), ctypes.byref(producer)) == 1
    assert (waiting.value, producer.value or 0) == (FakeImmutableTensor.CONSUMER_STREAM, 0), (waiting.value, producer.value)
    del got
    gc.collect()
    assert lib.polyquant_fake_cuda_outstanding_temporaries() == 0, "the output was freed with its last holder"

    # Device calls from several threads at once (the call state and the core's stream are per
    # thread), interleaved with host calls on the same data.
    import threading

    want_tensor = pq.int_quant(x, scale, 0.0, 8, 1, 0, "ROUND")
    problems: list = []

    def worker(k: int) -> None:
        for _ in range(20):
            if k % 2:
                got = pq.int_quant(dx, dscale, 0.0, 8, 1, 0, "ROUND").numpy()
            else:
                got = pq.int_quant(x, scale, 0.0, 8, 1, 0, "ROUND")
            if not same_bits(got, want_tensor):
                problems.append(k)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not problems and pq_device.current_call() is None, problems
    assert lib.polyquant_fake_cuda_faults() == 0 and lib.polyquant_fake_cuda_outstanding_temporaries() == 0

    # Errors name the parameter: a host array beside device tensors, two devices, a host-only op.
    def error(f) -> str:
        try:
            f()
        except (TypeError, ValueError) as e:
            return f"{type(e).__name__}: {e}"
        raise AssertionError("no error")

    e = error(lambda: pq.int_quant(dx, scale, 0.0, 8, 1, 0, "ROUND"))
    assert "scale is on cpu but x is on cuda:0" in e, e
    e = error(lambda: pq.int_quant(dx, FakeCudaTensor(scale, device=1), 0.0, 8, 1, 0, "ROUND"))
    assert e.startswith("ValueError: scale: on cuda:1, but the call's tensors are on cuda:0"), e
    e = error(lambda: pq.int_quant(dx, dscale, 0.0, 8, 1, 0, "ROUND", out=np.zeros_like(x)))
    assert "out is on cpu but x is on cuda:0" in e, e
    # AIMET's MinMax statistics on the device (per channel; a batch with a NaN is settled by the
    # host's code), the host's bits.
    for batch in (x, np.where(np.arange(x.size).reshape(x.shape) == 7, np.float32(np.nan), x)):
        on_host, on_device = (pa.analyzers.MinMaxEncodingAnalyzer(shape=(x.shape[1],)) for _ in range(2))
        on_host.update_stats(batch)
        on_device.update_stats(FakeCudaTensor(batch))
        for got, want in zip(on_device.compute_encodings(255, False), on_host.compute_encodings(255, False)):
            assert same_bits(got, want), "MinMax statistics"
        got = on_device.compute_dynamic_encodings(FakeCudaTensor(batch), 15, True)
        for g, w in zip(got, on_host.compute_dynamic_encodings(batch, 15, True)):
            assert same_bits(g, w), "MinMax dynamic encodings"
    # The histogram analyzers' statistics on the device: two batches (the second grows and re-bins
    # the histograms), the encodings and the dynamic encodings, the host's bits.
    for batch in (x, np.where(np.arange(x.size).reshape(x.shape) == 7, np.float32(np.inf), x)):
        for kind in (lambda: pa.analyzers.PercentileEncodingAnalyzer(shape=(x.shape[1],), num_bins=64, percentile=99.0),
                     lambda: pa.analyzers.SqnrEncodingAnalyzer(shape=(1,), num_bins=32)):
            on_host, on_device = kind(), kind()
            for b in (batch, batch * np.float32(2.5)):
                on_host.update_stats(b)
                on_device.update_stats(FakeCudaTensor(b))
            for got, want in zip(on_device.compute_encodings(255, False), on_host.compute_encodings(255, False)):
                assert same_bits(got, want), "histogram statistics"
            got = on_device.compute_dynamic_encodings(FakeCudaTensor(batch), 15, True)
            for g, w in zip(got, on_host.compute_dynamic_encodings(batch, 15, True)):
                assert same_bits(g, w), "histogram dynamic encodings"
    # AIMET's quantizer modules called on device tensors (calibration and forward): their scale and
    # offset go to the tensor's device (the framework's from_host); the host's bits. A framework
    # registered without from_host is an error naming the parameter.
    for make in (lambda: pa.QuantizeDequantize((1,), bitwidth=8, symmetric=False),
                 lambda: pa.Quantize((x.shape[0], 1), bitwidth=4, symmetric=True),
                 lambda: pa.GroupedBlockQuantizeDequantize((x.shape[0], 2), bitwidth=4, symmetric=True, decompressed_bw=8,
                                                           block_size=(1, 16))):
        on_host, on_device = make(), make()
        finite = np.where(np.isfinite(x), x, np.float32(0.5))
        with on_host.compute_encodings():
            want = on_host(finite)
        with on_device.compute_encodings():
            got = on_device(FakeCudaTensor(finite))
        assert isinstance(got, FakeCudaTensor) and same_bits(got.numpy(), want), f"{on_host} calibration"
        assert same_bits(on_device.get_scale(), on_host.get_scale()), f"{on_host} scale"
        assert same_bits(on_device(FakeCudaTensor(x)).numpy(), on_host(x)), f"{on_host} forward"
        e = error(lambda: on_device(FakeImmutableTensor(x)))
        assert "scale (the quantizer's, for a device tensor): polyquant cannot place it" in e, e
    # Host calls are untouched.
    assert same_bits(pq.int_quant(x, scale, 0.0, 8, 1, 0, "ROUND"), pq.int_quant(x.copy(), scale.copy(), 0.0, 8, 1, 0, "ROUND"))
    print("ok")


if __name__ == "__main__":
    main()
    sys.exit(0)
