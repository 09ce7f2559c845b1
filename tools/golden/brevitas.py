"""Export small Brevitas networks to QONNX for polyquant's tests (tests/data/brevitas/).

Not run by CI (torch and Brevitas are big): CI runs the committed models. To regenerate, in a
virtual environment of its own (Python 3.10+; the default package index serves torch with CUDA
libraries, which work on the CPU too):

    python3 -m venv /tmp/brevitas-venv
    /tmp/brevitas-venv/bin/pip install torch==2.6.0 brevitas==0.13.4 onnx==1.17.0 onnxoptimizer \
        onnxscript qonnx==1.0.0 "numpy<2" onnxruntime
    /tmp/brevitas-venv/bin/python -m tools.golden.brevitas      # from the repository root

For each network NAME it writes NAME.onnx (the QONNX export as Brevitas writes it, not cleaned up:
raw exports are what users feed polyquant), NAME.input.npy (a deterministic input) and
NAME.expected.npy (qonnx 1.0.0's execute_onnx output on that input, after qonnx's shape
inference, which execute_onnx needs). The networks:

* conv_perchannel: 8-bit unsigned input, Conv with per-output-channel 4-bit weights, unsigned
  QuantReLU, QuantLinear with per-channel weights (Transpose(Quant(W)) -> MatMul in the export,
  which ONNX Runtime fuses into FusedMatMul unless told not to).
* mlp_perchannel: batch 1; QuantLinear 256 -> 32 with per-channel 5-bit weights, unsigned 4-bit
  QuantReLU, QuantLinear 32 -> 256, unsigned 8-bit QuantReLU, QuantLinear 256 -> 16 whose MatMul is
  the output: a long dot product in the batch-1 (GEMV) path, where ONNX Runtime's FusedMatMul
  (Transpose+MatMul, its "extended" optimization level) sums in another order than the MatMul
  qonnx runs, and the outputs differ in the last bits.
* truncavgpool: QuantConv2d -> QuantReLU -> TruncAvgPool2d (a Trunc node) -> QuantLinear.
* bipolar: binary weights and activations (BipolarQuant) in a small MLP.
* fp8: OCP FP8 E4M3 activations (per tensor) and weights (per channel), FloatQuant nodes, in a
  conv + linear net.
"""

from __future__ import annotations

if not __package__:  # run as a script, tools/golden would shadow the reference's own packages
    raise SystemExit("run from the repository root: python -m tools.golden.brevitas")

import argparse
import warnings
from pathlib import Path

import numpy as np

from .common import data_dir

OUT = data_dir("brevitas")
SEED = 20260213


