"""The `polyquant` command line on files a new user may hand it by mistake (issue 17): a text file as
the model, a directory, a text file or an .npz archive as --input, an output directory that is a
file. Each gives one line on stderr and exit status 2 (1 is reserved for a mismatch against the
reference, 3 for an internal error), documented in --help."""

from __future__ import annotations

import io
import json
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


# ---- without the ONNX packages ---------------------------------------------------------------------

def _python_without(tmp_path, packages):
    """A command line for this Python that cannot import `packages`: site-packages seen through a
    directory of links to everything else in it (python -S: no site directories of its own)."""
    site = Path(np.__file__).resolve().parents[1]
    view = tmp_path / "site-packages"
    view.mkdir()
    for entry in site.iterdir():
        if entry.name.split("-")[0].split(".")[0].lower() not in packages:
            (view / entry.name).symlink_to(entry)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(view), "HOME": str(tmp_path)}
    return [sys.executable, "-S", "-m", "polyquant"], env


def test_info_bench_and_diff_run_where_onnx_and_onnxruntime_are_missing(tmp_path):
    """The GPU machine's Python has no onnx: `info`, `bench` and `diff` need neither package; the model
    commands answer with what to install (exit status 2, one line), not a traceback."""
    import polyquant
    if Path(polyquant.__file__).resolve().parents[1] != Path(np.__file__).resolve().parents[1]:
        pytest.skip("polyquant is not installed beside numpy (a development path)")
    command, env = _python_without(tmp_path, {"onnx", "onnxruntime", "qonnx"})
    probe = subprocess.run([*command[:2], "-c", "import onnx"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "No module named 'onnx'" in probe.stderr  # the view does hide it

    def polyquant_command(*argv):
        return subprocess.run([*command, *argv], env=env, capture_output=True, text=True, timeout=300)

    info = polyquant_command("info")
    assert info.returncode == 2 and "Traceback" not in info.stderr, info.stderr  # 2: the ORT library cannot load
    assert "onnxruntime     not installed" in info.stdout and "backend cpu" in info.stdout

    bench = polyquant_command("bench", "--ops", "intquant", "q_int8", "aimet_qdq", "alloc_onnx_q_int8", "--size", "16384",
                              "--repeat", "1", "--json")
    assert bench.returncode == 0, bench.stderr
    figures = json.loads(bench.stdout)
    assert figures["onnxruntime"] is None and figures["qonnx"] is None
    assert [r["name"] for r in figures["ops"]] == ["intquant"] and [r["name"] for r in figures["aimet"]] == ["aimet_qdq"]
    [q] = figures["qdq"]
    assert q["name"] == "q_int8" and q["polyquant_out_ms"] > 0 and q["onnxruntime_ms"] is None  # no peer, no error
    [alloc] = figures["allocating"]
    assert alloc["name"] == "alloc_onnx_q_int8" and alloc["peer_ms"] is None

    diff = polyquant_command("diff", "qkeras:quantized_bits(4,0,1)", "qkeras:quantized_bits(4,0,1)",
                             "--dtype", "float16")
    assert diff.returncode == 0, diff.stderr

    for argv in (["run", str(MODEL)], ["convert", str(MODEL), "-o", str(tmp_path / "m.onnx")],
                 ["calibrate", str(MODEL)], ["report", str(MODEL)]):
        done = polyquant_command(*argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stderr.strip().splitlines() == [
            f"polyquant {argv[0]}: error: this command needs the onnx package, which does not import here "
            f"(No module named 'onnx'); install it (pip install onnx), or reinstall polyquant, which depends on it"]
    helped = polyquant_command("--help")
    assert helped.returncode == 0 and "(unavailable here: needs the onnx package)" in helped.stdout
