"""Golden data for polyquant's AIMET encoding analyzers, from aimet-torch 2.42.0 itself.

Run from the repository root with an environment that has aimet-torch 2.42.0 and torch (CPU):

    python -m tools.golden.aimet_analyzers [OUT_DIR]      # default tests/data/aimet_analyzers

Writes index.json (one record per case: analyzer, its arguments, the batches' array keys, the
requested encodings and AIMET's results or error class) and arrays.npz (inputs and outputs;
bfloat16 stored as uint16 bits). The replay test is tests/python/aimet/test_golden_analyzers.py.
"""

if not __package__:  # run as a script, tools/golden would shadow the reference's own packages
    raise SystemExit("run from the repository root: python -m tools.golden.aimet_analyzers")

import json
import os
import sys
import warnings

import numpy as np
import torch

from aimet_torch.quantization.encoding_analyzer import (
    MinMaxEncodingAnalyzer,
    PercentileEncodingAnalyzer,
    SqnrEncodingAnalyzer,
    TfEnhancedEncodingAnalyzer,
)

from .common import data_dir

warnings.filterwarnings("ignore")
torch.set_num_threads(1)

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


def to_np(t):
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def make_batches(rng, kind, shape, n_batches, dtype):
    out = []
    for b in range(n_batches):
        if kind == "normal":
            x = rng.standard_normal(shape) * (1 + b)  # the range grows
        elif kind == "uniform_pos":
            x = rng.uniform(0, 6 * (1 + 0.5 * b), shape)
        elif kind == "shifted":
            x = rng.standard_normal(shape) * 0.1 + 3 - 2 * b
        elif kind == "special":
            x = rng.standard_normal(shape)
            flat = x.reshape(-1)
            flat[rng.integers(0, flat.size, 3)] = [np.inf, -np.inf, 0.0]
            flat[rng.integers(0, flat.size)] = -0.0
        elif kind == "nan":
            x = rng.standard_normal(shape)
            x.reshape(-1)[rng.integers(0, x.size)] = np.nan
        elif kind == "const":
            x = np.full(shape, 2.5 if b == 0 else 2.5 + b)
        elif kind == "zeros":
            x = np.zeros(shape)
        elif kind == "tiny":
            x = rng.standard_normal(shape) * 1e-6
        elif kind == "subnormal":
            x = rng.standard_normal(shape) * 1e-40
        elif kind == "negative":
            x = -np.abs(rng.standard_normal(shape)) * (1 + b)
        elif kind == "wide":
            x = rng.standard_normal(shape) * 1e4 * (1 + 3 * b)
        elif kind in ("signed_zeros_pos", "signed_zeros_neg"):
            # +0 and -0 mixed with values of one sign: the min (max) is a zero whose sign depends on
            # torch's reduction lanes, and the candidate grids' zeros on its tie rules
            sign = 1.0 if kind == "signed_zeros_pos" else -1.0
            x = sign * np.abs(rng.standard_normal(shape)) * (1 + b)
            flat = x.reshape(-1)
            zeros = rng.random(flat.size) < 0.4
            flat[zeros] = np.where(rng.random(int(zeros.sum())) < 0.5, 0.0, -0.0)
        else:
            raise ValueError(kind)
        out.append(torch.tensor(x, dtype=torch.float64).to(DTYPES[dtype]))
    return out


def make_analyzer(name, args):
    shape = tuple(args["shape"])
    block = None if args.get("block_size") is None else tuple(args["block_size"])
    if name == "minmax":
        return MinMaxEncodingAnalyzer(shape, block_size=block)
    if name == "percentile":
        return PercentileEncodingAnalyzer(shape, num_bins=args["num_bins"], percentile=args["percentile"], block_size=block)
    if name == "sqnr":
        kw = {k: args[k] for k in ("asymmetric_delta_candidates", "symmetric_delta_candidates", "offset_candidates",
                                   "max_parallelism", "gamma", "histogram_growth_limit") if k in args}
        return SqnrEncodingAnalyzer(shape, num_bins=args["num_bins"], block_size=block, **kw)
    if name == "tfenhanced":
        return TfEnhancedEncodingAnalyzer(shape, block_size=block)
    raise ValueError(name)


LAYOUTS = [
    # (input shape, analyzer shape, block size)
    ((131,), (1,), None),
    ((6, 24), (6, 1), None),
    ((24, 5), (5,), None),       # per channel on the last axis (AIMET's chunked merge quirk)
    ((3, 4, 12), (4, 1), None),
    ((4, 48), (4, 3), (1, 16)),  # blockwise
    ((2, 3, 16), (3, 2), (1, 8)),
]


