"""What every command of the CLI shares and that needs only numpy: the error a command reports to the
user, the progress bars and the bit-level comparison. Kept apart from the runner (onnx, onnxruntime) so
that `polyquant info` and `polyquant bench` work where the ONNX packages are missing (the GPU machine's
Python, for one)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

try:  # a dependency, but the bars are only decoration: without tqdm they are silent stand-ins
    from tqdm import tqdm
except ImportError:  # pragma: no cover
    tqdm = None

DEFAULT_OUTPUT_DIR = "polyquant_out"


class CommandError(Exception):
    """A problem with the user's request (bad argument, missing file); the CLI prints it and exits 2."""


class _NoBar:
    """Stand-in for a tqdm bar when tqdm is not installed."""

    def __init__(self, iterable):
        self._iterable = iterable

    def __iter__(self):
        return iter(self._iterable)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n=1):
        pass

    def set_postfix_str(self, text, refresh=True):
        pass


def progress(iterable, desc, total=None, unit="run"):
    """A tqdm bar on stderr that shows up only once the work has taken more than a second (usable as an
    iterable wrapper, or with iterable=None as a manual bar); a silent stand-in when tqdm is missing."""
    if tqdm is None:
        return _NoBar(iterable if iterable is not None else ())
    return tqdm(iterable, desc=desc, total=total, file=sys.stderr, delay=1.0, leave=False, unit=unit)


@dataclass
class Comparison:
    exact: bool
    mismatches: int = 0          # elements whose bits differ (NaN vs NaN counts as equal)
    size: int = 0
    max_abs_diff: float = 0.0    # over mismatching elements where both sides are numbers
    nan_mismatches: int = 0      # NaN on one side only
    zero_sign_only: bool = False  # every mismatch is +0 vs -0
    problem: str = ""            # shape or dtype differ

    def describe(self):
        if self.problem:
            return self.problem
        if self.exact:
            return "bit-exact"
        text = f"{self.mismatches} of {self.size} elements differ, max abs diff {self.max_abs_diff:.6g}"
        if self.nan_mismatches:
            text += f", {self.nan_mismatches} NaN on one side only"
        if self.zero_sign_only:
            text += " (sign of zero only)"
        return text


def compare(actual, expected):
    """Bit-level comparison: NaN equals NaN (any payload), -0.0 differs from +0.0."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return Comparison(False, size=actual.size, problem=f"shape/dtype differ: {actual.dtype}{list(actual.shape)} "
                                                            f"vs reference {expected.dtype}{list(expected.shape)}")
    if np.issubdtype(actual.dtype, np.floating):
        bits = np.dtype(f"u{actual.dtype.itemsize}")
        a_nan, e_nan = np.isnan(actual), np.isnan(expected)
        same = (actual.view(bits) == expected.view(bits)) | (a_nan & e_nan)
    else:
        a_nan = e_nan = np.zeros(actual.shape, bool)
        same = actual == expected
    mismatches = int(same.size - np.count_nonzero(same))
    if not mismatches:
        return Comparison(True, size=actual.size)
    differ = ~same
    nan_mismatches = int(np.count_nonzero(differ & (a_nan ^ e_nan)))
    numeric = differ & ~a_nan & ~e_nan
    diffs = np.abs(actual[numeric].astype(np.float64) - expected[numeric].astype(np.float64))
    max_abs = float(diffs.max()) if diffs.size else float("nan")
    return Comparison(False, mismatches, actual.size, max_abs, nan_mismatches,
                      zero_sign_only=not nan_mismatches and max_abs == 0.0)
