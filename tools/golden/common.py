"""What the golden-data generators share: where the data lives, how the machine and the installed
versions are described, and how arrays and the case index are written so that a rerun with the
same reference versions gives byte-identical files.

The generators run inside the reference's own environment (aimet-torch, TensorFlow + QKeras,
amd-quark, Brevitas), so this module needs only the standard library and numpy. Run a generator
from the repository root as a module (``python -m tools.golden.<family>``): a script run by path
would put ``tools/golden`` first on ``sys.path``, and ``quark.py`` / ``brevitas.py`` would then
shadow the reference packages they import.

The format new generators should write (docs/golden-data.md, "One format"): ``index.json`` with
the reference's versions, the machine and one record per case whose arrays are keys into one
``arrays.npz`` — written by :func:`write_index` and :func:`write_npz`.
"""

from __future__ import annotations

import io
import json
import os
import platform
import zipfile
import zlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
SPEED = Path(__file__).resolve().parent / "speed"  # peer timings: the references' own speed

CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl")


def data_dir(family: str) -> Path:
    """tests/data/<family>: where a family's committed golden data lives."""
    return DATA / family


def seed_of(case_id: str) -> int:
    """A case's random seed: the CRC-32 of its id, so adding or reordering cases leaves the
    inputs of every other case as they were."""
    return zlib.crc32(case_id.encode())


def _cpuinfo_lines() -> list[str] | None:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None


def _field(lines: list[str], name: str) -> list[str]:
    return [ln.split(":", 1)[1] for ln in lines if ln.startswith(name)]


def cpu_model() -> str | None:
    """The first 'model name' of /proc/cpuinfo (None where there is none)."""
    model = _field(_cpuinfo_lines() or [], "model name")
    return model[0].strip() if model else None


def machine_description(*, arch: bool = True, load_key: str | None = None) -> dict:
    """Cores, platform, Python, CPU model and vector flags, memory; with `load_key`, the load
    average under that key (timings record it: the machines are shared). `arch` adds
    platform.machine() (AIMET's records have it, QKeras' do not; the key order is the order of
    the recorded JSON)."""
    info = {"nproc": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    if arch:
        info["machine"] = platform.machine()
    lines = _cpuinfo_lines()
    if lines is not None:
        info["cpu_model"] = cpu_model()
        flags = _field(lines, "flags")
        fl = set(flags[0].split()) if flags else set()
        info["cpu_flags"] = {k: (k in fl) for k in CPU_FLAGS}
    try:
        info["mem_total_kib"] = int(Path("/proc/meminfo").read_text().split()[1])  # MemTotal comes first
    except OSError:
        pass
    if load_key:
        try:
            info[load_key] = list(os.getloadavg())
        except OSError:
            pass
    return info


def dist_version(name: str) -> str | None:
    """The installed version of distribution `name`, None where it is not installed."""
    from importlib.metadata import version

    try:
        return version(name)
    except Exception:  # noqa: BLE001 - not installed (or unreadable metadata)
        return None


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """An np.load-compatible .npz with fixed timestamps (np.savez stamps the current time), the
    members in the dict's order, deflated at level 9: the same arrays give the same bytes."""
    with zipfile.ZipFile(path, "w") as zf:
        for key, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.require(arr, requirements="C"), allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3
            zf.writestr(info, buf.getvalue(), compresslevel=9)


def write_index(path: Path, header: dict, cases: list[dict]) -> None:
    """index.json as the one format has it: the header (versions, machine, conventions, counts)
    indented by one space, then "cases" with one compact JSON record per line, so a diff of two
    runs shows one line per changed case. ASCII only; the header must not hold a "cases" key."""
    assert "cases" not in header
    head = json.dumps(header, indent=1, ensure_ascii=True)
    body = ",\n".join(" " + json.dumps(c, ensure_ascii=True, separators=(",", ":")) for c in cases)
    path.write_text(head[:-2] + ',\n "cases": [\n' + body + "\n ]\n}\n")
