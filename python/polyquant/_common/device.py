"""CUDA tensors in and out of polyquant's ops (docs/cuda.md#python).

An op that has a device path accepts torch tensors, CuPy arrays and any other DLPack producer on a
CUDA device. For such a call:

- the work is queued on the caller's current stream (torch: ``torch.cuda.current_stream()``, CuPy:
  ``cupy.cuda.get_current_stream()``; other producers: the legacy default stream), and nothing waits
  for the device;
- the tensors reach the core through DLPack with the stream protocol: ``x.__dlpack__(stream=s)``
  with that stream, so the producer makes them ready on it;
- the output is allocated by the inputs' framework on their device (``torch.empty``,
  ``cupy.empty``: its caching allocator sees the memory), or written into ``out=``, a tensor on the
  same device;
- Python scalars and 0-d numpy values may be parameters; any other host array beside device tensors,
  or tensors on two devices, is an error naming the parameter.

Functions without a device path raise TypeError naming the parameter for a CUDA tensor. This module
holds no numerics: it only carries tensors and the stream to the extension.
"""

from __future__ import annotations

import atexit
import functools
import threading
from typing import Any, Callable

import numpy as np

from .. import _polyquant_ext as _ext

_KDL_CUDA, _KDL_CUDA_MANAGED = 2, 13


def cuda_index(obj: Any) -> int | None:
    """The CUDA device ordinal of a DLPack producer on a CUDA device, else None."""
    method = getattr(type(obj), "__dlpack_device__", None)
    if method is None:
        return None
    try:
        kind, index = obj.__dlpack_device__()
    except Exception:  # a producer that cannot say: treated as a host object
        return None
    return int(index) if int(kind) in (_KDL_CUDA, _KDL_CUDA_MANAGED) else None


class Framework:
    """How polyquant meets one array library: its current CUDA stream on a device (a cudaStream_t
    as an int; 0: the legacy default stream), an empty array of a shape and dtype name there, and
    (optional) a view of an array's memory as another dtype of the same size (ml_dtypes' names:
    float8_e4m3fn, bfloat16, ...; the ONNX functions pass such tensors as their uint8 / uint16
    storage)."""

    def __init__(self, name: str, stream: Callable[[int], int], empty: Callable[[tuple, str, int], Any],
                 view: Callable[[Any, str], Any] | None = None, finish: Callable[[Any], Any] | None = None,
                 from_host: Callable[[np.ndarray, int], Any] | None = None):
        self.name, self.stream, self.empty, self._view = name, stream, empty, view
        self.finish = finish or (lambda obj: obj)  # an output as the framework's array
        self._from_host = from_host  # a numpy array copied to device `index` as the framework's array

    def from_host(self, array: np.ndarray, index: int, name: str) -> Any:
        if self._from_host is None:
            raise TypeError(f"{name}: polyquant cannot place it on a {self.name} device array's device (register the "
                            f"framework with from_host=, polyquant._common.device.register_framework)")
        return self._from_host(np.ascontiguousarray(array), index)

    def view(self, obj: Any, dtype: str, name: str) -> Any:
        if self._view is None:
            raise TypeError(f"{name}: polyquant cannot view a {type(obj).__name__} as {dtype}")
        try:
            return self._view(obj, dtype)
        except (AttributeError, TypeError, RuntimeError) as e:
            raise TypeError(f"{name}: {self.name} has no {dtype} tensors on the device ({e})") from None


_FRAMEWORKS: dict[type, Framework] = {}


