"""The `polyquant` command line on files a new user may hand it by mistake (issue 17): a text file as
the model, a directory, a text file or an .npz archive as --input, an output directory that is a
file. Each gives one line on stderr and exit status 2 (1 is reserved for a mismatch against the
reference, 3 for an internal error), documented in --help."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from polyquant._tools import cli

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "examples" / "qonnx_mlp.onnx"
README = ROOT / "README.md"


def polyquant_cli(*argv):
    out = io.StringIO()
    status = cli.main([str(a) for a in argv], out=out)
    return status, out.getvalue()


def _one_line_error(capsys, command, fragment):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"polyquant {command}: error: ") and fragment in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("reference", [False, True])
def test_run_on_a_file_that_is_not_a_model(reference, tmp_path, capsys):
    argv = ["run", README, "-o", tmp_path] + (["--reference"] if reference else [])
    assert polyquant_cli(*argv)[0] == cli.EXIT_ERROR == 2
    _one_line_error(capsys, "run", f"{README} is not an ONNX model")


def test_run_on_garbage_bytes_and_an_empty_file(tmp_path, capsys):
    for name, data in (("garbage.onnx", b"\xff\xfe" * 64 + b"Trunc"), ("empty.onnx", b"")):
        path = tmp_path / name
        path.write_bytes(data)
        status, _ = polyquant_cli("run", path, "-o", tmp_path / "out")
        assert status == 2
        err = capsys.readouterr().err
        assert err.startswith("polyquant run: error: ") and "Traceback" not in err and str(path) in err, err


def test_run_on_a_directory(tmp_path, capsys):
    assert polyquant_cli("run", ROOT / "examples", "-o", tmp_path)[0] == 2
    _one_line_error(capsys, "run", "is a directory, not an ONNX model file")


def test_input_that_is_not_a_npy_file(tmp_path, capsys):
    assert polyquant_cli("run", MODEL, "--input", f"x={README}", "-o", tmp_path)[0] == 2
    _one_line_error(capsys, "run", f"{README} is not a .npy or .npz file")
    assert polyquant_cli("run", MODEL, "--input", README, "-o", tmp_path)[0] == 2  # FILE alone: one input
    _one_line_error(capsys, "run", "is not a .npy or .npz file")
    assert polyquant_cli("run", MODEL, "--input", f"x={tmp_path}", "-o", tmp_path / "o")[0] == 2
    _one_line_error(capsys, "run", "is a directory, not a .npy file")
    truncated = tmp_path / "truncated.npy"
    np.save(truncated, np.zeros((256, 64), np.float32))
    truncated.write_bytes(truncated.read_bytes()[:200])
    assert polyquant_cli("run", MODEL, "--input", f"x={truncated}", "-o", tmp_path / "o")[0] == 2
    _one_line_error(capsys, "run", "cannot read")


def test_input_from_an_npz_archive(tmp_path, capsys):
    x = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
    np.savez(tmp_path / "one.npz", whatever=x)
    np.savez(tmp_path / "named.npz", x=x, other=x[:1])
    np.savez(tmp_path / "ambiguous.npz", a=x, b=x)
    for archive in ("one.npz", "named.npz"):
        status, text = polyquant_cli("run", MODEL, "--input", f"x={tmp_path / archive}", "-o", tmp_path / f"out_{archive}",
                                     "--repeat", "1")
        assert status == 0, capsys.readouterr().err
        assert "from file" in text
        np.testing.assert_array_equal(np.load(tmp_path / f"out_{archive}" / "inputs" / "x.npy"), x)
    assert polyquant_cli("run", MODEL, "--input", f"x={tmp_path / 'ambiguous.npz'}", "-o", tmp_path / "o")[0] == 2
    _one_line_error(capsys, "run", "holds 2 arrays (a, b) and none is named 'x'")


def test_output_dir_that_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert polyquant_cli("run", MODEL, "-o", blocker, "--repeat", "1")[0] == 2
    _one_line_error(capsys, "run", f"--output-dir: cannot write into {blocker}")


def test_internal_error_is_exit_3_not_the_mismatch_status(tmp_path, monkeypatch, capsys):
    from polyquant._tools import runner

    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(runner, "random_inputs", broken)
    assert polyquant_cli("run", MODEL, "-o", tmp_path)[0] == cli.EXIT_INTERNAL == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("polyquant run: internal error: KeyError")


@pytest.mark.parametrize("command", [[], ["run"], ["bench"]])
def test_help_documents_the_exit_statuses(command):
    result = subprocess.run([sys.executable, "-m", "polyquant", *command, "--help"], capture_output=True, text=True,
                            check=True)
    text = " ".join(result.stdout.split())
    for fragment in ("Exit status: 0 ok", "1 mismatch against the reference", "2 usage or input error",
                     "3 unexpected internal error"):
        assert fragment in text, result.stdout


def test_bench_bad_qkeras_timings_file(tmp_path, capsys):
    assert polyquant_cli("bench", "--size", "64", "--repeat", "1", "--ops", "qk_bits", "--qkeras-timings",
                         README)[0] == 2
    _one_line_error(capsys, "bench", "--qkeras-timings: cannot read")


@pytest.mark.parametrize("argv", [["run", MODEL, "--seed", "-1"], ["bench", "--seed", "-3"], ["run", MODEL, "--seed", "x"]])
def test_negative_seed_is_a_usage_error(argv, capsys):
    """numpy rejects negative seeds deep inside: a usage error (2), not an internal one."""
    with pytest.raises(SystemExit) as exc:
        cli.main([str(a) for a in argv])
    assert exc.value.code == 2
    assert "--seed" in capsys.readouterr().err


def test_input_without_a_file_name_and_a_model_that_is_no_regular_file(tmp_path, capsys):
    assert polyquant_cli("run", MODEL, "--input", "x=", "-o", tmp_path)[0] == 2
    _one_line_error(capsys, "run", "no file name given")
    assert polyquant_cli("run", "/dev/null", "-o", tmp_path)[0] == 2
    _one_line_error(capsys, "run", "/dev/null is not a regular file")