def add_case(case, name, args, dtype, kind, batches, picks, index, arrays):
    """Runs one analyzer over `batches` and records its encodings for `picks` (num_steps, symmetric)."""
    rec = {"id": case, "analyzer": name, "args": args, "dtype": dtype, "kind": kind, "batches": [], "results": []}
    for b, x in enumerate(batches):
        key = f"c{case}_x{b}"
        arrays[key] = to_np(x)
        rec["batches"].append(key)
    try:
        an = make_analyzer(name, args)
    except Exception as e:  # noqa: BLE001
        rec["construct_error"] = type(e).__name__
        index.append(rec)
        return
    err = None
    for x in batches:
        try:
            an.update_stats(x)
        except Exception as e:  # noqa: BLE001
            err = type(e).__name__
            break
    rec["update_error"] = err
    for n, sym in picks:
        r = {"num_steps": n, "symmetric": sym}
        if err is None:
            try:
                mn, mx = an.compute_encodings(n, sym)
                r["dtype"] = str(mn.dtype).replace("torch.", "")
                arrays[f"c{case}_min_{n}_{int(sym)}"] = to_np(mn)
                arrays[f"c{case}_max_{n}_{int(sym)}"] = to_np(mx)
            except Exception as e:  # noqa: BLE001
                r["error"] = type(e).__name__
        rec["results"].append(r)
    # dynamic encodings of the first batch
    try:
        mn, mx = an.compute_dynamic_encodings(batches[0], 255, False)
        arrays[f"c{case}_dmin"] = to_np(mn)
        arrays[f"c{case}_dmax"] = to_np(mx)
        rec["dynamic_dtype"] = str(mn.dtype).replace("torch.", "")
    except Exception as e:  # noqa: BLE001
        rec["dynamic_error"] = type(e).__name__
    index.append(rec)


def main(out_dir):
    rng = np.random.default_rng(20250601)
    index, arrays = [], {}
    analyzers = [
        ("minmax", {}),
        ("percentile", {"num_bins": 2048, "percentile": 100}),
        ("percentile", {"num_bins": 512, "percentile": 99}),
        ("percentile", {"num_bins": 100, "percentile": 99.9}),
        ("percentile", {"num_bins": 64, "percentile": 50}),
        ("sqnr", {"num_bins": 2048}),
        ("sqnr", {"num_bins": 128, "gamma": 1.0}),
        ("sqnr", {"num_bins": 300, "offset_candidates": 7, "asymmetric_delta_candidates": 5, "max_parallelism": 2,
                  "histogram_growth_limit": 2.0}),
        ("tfenhanced", {}),
    ]
    kinds = ["normal", "uniform_pos", "shifted", "special", "nan", "const", "zeros", "tiny", "subnormal", "negative", "wide"]
    steps = [(255, False), (255, True), (254, True), (15, False), (15, True), (3, True), (65535, False), (1, False)]
    case = 0
    for name, extra in analyzers:
        for dtype in DTYPES:
            for li, (xshape, shape, block) in enumerate(LAYOUTS):
                for kind in kinds:
                    if rng.random() < 0.6:
                        continue
                    n_batches = int(rng.integers(1, 4))
                    args = {"shape": list(shape), "block_size": None if block is None else list(block), **extra}
                    batches = make_batches(rng, kind, xshape, n_batches, dtype)
                    picks = [steps[i] for i in rng.choice(len(steps), 3, replace=False)]
                    add_case(case, name, args, dtype, kind, batches, picks, index, arrays)
                    case += 1
    # Signed zeros (appended with their own generator, so the cases above stay as recorded): wider
    # per-channel layouts put channels in torch's vector loops as well as its scalar tails.
    rng = np.random.default_rng(20261126)
    zero_layouts = LAYOUTS + [((40, 16), (40, 1), None), ((16, 37), (37,), None), ((3, 20, 8), (1, 20, 1), None)]
    for name, extra in analyzers:
        for dtype in DTYPES:
            for xshape, shape, block in zero_layouts:
                for kind in ("signed_zeros_pos", "signed_zeros_neg"):
                    if rng.random() < 0.5:
                        continue
                    args = {"shape": list(shape), "block_size": None if block is None else list(block), **extra}
                    add_case(case, name, args, dtype, kind, make_batches(rng, kind, xshape, int(rng.integers(1, 3)), dtype),
                             [steps[i] for i in rng.choice(len(steps), 3, replace=False)], index, arrays)
                    case += 1
    meta = {"aimet_torch": "2.42.0", "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cases": index}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "index.json"), "w") as f:
        json.dump(meta, f, indent=0)
    np.savez_compressed(os.path.join(out_dir, "arrays.npz"), **arrays)
    print(len(index), "cases")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(data_dir("aimet_analyzers")))
