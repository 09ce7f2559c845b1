"""`polyquant report`: the figures of each tensor (checked from first principles with numpy on small
data), the page's self-containment, the CLI, the errors, and the page in a real headless browser
(Debian's chromium and its driver, through selenium; skipped when one of them is missing)."""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import polyquant
import polyquant.aimet as A
from polyquant._tools import cli
from polyquant._tools import report as rep_mod
from polyquant._tools.runner import CommandError

from .test_calibrate import batches, small_model


def intermediate(model, data, names):
    """Every batch's values of `names`, from onnxruntime under the report's session options (no fusions:
    a fused Conv + Relu rounds differently)."""
    s = rep_mod._session(rep_mod._with_outputs(model, names))
    return [dict(zip(names, s.run(names, b))) for b in data]


def conv_net():
    """x (n, 1, 12, 12) -> Conv 3x3 (6) -> Relu -> Conv 3x3 (8) -> Relu -> Conv 1x1 (4) -> y: a few conv
    layers whose weights have channels of different ranges."""
    rng = np.random.default_rng(3)
    w1 = (rng.standard_normal((6, 1, 3, 3)) * np.linspace(0.2, 2.0, 6)[:, None, None, None]).astype(np.float32)
    w2 = (rng.standard_normal((8, 6, 3, 3)) * 0.3).astype(np.float32)
    w3 = (rng.standard_normal((4, 8, 1, 1)) * 0.5).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "conv1.w"), numpy_helper.from_array(np.zeros(6, np.float32), "conv1.b"),
             numpy_helper.from_array(w2, "conv2.w"), numpy_helper.from_array(np.full(8, 0.1, np.float32), "conv2.b"),
             numpy_helper.from_array(w3, "conv3.w")]
    nodes = [helper.make_node("Conv", ["x", "conv1.w", "conv1.b"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "conv2.w", "conv2.b"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "conv3.w"], ["y"])]
    g = helper.make_graph(nodes, "conv_net", [helper.make_tensor_value_info("x", T.FLOAT, ["n", 1, 12, 12])],
                          [helper.make_tensor_value_info("y", T.FLOAT, ["n", 4, 10, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def conv_batches(n=4, seed=5):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((2, 1, 12, 12)).astype(np.float32)} for _ in range(n)]


def sqnr_db(x, y):
    x, y = np.asarray(x, np.float64).reshape(-1), np.asarray(y, np.float64).reshape(-1)
    noise = np.sum((x - y) ** 2)
    return math.inf if noise == 0 else 10 * math.log10(np.sum(x ** 2) / noise)


def quantizer_of(result, name):
    return next(t.quantizer for t in result.tensors if t.name == name)


# ---- the figures ---------------------------------------------------------------------------------


@pytest.mark.parametrize("analyzer", ["minmax", "percentile"])
def test_sqnr_clipped_and_histograms_from_first_principles(analyzer):
    """Per activation: SQNR and the clipped share recomputed with numpy over every batch's values at once
    (from onnxruntime's intermediate outputs and the calibrated quantizer), and the histogram counting
    every value."""
    model, data = small_model(), batches()
    r = polyquant.report(model, data, analyzer, percentile=99.0) if analyzer == "percentile" else \
        polyquant.report(model, data, analyzer)
    cal = polyquant.calibrate(model, data, analyzer, **({"percentile": 99.0} if analyzer == "percentile" else {}))
    values = intermediate(model, data, ["x", "f", "y"])
    got = {t.name: t for t in r.tensors}
    for name in ("x", "f", "y"):
        every = np.concatenate([v[name].reshape(-1) for v in values])
        q = quantizer_of(cal, name)
        qdq = q(every)
        assert math.isclose(got[name].sqnr_db, sqnr_db(every, qdq), rel_tol=1e-12), name
        enc = q.get_encodings()
        step = float(enc.scale)
        # Clipped: beyond the grid's range [min, max] by more than half a step (no ties in this data).
        clipped = np.count_nonzero((every < float(enc.min) - step / 2) | (every > float(enc.max) + step / 2))
        assert got[name].clipped == clipped and got[name].values == every.size, name
        assert int(got[name].counts.sum()) == every.size, name
        assert got[name].edges[0] <= every.min() and got[name].edges[-1] >= every.max()
        assert got[name].edges[0] <= float(enc.min) and got[name].edges[-1] >= float(enc.max)
        # the counts are those of numpy's histogram over all the values with the same edges
        expected, _ = np.histogram(every, bins=got[name].edges)
        assert np.array_equal(got[name].counts, expected), name
    if analyzer == "percentile":  # the 99th percentile's range clips ~2% of the values
        assert 0 < got["x"].clipped_fraction < 0.05
    else:
        assert all(t.clipped == 0 for t in r.tensors)


def test_per_channel_weights_from_first_principles():
    model = conv_net()
    r = polyquant.report(model, conv_batches(), per_channel=True, bits=4)
    cal = polyquant.calibrate(model, conv_batches(), per_channel=True, bits=4)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for t in (t for t in r.tensors if t.kind == "param"):
        w = inits[t.name]
        q = quantizer_of(cal, t.name)
        assert t.channels == w.shape[0]
        assert math.isclose(t.sqnr_db, sqnr_db(w, q(w)), rel_tol=1e-12)
        assert int(t.counts.sum()) == w.size == t.values
        assert t.clipped == 0  # minmax per channel: every weight lies in its channel's range


def test_model_level_sqnr_is_the_qdq_model_against_the_float_model():
    """The Q/DQ model's activation against the float model's, over all batches; the graph input's
    equals its own quantize-dequantize (nothing upstream)."""
    model, data = small_model(), batches()
    r = polyquant.report(model, data)
    cal = polyquant.calibrate(model, data)
    got = {t.name: t for t in r.tensors}
    qdq = cal.qdq_model()
    names = {"f": "f", "y": "y", "x": next(n.output[0] for n in qdq.graph.node if n.op_type == "DequantizeLinear"
                                              and n.input[0].startswith("x__quantized"))}
    s = rep_mod._session(rep_mod._with_outputs(qdq, list(names.values())))
    floats = intermediate(model, data, ["x", "f", "y"])
    quantized = [dict(zip(names, s.run(list(names.values()), b))) for b in data]
    for name in ("x", "f", "y"):
        a = np.concatenate([v[name].reshape(-1) for v in floats])
        b = np.concatenate([v[name].reshape(-1) for v in quantized])
        assert math.isclose(got[name].model_sqnr_db, sqnr_db(a, b), rel_tol=1e-9), name
    assert math.isclose(got["x"].model_sqnr_db, got["x"].sqnr_db, rel_tol=1e-9)
    assert got["conv.w"].model_sqnr_db is None
    div = r.divergence()
    assert div["worst"][0] == min(("x", "f", "y"), key=lambda n: got[n].model_sqnr_db)


def test_an_exact_tensor_has_infinite_sqnr():
    """A weight whose values are all on the grid: q(w) == w, so SQNR is +inf ("inf" in JSON)."""
    w = np.array([[0.0, 1.0], [2.0, 3.0]], np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1, 2])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, 2])], [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    r = polyquant.report(m, [{"x": np.ones((1, 2), np.float32)}], bits=2)  # 4 levels 0..3, scale 1
    t = next(t for t in r.tensors if t.name == "w")
    assert t.sqnr_db == math.inf and t.clipped == 0
    d = json.loads(r.to_json())
    assert next(e for e in d["tensors"] if e["name"] == "w")["sqnr_db"] == "inf"


def test_ranked_by_damage_and_json_round_trip(tmp_path):
    r = polyquant.report(small_model(), batches())
    sq = [t.sqnr_db for t in r.ranked()]
    assert sq == sorted(sq)
    r.save(tmp_path / "r.json")
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["batches"] == 6 and [e["name"] for e in d["tensors"]] == [t.name for t in r.tensors]
    for e, t in zip(d["tensors"], r.tensors):
        assert sum(e["histogram"]["counts"]) == t.values
        assert len(e["histogram"]["edges"]) == len(e["histogram"]["counts"]) + 1


def test_nonfinite_values_are_counted_apart():
    t = rep_mod.TensorReport("t", "activation", (5,), np.float32(0.1), np.int64(0), 0, 255,
                             np.float32(0.0), np.float32(25.5))
    q = A.QuantizeDequantize((), 8, False)
    q.set_range(np.float32(0.0), np.float32(25.5))
    t.scale, t.zero_point = q.get_encodings().scale, -q.get_encodings().offset.astype(np.int64)
    t.grid_min, t.grid_max = q.get_encodings().min, q.get_encodings().max
    x = np.array([1.0, np.nan, 30.0, np.inf, 2.0], np.float32)
    rep_mod._accumulate(t, x, q)
    finite = x[np.isfinite(x)]
    assert t.values == 3 and t.nonfinite == 2 and t.clipped == 1
    assert math.isclose(t.sqnr_db, sqnr_db(finite, q(finite)), rel_tol=1e-12)
    rep_mod._fix_edges(t, 16)
    rep_mod._count(t, x)
    assert t.counts.sum() == 3 and t.edges[-1] == 30.0


# ---- the page -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """One small report's page, written once for the module (the browser tests read it)."""
    pytest.importorskip("matplotlib")
    # percentile: ranges inside the data, so the page shows clipping
    r = polyquant.report(conv_net(), conv_batches(), "percentile", per_channel=True, percentile=99.5)
    path = tmp_path_factory.mktemp("report") / "report.html"
    r.save(path)
    return r, path


def test_the_page_is_self_contained(page):
    r, path = page
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>")
    # No resource from elsewhere: every src / href is a fragment, no url() leaves the page, no font.
    for m in re.finditer(r"""(?:src|href)\s*=\s*["']([^"']*)["']""", text):
        assert m.group(1).startswith("#"), m.group(0)
    assert not re.search(r"url\(\s*['\"]?(?!#)", text)
    assert not re.search(r"@import|@font-face|<link\b|<iframe\b|<img\b", text)
    assert text.count("<svg") == len(r.tensors) + 1  # one histogram per tensor and the divergence plot
    assert "<?xml" not in text and "<!DOCTYPE svg" not in text
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids)), "an id is used twice (the plots' ids must be salted apart)"


