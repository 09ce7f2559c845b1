"""AIMET's affine quantization (``aimet_torch.quantization.affine``, aimet-torch 2.42.0), bit-exact,
on numpy arrays (float16, float32, float64, ``ml_dtypes.bfloat16``).

Functional ops with AIMET's names, parameters and call forms::

    quantize(tensor, scale, offset, bitwidth, signed=False, block_size=None, *, out=None)
    quantize(tensor, scale, offset, *, num_steps, signed=False, block_size=None, out=None)
    quantize(tensor, scale, offset, qmin, qmax, block_size=None, *, out=None)  # qmin/qmax also by keyword
    quantize_dequantize(...)                                             # the same three forms
    dequantize(tensor, scale, offset, block_size=None, *, out=None)
    quantize_dequantize_grad(grad_output, tensor, scale, offset, <form>, block_size=None)
        -> (output, grad_tensor, grad_scale, grad_offset)

Beyond AIMET (whose functions ignore keywords they do not know): a keyword none of the forms
names (e.g. ``bitwdith=8``) is a TypeError, and ``out=`` (numpy arrays only) receives the result
as in the other families: it must have the result's dtype and shape (ValueError otherwise), may
overlap the inputs, and must be in native byte order like every family's ``out=``. Big-endian
inputs are read in native byte order.

``quantize_dequantize`` returns what AIMET returns for tensors that do not require grad: where
AIMET takes its no-grad shortcut (torch's fake quantization: no block size, one scale/offset value
or one per index of a single axis) that is the shortcut's result, which rounds ``x * (1/scale)``
rather than ``x / scale`` and maps NaN to the lowest level. ``quantize_dequantize_grad`` runs the
training path (tensor, scale and offset requiring grad) and its gradients.

Also AIMET's quantizer modules (``Quantize``, ``QuantizeDequantize``, ``Dequantize``,
``GroupedBlockQuantizeDequantize``; module ``quantizers``), their encodings (``AffineEncoding``,
``GroupedBlockEncoding``; module ``encodings``) and the encoding analyzers (``MinMaxEncodingAnalyzer``,
``PercentileEncodingAnalyzer``, ``SqnrEncodingAnalyzer``, ``TfEnhancedEncodingAnalyzer``; module
``analyzers``); the functional ops live in module ``functional``.

Every number is computed by polyquant's C++ core; these modules map AIMET's arguments onto it.
"""

from .analyzers import (
    MinMaxEncodingAnalyzer,
    PercentileEncodingAnalyzer,
    SqnrEncodingAnalyzer,
    StatisticsNotFoundError,
    TfEnhancedEncodingAnalyzer,
)
from .encodings import AffineEncoding, GroupedBlockEncoding
from .functional import (
    GridTypeError,
    TensorDtypeError,
    dequantize,
    dequantize_grad,
    quantize,
    quantize_dequantize,
    quantize_dequantize_grad,
    quantize_grad,
)
from .quantizers import Dequantize, GroupedBlockQuantizeDequantize, Quantize, QuantizeDequantize

__all__ = [
    "quantize",
    "quantize_dequantize",
    "dequantize",
    "quantize_grad",
    "quantize_dequantize_grad",
    "dequantize_grad",
    "MinMaxEncodingAnalyzer",
    "PercentileEncodingAnalyzer",
    "SqnrEncodingAnalyzer",
    "TfEnhancedEncodingAnalyzer",
    "StatisticsNotFoundError",
    "Quantize",
    "QuantizeDequantize",
    "GroupedBlockQuantizeDequantize",
    "Dequantize",
    "AffineEncoding",
    "GroupedBlockEncoding",
]