def networks():
    import torch
    from brevitas import nn as qnn
    from brevitas.quant import (Int8ActPerTensorFloat, Int8WeightPerChannelFloat, SignedBinaryActPerTensorConst,
                                SignedBinaryWeightPerTensorConst, Uint8ActPerTensorFloat)
    from brevitas.quant.float_quant_ocp import Fp8e4m3OCPActPerTensorFloat as Fp8e4m3ActPerTensorFloat
    from brevitas.quant.float_quant_ocp import Fp8e4m3OCPWeightPerChannelFloat as Fp8e4m3WeightPerTensorFloat

    class ConvPerChannel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = qnn.QuantIdentity(act_quant=Uint8ActPerTensorFloat, return_quant_tensor=True)
            self.conv = qnn.QuantConv2d(3, 8, 3, padding=1, bias=False, weight_quant=Int8WeightPerChannelFloat,
                                        weight_bit_width=4, return_quant_tensor=True)
            self.relu = qnn.QuantReLU(bit_width=4, return_quant_tensor=True)
            self.fc = qnn.QuantLinear(8 * 6 * 6, 10, bias=True, weight_quant=Int8WeightPerChannelFloat,
                                      weight_bit_width=6)

        def forward(self, x):
            x = self.relu(self.conv(self.inp(x)))
            return self.fc(x.flatten(1))

    class TruncAvgPool(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = qnn.QuantIdentity(act_quant=Int8ActPerTensorFloat, return_quant_tensor=True)
            self.conv = qnn.QuantConv2d(3, 6, 3, bias=False, weight_bit_width=4, return_quant_tensor=True)
            self.relu = qnn.QuantReLU(bit_width=6, return_quant_tensor=True)
            self.pool = qnn.TruncAvgPool2d(kernel_size=2, stride=2, bit_width=6, return_quant_tensor=True)
            self.fc = qnn.QuantLinear(6 * 3 * 3, 5, bias=False, weight_bit_width=4)

        def forward(self, x):
            x = self.pool(self.relu(self.conv(self.inp(x))))
            return self.fc(x.flatten(1))

    class Bipolar(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = qnn.QuantIdentity(act_quant=SignedBinaryActPerTensorConst, return_quant_tensor=True)
            self.fc1 = qnn.QuantLinear(32, 24, bias=False, weight_quant=SignedBinaryWeightPerTensorConst)
            self.act = qnn.QuantIdentity(act_quant=SignedBinaryActPerTensorConst, return_quant_tensor=True)
            self.fc2 = qnn.QuantLinear(24, 4, bias=False, weight_quant=SignedBinaryWeightPerTensorConst)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(self.inp(x))))

    class Fp8(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = qnn.QuantIdentity(act_quant=Fp8e4m3ActPerTensorFloat, return_quant_tensor=True)
            self.conv = qnn.QuantConv2d(2, 4, 3, bias=False, weight_quant=Fp8e4m3WeightPerTensorFloat,
                                        input_quant=None, return_quant_tensor=False)
            self.act = qnn.QuantIdentity(act_quant=Fp8e4m3ActPerTensorFloat, return_quant_tensor=True)
            self.fc = qnn.QuantLinear(4 * 4 * 4, 6, bias=False, weight_quant=Fp8e4m3WeightPerTensorFloat)

        def forward(self, x):
            x = self.act(torch.relu(self.conv(self.inp(x))))
            return self.fc(x.flatten(1))

    class MlpPerChannel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = qnn.QuantIdentity(act_quant=Int8ActPerTensorFloat, return_quant_tensor=True)
            self.fc1 = qnn.QuantLinear(256, 32, bias=False, weight_quant=Int8WeightPerChannelFloat,
                                       weight_bit_width=5, return_quant_tensor=True)
            self.relu = qnn.QuantReLU(act_quant=Uint8ActPerTensorFloat, bit_width=4, return_quant_tensor=True)
            self.fc2 = qnn.QuantLinear(32, 256, bias=False, weight_quant=Int8WeightPerChannelFloat,
                                       weight_bit_width=5, return_quant_tensor=True)
            self.out = qnn.QuantReLU(act_quant=Uint8ActPerTensorFloat, bit_width=8, return_quant_tensor=False)
            self.fc3 = qnn.QuantLinear(256, 16, bias=False, weight_quant=Int8WeightPerChannelFloat)

        def forward(self, x):
            return self.fc3(self.out(self.fc2(self.relu(self.fc1(self.inp(x))))))

    return {
        "mlp_perchannel": (MlpPerChannel, (1, 256)),  # batch 1: the GEMV path
        "conv_perchannel": (ConvPerChannel, (2, 3, 6, 6)),
        "truncavgpool": (TruncAvgPool, (2, 3, 8, 8)),
        "bipolar": (Bipolar, (4, 32)),
        "fp8": (Fp8, (2, 2, 6, 6)),
    }


def qonnx_reference(path: Path, x: np.ndarray) -> np.ndarray:
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    model = ModelWrapper(str(path)).transform(InferShapes())
    (name,) = [i.name for i in model.graph.input if model.get_initializer(i.name) is None]
    outputs = execute_onnx(model, {name: x})
    (y,) = outputs.values()
    return np.asarray(y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    import torch
    from brevitas.export import export_qonnx

    args.out.mkdir(parents=True, exist_ok=True)
    for index, (name, (cls, shape)) in enumerate(networks().items()):
        torch.manual_seed(SEED + index)
        net = cls()
        # A few forward passes in training mode let the activation quantizers' statistics settle
        # (scales that are not powers of two, as in trained networks).
        rng = np.random.default_rng(SEED + index)
        net.train()
        with torch.no_grad():
            for _ in range(3):
                net(torch.from_numpy(rng.standard_normal(shape).astype(np.float32)))
        net.eval()
        x = rng.standard_normal(shape).astype(np.float32)
        path = args.out / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            export_qonnx(net, args=torch.from_numpy(x), export_path=str(path))
        np.save(args.out / f"{name}.input.npy", x)
        with np.errstate(all="ignore"):
            expected = qonnx_reference(path, x)
        np.save(args.out / f"{name}.expected.npy", expected)
        with torch.no_grad():
            torch_out = net(torch.from_numpy(x))
        torch_out = getattr(torch_out, "value", torch_out).numpy()
        print(f"{name}: {path.stat().st_size} bytes, output {expected.dtype}{list(expected.shape)}, "
              f"max |qonnx - torch| = {np.abs(expected - torch_out).max():.3g}")


if __name__ == "__main__":
    main()