def test_the_page_is_deterministic():
    pytest.importorskip("matplotlib")
    a = polyquant.report(small_model(), batches(2)).html()
    b = polyquant.report(small_model(), batches(2)).html()
    assert a == b


def test_missing_matplotlib_names_the_extra(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real(name, *args, **kwargs)

    r = polyquant.report(small_model(), batches(1))
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(CommandError, match=re.escape("pip install .[report]")):
        r.html()
    r.to_json()  # JSON needs no plot


# ---- CLI and errors -------------------------------------------------------------------------------


def run_cli(*argv):
    out = io.StringIO()
    return cli.main(list(argv), out=out), out.getvalue()


def test_cli_writes_the_page_and_the_json(tmp_path):
    pytest.importorskip("matplotlib")
    onnx.save(conv_net(), tmp_path / "m.onnx")
    (tmp_path / "data").mkdir()
    for k, b in enumerate(conv_batches(3)):
        np.save(tmp_path / "data" / f"{k}.npy", b["x"])
    code, text = run_cli("report", str(tmp_path / "m.onnx"), "--data", str(tmp_path / "data"), "-o",
                         str(tmp_path / "r.html"), "--json", str(tmp_path / "r.json"), "--per-channel", "--symmetric")
    assert code == 0, text
    assert "conv1.w" in text and "written:" in text
    d = json.loads((tmp_path / "r.json").read_text())
    py = polyquant.report(conv_net(), conv_batches(3), per_channel=True, symmetric=True).to_dict()
    py["model"] = d["model"]
    assert d == json.loads(json.dumps(py))
    assert (tmp_path / "r.html").read_text().count("<svg") == len(d["tensors"]) + 1


def test_cli_errors(tmp_path, capsys):
    onnx.save(small_model(), tmp_path / "m.onnx")
    code, _ = run_cli("report", str(tmp_path / "m.onnx"), "--data", str(tmp_path / "absent"))
    assert code == 2 and "no such file or directory" in capsys.readouterr().err
    np.save(tmp_path / "x.npy", batches(1)[0]["x"])
    code, _ = run_cli("report", str(tmp_path / "m.onnx"), "--data", str(tmp_path / "x.npy"), "--bins", "1")
    assert code == 2 and "bins: expected an integer from 2 to 100000, got 1" in capsys.readouterr().err


def test_errors_name_the_parameter():
    with pytest.raises(CommandError, match="analyzer: expected one of minmax, percentile, sqnr, tfenhanced"):
        polyquant.report(small_model(), batches(1), "kl")
    with pytest.raises(CommandError, match="bits: expected an integer from 2 to 16"):
        polyquant.report(small_model(), batches(1), bits=1)
    with pytest.raises(CommandError, match="read once: pass a list"):
        polyquant.report(small_model(), (b for b in batches(2)))
    with pytest.raises(CommandError, match="batch 0 lacks input"):
        polyquant.report(small_model(), [{"z": np.zeros(1, np.float32)}])
    with pytest.raises(CommandError, match="expected a path, a dict of inputs"):
        polyquant.report(small_model(), 3)


def test_a_model_without_a_qdq_form_still_reports():
    """4 bits need opset 21 for QuantizeLinear: on an opset-17 model the model-level comparison is
    left out, and the page says why."""
    pytest.importorskip("matplotlib")
    r = polyquant.report(small_model(), batches(2), bits=4)
    assert r.model_note and "opset" in r.model_note
    assert all(t.model_sqnr_db is None for t in r.tensors)
    assert "No model-level comparison" in r.html()


# ---- in a real browser -------------------------------------------------------------------------


def _chromium_paths():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return browser, driver


@pytest.fixture(scope="module")
def browser():
    """One headless chromium for the module (starting it takes a second)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    binary, driver_path = _chromium_paths()
    if not binary or not driver_path:
        pytest.skip("chromium and chromedriver are not installed (Debian: chromium, chromium-driver)")
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900",
                "--hide-scrollbars"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    yield driver
    driver.quit()


def test_the_page_loads_without_errors_and_shows_every_plot(page, browser):
    r, path = page
    browser.get(path.as_uri())
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []
    sizes = browser.execute_script(
        "return Array.from(document.querySelectorAll('.plot svg')).map(function (s) {"
        " var b = s.getBoundingClientRect(); return [b.width, b.height]; });")
    assert len(sizes) == len(r.tensors) + 1
    assert all(w > 100 and h > 50 for w, h in sizes), sizes


def test_clicking_a_header_sorts_the_table(page, browser):
    r, path = page
    from selenium.webdriver.common.by import By
    browser.get(path.as_uri())

    def column(k):
        return [row.find_elements(By.TAG_NAME, "td")[k].get_attribute("data-sort")
                for row in browser.find_elements(By.CSS_SELECTOR, "#tensors tbody tr")]

    def as_numbers(col):
        return [float(v) for v in col]

    initial = as_numbers(column(4))
    assert initial == sorted(initial)  # ranked by SQNR ascending
    header = browser.find_elements(By.CSS_SELECTOR, "#tensors th")
    header[4].click()  # already ascending: descending now
    assert as_numbers(column(4)) == sorted(initial, reverse=True)
    header[0].click()  # by name
    names = [v.lower() for v in column(0)]
    assert names == sorted(names) and len(names) == len(r.tensors)
    assert header[0].get_attribute("aria-sort") == "ascending"
    header[5].click()
    assert as_numbers(column(5)) == sorted(as_numbers(column(5)))


def test_screenshot_is_not_blank(page, browser, tmp_path):
    """A full-page screenshot: every plot's box holds a real picture (many distinct colours: bars,
    shaded ranges, axes, anti-aliased text), not an empty or failed element."""
    Image = pytest.importorskip("PIL.Image")  # Pillow: a dependency of matplotlib
    r, path = page
    browser.get(path.as_uri())
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, height + 100)
    shot = tmp_path / "report.png"
    browser.save_screenshot(str(shot))
    boxes = browser.execute_script(
        "return Array.from(document.querySelectorAll('.plot svg')).map(function (s) {"
        " var b = s.getBoundingClientRect(); return [b.left + window.scrollX, b.top + window.scrollY, b.width, b.height]; });")
    ratio = browser.execute_script("return window.devicePixelRatio")
    image = Image.open(shot).convert("RGB")
    for left, top, w, h in boxes:
        crop = image.crop(tuple(int(v * ratio) for v in (left, top, left + w, top + h)))
        colors = crop.getcolors(maxcolors=1 << 20)
        assert colors is not None and len(colors) >= 20, (left, top, w, h)
    target = os.environ.get("POLYQUANT_REPORT_SCREENSHOT")
    if target:  # regenerates docs/img/report.png: the page's top (summary to the first histograms), 96 colours
        top = image.crop((0, 0, image.width, min(image.height, int(2000 * ratio))))
        top.quantize(colors=96).save(target, optimize=True)


# ---- streaming ------------------------------------------------------------------------------------


_PEAK_SCRIPT = """
import gc, sys, tracemalloc
import numpy as np
import polyquant

