"""The one way tests open a family's committed golden data (tests/data/<family>/, written by
tools/golden/<family>.py; docs/golden-data.md describes each family's files).

    from ..golden import golden

    data = golden("quark")                 # cached: every test module shares one copy
    data.index                             # index.json, parsed
    data.cases                             # data.index["cases"]
    data.arrays["c0001/x"]                 # arrays.npz (read lazily, one member per access)
    data.npz("quantized_bits.npz")         # another .npz of the family, every array read
    data.json("qkeras_own_tests.json")     # another JSON file of the family
    data.npy("bipolar.input.npy")          # a single .npy
    data.path("bipolar.onnx")              # any file of the family

The array specs inside the cases still differ per family (AIMET: [dtype, shape, start] into one
pool per dtype; QKeras: {buf, offset, shape} into one of several .npz files; Quark: {key, dtype,
shape}); each family's tests decode their own. `as_stored_dtype` turns the one convention they
share back into numbers: bfloat16 is stored as its uint16 bit pattern.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

DATA = Path(__file__).resolve().parents[1] / "data"


class GoldenData:
    """The committed files of one family, each read once and kept."""

    def __init__(self, family: str):
        self.family = family
        self.dir = DATA / family
        if not self.dir.is_dir():
            raise FileNotFoundError(f"no golden data for {family!r} at {self.dir}")

    def path(self, name: str) -> Path:
        return self.dir / name

    @functools.cached_property
    def index(self) -> dict[str, Any]:
        return self.json("index.json")

    @property
    def cases(self) -> list[dict[str, Any]]:
        return self.index["cases"]

    @functools.cached_property
    def arrays(self) -> np.lib.npyio.NpzFile:
        """arrays.npz, opened once; each access reads (and decompresses) that one member anew."""
        return np.load(self.dir / "arrays.npz", allow_pickle=False)

    @functools.cache  # noqa: B019 - one instance per family (golden() caches them), kept for the session
    def json(self, name: str) -> Any:
        with open(self.dir / name) as f:
            return json.load(f)

    @functools.cache  # noqa: B019
    def npz(self, name: str) -> dict[str, np.ndarray]:
        """Every array of the .npz `name`, read at once (the file is closed again)."""
        with np.load(self.dir / name, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    def npy(self, name: str) -> np.ndarray:
        """A .npy file, read anew on each call (the caller may write into it)."""
        return np.load(self.dir / name, allow_pickle=False)


@functools.cache
def golden(family: str) -> GoldenData:
    """The golden data of `family` (the directory name under tests/data: aimet, aimet_analyzers,
    qkeras, quark, brevitas)."""
    return GoldenData(family)


def as_stored_dtype(a: np.ndarray, dtype: str) -> np.ndarray:
    """A stored array as the dtype the case names: bfloat16 comes back from its uint16 bits."""
    return a.view(ml_dtypes.bfloat16) if dtype == "bfloat16" else a
