"""Argument and array plumbing shared by the families (no numerics): ``args`` (strict integer and
real checks, ``out=``), ``convert`` (array-likes to views the extension reads; the QONNX flag and
rounding-mode checks), ``operands`` (ml_dtypes arrays as storage views with their dtype codes)."""
