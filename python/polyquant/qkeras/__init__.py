"""QKeras quantizers, bit-exact with QKeras (google/qkeras 78ea90fc) on TensorFlow CPU: a drop-in.

``quantized_bits``, ``quantized_relu`` and ``quantized_linear`` are classes built with QKeras'
keyword names, order and defaults and called as ``q(x)``; code switches by changing the import::

    from polyquant.qkeras import quantized_bits, quantized_relu, quantized_linear
    q = quantized_bits(8, 0, alpha="auto_po2")
    y = q(weights)           # numpy float32, same shape; q.scale holds the per-channel scale

Inputs may be numpy arrays, nested sequences, or any ``__dlpack__``/``__array__`` object of any
dtype and strides; like QKeras (``K.cast_to_floatx``) they are rounded to float32, and the result
is a float32 numpy array. After a call, ``scale`` (and ``quantization_scale``,
``data_type_scale``, ``get_clip_bounds()`` on ``quantized_linear``) are numpy arrays with QKeras'
kept-dimension shapes; ``min()``, ``max()``, ``range()``, ``get_config()`` / ``from_config()`` and
``str(q)`` are QKeras'.

Keras globals QKeras reads are explicit keyword-only parameters: ``epsilon`` (1e-7) and
``image_data_format`` ("channels_last"). Training: ``q(x, training=True)`` is QKeras with the Keras
learning phase 1, i.e. stochastic rounding where ``use_stochastic_rounding`` asks for it, drawn by
Philox from the quantizer's ``seed`` (keyword-only, default 0), the call's step number and each
element's index (reproducible; independent of threads and kernel sets). ``q.gradient(x)`` is the
straight-through gradient d q(x) / dx as QKeras' graph defines it.

Departures from QKeras (each where QKeras fails or is inconsistent) are listed in docs/qkeras.md.
"""

from .quantizers import get_quantizer, quantized_bits, quantized_linear, quantized_relu

__all__ = ["quantized_bits", "quantized_relu", "quantized_linear", "get_quantizer"]