def register_framework(array_type: type, stream: Callable[[int], int], empty: Callable[[tuple, str, int], Any],
                       name: str | None = None, view: Callable[[Any, str], Any] | None = None,
                       finish: Callable[[Any], Any] | None = None,
                       from_host: Callable[[np.ndarray, int], Any] | None = None) -> None:
    """Teaches polyquant another DLPack producer: `stream(device)` gives its current stream,
    `empty(shape, dtype_name, device)` allocates an output (or `polyquant_empty`: memory polyquant
    owns), `view(array, dtype_name)` reinterprets its memory, `finish(output)` turns an output into
    the framework's array, `from_host(numpy_array, device)` copies a host array there (the AIMET
    quantizer modules' parameters, for a call on a device tensor). torch, CuPy and JAX are known."""
    _FRAMEWORKS[array_type] = Framework(name or array_type.__name__, stream, empty, view, finish, from_host)


def on_device_of(array: np.ndarray, like: Any, name: str) -> Any:
    """`array` (host) as an array of `like`'s framework on `like`'s CUDA device, or `array` itself
    where `like` is not on a device. For state a polyquant object keeps on the host and uses with
    the device tensor it is called on (as a torch module's parameters live on its device); the
    functional ops never move operands themselves (mixed devices are an error naming the operand)."""
    index = cuda_index(like)
    if index is None:
        return array
    return framework_of(like).from_host(np.asarray(array), index, name)


def polyquant_empty(shape: tuple, dtype: str, index: int) -> Any:
    """An output in device memory polyquant owns (freed when its last DLPack consumer lets it go):
    for frameworks that cannot allocate one, such as JAX, whose arrays are immutable."""
    return _ext._device_empty(list(shape), dtype, index)


def _jax() -> Framework:
    import jax.dlpack

    def stream(index: int) -> int:
        return 0  # JAX makes its arrays ready for the legacy default stream (DLPack's stream 1)

    def from_host(array: np.ndarray, index: int) -> Any:
        import jax

        return jax.device_put(array, jax.devices("gpu")[index])

    return Framework("jax", stream, polyquant_empty, None, jax.dlpack.from_dlpack, from_host)


def _torch() -> Framework:
    import torch

    def stream(index: int) -> int:
        return int(torch.cuda.current_stream(index).cuda_stream)

    def empty(shape: tuple, dtype: str, index: int) -> Any:
        return torch.empty(shape, dtype=getattr(torch, dtype), device=f"cuda:{index}")

    def view(obj: Any, dtype: str) -> Any:
        return obj.view(getattr(torch, dtype))

    def from_host(array: np.ndarray, index: int) -> Any:
        return torch.from_numpy(array.copy()).to(f"cuda:{index}")

    return Framework("torch", stream, empty, view, None, from_host)


def _cupy() -> Framework:
    import cupy

    def stream(index: int) -> int:
        with cupy.cuda.Device(index):
            return int(cupy.cuda.get_current_stream().ptr)

    def empty(shape: tuple, dtype: str, index: int) -> Any:
        with cupy.cuda.Device(index):
            return cupy.empty(shape, dtype=dtype)

    def view(obj: Any, dtype: str) -> Any:
        return obj.view(_numpy_dtype_named(dtype))

    def from_host(array: np.ndarray, index: int) -> Any:
        with cupy.cuda.Device(index):
            return cupy.asarray(array)

    return Framework("cupy", stream, empty, view, None, from_host)


def _no_allocator(array_type: type) -> Framework:
    def stream(index: int) -> int:
        return 0

    def empty(shape: tuple, dtype: str, index: int) -> Any:
        raise TypeError(f"out: polyquant cannot allocate a {array_type.__name__} output; pass out= (an array on the "
                        f"inputs' device), or polyquant._common.device.register_framework({array_type.__name__}, ...)")

    return Framework(array_type.__name__, stream, empty)


def framework_of(obj: Any) -> Framework:
    for t in type(obj).__mro__:
        if t in _FRAMEWORKS:
            return _FRAMEWORKS[t]
    root = type(obj).__module__.split(".")[0]
    if root == "torch":
        fw = _torch()
    elif root == "cupy":
        fw = _cupy()
    elif root in ("jax", "jaxlib"):
        fw = _jax()
    else:
        fw = _no_allocator(type(obj))
    _FRAMEWORKS[type(obj)] = fw
    return fw


