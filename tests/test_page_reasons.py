"""The page says why a batch gets no speed, as decode does, and reads as a page should.

It said "DOES NOT FIT: the vllm pool holds N conversations" of every such point: of vLLM
0.6's batch 512 at 512 tokens (its pool holds 876; its max_num_seqs runs 256), of
Llama-3.1-70B on one H100 (141 GB of weights on an 85 GB card: "holds 0") and of Qwen3-8B
at 131,072 tokens (vLLM refuses a length past its 40,960 positions: "holds 0"). It took no
--gpu-file, dropped decode's calibration cautions, and its sliders read as their index.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ridgeline.cli import main
from ridgeline.page import BATCHES, CONTEXTS, page_data, page_html, point_words

ROOT = Path(__file__).resolve().parents[1]
PROBED = ROOT / "validation" / "h200" / "2026-11-29-run2.accelerator.json"


def _decode(capsys: pytest.CaptureFixture[str], model: str, gpu: str, batch: int,
            context: int, *flags: str) -> dict[str, Any]:
    """decode --json at one point, started as the page starts it: max_model_len = context."""
    assert main(["decode", model, "--gpu", gpu, "--batch", str(batch), "--context",
                 str(context), "--max-model-len", str(context), "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def _only(data: dict[str, Any]) -> str:
    (key,) = data["combos"]
    return key


def test_a_batch_past_the_engines_seats_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.6 on an H100 at 512 tokens: its pool holds more than 512 of Llama-3.1-8B's
    conversations, its max_num_seqs runs 256: decode's reason, word for word, and the chart's
    note names the seats, not the pool."""
    data = page_data(["llama-3.1-8b"], ["h100"], [1], ["as stored"], ["bf16"], version="0.6")
    key, ci, bi = _only(data), CONTEXTS.index(512), BATCHES.index(512)
    combo = data["combos"][key]
    assert combo["conversations"][ci] >= 512 and not combo["fits"][ci][bi]
    decoded = _decode(capsys, "llama-3.1-8b", "h100", 512, 512, "--engine-version", "0.6")
    point = decoded["points"][0]
    assert point["expected_none_code"] == "over_engine_pool"
    assert point_words(data, key, ci, bi)[0] == point["expected_none_reason"]
    note = data["texts"][combo["no_speed"][ci]]
    seat = decoded["engine_max_batch"][0]
    assert seat["max_num_seqs"] == seat["engine_max_batch"] < seat["conversations"]
    assert f"at most {seat['engine_max_batch']:,} sequences" in note and "max_num_seqs" in note
    assert combo["engine_shown"] == "vLLM 0.6"


@pytest.mark.parametrize(("model", "context"), [("llama-3.1-70b", 2048),  # weights > card
                                                ("qwen3-8b", 131072)])  # past its positions
def test_a_context_the_engine_runs_none_of_says_why(capsys: pytest.CaptureFixture[str],
                                                    model: str, context: int) -> None:
    """Where the engine runs no sequence of the context at all, every batch says why, as
    decode's pool line does: the weights alone past the card, or vLLM refusing a length past
    the model's positions; never "the pool holds 0"."""
    data = page_data([model], ["h100"], [1], ["as stored"], ["bf16"])
    key, ci = _only(data), CONTEXTS.index(context)
    combo = data["combos"][key]
    assert combo["conversations"][ci] == 0
    reason = _decode(capsys, model, "h100", 1, context)["engine_max_batch"][0]["reason"]
    assert reason and "pool holds" not in reason
    assert {point_words(data, key, ci, bi)[0] for bi in range(len(BATCHES))} == {reason}
    assert data["texts"][combo["no_speed"][ci]].endswith(reason)


