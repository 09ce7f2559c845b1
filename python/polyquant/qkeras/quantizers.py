"""QKeras' quantizers ``quantized_bits``, ``quantized_relu``, ``quantized_linear`` and
``get_quantizer`` (see ``polyquant.qkeras``)."""

from __future__ import annotations

import ast
import functools
import math
import numbers
import re
from typing import Any

import numpy as np

from .. import _polyquant_ext as _ext
from .._common import operands
from .._common.convert import _as_array, as_out
from .._common import torch_autograd
from .._common.device import device_path

__all__ = ["quantized_bits", "quantized_relu", "quantized_linear", "get_quantizer"]

# The core's attribute structs (polyquant/qkeras.h), bound with read-write fields: each call fills
# them from the quantizer's resolved configuration and passes them with the tensors.
_qk = _ext.qkeras

_ALPHA_STRINGS = ["auto", "auto_po2"]
_DATA_FORMATS = ("channels_last", "channels_first")


def _pow2_float32(e: float) -> np.float32:
    """2^e in float32, as tf.pow(2.0, e)."""
    return np.float32(_ext_pow2(float(np.float32(e))))


def _ext_pow2(e: float) -> float:
    return float(np.power(np.float32(2.0), np.float32(e), dtype=np.float32))


def _number(value: Any, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name}: must be a finite number, got {v}")
    return v


def _seed(value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"seed: expected an int, got {type(value).__name__}")
    v = int(value)
    # The Philox key is 64 bits: a negative int64 seed is taken as its two's complement; a wider
    # one would silently alias another seed (2**64 + 1 drawing what 1 draws).
    if not -(2**63) <= v <= 2**64 - 1:
        raise ValueError(f"seed: {v} does not fit 64 bits; allowed: an integer from -2**63 to 2**64 - 1")
    return v & 0xFFFFFFFFFFFFFFFF


# The axes the core takes (a C int); which of them name a dimension of x is checked at call time
# (an int scale_axis must be in [-rank, rank - 1]; a list entry outside that names no dimension).
_AXIS_MIN, _AXIS_MAX = -(2**31), 2**31 - 1


def _axis(value: int) -> int:
    v = int(value)
    if not _AXIS_MIN <= v <= _AXIS_MAX:
        raise ValueError(f"scale_axis: {v} is out of range; an axis must be an int in [{_AXIS_MIN}, {_AXIS_MAX}] "
                         "(an int scale_axis names an axis of x: [-rank, rank - 1])")
    return v