def _numpy_dtype_named(name: str) -> np.dtype:
    """numpy's or ml_dtypes' dtype called `name`."""
    import ml_dtypes

    if hasattr(ml_dtypes, name) and not hasattr(np, name):
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _numpy_dtype(obj: Any) -> np.dtype:
    """A producer's dtype as numpy's (torch.float32 -> float32; bfloat16, float8_* through ml_dtypes)."""
    dtype = getattr(obj, "dtype", None)
    if isinstance(dtype, np.dtype):
        return dtype
    name = str(dtype).replace("torch.", "")
    try:
        return _numpy_dtype_named(name)
    except TypeError:
        raise TypeError(f"unsupported dtype {dtype!r} of a CUDA tensor") from None


class DeviceTensor:
    """A tensor on a CUDA device as the Python layer sees it: dtype, shape and ndim like a numpy
    array (numpy's promotion rules apply to it), and ``__dlpack__`` handing the producer's capsule,
    made ready on the call's stream. The extension reads it through DLPack; its data never comes
    to the host."""

    __slots__ = ("obj", "dtype", "shape", "ndim", "_call")

    def __init__(self, obj: Any, call: "DeviceCall", dtype: np.dtype | None = None, shape: tuple | None = None):
        self.obj, self._call = obj, call
        self.dtype = dtype if dtype is not None else _numpy_dtype(obj)
        self.shape = tuple(int(d) for d in (shape if shape is not None else obj.shape))
        self.ndim = len(self.shape)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, **kwargs: Any) -> Any:
        kwargs["stream"] = self._call.protocol_stream
        if max_version is not None:
            kwargs["max_version"] = max_version
        return self.obj.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.obj.__dlpack_device__()

    def __repr__(self) -> str:
        return f"DeviceTensor({self.obj!r})"

    def to_user(self) -> Any:
        """The tensor as the caller's framework holds it (an output polyquant allocated: converted)."""
        framework = self._call.framework
        if framework.empty is polyquant_empty:  # memory polyquant owns: its consumer's stream is ordered
            return framework.finish(_HandedOver(self.obj, self._call))
        return framework.finish(self.obj)

    def view(self, dtype: str, name: str) -> "DeviceTensor":
        """The same memory as dtype `dtype` (ml_dtypes' names; same item size)."""
        return DeviceTensor(self._call.framework.view(self.obj, dtype, name), self._call)


class _HandedOver:
    """An output in memory polyquant owns, as its framework's ``from_dlpack`` takes it over: the
    producer's side of DLPack's stream protocol. The consumer names the stream it will read on
    (``stream=``: None or 1 the legacy default stream, 2 the per-thread one, else a cudaStream_t;
    -1 asks for no ordering), and that stream is ordered after the work the call queued on its own
    stream (an event, so the host does not wait): a framework reading on a stream of its own (JAX's
    are non-blocking) would otherwise see the output before the kernel wrote it."""

    __slots__ = ("_array", "_call")

    def __init__(self, array: Any, call: "DeviceCall"):
        self._array, self._call = array, call

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, **kwargs: Any) -> Any:
        consumer = 1 if stream is None else int(stream)
        if consumer != -1:
            _ext._device_order_after(self._call.index, consumer, self._call.stream)
        return self._array.__dlpack__(max_version=max_version, **kwargs)  # nanobind's: takes every key

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array.__dlpack_device__()


class DeviceCall:
    """One op call on CUDA device `index`: the inputs' framework and its current stream."""

    def __init__(self, framework: Framework, index: int):
        self.framework, self.index = framework, index
        self.stream = framework.stream(index)
        # DLPack's stream protocol: 1 names the legacy default stream (0 is ambiguous, disallowed).
        self.protocol_stream = 1 if self.stream == 0 else self.stream

    def wrap(self, obj: Any, name: str) -> DeviceTensor:
        index = cuda_index(obj)
        if index != self.index:
            raise ValueError(f"{name}: on cuda:{index}, but the call's tensors are on cuda:{self.index}")
        return DeviceTensor(obj, self)


