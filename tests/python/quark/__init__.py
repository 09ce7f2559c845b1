"""polyquant.quark against amd-quark 0.13."""
