"""The `polyquant` command line: run QONNX, ONNX Q/DQ and Quark models, benchmark the ops of every
family (QONNX, QKeras, AIMET, ONNX Q/DQ, Quark), show what was detected.

    polyquant info
    polyquant run MODEL.onnx [--input NAME=FILE.npy ...] [--output-dir DIR] [--reference | --reference-model ORIGINAL.onnx]
                             [--repeat N] [--seed S]
    polyquant bench [--size N] [--repeat R] [--json] [--ops OP ...] [--no-peers] [--qkeras-timings FILE] [--device cuda[:N]]
    polyquant diff SPEC_A SPEC_B [--dtype float32|float16|bfloat16] [--json]
    polyquant convert IN.onnx -o OUT.onnx [--to onnx] [--check sample|exhaustive|none]
    polyquant calibrate MODEL.onnx --data DIR|FILE [--analyzer minmax|percentile|sqnr|tfenhanced] [-o OUT.json]
    polyquant report MODEL.onnx --data DIR|FILE -o REPORT.html [--json OUT.json] [--analyzer ...] [--bits N]

Exit status: 0 success; 1 a --reference check (run), a qonnx comparison (bench) or diff found a mismatch;
2 bad arguments or a problem with the inputs (a missing file, a directory or a file that is no ONNX
model / .npy file, a model onnxruntime cannot load, qonnx absent for --reference, an output directory
that cannot be written); 3 an unexpected internal error (a bug: the traceback is printed); 130
interrupted.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import traceback
from importlib.metadata import PackageNotFoundError, version

import polyquant

from .. import ort as polyquant_ort
from . import diff as diff_tool
from .bench.driver import DEFAULT_SIZE, GROUPS, OPS_CHOICES, OPT_IN_CASE_NAMES, bench_command
from .common import DEFAULT_OUTPUT_DIR, CommandError

# The commands that read or write ONNX models import the onnx package (and `run` onnxruntime) when
# they are registered or run; `info`, `bench` and `diff` need neither, so they work where those
# packages are missing (a GPU machine's Python, say) and the model commands say what to install.
_ONNX_PACKAGES = ("onnx", "onnxruntime", "google")  # google: onnx's protobuf
_MODEL_TOOLS = ("convert", "calibrate", "report")

# 1 is reserved for a mismatch against the reference (returned by run and bench), so that scripts can
# tell "the bits differ" from "the command could not run".
EXIT_OK, EXIT_MISMATCH, EXIT_ERROR, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_STATUS_HELP = ("Exit status: 0 ok; 1 mismatch against the reference (run --reference, bench), between "
                    "the two specs (diff) or a node convert refused; 2 usage or "
                    "input error (bad arguments, a missing file, a directory or a file that is no ONNX model / "
                    ".npy file, a model onnxruntime cannot load, a reference that is not installed, an output "
                    "directory that cannot be written); 3 unexpected internal error (a bug; the traceback is "
                    "printed); 130 interrupted.")


def info_report():
    """What `polyquant info` prints, as a dict."""
    report = {"polyquant": dict(polyquant.runtime_info()), "module": polyquant.__file__, "onnxruntime": None}
    library = {"path": None, "loads": False, "error": None}
    try:
        # Imported here, guarded: `polyquant info` is the diagnostic that reports a missing onnxruntime.
        import onnxruntime
    except ImportError as exc:
        library["error"] = f"onnxruntime is not installed ({exc})"
    else:
        report["onnxruntime"] = onnxruntime.__version__
        try:
            library["path"] = str(polyquant_ort.library_path())
            onnxruntime.SessionOptions().register_custom_ops_library(library["path"])
            library["loads"] = True
        except Exception as exc:  # a missing file or an ABI mismatch surfaces as various exception types
            library["error"] = f"{type(exc).__name__}: {exc}"
    report["ort_library"] = library

    report["qonnx"] = {"version": None, "usable": False, "error": None}
    if importlib.util.find_spec("qonnx") is not None:
        try:
            report["qonnx"]["version"] = version("qonnx")
        except PackageNotFoundError:
            report["qonnx"]["version"] = "unknown"
        try:
            from . import runner
        except ImportError as exc:
            report["qonnx"]["error"] = f"polyquant run needs {exc.name}, which does not import ({exc})"
        else:
            report["qonnx"]["error"] = runner.reference_unavailable()
        report["qonnx"]["usable"] = report["qonnx"]["error"] is None
    return report


def _describe_qonnx(qonnx):
    if qonnx["version"] is None:
        return "not installed (polyquant run --reference and the bench peers need it)"
    if not qonnx["usable"]:
        return f"{qonnx['version']}, unusable: {qonnx['error']}"
    return f"{qonnx['version']} (run --reference and bench peers available)"


def info_command(args, out=sys.stdout):
    report = info_report()
    if args.json:
        print(json.dumps(report, indent=2), file=out)
        return EXIT_OK if report["ort_library"]["loads"] else EXIT_ERROR
    rt, lib = report["polyquant"], report["ort_library"]
    lines = [
        f"polyquant       {rt.get('version')}  ({report['module']})",
        f"kernels         {rt.get('isa')} (supported here: {', '.join(rt.get('supported', []))})",
        f"threads         {rt.get('num_threads')}",
        f"onnxruntime     {report['onnxruntime'] or 'not installed'}",
        f"custom-op lib   {lib['path'] or '-'}",
        f"                " + ("registers in onnxruntime.SessionOptions: yes" if lib["loads"]
                               else f"does NOT load: {lib['error']}"),
        f"qonnx           {_describe_qonnx(report['qonnx'])}",
    ]
    # The compute backends (runtime_info()["backends"]); an unavailable CUDA backend is not an error.
    for name, backend in rt.get("backends", {}).items():
        if backend["available"]:
            where = f"  ({backend['library']})" if backend["library"] else ""
            state = "available" + (f": {', '.join(backend['devices'])}" if backend["devices"] else "") + where
        else:
            state = f"unavailable: {backend['reason']}"
        lines.append(f"{'backend ' + name:<16}{state}")
    print("\n".join(lines), file=out)
    return EXIT_OK if lib["loads"] else EXIT_ERROR


def _missing_onnx_package(exc: ImportError) -> bool:
    return (exc.name or "").split(".")[0] in _ONNX_PACKAGES


def _needs(exc: ImportError) -> CommandError:
    package = (exc.name or "onnx").split(".")[0]
    package = "onnx" if package == "google" else package
    return CommandError(f"this command needs the {package} package, which does not import here ({exc}); "
                        f"install it (pip install {package}), or reinstall polyquant, which depends on it")


def _run(args, out):
    try:
        from . import runner
    except ImportError as exc:
        if not _missing_onnx_package(exc):
            raise
        raise _needs(exc) from None
    return runner.run_command(args, out=out)


def _add_model_tools(sub) -> None:
    """convert, calibrate and report, each registered by its module; where the module cannot import
    onnx, a stand-in that takes any arguments and answers with what to install (exit status 2)."""
    import importlib
    for name in _MODEL_TOOLS:
        try:
            module = importlib.import_module(f".{name}", __package__)
        except ImportError as exc:
            if not _missing_onnx_package(exc):
                raise
            error = _needs(exc)
            package = str(error).split(" package", 1)[0].rsplit(" ", 1)[-1]
            p = sub.add_parser(name, help=f"(unavailable here: needs the {package} package)", description=str(error))
            p.add_argument("arguments", nargs=argparse.REMAINDER)

            def unavailable(args, out, error=error):
                raise error

            p.set_defaults(func=unavailable)
        else:
            module.add_parser(sub, EXIT_STATUS_HELP)


def _bench(args, out):
    return bench_command(args, out=out)


def _int_at_least(minimum, requirement):
    """An argparse type: an integer >= minimum; `requirement` says so in the error."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{requirement}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1, "must be at least 1")