def _scale_axis(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        raise TypeError("scale_axis: expected None, an int or a list of ints, got bool")
    if isinstance(value, (numbers.Integral, np.integer)):
        return _axis(value)
    if isinstance(value, (list, tuple)):
        axes = []
        for a in value:
            if isinstance(a, (bool, np.bool_)) or not isinstance(a, (numbers.Integral, np.integer)):
                raise TypeError(f"scale_axis: list entries must be ints, got {a!r}")
            axes.append(_axis(a))
        return axes
    raise TypeError(f"scale_axis: expected None, an int or a list of ints, got {type(value).__name__}")


def _arithmetic_flag(value: Any, name: str) -> bool:
    """symmetric / keep_negative: QKeras computes with them (bits - keep_negative,
    keep_negative * (-m + symmetric)), so only 0 and 1 (bool, int or float) mean what a flag means;
    bool() would turn 2, 0.5, "no" or None silently into True or False."""
    if not isinstance(value, (bool, np.bool_, numbers.Real, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a bool or 0/1, got {type(value).__name__} {value!r}")
    v = float(value)
    if v not in (0.0, 1.0):
        raise ValueError(f"{name}: expected a bool or 0/1, got {value!r}")
    return v == 1.0


def _settings(epsilon: Any, image_data_format: Any) -> tuple[float, str]:
    eps = _number(epsilon, "epsilon")
    if eps < 0:
        raise ValueError(f"epsilon: must be >= 0, got {eps}")
    if image_data_format not in _DATA_FORMATS:
        raise ValueError(f"image_data_format: must be one of {list(_DATA_FORMATS)}, got {image_data_format!r}")
    return eps, image_data_format


def _alpha_kind(kind: str) -> Any:
    """The core's Alpha for "none", "value", "auto" or "auto_po2"."""
    if kind not in ("none", "value", "auto", "auto_po2"):
        raise ValueError(f"alpha: unknown kind '{kind}'")
    return getattr(_qk.Alpha, kind)


def _scale_axis_attr(value: Any) -> Any:
    """A validated scale_axis (None, an int or a list of ints) as the core's ScaleAxis."""
    a = _qk.ScaleAxis()
    if value is None:
        return a
    if isinstance(value, int):
        a.kind, a.axes = _qk.ScaleAxis.Kind.int, [value]
    else:
        a.kind, a.axes = _qk.ScaleAxis.Kind.list, list(value)
    return a


def _elements_per_scale_attr(value: Any) -> Any:
    """elements_per_scale (None, an int or a list of ints) as the core's ElementsPerScale."""
    e = _qk.ElementsPerScale()
    if value is None:
        return e
    if isinstance(value, (list, tuple)):
        e.kind, e.values = _qk.ElementsPerScale.Kind.list, [int(v) for v in value]
    else:
        e.kind, e.values = _qk.ElementsPerScale.Kind.int, [int(value)]
    return e


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _integer_str(integer: Any) -> str:
    # QKeras prints a one-digit [k] as k (its regex for tf.Variable values).
    return re.sub(r"\[(\d)\]", r"\g<1>", str(integer))


def _alpha_array(alpha: Any) -> np.ndarray:
    """A numeric alpha as the float32 tensor TensorFlow converts it to."""
    try:
        a = np.asarray(alpha, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(f"alpha must be a string, an array, or None, not {type(alpha).__name__}") from e
    return a.astype(np.float32)


def _to_json(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class _Quantizer:
    """Shared state: build flag, qnoise handling, training steps and Keras settings."""

    def __init__(self, qnoise_factor: Any, var_name: Any, use_variables: Any, epsilon: Any, image_data_format: Any,
                 seed: Any) -> None:
        self.qnoise_factor = qnoise_factor
        _number(qnoise_factor, "qnoise_factor")
        self.var_name = var_name
        self.use_variables = use_variables
        self.epsilon, self.image_data_format = _settings(epsilon, image_data_format)
        self.seed = _seed(seed)
        self.built = False
        self._training_step = 0

    def build(self, var_name: Any = None, use_variables: bool = False) -> None:
        # QKeras turns qnoise_factor into a float32 tf.Variable here; polyquant keeps the number
        # and computes 1 - qnoise_factor in float32 as the variable would.
        self.built = True

    def update_qnoise_factor(self, qnoise_factor: Any) -> None:
        _number(qnoise_factor, "qnoise_factor")
        self.qnoise_factor = qnoise_factor

    def _set_trainable_parameter(self) -> None:
        pass

    def _common_config(self, training: bool, seed: Any) -> tuple[Any, Any, Any]:
        """(QNoise, Settings, Training) of one call; a training call advances the noise step."""
        if not isinstance(training, (bool, np.bool_)):
            raise TypeError(f"training: expected a bool, got {type(training).__name__}")
        q = float(np.float32(self.qnoise_factor)) if self.use_variables else float(self.qnoise_factor)
        step_seed = 0
        if training:
            base = self.seed if seed is None else _seed(seed)
            # Each training call draws fresh noise: the Philox key mixes the seed and the step.
            step_seed = (base * 0x9E3779B97F4A7C15 + self._training_step) & 0xFFFFFFFFFFFFFFFF
            self._training_step += 1
        qnoise = _qk.QNoise()
        qnoise.factor, qnoise.float32_variable = q, bool(self.use_variables)
        settings = _qk.Settings()
        settings.epsilon = float(self.epsilon)
        settings.image_data_format = (_qk.DataFormat.channels_first if self.image_data_format == "channels_first"
                                      else _qk.DataFormat.channels_last)
        t = _qk.Training()
        t.enabled, t.seed = bool(training), step_seed
        return qnoise, settings, t

    @staticmethod
    def _grad_output(g: Any) -> tuple[Any, int]:
        """(array, dtype code) of the upstream gradient of gradient(x, grad_output), or (None, -1):
        float32 or float16 as it is, bfloat16 as its storage (the core reads every one as float32;
        a bfloat16 device tensor is widened to float32 first, exactly)."""
        if g is None:
            return None, -1
        if torch_autograd.is_tensor(g):
            g = g.detach()
            if g.device.type != "cpu" and str(g.dtype) == "torch.bfloat16":
                g = g.float()
        return _core_operand(g, "grad_output")

    @staticmethod
    def _input(x: Any) -> tuple[Any, int]:
        """(array, dtype code) of x for the core."""
        if torch_autograd.is_tensor(x):
            x = x.detach()  # read, never differentiated here (autograd goes through _autograd)
        return _core_operand(x, "x")


def _core_operand(value: Any, name: str) -> tuple[Any, int]:
    """(array, dtype code or -1) for the core. QKeras casts its input to float32 (K.cast_to_floatx)
    before any op, so a bfloat16 x (an ml_dtypes array, a tf.Tensor or a CPU torch tensor alike) is
    quantized as its exact float32 widening; the core widens it inside its pass, so it travels as
    its uint16 storage with bfloat16's code (a CPU torch tensor viewed as one, not copied)."""
    if torch_autograd.is_tensor(value) and value.device.type == "cpu" and str(value.dtype) == "torch.bfloat16":
        import ml_dtypes  # noqa: PLC0415
        import torch  # noqa: PLC0415 (only for torch tensors)

        # numpy reads no bfloat16 through DLPack: the int16 bits, viewed as ml_dtypes' bfloat16
        value = np.from_dlpack(value.view(torch.int16)).view(ml_dtypes.bfloat16)
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype.name == "bfloat16":
        return operands.operand(value, name)
    return _as_array(value, name), -1


def _autograd(call):
    """A quantizer's __call__ with torch autograd: a torch tensor that requires grad (grad enabled)
    gives a tensor on its device whose backward is q.gradient(x, grad_output), the upstream gradient
    times QKeras' straight-through derivative in one core pass (_common/torch_autograd.py); other
    inputs are unchanged."""

    @functools.wraps(call)
    def wrapper(self, x: Any, training: bool = False, *, seed: Any = None, out: Any = None) -> Any:
        if not torch_autograd.requires_grad(x):
            return call(self, x, training, seed=seed, out=out)
        if out is not None:
            raise ValueError("out: not with an x that requires grad (autograd returns a new tensor; "
                             "call under torch.no_grad() to write into out)")
        return torch_autograd.elementwise(lambda t: call(self, t, training, seed=seed),
                                          lambda t, g: self.gradient(t, grad_output=g), x)

    return wrapper


# ---------------------------------------------------------------------------------------------
class quantized_bits(_Quantizer):  # noqa: N801  (QKeras' name)
    """QKeras' legacy fixed-point quantizer (see polyquant::qkeras::quantized_bits for the math)."""

    def __init__(self, bits: Any = 8, integer: Any = 0, symmetric: Any = 0, keep_negative: Any = True, alpha: Any = None,
                 use_stochastic_rounding: Any = False, scale_axis: Any = None, qnoise_factor: Any = 1.0,
                 var_name: Any = None, use_ste: Any = True, use_variables: Any = False, elements_per_scale: Any = None,
                 min_po2_exponent: Any = None, max_po2_exponent: Any = None, post_training_scale: Any = None, *,
                 epsilon: Any = 1e-7, image_data_format: str = "channels_last", seed: Any = 0) -> None:
        super().__init__(qnoise_factor, var_name, use_variables, epsilon, image_data_format, seed)
        _number(bits, "bits")
        _number(integer, "integer")
        self.bits = bits
        self.integer = integer
        self.symmetric = symmetric
        self.keep_negative = keep_negative
        self.alpha = alpha
        self.use_stochastic_rounding = use_stochastic_rounding
        self.post_training_scale = post_training_scale
        if isinstance(alpha, str):
            if alpha not in _ALPHA_STRINGS:
                raise ValueError(f"alpha: invalid alpha '{alpha}'; must be one of {_ALPHA_STRINGS}, a number, "
                                 "a list or array of numbers, or None")
            self.freeze_scale = False
            self.symmetric = True
            if post_training_scale is not None:
                self.scale = np.array(post_training_scale)
                self.freeze_scale = True
        else:
            if post_training_scale is not None:
                raise ValueError(f"alpha={alpha} doesn't support post_training_scale: {post_training_scale}")
            if alpha is not None:
                _alpha_array(alpha)
            self.scale = None
            self.freeze_scale = True
        self.scale_axis = _scale_axis(scale_axis)
        self.use_ste = use_ste
        self.elements_per_scale = elements_per_scale
        self.min_po2_exponent = min_po2_exponent
        self.max_po2_exponent = max_po2_exponent
        self._check_po2_options()

    def _check_po2_options(self) -> None:
        if not (isinstance(self.alpha, str) and self.alpha == "auto_po2"):  # alpha may be an array
            for name in ("elements_per_scale", "min_po2_exponent", "max_po2_exponent"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}: only supported with alpha='auto_po2' (alpha is {self.alpha!r})")
        eps = self.elements_per_scale
        if eps is not None:
            values = eps if isinstance(eps, (list, tuple)) else [eps]
            for v in values:
                if (isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, np.integer))
                        or not 0 < int(v) <= 2**63 - 1):
                    raise ValueError(f"elements_per_scale: expected a positive int (at most 2**63 - 1) or a list of "
                                     f"them, got {eps!r}")
        for name in ("min_po2_exponent", "max_po2_exponent"):
            v = getattr(self, name)
            if v is not None:
                _number(v, name)

    def _alpha_kind(self) -> str:
        if self.alpha is None:
            return "none"
        if isinstance(self.alpha, str):
            return self.alpha
        return "value"

    def _config(self, training: bool, seed: Any) -> tuple[Any, Any, Any]:
        """(QuantizedBitsAttrs, Settings, Training) of one call."""
        a = _qk.QuantizedBitsAttrs()
        a.bits = float(self.bits)
        a.integer = float(self.integer)
        a.symmetric = _arithmetic_flag(self.symmetric, "symmetric")
        a.keep_negative = _arithmetic_flag(self.keep_negative, "keep_negative")
        a.alpha = _alpha_kind(self._alpha_kind())
        a.use_stochastic_rounding = bool(self.use_stochastic_rounding)
        a.scale_axis = _scale_axis_attr(self.scale_axis)
        a.use_ste = bool(self.use_ste)
        a.frozen_scale = isinstance(self.alpha, str) and bool(self.freeze_scale)
        a.elements_per_scale = _elements_per_scale_attr(self.elements_per_scale)
        a.min_po2_exponent = _optional_float(self.min_po2_exponent)
        a.max_po2_exponent = _optional_float(self.max_po2_exponent)
        a.qnoise, settings, t = self._common_config(training, seed)
        return a, settings, t

    def _operand(self) -> Any:
        if isinstance(self.alpha, str):
            if self.freeze_scale:
                # astype(order="C"), not ascontiguousarray: that makes a 0-d scale 1-d, and the
                # broadcast then turns a 0-d input's result into shape (1,)
                return np.asarray(self.scale, dtype=np.float64).astype(np.float32, order="C")
            return None
        if self.alpha is None:
            return None
        return _alpha_array(self.alpha)

    @_autograd
    @device_path
    def __call__(self, x: Any, training: bool = False, *, seed: Any = None, out: Any = None) -> np.ndarray:
        if not self.built:
            self.build(var_name=self.var_name, use_variables=self.use_variables)
        self._check_po2_options()
        x, x_dtype = self._input(x)
        result, scale = _ext.qkeras.quantized_bits(x, self._operand(), *self._config(training, seed), False, as_out(out),
                                                   x_dtype=x_dtype)
        if isinstance(self.alpha, str):
            if not self.freeze_scale:
                self.scale = scale
        else:
            self.scale = 1.0 if self.alpha is None else self.alpha
        return result

    @device_path
    def gradient(self, x: Any, grad_output: Any = None) -> np.ndarray:
        """d q(x) / dx of QKeras' graph: 1 with use_ste, else 1 - qnoise_factor (float32); with
        grad_output (x's result shape), grad_output times it: the backward's product."""
        (x, x_dtype), (g, g_dtype) = self._input(x), self._grad_output(grad_output)
        result, _ = _ext.qkeras.quantized_bits(x, self._operand(), *self._config(False, None), True, None, grad_output=g,
                                               x_dtype=x_dtype, grad_output_dtype=g_dtype)
        return result

    def __str__(self) -> str:
        flags = [str(self.bits), _integer_str(self.integer), str(int(self.symmetric))]
        if not self.keep_negative:
            flags.append("keep_negative=False")
        alpha = self.alpha
        truthy = (alpha is not None and not isinstance(alpha, (list, tuple, np.ndarray)) and bool(alpha)) or \
                 (isinstance(alpha, (list, tuple)) and len(alpha) > 0) or \
                 (isinstance(alpha, np.ndarray) and alpha.size > 0)
        if truthy:
            text = "'" + alpha + "'" if isinstance(alpha, str) else str(alpha)
            flags.append("alpha=" + text)
        if self.use_stochastic_rounding:
            flags.append("use_stochastic_rounding=" + str(int(self.use_stochastic_rounding)))
        return "quantized_bits(" + ",".join(flags) + ")"

    def __repr__(self) -> str:
        return str(self)

    def _set_trainable_parameter(self) -> None:
        if self.alpha is None:
            self.alpha = "auto_po2"
            self.freeze_scale = False
            self.symmetric = True

    def max(self) -> Any:
        if self.bits - self.keep_negative > 0:
            return max(1.0, np.array(_pow2_float32(self.integer), dtype=np.float32))
        return 1.0

    def min(self) -> Any:
        if not self.keep_negative:
            return 0.0
        if self.bits - self.keep_negative > 0:
            return -max(1.0, np.array(_pow2_float32(self.integer), dtype=np.float32))
        return -1.0

    def range(self) -> np.ndarray:
        if self.symmetric != 0 or not self.keep_negative or not (self.alpha is None or (not isinstance(self.alpha, str) and np.all(np.asarray(self.alpha) == 1.0))):
            raise ValueError("range(): only defined for symmetric=0, keep_negative=True and alpha None or 1.0")
        bits = int(self.bits)
        x = np.asarray(range(2**bits), dtype=np.float32)
        half = 2 ** (bits - 1)
        p_and_n = np.where(x >= half, (x - half) - half, x)
        exponent = (np.float32(-self.bits) + np.float32(self.integer)) + np.float32(1.0)
        return p_and_n * np.array(_pow2_float32(exponent), dtype=np.float32)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "quantized_bits":
        config = dict(config)
        if config.get("post_training_scale") is not None:
            config["post_training_scale"] = np.array(config["post_training_scale"])
        return cls(**config)

    def get_config(self) -> dict[str, Any]:
        pts = self.post_training_scale
        return {
            "bits": _to_json(self.bits),
            "integer": _to_json(self.integer),
            "symmetric": _to_json(self.symmetric),
            "alpha": _to_json(self.alpha),
            "keep_negative": _to_json(self.keep_negative),
            "use_stochastic_rounding": _to_json(self.use_stochastic_rounding),
            "qnoise_factor": _to_json(self.qnoise_factor),
            "post_training_scale": None if pts is None else np.asarray(pts).tolist(),
        }


# ---------------------------------------------------------------------------------------------
class quantized_relu(_Quantizer):  # noqa: N801
    """QKeras' quantized ReLU (see polyquant::qkeras::quantized_relu for the math)."""

    def __init__(self, bits: Any = 8, integer: Any = 0, use_sigmoid: Any = 0, negative_slope: Any = 0.0,
                 use_stochastic_rounding: Any = False, relu_upper_bound: Any = None, is_quantized_clip: Any = True,
                 qnoise_factor: Any = 1.0, var_name: Any = None, use_ste: Any = True, use_variables: Any = False,
                 enable_fast_inference: Any = False, *, epsilon: Any = 1e-7, image_data_format: str = "channels_last",
                 seed: Any = 0) -> None:
        super().__init__(qnoise_factor, var_name, use_variables, epsilon, image_data_format, seed)
        _number(bits, "bits")
        _number(integer, "integer")
        ns = _number(negative_slope, "negative_slope")
        if ns < 0:
            raise ValueError(f"negative_slope: must be >= 0, got {negative_slope}")
        if ns != 0 and math.log2(ns) % 1 != 0:
            raise ValueError(f"negative_slope: must be 0 or a power of two (0.125, 0.25, 0.5, ...), got {negative_slope}")
        if ns != 0 and abs(math.log2(ns)) > 126:
            raise ValueError(f"negative_slope: a power of two between 2**-126 and 2**126 (float32), got {negative_slope}")
        if relu_upper_bound is not None:
            _number(relu_upper_bound, "relu_upper_bound")
        self.bits = bits
        self.integer = integer
        self.use_sigmoid = use_sigmoid
        self.negative_slope = negative_slope
        self.use_stochastic_rounding = use_stochastic_rounding
        self.relu_upper_bound = relu_upper_bound
        self.is_quantized_clip = is_quantized_clip
        self.use_ste = use_ste
        self.enable_fast_inference = enable_fast_inference

    def _config(self, training: bool, seed: Any) -> tuple[Any, Any]:
        """(QuantizedReluAttrs, Training) of one call (quantized_relu reads no Keras setting)."""
        a = _qk.QuantizedReluAttrs()
        a.bits = float(self.bits)
        a.integer = float(self.integer)
        a.use_sigmoid = bool(self.use_sigmoid)
        a.negative_slope = float(self.negative_slope)
        a.use_stochastic_rounding = bool(self.use_stochastic_rounding)
        a.relu_upper_bound = _optional_float(self.relu_upper_bound)
        a.is_quantized_clip = bool(self.is_quantized_clip)
        a.use_ste = bool(self.use_ste)
        a.enable_fast_inference = bool(self.enable_fast_inference)
        a.qnoise, _, t = self._common_config(training, seed)
        return a, t

    @_autograd
    @device_path
    def __call__(self, x: Any, training: bool = False, *, seed: Any = None, out: Any = None) -> np.ndarray:
        if not self.built:
            self.build(var_name=self.var_name, use_variables=self.use_variables)
        x, x_dtype = self._input(x)
        return _ext.qkeras.quantized_relu(x, *self._config(training, seed), False, as_out(out), x_dtype=x_dtype)

    @device_path
    def gradient(self, x: Any, grad_output: Any = None) -> np.ndarray:
        """d q(x) / dx of QKeras' graph: the derivative of the unquantized companion (1 above 0;
        negative_slope, or 0, at and below 0; 0 above the clip or upper bound), times
        1 - qnoise_factor without use_ste; with grad_output, grad_output times it."""
        (x, x_dtype), (g, g_dtype) = self._input(x), self._grad_output(grad_output)
        return _ext.qkeras.quantized_relu(x, *self._config(False, None), True, None, grad_output=g, x_dtype=x_dtype,
                                          grad_output_dtype=g_dtype)

    def __str__(self) -> str:
        flags = [str(self.bits), _integer_str(self.integer)]
        if self.use_sigmoid or self.use_stochastic_rounding:
            flags.append(str(int(self.use_sigmoid)))
        if self.negative_slope:
            flags.append(str(self.negative_slope))
        if self.use_stochastic_rounding:
            flags.append(str(int(self.use_stochastic_rounding)))
        return "quantized_relu(" + ",".join(flags) + ")"

    def __repr__(self) -> str:
        return str(self)

    def max(self) -> Any:
        if self.bits - (self.negative_slope != 0.0) > 0:
            return max(1.0, np.array(_pow2_float32(self.integer), dtype=np.float32))
        return 1.0

    def min(self) -> Any:
        if self.negative_slope == 0.0:
            return 0.0
        if self.bits - 1 > 0:
            return min(-0.0, -self.negative_slope * np.array(_pow2_float32(self.integer), dtype=np.float32))
        return -1.0

    def range(self) -> np.ndarray:
        if self.use_sigmoid != 0 or self.negative_slope != 0:
            raise ValueError("range(): only defined for use_sigmoid=0 and negative_slope=0")
        x = np.asarray(range(2 ** int(self.bits)))
        exponent = np.float32(-self.bits) + np.float32(self.integer)
        return x * np.array(_pow2_float32(exponent), dtype=np.float32)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "quantized_relu":
        return cls(**config)

    def get_config(self) -> dict[str, Any]:
        return {
            "bits": _to_json(self.bits),
            "integer": _to_json(self.integer),
            "use_sigmoid": _to_json(self.use_sigmoid),
            "negative_slope": _to_json(self.negative_slope),
            "use_stochastic_rounding": _to_json(self.use_stochastic_rounding),
            "relu_upper_bound": _to_json(self.relu_upper_bound),
            "qnoise_factor": _to_json(self.qnoise_factor),
        }


# ---------------------------------------------------------------------------------------------
class quantized_linear(_Quantizer):  # noqa: N801
    """QKeras' linear quantizer (see polyquant::qkeras::quantized_linear for the math)."""

    ALPHA_STRING_OPTIONS = ("auto", "auto_po2")

    def __init__(self, bits: Any = 8, integer: Any = 0, symmetric: Any = 1, keep_negative: Any = True, alpha: Any = None,
                 use_stochastic_rounding: Any = False, scale_axis: Any = None, qnoise_factor: Any = 1.0,
                 var_name: Any = None, use_variables: Any = False, *, epsilon: Any = 1e-7,
                 image_data_format: str = "channels_last", seed: Any = 0) -> None:
        super().__init__(qnoise_factor, var_name, use_variables, epsilon, image_data_format, seed)
        _number(bits, "bits")
        _number(integer, "integer")
        if bits <= 0:
            raise ValueError(f"bits: Bit count {bits} must be positive")
        if isinstance(alpha, str):
            if alpha not in self.ALPHA_STRING_OPTIONS:
                raise ValueError(f"alpha: invalid alpha '{alpha}' for auto alpha computation. "
                                 f"Must be one of {list(self.ALPHA_STRING_OPTIONS)}")
        elif alpha is not None:
            _alpha_array(alpha)
        self._bits = bits
        self._integer = integer
        self._keep_negative = keep_negative
        self._use_stochastic_rounding = use_stochastic_rounding
        self._scale_axis = _scale_axis(scale_axis)
        self.alpha = alpha
        self.symmetric = symmetric
        self.quantization_scale = self.default_quantization_scale

    bits = property(lambda self: self._bits)
    integer = property(lambda self: self._integer)
    keep_negative = property(lambda self: self._keep_negative)
    use_stochastic_rounding = property(lambda self: self._use_stochastic_rounding)
    scale_axis = property(lambda self: self._scale_axis)

    @property
    def auto_alpha(self) -> bool:
        return isinstance(self.alpha, str)

    @property
    def use_sign_function(self) -> bool:
        return bool((self.bits == 1.0) and self.keep_negative)

    @property
    def data_type_scale(self) -> np.float32:
        e = (np.float32(self.integer) - np.float32(self.bits)) + np.float32(bool(self.keep_negative))
        return _pow2_float32(e)

    @property
    def default_quantization_scale(self) -> Any:
        if self.alpha is not None and not self.auto_alpha:
            return _alpha_array(self.alpha) * self.data_type_scale
        return self.data_type_scale

    @property
    def scale(self) -> Any:
        return np.asarray(self.quantization_scale, dtype=np.float32) / self.data_type_scale

    def get_clip_bounds(self) -> tuple[np.float32, np.float32]:
        if self.use_sign_function:
            return np.float32(-0.5), np.float32(0.5)
        u = _pow2_float32(self.bits - self.keep_negative)
        clip_min = np.float32(bool(self.keep_negative)) * (-u + np.float32(self.symmetric))
        clip_max = u - np.float32(1.0)
        return np.float32(clip_min), np.float32(clip_max)

    def _config(self, training: bool, seed: Any) -> tuple[Any, Any, Any]:
        """(QuantizedLinearAttrs, Settings, Training) of one call."""
        a = _qk.QuantizedLinearAttrs()
        a.bits = float(self.bits)
        a.integer = float(self.integer)
        a.symmetric = _arithmetic_flag(self.symmetric, "symmetric")
        a.keep_negative = _arithmetic_flag(self.keep_negative, "keep_negative")
        a.alpha = _alpha_kind("none" if self.alpha is None else self.alpha if self.auto_alpha else "value")
        a.use_stochastic_rounding = bool(self.use_stochastic_rounding)
        a.scale_axis = _scale_axis_attr(self.scale_axis)
        a.qnoise, settings, t = self._common_config(training, seed)
        return a, settings, t

    def _operand(self) -> Any:
        if self.alpha is None or self.auto_alpha:
            return None
        return _alpha_array(self.alpha)

    @_autograd
    @device_path
    def __call__(self, x: Any, training: bool = False, *, seed: Any = None, out: Any = None) -> np.ndarray:
        if not self.built:
            self.build(var_name=self.var_name, use_variables=self.use_variables)
        x, x_dtype = self._input(x)
        result, qs = _ext.qkeras.quantized_linear(x, self._operand(), *self._config(training, seed), False, as_out(out),
                                                  x_dtype=x_dtype)
        self.quantization_scale = qs
        return result

    @device_path
    def gradient(self, x: Any, grad_output: Any = None) -> np.ndarray:
        """d q(x) / dx = (1 - qnoise_factor) + qnoise_factor * [clip_min <= x / s <= clip_max]; with
        grad_output, grad_output times it."""
        (x, x_dtype), (g, g_dtype) = self._input(x), self._grad_output(grad_output)
        result, _ = _ext.qkeras.quantized_linear(x, self._operand(), *self._config(False, None), True, None,
                                                 grad_output=g, x_dtype=x_dtype, grad_output_dtype=g_dtype)
        return result

    def max(self) -> Any:
        _, clip_max = self.get_clip_bounds()
        return clip_max * np.asarray(self.quantization_scale, dtype=np.float32)

    def min(self) -> Any:
        clip_min, _ = self.get_clip_bounds()
        return clip_min * np.asarray(self.quantization_scale, dtype=np.float32)

    def range(self) -> np.ndarray:
        """Every representable value: s * [0, 1, ..., clip_max, clip_min, ..., -1] (the sign
        function: [max, min]), broadcast as QKeras does; where QKeras cannot broadcast a per-channel
        scale against the levels, the levels form a last axis."""
        qs = np.asarray(self.quantization_scale, dtype=np.float32)
        if self.use_sign_function:
            return np.asarray([self.max(), self.min()], dtype=np.float32)
        clip_min, clip_max = self.get_clip_bounds()
        levels = np.concatenate([np.arange(int(clip_max) + 1), np.arange(int(clip_min), 0)]).astype(np.float32)
        with np.errstate(all="ignore"):  # TensorFlow multiplies an inf scale by 0 silently
            try:
                np.broadcast_shapes(qs.shape, levels.shape)
            except ValueError:
                return np.multiply.outer(qs, levels)  # QKeras cannot broadcast these: levels on a last axis
            return qs * levels  # QKeras: quantization_scale * levels, numpy broadcasting

    def __str__(self) -> str:
        flags = [str(int(self.bits)), str(int(self.integer)), str(int(self.symmetric))]
        if not self.keep_negative:
            flags.append("keep_negative=False")
        if self.auto_alpha:
            flags.append("alpha='" + self.alpha + "'")
        elif self.alpha is not None:
            flags.append("alpha=" + str(np.array(self.alpha)))
        if self.use_stochastic_rounding:
            flags.append("use_stochastic_rounding=" + str(int(self.use_stochastic_rounding)))
        return "quantized_linear(" + ",".join(flags) + ")"

    def __repr__(self) -> str:
        return str(self)

    def _set_trainable_parameter(self) -> None:
        if self.alpha is None:
            self.alpha = "auto_po2"
            self.symmetric = True

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "quantized_linear":
        return cls(**config)

    def get_config(self) -> dict[str, Any]:
        return {
            "bits": _to_json(self.bits),
            "integer": _to_json(self.integer),
            "symmetric": _to_json(self.symmetric),
            "alpha": _to_json(self.alpha),
            "keep_negative": _to_json(self.keep_negative),
            "use_stochastic_rounding": _to_json(self.use_stochastic_rounding),
            "qnoise_factor": _to_json(self.qnoise_factor),
        }


_QUANTIZERS = {"quantized_bits": quantized_bits, "quantized_relu": quantized_relu, "quantized_linear": quantized_linear}


def get_quantizer(identifier: Any) -> Any:
    """A quantizer from its string form ("quantized_bits(8,0,1)"), a config dict
    ({"class_name": ..., "config": {...}}) or itself, as QKeras' get_quantizer for these three."""
    if identifier is None or isinstance(identifier, _Quantizer):
        return identifier
    if isinstance(identifier, dict):
        return _QUANTIZERS[identifier["class_name"]].from_config(identifier["config"])
    if isinstance(identifier, str):
        m = re.fullmatch(r"\s*(\w+)\s*\((.*)\)\s*", identifier)
        name = m.group(1) if m else identifier.strip()
        if name not in _QUANTIZERS:
            raise ValueError(f"identifier: unknown quantizer {identifier!r}; known: {sorted(_QUANTIZERS)}")
        if not m:
            return _QUANTIZERS[name]()
        call = ast.parse(f"f({m.group(2)})", mode="eval").body
        args = [ast.literal_eval(a) for a in call.args]  # type: ignore[attr-defined]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}  # type: ignore[attr-defined]
        return _QUANTIZERS[name](*args, **kwargs)
    raise TypeError(f"identifier: expected a string, dict or quantizer, got {type(identifier).__name__}")