class GeneratedBatches:  # n batches made on the fly each time it is iterated (never all in memory)
    def __init__(self, n):
        self.n = n
    def __iter__(self):
        rng = np.random.default_rng(7)
        for _ in range(self.n):
            yield {"x": rng.standard_normal((8, 1, 12, 12)).astype(np.float32)}

model = sys.argv[1]
polyquant.report(model, GeneratedBatches(2), show_progress=False)  # imports and caches warmed up
for n in (4, 40):
    gc.collect()
    tracemalloc.start()
    r = polyquant.report(model, GeneratedBatches(n), show_progress=False)
    print(n, tracemalloc.get_traced_memory()[1], r.batches, sum(int(t.counts.sum()) for t in r.activations))
    tracemalloc.stop()
"""


def test_memory_does_not_grow_with_the_number_of_batches(tmp_path):
    """Peak Python-side allocations (numpy's included) for 10x the batches stay within 1.5x: one batch
    and the statistics are held, not the data. Measured in a fresh interpreter: tracemalloc counts
    every thread's allocations, and under pytest-xdist the worker's messaging thread allocates while
    the report runs (a full parallel run once measured 1.54x that way; alone, 1.08x)."""
    import subprocess
    import sys
    path = tmp_path / "conv.onnx"
    onnx.save(conv_net(), path)
    done = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, str(path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    (n_small, small, batches_small, counts_small), (n_large, large, batches_large, counts_large) = (
        tuple(int(v) for v in line.split()) for line in done.stdout.split("\n") if line.strip())
    assert (n_small, batches_small, n_large, batches_large) == (4, 4, 40, 40)
    assert counts_large == 10 * counts_small
    assert large < 1.5 * small, (small, large)


def test_progress_bars_only_on_a_terminal(monkeypatch):
    calls = []

    def fake_progress(iterable, desc, total=None, unit="run"):
        calls.append((desc, total))
        return rep_mod._NoBar(())

    monkeypatch.setattr(rep_mod, "progress", fake_progress)
    polyquant.report(small_model(), batches(2))
    assert calls == []  # pytest's stderr is not a terminal
    monkeypatch.setattr(rep_mod.sys.stderr, "isatty", lambda: True, raising=False)
    polyquant.report(small_model(), batches(2))
    assert calls == [("report: statistics", 2), ("report: histograms", 2)]


# ---- the summary's pointers, names, data files ----------------------------------------------------


def mlp_chain(names, opset=17):
    """input -> (MatMul -> Tanh) per name: activations named by the caller (any characters)."""
    rng = np.random.default_rng(11)
    nodes, inits, prev = [], [], "input"
    for k, name in enumerate(names):
        inits.append(numpy_helper.from_array((rng.standard_normal((8, 8)) / 3).astype(np.float32), f"w{k}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{k}"], [f"mm{k}"]), helper.make_node("Tanh", [f"mm{k}"], [name])]
        prev = name
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("input", T.FLOAT, ["n", 8])],
                          [helper.make_tensor_value_info(prev, T.FLOAT, ["n", 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def test_divergence_points_at_the_lowest_and_the_largest_drop():
    names = [f"act{k}" for k in range(6)]
    rng = np.random.default_rng(2)
    r = polyquant.report(mlp_chain(names), [{"input": rng.standard_normal((16, 8)).astype(np.float32)}])
    acts = r.activations  # graph order: input, act0 .. act4 (inputs of the MatMuls), then the output act5
    assert [t.name for t in acts] == ["input"] + names
    sq = [t.model_sqnr_db for t in acts]
    div = r.divergence()
    assert div["worst"] == (acts[int(np.argmin(sq))].name, min(sq))
    drops = [sq[k] - sq[k + 1] for k in range(len(sq) - 1)]
    k = int(np.argmax(drops))
    assert div["largest_drop"] == (acts[k].name, acts[k + 1].name, drops[k])


def test_names_are_escaped_in_the_page():
    pytest.importorskip("matplotlib")
    odd = 'a<b>&"c'
    rng = np.random.default_rng(2)
    r = polyquant.report(mlp_chain([odd, "out"]), [{"input": rng.standard_normal((4, 8)).astype(np.float32)}])
    text = r.html()
    assert odd not in text and "a&lt;b&gt;&amp;&quot;c" in text


def test_npz_file_for_a_model(tmp_path):
    onnx.save(small_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "b.npz", **batches(1)[0])
    code, text = run_cli("report", str(tmp_path / "m.onnx"), "--data", str(tmp_path / "b.npz"), "--json",
                         str(tmp_path / "r.json"))
    assert code == 0, text
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["batches"] == 1 and d["model"] == "m.onnx"
    assert d == polyquant.report(str(tmp_path / "m.onnx"), str(tmp_path / "b.npz")).to_dict()
