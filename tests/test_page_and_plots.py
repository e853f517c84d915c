"""Pictures: --plot on each answer, and the self-contained roofline page."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from ridgeline.cli import main
from ridgeline.page import (
    BATCHES,
    CONTEXTS,
    FMT_SHARE_JS,
    KV_CHART_JS,
    page_data,
    page_html,
    point_words,
)
from ridgeline.plots import Chart, Series, html_page, save
from ridgeline.served_model import DEFAULT_WEIGHTS_ENTRY, LLAMACPP_STORED_GGUF, llamacpp_weights
from ridgeline.units import fmt_share
from tests.conftest import LOWBATCH, SERVING


def test_page_data_come_from_the_python_model() -> None:
    from ridgeline import Deployment, decode_floor, resolve_accelerator, resolve_model

    data = page_data(["llama-3.1-70b"], ["h100-sxm"], [1, 2], ["fp8"], ["bf16"])
    one, two = (data["combos"][f"llama-3.1-70b|h100-sxm|{n}|fp8|bf16"] for n in (1, 2))
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"), "fp8",
                           "bf16", 2)
    ci, bi = CONTEXTS.index(2048), BATCHES.index(32)
    assert two["agg_floor"][ci][bi] == pytest.approx(decode_floor(dep, 32, 2048).aggregate_tok_s)
    # fp8 matmuls, with the bf16 LM head's blended in (Deployment.dense_peak_flops_per_s)
    assert two["ridge"] == pytest.approx(dep.dense_ridge_flop_per_byte)
    assert 989.4e12 / 3.35e12 < two["ridge"] < 1978.9e12 / 3.35e12
    # the ridge batch is a batch: ridge × bytes per weight ÷ 2, not the ridge in FLOP/byte
    assert two["batch_to_ridge"] == pytest.approx(two["ridge"] * two["bpw"] / 2)
    assert one["fits"][ci][bi] is False  # the article's 32 users do not fit one H100
    assert one["agg_exp"][ci][bi] is None and one["user_floor"][ci][bi] is None  # no speed
    assert two["fits"][ci][bi] is True
    # decode attention after each context: GQA's group 8 at bf16 whatever the context
    assert one["att_int"] == pytest.approx([8] * len(CONTEXTS))
    # the page opens on the first pick whose pool runs batch 32 at 2,048 tokens: two cards
    assert (data["start_batch"], data["start_context"]) == (bi, ci)
    assert data["start"] == ["llama-3.1-70b", "h100-sxm", "2", "fp8", "bf16"]


def test_the_pages_band_is_decodes_band(capsys: pytest.CaptureFixture[str]) -> None:
    # a rate's band is the time's band inverted: decode's 21.8–29.9 ms step is 1,071–1,470
    # tok/s for 32 users; the page had divided the rate by the multipliers, drawing it ~8 % fast
    data = page_data(["llama-3.1-70b"], ["h100-sxm"], [2], ["fp8"], ["bf16"])
    combo = data["combos"]["llama-3.1-70b|h100-sxm|2|fp8|bf16"]
    ci, bi = CONTEXTS.index(2048), BATCHES.index(32)
    assert main(["decode", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2", "--weights",
                 "fp8", "--batch", "32", "--context", "2048", "--usage", "serve",
                 "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)["points"][0]["expected"]
    assert combo["agg_exp"][ci][bi] == pytest.approx(expected["aggregate_tok_s"])
    assert combo["agg_low"][ci][bi] == pytest.approx(32 / expected["high_s"])
    assert combo["agg_high"][ci][bi] == pytest.approx(32 / expected["low_s"])
    assert combo["agg_low"][ci][bi] < combo["agg_exp"][ci][bi] < combo["agg_high"][ci][bi]


def test_a_picker_combination_that_cannot_run_says_why(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A V100 has no fp8: its picks stay in the pickers, and the page and the command say
    why they cannot run, instead of a bare "not computable"."""
    data = page_data(["llama-3.1-8b"], ["h100-sxm", "v100"], [1], ["fp8"], ["bf16"])
    assert "llama-3.1-8b|h100-sxm|1|fp8|bf16" in data["combos"]
    assert "no fp8 weights on v100" in data["left_out"]["llama-3.1-8b|v100|1|fp8|bf16"]
    out = tmp_path / "roofline.html"
    assert main(["page", "llama-3.1-8b", "--gpu", "h100,v100", "--counts", "1", "--weights",
                 "fp8", "--kv-dtypes", "bf16", "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert "1 picker combination cannot run (the page says why; the first, llama-3.1-8b " \
        "v100 1 fp8 bf16:" in said
    assert "no fp8 weights on v100" in out.read_text()


def test_the_page_is_one_offline_file_with_sliders(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "roofline.html"
    assert main(["page", "llama-3.1-8b", "--gpu", "h100,l40s", "--counts", "1,2", "-o",
                 str(out)]) == 0
    html = out.read_text()
    assert 'type="range"' in html and "uPlot" in html
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=\"?http", html)  # nothing fetched
    payload = json.loads(html.split("const PAGE = ", 1)[1].split(";\n", 1)[0])
    assert len(payload["combos"]) == 2 * 2 * 3 * 2
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("suffix", [".html", ".svg", ".png"])
def test_every_answer_can_be_drawn(tmp_path: Path, suffix: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    if suffix != ".html":
        pytest.importorskip("matplotlib")
    commands = [
        ["decode", "llama-3.1-8b", "--gpu", "h100"],
        ["kv", "gpt-oss-120b", "--context", "8k"],
        ["fit", "gpt-oss-120b", "--gpu", "h100", "--num-gpus", "2", "--max-model-len", "8k"],
        ["moe", "qwen3-30b-a3b"],
        ["validate", str(LOWBATCH), "--summary"],  # tok/s rows to draw, fewer than the whole set
        ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "5", "--num-requests", "40"],
    ]
    for i, argv in enumerate(commands):
        path = tmp_path / f"plot{i}{suffix}"
        assert main([*argv, "--plot", str(path)]) == 0, argv
        assert path.stat().st_size > 1000
        assert capsys.readouterr().err.startswith(f"wrote {path}: ")  # said where it went


def test_a_plot_to_an_unknown_format_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["decode", "llama-3.1-8b", "--gpu", "h100", "--plot", "x.gif"]) == 2
    assert ".png, .svg or .html" in capsys.readouterr().err
    # refused before the run: no report printed for a run that then fails
    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2",
                 "--num-requests", "20", "--json", "--plot", "out.txt"]) == 2
    assert capsys.readouterr().out == ""
    assert main(["decode", "llama-3.1-8b", "--gpu", "h100", "--plot",
                 "/no/such/folder/x.html"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "no folder /no/such/folder" in captured.err


def test_html_charts_align_series_on_one_x_axis(tmp_path: Path) -> None:
    chart = Chart("t", "x", "y", (Series("a", (1.0, 2.0), (3.0, 4.0)),
                                  Series("b", (2.0, 5.0), (1.0, 1.0), "points")))
    html = html_page("t", [chart])
    payload = json.loads(html.split("const CHARTS = ", 1)[1].split(";\n", 1)[0])
    assert payload[0]["data"] == [[1.0, 2.0, 5.0], [3.0, 4.0, None], [None, 1.0, 1.0]]
    path = tmp_path / "c.html"
    assert save(chart, str(path)) == str(path)


def test_page_html_embeds_the_data() -> None:
    data = page_data(["llama-3.2-1b"], ["l4"], [1], ["as stored"], ["bf16"])
    assert "llama-3.2-1b|l4|1|as stored|bf16" in page_html(data, "t")


@pytest.mark.skipif(shutil.which("node") is None, reason="no node to run the page's script")
def test_the_pages_share_of_the_arithmetic_stays_on_its_side_of_a_bound() -> None:
    """The page's summary gives the weights' share of the arithmetic through its fmtShare,
    which reads as units.fmt_share does: 0.9996 of the ridge at one place is '99.96%', where
    the page's toFixed(1) printed '100.0%' (a batch under the ridge read as at it), and
    0.0004 '0.04%', not '0.0%'. Run under node on the bounds' neighbours and a seeded draw."""
    draw = random.Random(0)
    shares = [0.0, 1.0, 0.42, 0.003, 0.0004, 0.9996, 0.99996, 0.99949, 1 - 1e-12, 1e-9,
              *(draw.random() for _ in range(200)), *(1 - draw.random() / 1e4 for _ in range(50))]
    script = (FMT_SHARE_JS + "console.log(JSON.stringify(" + json.dumps(shares)
              + ".map(s => fmtShare(s, 1))));")
    shown = json.loads(subprocess.run(["node", "-e", script], capture_output=True, text=True,
                                      check=True, timeout=60).stdout)
    assert shown == [fmt_share(s, 1) for s in shares]
    assert shown[shares.index(0.9996)] == "99.96%" and shown[shares.index(1.0)] == "100.0%"
    html = page_html(page_data(["llama-3.2-1b"], ["l4"], [1], ["as stored"], ["bf16"]), "t")
    assert "fmtShare(Math.min(1, c.w_int[i] / c.ridge), 1)" in html and ".toFixed(1) + \"%" \
        not in html


@pytest.mark.skipif(shutil.which("node") is None, reason="no node to run the page's script")
def test_the_pages_kv_chart_marks_a_context_that_holds_no_conversation_apart() -> None:
    """Llama-3.1-8B on one L4 holds conversations up to 8,192 tokens and none past: its KV
    chart's count line stops there (a log scale has no 0, and the page once drew 0 as 0.1, a
    count), a marker of its own sits at the floor, under every count drawn on its axis (the
    GiB per conversation have an axis of their own: "count / GiB" read as a ratio), reading "none",
    and a note names the contexts. Where every context holds one, no marker and no note."""
    data = page_data(["llama-3.1-8b"], ["l4", "h100-sxm"], [1], ["as stored"], ["bf16"])
    script = (KV_CHART_JS + "const D = " + json.dumps(data) + ";\nconsole.log(JSON.stringify("
              "Object.values(D.combos).map(c => kvChart(c, D.contexts))));")
    charts = json.loads(subprocess.run(["node", "-e", script], capture_output=True, text=True,
                                       check=True, timeout=60).stdout)
    for combo, chart in zip(data["combos"].values(), charts):
        held = combo["conversations"]
        assert chart["data"][1] == [n if n > 0 else None for n in held]
        none = [c for c, n in zip(data["contexts"], held) if n == 0]
        if not none:
            assert len(chart["series"]) == 3 and len(chart["notes"]) == 1
            continue
        marker = chart["data"][4]
        assert chart["series"][3]["text"] == "none"
        assert [c for c, y in zip(data["contexts"], marker) if y is not None] == none
        # under every figure on its own axis, the left one's (the GiB have their own, y2)
        assert [s.get("y2", False) for s in chart["series"][:3]] == [False, True, False]
        drawn = [v for row in (chart["data"][1], chart["data"][3]) for v in row if v]
        assert max(y for y in marker if y is not None) < min(drawn)
        assert f"{none[-1]:,} tokens" in chart["notes"][-1]
    assert any(0 in c["conversations"] for c in data["combos"].values())  # the L4's
    assert any(0 not in c["conversations"] for c in data["combos"].values())  # the H100's


def _wait_for_summary(browser: Any) -> None:
    """Wait (up to 10 s) for the page's script to write its summary."""
    for _ in range(100):
        if browser.evaluate("document.getElementById('summary').textContent.length > 0"):
            return
        time.sleep(0.1)


@pytest.mark.skipif(not __import__("tests.browser", fromlist=["x"]).chromium_path(),
                    reason="Chromium is not installed (.ci/run installs it)")
def test_the_page_in_headless_chromium_moves_with_the_batch_slider(tmp_path: Path) -> None:
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.cost import decode_batch, step_time_s
    from ridgeline.engines import profile_for
    from tests.browser import Browser

    out = tmp_path / "roofline.html"
    assert main(["page", "llama-3.1-8b", "--gpu", "h100", "--counts", "1", "--weights", "bf16",
                 "--kv-dtypes", "bf16", "-o", str(out)]) == 0
    browser = Browser(out.as_uri())
    try:
        _wait_for_summary(browser)
        dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                               "bf16", "bf16")
        seen = []
        for index in (0, 7):
            move = ("(() => { const s = document.getElementById('batch'); s.value = INDEX;"
                    " s.dispatchEvent(new Event('input')); "
                    "return document.getElementById('summary').textContent; })()")
            text = browser.evaluate(move.replace("INDEX", str(index)))
            batch = BATCHES[index]
            per_user = 1 / step_time_s(dep, decode_batch(batch, 2048), profile_for("vllm"))
            assert text.startswith(f"batch {batch} at 2,048 tokens")
            shown = float(text.split(": ", 1)[1].split(" tok/s")[0].replace(",", ""))
            assert shown == pytest.approx(per_user, rel=0.01)
            seen.append(shown)
        assert seen[0] != seen[1]
        assert browser.evaluate("document.querySelectorAll('canvas').length") >= 3
        browser.screenshot(str(tmp_path / "page.png"))
        assert (tmp_path / "page.png").stat().st_size > 10_000
    finally:
        browser.close()


def test_a_llama_cpp_pages_weights_picker_names_the_gguf_it_computes(tmp_path: Path) -> None:
    """Under llama.cpp the page's default entry is the weights fit reads with no --weights:
    gpt-oss as ggml-org's mxfp4_moe GGUF (served_model.llamacpp_weights), said so in the
    picker; another model's as stored. An explicit "as stored" is fit's --weights "as stored",
    convert_hf_to_gguf.py's own (BF16) output, and says so too."""
    from tests.browser import Browser

    data = page_data(["gpt-oss-120b", "llama-3.1-8b"], ["h100-sxm"], [2],
                     [DEFAULT_WEIGHTS_ENTRY, "q8_0"], ["f16"], engine="llama.cpp")
    assert data["weights_shown"] == {
        "gpt-oss-120b": {DEFAULT_WEIGHTS_ENTRY: "mxfp4_moe (ggml-org's GGUF of the checkpoint)"},
        "llama-3.1-8b": {DEFAULT_WEIGHTS_ENTRY: "as stored"}}
    assert page_data(["gpt-oss-120b"], ["h100-sxm"], [2], ["as stored"], ["bf16"]
                     )["weights_shown"] == {}  # vLLM runs the checkpoint as stored
    out = tmp_path / "roofline.html"
    assert main(["page", "gpt-oss-120b", "--gpu", "h100", "--counts", "2", "--engine",
                 "llama.cpp", "--weights", f"{DEFAULT_WEIGHTS_ENTRY},as stored,q8_0", "-o",
                 str(out)]) == 0
    if not __import__("tests.browser", fromlist=["x"]).chromium_path():
        return
    browser = Browser(out.as_uri())
    try:
        _wait_for_summary(browser)
        labels = browser.evaluate(
            "[...document.getElementById('weights').options].map(o => o.textContent)")
        assert labels == ["mxfp4_moe (ggml-org's GGUF of the checkpoint)",
                          f"as stored ({LLAMACPP_STORED_GGUF}, not ggml-org's mxfp4_moe)",
                          "q8_0"]
    finally:
        browser.close()


def test_a_llama_cpp_page_labels_the_default_gguf_and_the_stored_conversion_apart() -> None:
    """gpt-oss-20b on an RTX 4090 under llama.cpp: the page's default entry is computed as
    ggml-org's mxfp4_moe GGUF (decode and fit with no --weights), an explicit "as stored" as
    convert_hf_to_gguf.py's own (BF16) output (decode and fit's --weights "as stored"); each label
    says which, and the numbers under each are decode's for that GGUF."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.capacity import decode_held

    model = "openai/gpt-oss-20b"
    data = page_data([model], ["rtx-4090"], [1], [DEFAULT_WEIGHTS_ENTRY, "as stored"], ["f16"],
                     engine="llama.cpp")
    spec, acc = resolve_model(model), resolve_accelerator("rtx-4090")
    gguf = llamacpp_weights(spec)
    shown = data["weights_shown"][model]
    assert gguf is not None and gguf in shown[DEFAULT_WEIGHTS_ENTRY]
    assert LLAMACPP_STORED_GGUF in shown["as stored"]
    for entry, weights in ((DEFAULT_WEIGHTS_ENTRY, None), ("as stored", "as stored")):
        dep = Deployment.build(spec, acc, weights, "f16", engine="llama.cpp")
        combo = data["combos"][f"{model}|rtx-4090|1|{entry}|f16"]
        assert combo["conversations"] == [decode_held(dep, c) for c in data["contexts"]]
        assert combo["bpw"] == dep.bytes_per_weight_split[0]
    assert data["combos"][f"{model}|rtx-4090|1|{DEFAULT_WEIGHTS_ENTRY}|f16"]["conversations"] \
        != data["combos"][f"{model}|rtx-4090|1|as stored|f16"]["conversations"]


@pytest.mark.parametrize("stored", ["as stored", "stored", "auto"])
def test_a_llama_cpp_pages_stored_entry_is_fits_stored_weights(
        capsys: pytest.CaptureFixture[str], stored: str) -> None:
    """page --engine llama.cpp --weights "as stored" (or "stored", "auto") is the file fit
    --engine llama.cpp --weights "as stored" sizes, convert_hf_to_gguf.py's own (BF16) output: gpt-oss-20b
    on an H100 reaches the ridge at bf16's 296.0, not ggml-org's GGUF's 157.8, which the page
    had given it as its default entry's; the default entry is fit's with no --weights."""
    argv = ["gpt-oss-20b", "--gpu", "h100", "--engine", "llama.cpp", "--json"]
    assert main(["page", *argv, "--counts", "1", "--kv-dtypes", "f16", "--weights",
                 f"{DEFAULT_WEIGHTS_ENTRY},{stored}"]) == 0
    combos = json.loads(capsys.readouterr().out)["page"]["combos"]
    fits = {}
    for entry, flags in ((DEFAULT_WEIGHTS_ENTRY, []), (stored, ["--weights", stored])):
        assert main(["fit", *argv, *flags]) == 0
        fits[entry] = json.loads(capsys.readouterr().out)["batch_to_ridge"]
        assert combos[f"gpt-oss-20b|h100|1|{entry}|f16"]["batch_to_ridge"] \
            == pytest.approx(fits[entry])
    assert round(fits[stored], 1) == 296.0 and round(fits[DEFAULT_WEIGHTS_ENTRY], 1) == 157.8


def test_the_page_refuses_two_names_for_the_stored_formats(
        capsys: pytest.CaptureFixture[str]) -> None:
    """"as stored" and "stored" are one format, as fit reads them: two picker entries for one
    file are refused, as a name given twice is."""
    assert main(["page", "gpt-oss-20b", "--gpu", "h100", "--engine", "llama.cpp", "--json",
                 "--weights", "as stored,stored"]) == 2
    err = capsys.readouterr().err
    assert "--weights names one weight format twice (as stored, stored)" in err
    assert err.count("\n") == 1


def test_plots_carry_the_models_numbers(tmp_path: Path) -> None:
    from ridgeline import Deployment, decode_floor, resolve_accelerator, resolve_model

    html = tmp_path / "decode.html"
    assert main(["decode", "llama-3.1-8b", "--gpu", "h100", "--context", "4096", "--plot",
                 str(html)]) == 0
    payload = json.loads(html.read_text().split("const CHARTS = ", 1)[1].split(";\n", 1)[0])
    data, names = payload[0]["data"], [s["name"] for s in payload[0]["series"]]
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))
    floor = decode_floor(dep, 16, 4096).aggregate_tok_s
    column = data[1 + names.index("aggregate, floor")]
    assert column[data[0].index(16)] == pytest.approx(floor)


@pytest.mark.parametrize(("argv", "context"), [
    (("gpt-oss-120b", "--context", "100000"), 100_000),
    (("mistral-7b", "--context", "20000", "--gpu", "h100", "--engine", "sglang"), 20_000),
    # MLA's latent on each of 8 tensor-parallel ranks: the text's per sequence is 8 copies
    (("deepseek-v3", "--context", "32768", "--gpu", "h200", "--num-gpus", "8"), 32_768)])
def test_a_kv_plot_marks_the_context_asked_on_its_curve(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...],
        context: int) -> None:
    """kv --plot drew the sweep (512 … 131,072) without the context asked: 100,000 tokens
    sat between two points, unmarked. Now the asked context is a point of the curve and a
    marked point of its own, at the text's per-sequence figure (--json's bytes_per_sequence),
    named in the legend. Under SGLang, Mistral-7B's window layers keep every token
    (engine_windows), and the curve follows the report. Where tensor parallelism copies the
    cache (DeepSeek-V3's latent on 8 H200s, ×8), the curve drew one copy, an eighth of the
    text's figure: it now draws the copies, and its legend says so."""
    assert main(["kv", *argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    html = tmp_path / "kv.html"
    assert main(["kv", *argv, "--plot", str(html)]) == 0
    chart = json.loads(html.read_text().split("const CHARTS = ", 1)[1].split(";\n", 1)[0])[0]
    data, series = chart["data"], chart["series"]
    marks = [i for i, s in enumerate(series) if s["style"] == "mark"]
    assert len(marks) == 1
    mark = series[marks[0]]
    gib = report["bytes_per_sequence"] / 2**30
    assert mark["name"] == f"asked: {context:,} tokens, {gib:,.3f} GiB"
    row = data[0].index(context)
    assert data[1 + marks[0]][row] == pytest.approx(gib)
    copies = report["tp_replication"]
    name = "KV per conversation (GiB)" if copies == 1 else \
        f"KV per conversation, over {report['num_gpus']} GPUs with the latent's copies " \
        f"×{copies:g} (GiB)"
    curve = data[1 + [s["name"] for s in series].index(name)]
    assert curve[row] == pytest.approx(gib)  # the mark sits on the curve
    if copies != 1:  # each GPU's copy, as the text's "on each GPU", is the curve's share
        assert report["bytes_per_sequence_per_gpu"] * report["num_gpus"] \
            == pytest.approx(gib * 2**30)
    assert sum(y is not None for y in data[1 + marks[0]]) == 1


def test_a_decode_plot_draws_no_speed_for_a_batch_that_cannot_run(tmp_path: Path) -> None:
    """Llama-3.1-8B on an H100 at 2,000 tokens: the engine's pool seats 220 sequences and the
    memory 256 at most, so the expectation stops before batch 256 and the floor before 512;
    the batches asked (here 300) are drawn among the sweep's."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.capacity import engine_holds

    html = tmp_path / "decode.html"
    assert main(["decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1,300", "--context",
                 "2000", "--plot", str(html)]) == 0
    chart = json.loads(html.read_text().split("const CHARTS = ", 1)[1].split(";\n", 1)[0])[0]
    data, names = chart["data"], [s["name"] for s in chart["series"]]
    xs = data[0]
    floor = data[1 + names.index("aggregate, floor")]
    expected = data[1 + names.index("aggregate, expected (vllm)")]
    seats = engine_holds(Deployment.build(resolve_model("llama-3.1-8b"),
                                          resolve_accelerator("h100")), 2000)
    assert seats is not None and 128 < seats < 256 and 300 in xs
    drawn = [x for x, y in zip(xs, expected) if y is not None]
    assert max(drawn) <= seats < min(x for x, y in zip(xs, expected) if y is None)
    assert floor[xs.index(256)] is not None and floor[xs.index(512)] is None
    assert any(f"stops at {seats:,} sequences" in n for n in chart["notes"])


def test_png_plots_have_the_figure_size(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import struct

    png = tmp_path / "kv.png"
    assert main(["kv", "gpt-oss-120b", "--context", "8k", "--plot", str(png)]) == 0
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", header[16:24]) == (800, 500)  # 8 x 5 inches at 100 dpi


def test_a_png_plots_notes_sit_under_the_axes_and_overprint_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """decode's notes (four here: the floor stops, one context of two, no expectation) had
    been stacked over the x-axis label and the tick labels; they sit in their own block
    under them, first note on top, inside the figure, a long one wrapped to its width."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    drawn: dict[str, Any] = {}
    savefig = Figure.savefig

    def spy(fig: Figure, *args: Any, **kwargs: Any) -> None:
        savefig(fig, *args, **kwargs)  # the figure as written, before it is closed
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        ax = fig.axes[0]
        drawn["figure"] = fig.bbox
        drawn["notes"] = [t.get_window_extent(renderer) for t in fig.texts]
        drawn["texts"] = [t.get_text() for t in fig.texts]
        drawn["axis"] = [ax.xaxis.label.get_window_extent(renderer),
                         *(t.get_window_extent(renderer) for t in ax.get_xticklabels()
                           if t.get_text())]

    monkeypatch.setattr(Figure, "savefig", spy)
    asked = ["decode", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2", "--batch", "1,8",
             "--context", "8000,32000", "--plot"]
    html, png = tmp_path / "d.html", tmp_path / "d.png"
    assert main([*asked, str(html)]) == 0 and main([*asked, str(png)]) == 0
    notes_asked = json.loads(html.read_text().split("const CHARTS = ", 1)[1]
                             .split(";\n", 1)[0])[0]["notes"]
    assert len(notes_asked) >= 3 and png.exists()
    figure, notes, axis = drawn["figure"], drawn["notes"], drawn["axis"]
    assert notes and axis
    for note in notes:
        assert all(note.y1 < a.y0 for a in axis)
        assert note.x0 >= 0 and note.x1 <= figure.x1 and note.y0 >= 0
    text = " ".join(" ".join(drawn["texts"]).split())
    assert all(note in text for note in notes_asked)  # every note, whole (wrapped or not)
    assert text.index(notes_asked[0]) < text.index(notes_asked[-1])  # the first on top

    long = Chart("t", "batch", "tok/s", (Series("a", (1.0, 2.0), (2.0, 1.0)),),
                 notes=("word " * 300,))
    save(long, str(tmp_path / "long.png"))
    (block,) = drawn["notes"]
    assert block.x1 <= drawn["figure"].x1
    assert all(block.y1 < a.y0 for a in drawn["axis"])


def test_page_writes_only_html_and_never_over_a_file_it_did_not_write(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`page -o roof.png` wrote HTML into a .png, and `-o profile.json` replaced a
    calibrated profile: both are refused, a page it wrote is rewritten."""
    profile = tmp_path / "profile.json"
    profile.write_text('{"engines": {}}')
    for name, said in (("roof.png", "takes an .html file"),
                       ("profile.json", "takes an .html file")):
        assert main(["page", "llama-3.1-8b", "--gpu", "h100", "-o", str(tmp_path / name)]) == 2
        assert said in capsys.readouterr().err
    notes = tmp_path / "notes.html"
    notes.write_text("<!doctype html><title>my notes</title>")
    assert main(["page", "llama-3.1-8b", "--gpu", "h100", "-o", str(notes)]) == 2
    assert "not a page ridgeline wrote" in capsys.readouterr().err
    assert notes.read_text().endswith("my notes</title>") and profile.read_text().startswith("{")
    page = tmp_path / "page.html"
    args = ["page", "llama-3.1-8b", "--gpu", "h100", "--counts", "1", "--weights", "bf16",
            "-o", str(page)]
    assert main(args) == 0 and main(args) == 0  # its own page, rewritten


def test_page_json_prints_the_pages_data_and_writes_html_only_where_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`page --json` wrote roofline.html into the working folder, unasked: it prints the data
    the HTML embeds (under 'page') and writes nothing; with -o it writes that file too, the
    same data in it; without --json the page still goes to roofline.html."""
    monkeypatch.chdir(tmp_path)
    args = ["page", "llama-3.1-8b", "--gpu", "h100", "--counts", "1"]
    assert main([*args, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert list(tmp_path.iterdir()) == [] and printed["wrote"] is None
    assert printed["deployments"] == len(printed["page"]["combos"]) == 6
    assert main([*args, "--json", "-o", "mine.html"]) == 0
    written = json.loads(capsys.readouterr().out)
    html = (tmp_path / "mine.html").read_text()
    embedded = json.loads(html.split("const PAGE = ", 1)[1].split(";\n", 1)[0])
    assert written["wrote"] == "mine.html" and embedded == written["page"] == printed["page"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.html"]
    assert main(args) == 0
    assert "wrote roofline.html" in capsys.readouterr().out
    assert (tmp_path / "roofline.html").read_text() == html


def test_a_llama_cpp_page_offers_llama_cpps_own_formats(tmp_path: Path) -> None:
    """Its defaults are GGUF weights and llama.cpp's cache types (it has no fp8 cache); the
    formats offered are the same at any count (one card here)."""
    out = tmp_path / "p.html"
    assert main(["page", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp",
                 "--counts", "1", "-o", str(out)]) == 0
    assert "q4_k_m" in out.read_text() and "q8_0" in out.read_text()


@pytest.mark.parametrize("model", ["llama-3.1-8b", "gpt-oss-20b"])
def test_a_llama_cpp_page_runs_the_batches_decode_prices(
        capsys: pytest.CaptureFixture[str], model: str) -> None:
    """The page prices llama.cpp's batches as decode does: batch 4 of Llama-3.1-8B at 512
    tokens on a 4090 at decode's speed, batch 8 past llama-server's default 4 slots with no
    speed in either (decode's words say why, and --parallel raises them); its conversations
    are the slots the pool holds a sequence each, decode's count (gpt-oss-20b's pool was
    sized for 4 slots of windows, 764 conversations to 637)."""
    data = page_data([model], ["rtx-4090"], [1], ["q4_k_m"], ["f16"], engine="llama.cpp")
    combo = data["combos"][f"{model}|rtx-4090|1|q4_k_m|f16"]
    ci = CONTEXTS.index(512)
    assert main(["decode", model, "--gpu", "rtx-4090", "--engine", "llama.cpp", "--weights",
                 "q4_k_m", "--batch", "4,8", "--context", "512", "--json"]) == 0
    decoded = json.loads(capsys.readouterr().out)
    four, eight = decoded["points"]
    assert combo["fits"][ci][BATCHES.index(4)] is True and four["expected"] is not None
    assert combo["agg_exp"][ci][BATCHES.index(4)] == pytest.approx(
        four["expected"]["aggregate_tok_s"])
    assert combo["fits"][ci][BATCHES.index(8)] is False and eight["expected"] is None
    key = f"{model}|rtx-4090|1|q4_k_m|f16"
    assert "--parallel N raises it" in point_words(data, key, ci, BATCHES.index(8))[0]
    assert combo["conversations"][ci] == decoded["engine_max_batch"][0]["conversations"]


def test_a_llama_cpp_page_explains_the_margin_its_pool_leaves_free(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The opening view's pool (Llama-3.1-8B q4_k_m on a 4090 at 2,048 tokens) is decode's,
    less the 1,024 MiB llama-server's default --fit keeps free: --explain names that margin,
    as decode's pool line and `fit`'s breakdown do (it had divided the smaller pool unsaid)."""
    assert main(["page", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp",
                 "--counts", "1", "-o", str(tmp_path / "p.html"), "--json", "--explain"]) == 0
    data = json.loads(capsys.readouterr().out)
    step = next(s for s in data["explain"] if s["label"].startswith("conversations of"))
    assert "less the 1,024 MiB its default --fit keeps free (--fit-target)" in step["formula"]


def test_validate_plot_says_how_many_rows_it_leaves_out_for_their_units(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The chart draws tok/s against tok/s; the published file's TTFTs, per-GPU throughputs
    and KV capacities were left off it without a word (the serving rows: per-GPU throughputs
    beside tok/s)."""
    from ridgeline.measurements import UNITS

    path = tmp_path / "v.html"
    assert main(["validate", str(SERVING), "--json", "--plot", str(path)]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)["rows"]
    other = sum(r["predicted"] is not None and UNITS[r["metric"]] != "tok/s" for r in rows)
    assert other > 0
    assert f"(tok/s; {other} rows in other units not drawn)" in captured.err


def test_validate_plot_with_no_speed_rows_keeps_the_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """KV-capacity rows alone: nothing in tok/s to draw. The report prints, and the run ends
    with one line saying why there is no chart (it had ended in 'min() arg is an empty
    sequence', the report lost)."""
    import csv

    source = Path(__file__).resolve().parent.parent / "validation" / "measurements.csv"
    with source.open(encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        rows = [r for r in reader if r["metric"] in ("kv_cache_tokens", "gpu_blocks")][:3]
        columns = reader.fieldnames
    assert rows and columns
    path = tmp_path / "kv.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    assert main(["validate", str(path), "--plot", str(tmp_path / "kv.html")]) == 2
    captured = capsys.readouterr()
    assert "rows scored" in captured.out
    assert "no row measures tok/s" in captured.err and not (tmp_path / "kv.html").exists()


def test_page_explains_its_opening_view_and_refuses_a_page_where_nothing_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--explain shows the ridge and the batch to reach it for the view the page opens on
    (it printed no step); a page where no deployment holds a conversation is "does not fit"
    (it wrote six empty charts and exited 0); an unknown model is named as itself."""
    out = tmp_path / "p.html"
    assert main(["page", "llama-3.1-8b", "--gpu", "h100", "--counts", "1", "-o", str(out),
                 "--json", "--explain"]) == 0
    data = json.loads(capsys.readouterr().out)
    ridge = next(s for s in data["explain"] if s["label"].startswith("ridge point"))
    shown = {i["name"]: i["value"] for i in ridge["inputs"]}
    assert ridge["result"]["value"] == pytest.approx(shown["peak"] / shown["bandwidth"])
    assert data["batch_to_ridge"] == pytest.approx(data["ridge_flop_per_byte"])  # bf16: 2 B
    # the whole batch --explain shows (296 on an H100), as fit's --json carries it
    batch = next(s for s in data["explain"] if s["label"].startswith("batch to reach it"))
    assert data["first_whole_batch_to_ridge"] == batch["result"]["value"] == 296
    # its ridge named in its unit, as the ridge step above gives it (it read 'ridge = 295.3')
    assert {i["name"]: i["unit"] for i in batch["inputs"]}["ridge"] == "FLOP/byte"
    assert data["opening"]["count"] == 1 and data["deployments"] == 6
    assert main(["page", "deepseek-v3", "--gpu", "l4", "--counts", "1",
                 "-o", str(tmp_path / "q.html")]) == 2
    assert "does not fit: none of the 6 deployments" in capsys.readouterr().err
    assert not (tmp_path / "q.html").exists()
    assert main(["page", "foo/bar", "-o", str(tmp_path / "r.html")]) == 2
    assert capsys.readouterr().err.startswith("ridgeline: error: unknown model 'foo/bar'")


def test_an_apple_silicon_page_offers_one_device_unless_asked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Mac runs llama.cpp's Metal backend on one device: the default counts 1, 2, 4, 8 left
    three of every four picker combinations unable to run; unasked it offers 1, and a card
    that is not Apple silicon keeps the four counts."""
    out = tmp_path / "mac.html"

    def said(*argv: str) -> str:
        assert main(["page", "llama-3.1-8b", *argv, "-o", str(out)]) == 0
        both = capsys.readouterr()
        return both.out + both.err

    mac = ("--engine", "llama.cpp-metal", "--gpu", "apple-m2-max-38c")
    unasked = said(*mac)  # one page, both claims
    assert "6 deployments" in unasked and "cannot run" not in unasked
    assert "6 picker combinations cannot run" in said(*mac, "--counts", "1,2")  # asked: said
    assert "24 deployments" in said("--gpu", "h100")  # 4 counts × 3 formats × 2 caches


def test_a_page_of_cards_vllm_does_not_run_on_draws_their_llama_cpp_build(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Unasked, --engine was vllm whatever the cards: a page of an Apple-silicon card priced
    no combination and stopped ("try --engine llama.cpp-metal"), where decode defaults the card
    to llama.cpp's Metal build. Now the page draws each card's llama.cpp build where vLLM runs
    on none of them (the same page as --engine llama.cpp-metal asks), and vllm where any card
    runs it, the Mac's combinations said not to run."""
    def data(*argv: str) -> dict[str, Any]:
        assert main(["page", "llama-3.1-8b", "--json", *argv]) == 0
        return dict(json.loads(capsys.readouterr().out)["page"])

    mac = data("--gpu", "apple-m3-max-40c")
    assert mac == data("--gpu", "apple-m3-max-40c", "--engine", "llama.cpp-metal")
    assert mac["combos"] and not mac["left_out"]
    assert mac == data("--gpu", "apple-m3-max-40c", "--engine", "llama.cpp")
    mixed = data("--gpu", "h100,apple-m3-max-40c", "--counts", "1")
    assert mixed == data("--gpu", "h100,apple-m3-max-40c", "--counts", "1", "--engine", "vllm")
    assert any("vllm does not run on apple-m3-max-40c" in why for why in mixed["left_out"].values())


@pytest.mark.parametrize(("flag", "names"), [("--gpu", "h100,h100-sxm"), ("--weights", "fp8,FP8"),
                                             ("--kv-dtypes", "bf16,bfloat16")])
def test_the_page_refuses_one_entry_by_two_of_its_names(
        capsys: pytest.CaptureFixture[str], flag: str, names: str) -> None:
    """Two names of one card, format or dtype had made two picker entries, and twice the
    deployments, for one (--weights fp8,FP8: 16 where there are 8): refused, naming both, as
    'as stored,stored' is."""
    from ridgeline import resolve_accelerator
    from ridgeline.precision import kv_dtype, weight_format

    first, second = names.split(",")
    same = {"--gpu": lambda n: resolve_accelerator(n).id, "--weights": lambda n: weight_format(n).id,
            "--kv-dtypes": lambda n: kv_dtype(n).id}[flag]
    assert same(first) == same(second)
    card = [] if flag == "--gpu" else ["--gpu", "h100"]  # one --gpu: a second is refused
    assert main(["page", "llama-3.1-8b", *card, "--counts", "1", "--json", flag, names]) == 2
    err = capsys.readouterr().err
    assert f"{flag} names one" in err and f"twice ({first}, {second})" in err
