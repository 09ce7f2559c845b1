"""Shared fixtures: a reproducible RNG and the bit-exact comparison every test uses (helpers.py holds
the functions the tests import)."""

from __future__ import annotations

import zlib
from typing import Callable

import numpy as np
import pytest

from .helpers import SEED, assert_identical


def pytest_report_header(config: pytest.Config) -> str:
    import polyquant

    info = polyquant.runtime_info()
    return (
        f"polyquant {polyquant.__version__}: isa={info['isa']} supported={info['supported']} "
        f"threads={info['num_threads']}; numpy {np.__version__}; POLYQUANT_TEST_SEED={SEED}"
    )


# Test files by their path before the tests moved into one directory per family: the rng salt is
# the test id with the former path, so every test still draws exactly the inputs it drew there.
_FORMER_PATHS = {
    "qonnx/test_api.py": "test_api.py",
    "qonnx/test_reference.py": "test_qonnx_ops.py",
    "qonnx/test_signatures.py": "test_signatures.py",
    "qonnx/test_properties.py": "test_properties.py",
    "qonnx/test_robustness.py": "test_qonnx_robustness.py",
    "qonnx/test_specials.py": "test_qonnx_nan_bits.py",
    "qonnx/test_ort.py": "test_ort.py",
    "qonnx/test_ort_models.py": "test_ort_models.py",
    "qonnx/test_execute_onnx.py": "test_execute_onnx.py",
    "qkeras/test_api.py": "test_qkeras_api.py",
    "qkeras/test_golden.py": "test_qkeras_golden.py",
    "qkeras/test_golden_data.py": "test_qkeras_golden_data.py",
    "qkeras/test_upstream_vectors.py": "test_qkeras_own.py",
    "qkeras/test_properties.py": "test_qkeras_properties.py",
    "qkeras/test_specials.py": "test_qkeras_specials.py",
    "qkeras/test_training.py": "test_qkeras_training.py",
    "aimet/test_golden.py": "test_aimet_golden.py",
    "aimet/test_upstream_vectors.py": "test_aimet_fixed_vectors.py",
    "aimet/test_properties.py": "test_aimet_properties.py",
    "aimet/test_robustness.py": "test_aimet_robustness.py",
    "aimet/test_quantizers.py": "test_aimet_quantizers.py",
    "aimet/test_torch.py": "test_aimet_torch.py",
    "aimet/test_golden_analyzers.py": "test_aimet_analyzers.py",
    "aimet/test_analyzer_state.py": "test_aimet_analyzer_state.py",
    "aimet/test_robustness_analyzers.py": "test_aimet_analyzers_robustness.py",
    "onnx/test_reference.py": "test_onnx_qdq.py",
    "onnx/test_properties.py": "test_qdq_properties.py",
    "onnx/test_robustness.py": "test_qdq_robustness.py",
    "onnx/test_ort.py": "test_ort_qdq.py",
    "quark/test_golden.py": "test_quark_golden.py",
    "tools/test_cli.py": "test_cli.py",
    "tools/test_cli_qdq.py": "test_cli_qdq.py",
    "tools/test_cli_robustness.py": "test_cli_robustness.py",
    "tools/test_example.py": "test_example.py",
}


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from SEED and the test's id, so every test is reproducible alone."""
    path, sep, rest = request.node.nodeid.partition("::")
    prefix, slash, name = path.rpartition("tests/python/")
    former = prefix + slash + _FORMER_PATHS.get(name, name)
    salt = zlib.crc32((former + sep + rest).encode())
    return np.random.default_rng([SEED, salt])


@pytest.fixture
def same() -> Callable[..., None]:
    """The bit-exact comparison, as a fixture: same(actual, expected, *inputs)."""
    return assert_identical