_seed = _int_at_least(0, "must be a non-negative integer (numpy's seeds are)")


def build_parser():

    parser = argparse.ArgumentParser(
        prog="polyquant",
        description="Bit-exact quantization operators of QONNX, QKeras, AIMET, ONNX (QuantizeLinear / "
                    "DequantizeLinear) and AMD Quark: run models, benchmark, inspect.",
        epilog=EXIT_STATUS_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    info = sub.add_parser("info", epilog="Exit status: 0 ok; 2 the custom-op library does not load in onnxruntime.",
                          help="version, detected ISA, threads, custom-op library, peers",
                          description="Show the polyquant version, the kernel set (ISA) in use and those this CPU "
                                      "supports, the worker threads, the ONNX Runtime custom-op library (and whether "
                                      "it registers), and the onnxruntime and qonnx versions.")
    info.add_argument("--json", action="store_true", help="print a JSON object")
    info.set_defaults(func=info_command)

    run = sub.add_parser(
        "run", epilog=EXIT_STATUS_HELP, help="run an ONNX/QONNX/Quark model in onnxruntime with polyquant's custom ops",
        description="Run MODEL in onnxruntime with the polyquant custom-op library (IntQuant, Quant, BipolarQuant, "
                    "Trunc v1/v2, FloatQuant in the qonnx.custom_op.general, finn.custom_op.general and onnx.brevitas "
                    "domains; Quark's ExtendedQuantizeLinear/ExtendedDequantizeLinear in com.amd.quark; opset-28 "
                    "QuantizeLinear/DequantizeLinear, moved onto the polyquant.onnx domain when onnxruntime has no "
                    "kernel for them). A Quark model is checked by --reference against amd-quark's own op (when "
                    "amd-quark and torch are installed), a model of standard ops against onnx's reference evaluator, "
                    "a QONNX model against qonnx. Inputs not given with --input get random values (standard normal for floats) from "
                    "--seed; symbolic dimensions become 1. Outputs are saved as DIR/NAME.npy, the inputs used as "
                    "DIR/inputs/NAME.npy. With --reference the model is also executed by its reference and "
                    "every output must match bit for bit (NaN equals NaN, the sign of zero counts); a mismatch "
                    "gives exit status 1 and names the first node whose output differs. The comparison runs in a "
                    "second session whose standard ops compute what qonnx's do (no fusions, no weight "
                    "prepacking), so only polyquant's ops are checked; the fast, fully optimized session is "
                    "timed and saved apart. onnxruntime's log is limited to errors.")
    run.add_argument("model", metavar="MODEL.onnx", help="the model file")
    run.add_argument("--input", "-i", action="append", metavar="NAME=FILE.npy",
                     help="value of input NAME (repeatable; FILE.npy alone if the model has one input)")
    run.add_argument("--output-dir", "-o", default=DEFAULT_OUTPUT_DIR, metavar="DIR",
                     help="where to save the outputs (default: ./%(default)s)")
    run.add_argument("--reference", action="store_true",
                     help="also run the reference (qonnx, amd-quark's op or onnx's evaluator) and check the outputs are bit-exact (from a session with "
                          "qonnx's standard-op numerics); report the speedup, and on a mismatch the first "
                          "differing node")
    run.add_argument("--reference-model", metavar="ORIGINAL.onnx",
                     help="compare MODEL with another model on the same inputs instead of with a reference "
                          "framework, bit for bit: for a model written by `polyquant convert`, its original "
                          "(both run in sessions with qonnx's standard-op numerics, the original with polyquant's "
                          "ops); a mismatch gives exit status 1")
    run.add_argument("--repeat", "-n", type=_positive_int, default=10, metavar="N",
                     help="timed runs after one warm-up; the median is reported (default: %(default)s)")
    run.add_argument("--reference-repeat", type=_positive_int, default=3, metavar="N",
                     help="timed qonnx runs, at most --repeat (default: %(default)s; qonnx is slow)")
    run.add_argument("--seed", type=_seed, default=0, metavar="S", help="seed of the random inputs (default: %(default)s)")
    run.set_defaults(func=_run)

    bench = sub.add_parser(
        "bench", epilog=EXIT_STATUS_HELP, help="throughput of each op vs memcpy and vs qonnx's numpy functions (QKeras quantizers: vs numpy "
                      "copies, their minimum passes and QKeras' recorded times)",
        description="Time each op on N float32 elements against an in-process memcpy of the same bytes (interleaved, "
                    "medians) and, unless --no-peers, against qonnx's numpy function on the same input (fewer "
                    "repeats: they are slow), checking the two results are bit-identical. Issue 19's groups: QKeras "
                    "scale searches on every layout vs the square array (qk_layouts), allocating calls vs out= and "
                    "onnxruntime's session.run (alloc), float16/bfloat16 x vs np.copyto of float32 (from_16bit), and, "
                    "only when named, AIMET's forward, gradients and torch autograd vs the torch-composed training "
                    "path (aimet_train). See docs/cli.md for every column.")
    bench.add_argument("--size", type=_positive_int, default=DEFAULT_SIZE, metavar="N",
                       help="elements per array, a multiple of 64 (default: %(default)s = 256 MiB of float32)")
    bench.add_argument("--repeat", "-n", type=_positive_int, default=5, metavar="R",
                       help="interleaved repeats per op (default: %(default)s)")
    bench.add_argument("--peer-repeat", type=int, default=3, metavar="R",
                       help="repeats of each qonnx function (default: %(default)s)")
    bench.add_argument("--ops", nargs="+", choices=OPS_CHOICES, metavar="OP",
                       help=f"cases to run (default: all but {', '.join(n for n in GROUPS if set(GROUPS[n]) <= set(OPT_IN_CASE_NAMES))}"
                            f", which run only when named): {', '.join(n for n in OPS_CHOICES if n not in GROUPS)}; "
                            "group names, each standing for its cases: "
                            + "; ".join(f"{g} = {' '.join(names)}" for g, names in GROUPS.items()))
    bench.add_argument("--qkeras-timings", metavar="FILE", default=None,
                       help="QKeras' recorded timings (default: tools/golden/speed/qkeras_peer_timings.json when present)")
    bench.add_argument("--no-peers", action="store_true", help="do not time qonnx's numpy functions")
    bench.add_argument("--seed", type=_seed, default=0, metavar="S", help="seed of the input data (default: %(default)s)")
    bench.add_argument("--json", action="store_true", help="print the results as JSON")
    bench.add_argument("--device", default="cpu", metavar="DEVICE",
                       help="cpu (default), or cuda / cuda:N: the ops on that GPU through torch CUDA tensors, timed "
                            "with CUDA events beside y.copy_(x) and torch's peers, each result checked against the "
                            "host's bits (--size, --repeat and --json apply; docs/cuda.md)")
    bench.set_defaults(func=_bench)
    diff_tool.add_parser(sub, EXIT_STATUS_HELP)
    _add_model_tools(sub)
    return parser


def main(argv=None, out=None):
    """Entry point of `polyquant` and `python -m polyquant`; returns the exit status."""
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        # A bad POLYQUANT_ISA or POLYQUANT_NUM_THREADS makes the first use of the core raise; say so
        # plainly before any command runs (info included) instead of a traceback.
        polyquant.runtime_info()
    except ValueError as exc:
        print(f"polyquant {args.command}: error: {exc} (check the environment variable)", file=sys.stderr)
        return EXIT_ERROR
    try:
        return args.func(args, out)
    except CommandError as exc:
        print(f"polyquant {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - a bug: say so, keep the traceback, and never exit 1 (mismatch)
        traceback.print_exc(file=sys.stderr)
        print(f"polyquant {args.command}: internal error: {type(exc).__name__}: {exc} (please report it with the "
              f"traceback above)", file=sys.stderr)
        return EXIT_INTERNAL