_state = threading.local()


def current_call() -> DeviceCall | None:
    return getattr(_state, "call", None)


def as_device_operand(obj: Any, name: str) -> DeviceTensor | None:
    """`obj` wrapped for the current device call when it is a CUDA tensor, else None. A CUDA tensor
    outside a device call (a function without a device path) is a TypeError naming `name`."""
    if cuda_index(obj) is None:
        return None
    call = current_call()
    if call is None:
        raise TypeError(f"{name}: a tensor on a CUDA device; this function runs on the host only (docs/cuda.md "
                        f"lists the ops with a device path): copy it to the CPU first")
    return call.wrap(obj, name)


def _allocate(shape: tuple, dtype: str) -> DeviceTensor:
    """Called by the extension for an output not given: the inputs' framework allocates it."""
    call = current_call()
    if call is None:
        raise RuntimeError("internal: a device output outside a device call")
    return DeviceTensor(call.framework.empty(tuple(shape), dtype, call.index), call, _numpy_dtype_named(dtype), tuple(shape))


# Argument types that are never on a device: skipped without asking (the common host call).
_HOST_TYPES = frozenset({np.ndarray, float, int, bool, str, type(None), list, tuple, np.float16, np.float32, np.float64,
                         np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_})


def _first_on_device(args: tuple, kwargs: dict) -> Any:
    for a in args:
        if type(a) not in _HOST_TYPES and cuda_index(a) is not None:
            return a
    for a in kwargs.values():
        if type(a) not in _HOST_TYPES and cuda_index(a) is not None:
            return a
    return None


# ---- interpreter exit ------------------------------------------------------------------------------
# A device call runs Python code inside the extension's functions (the producers' __dlpack__, the
# framework's allocation). At interpreter exit a daemon thread that takes the GIL there is ended
# with pthread_exit (CPython 3.11-3.13), whose unwinding runs the extension's C++ destructors,
# which touch Python objects without the GIL while the main thread finalizes: a crash. So exit
# first lets the device calls in flight finish (atexit runs before finalization starts, while
# other threads can still run), and a thread that starts one after that is parked for good instead
# (blocked on a lock, without the GIL: finalization never meets it).
_calls_lock = threading.Condition()
_calls_in_flight = 0
_closing = False
_EXIT_WAIT_SECONDS = 10.0


def _enter_device_call() -> None:
    global _calls_in_flight
    with _calls_lock:
        closing = _closing
        if not closing:
            _calls_in_flight += 1
    if closing:
        threading.Event().wait()  # parked until the process ends


def _leave_device_call() -> None:
    global _calls_in_flight
    with _calls_lock:
        _calls_in_flight -= 1
        if _calls_in_flight == 0:
            _calls_lock.notify_all()


@atexit.register
def _drain_device_calls() -> None:
    global _closing
    with _calls_lock:
        _closing = True
        _calls_lock.wait_for(lambda: _calls_in_flight == 0, _EXIT_WAIT_SECONDS)


def device_path(fn: Callable) -> Callable:
    """Decorator of an op with a device path: a call with a CUDA tensor among its arguments runs on
    that device, on its framework's current stream (see the module's text); other calls are
    unchanged."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        first = _first_on_device(args, kwargs)
        if first is None or current_call() is not None:
            return fn(*args, **kwargs)
        _enter_device_call()
        try:
            device_call = DeviceCall(framework_of(first), cuda_index(first))
            _state.call = device_call
            _ext._device_call_enter(device_call.stream)
            try:
                result = fn(*args, **kwargs)
            finally:
                _ext._device_call_exit()
                _state.call = None
        finally:
            _leave_device_call()
        return result.to_user() if isinstance(result, DeviceTensor) else result

    return call