def test_the_page_carries_decodes_calibration_cautions(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp-metal's bundled profile was fitted at batch 1 alone: decode cautions at batch
    32 on an M3 Max, and so does the page, at the batches decode does."""
    data = page_data(["llama-3.1-8b"], ["apple-m3-max-40c"], [1], ["default"], ["f16"],
                     engine="llama.cpp")
    key, ci = _only(data), CONTEXTS.index(2048)
    for batch in (1, 32):
        assert main(["decode", "llama-3.1-8b", "--gpu", "apple-m3-max-40c", "--batch",
                     str(batch), "--context", "2048", "--json"]) == 0
        cautions = json.loads(capsys.readouterr().out)["cautions"]
        said = point_words(data, key, ci, BATCHES.index(batch))[1]
        assert (said in cautions) if said else not any("fitted" in c for c in cautions)
    assert point_words(data, key, ci, BATCHES.index(32))[1]


def test_page_takes_a_probed_accelerator_record(capsys: pytest.CaptureFixture[str]) -> None:
    """`page --gpu-file` (measure's probed record) was refused ("not of `page`"): it is
    offered by its id, alone without --gpu, beside --gpu's cards with it, at the ridge
    roofline gives it."""
    assert main(["roofline", "--gpu-file", str(PROBED), "--json"]) == 0
    ridge = json.loads(capsys.readouterr().out)["ridge_flop_per_byte"]
    assert main(["page", "llama-3.1-8b", "--gpu-file", str(PROBED), "--counts", "1",
                 "--weights", "bf16", "--kv-dtypes", "bf16", "--json"]) == 0
    page = json.loads(capsys.readouterr().out)["page"]
    record = json.loads(PROBED.read_text())["id"]
    assert page["gpus"] == [record]
    assert page["combos"][f"llama-3.1-8b|{record}|1|bf16|bf16"]["ridge"] == \
        pytest.approx(ridge)
    assert main(["page", "llama-3.1-8b", "--gpu", "h100", "--gpu-file", str(PROBED),
                 "--counts", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["page"]["gpus"] == ["h100", record]
    assert main(["page", "llama-3.1-8b", "--gpu-file", str(PROBED), "--gpu-file",
                 str(PROBED), "--json"]) == 2
    assert "the picker would offer one card twice" in capsys.readouterr().err


# A stand-in for the browser's DOM, enough for the page's script: elements by id, with
# attributes; uPlot records the options it is given.
_STUB = """
const els = {};
function el(id) { return els[id] || (els[id] = {id, value: "", textContent: "", options: [],
  attrs: {}, setAttribute(k, v) { this.attrs[k] = String(v); },
  appendChild(c) { if (c.tag === "option") this.options.push(c); }, set innerHTML(v) {}}); }
globalThis.document = {getElementById: el,
  createElement: tag => ({tag, value: "", textContent: "", appendChild() {}})};
globalThis.window = {innerWidth: 1200};
const drawn = [];
globalThis.uPlot = function (opts, data) { drawn.push({opts, data}); };
"""


def _run_page(html: str, settings: dict[str, str]) -> dict[str, Any]:
    """The page's script under node at the pickers' and sliders' ``settings``: its summary,
    caution, engine line, sliders' attributes and the charts' options."""
    script = html.rsplit("<script>", 1)[1].split("</script>", 1)[0]
    moved = "".join(f"el({k!r}).value = {v!r};\n" for k, v in settings.items())
    code = (_STUB + script + "\n" + moved + "drawn.length = 0; update();\n"
            "console.log(JSON.stringify({summary: el('summary').textContent, "
            "caution: el('caution').textContent, engine: el('engine').textContent, "
            "batch: el('batch').attrs, context: el('context').attrs, "
            "charts: drawn.map(d => ({y: d.opts.axes.map(a => a.label), "
            "x: d.opts.scales.x.range ? d.opts.scales.x.range() : null}))}));")
    out = subprocess.run(["node", "-e", code], capture_output=True, text=True, check=True,
                         timeout=60)
    return dict(json.loads(out.stdout))


@pytest.mark.skipif(shutil.which("node") is None, reason="no node to run the page's script")
def test_the_pages_script_says_why_and_reads_out_its_values() -> None:
    """Under node: a point with no speed gives decode's reason in the summary; the sliders
    give a screen reader the batch and context (aria-valuetext), not their index; the summary
    is a live region; the page says its language, the engine's release, the ridge's unit;
    a TP group's roofline is labelled its total; the batch axis ends at the last batch."""
    data = page_data(["llama-3.1-8b"], ["h100"], [1, 2], ["as stored"], ["bf16"],
                     version="0.6")
    html = page_html(data, "t")
    assert '<html lang="en">' in html and 'id="summary" class="note" aria-live="polite"' in html
    assert 'number of accelerators <select id="count">' in html
    key = "llama-3.1-8b|h100|1|as stored|bf16"
    ci, bi = CONTEXTS.index(512), BATCHES.index(512)
    shown = _run_page(html, {"batch": str(bi), "context": str(ci)})
    assert shown["summary"] == (f"batch 512 at 512 tokens: no speed: "
                                f"{point_words(data, key, ci, bi)[0]}")
    assert shown["batch"]["aria-valuetext"] == "batch 512"
    assert shown["context"]["aria-valuetext"] == "512 tokens of context"
    assert "vLLM 0.6" in shown["engine"]
    roofline, speeds, kv = shown["charts"]
    assert roofline["y"] == ["FLOP per byte", "TFLOP/s"]
    assert speeds["x"] == [BATCHES[0], BATCHES[-1]]
    assert kv["y"] == ["context tokens", "conversations", "GiB per conversation"]
    two = _run_page(html, {"count": "2", "batch": "5", "context": "1"})
    assert "2 GPUs' total" in two["charts"][0]["y"][1]
    assert " FLOP/byte of a ridge of " in two["summary"] and " FLOP/byte = " in two["summary"]
