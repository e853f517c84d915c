"""A serving engineer's audit: an emitted decode row's mixed step said by how much, the page's
conversations as a division its inputs reproduce, moe's --batch as the table's rows,
evalstats naming the gap it sized, and utilization giving no share for a batch the pool
cannot run."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from ridgeline.capacity import conversation_bytes, held_conversations
from ridgeline.catalog import resolve_model
from ridgeline.cost import decode_batch, step_time_s
from ridgeline.deployment import Deployment
from ridgeline.engines import profile_for
from ridgeline.evalstats import items_needed_unpaired
from ridgeline.hardware import resolve_accelerator
from ridgeline.measurements import read_measurements
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.predict import predict
from ridgeline.reports.moe import EXPLAIN_BATCH, TABLE_BATCHES
from ridgeline.reports.roofline import first_whole_batch
from ridgeline.roofline import arithmetic_share
from ridgeline.units import GIB
from tests.conftest import run_cli


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def h100(model: str, engine: str = "vllm") -> Deployment:
    return Deployment.build(resolve_model(model, fetchable=False), resolve_accelerator("h100"),
                            None, None, 1, engine=engine)


# --- 9: a decode row from a window whose steps carry prompt tokens -------------------------


def scrape(time_s: int, prompt_tokens: int, generated: int, finished: int,
           itl_sum_s: float) -> str:
    """One vLLM /metrics scrape: 32 running, every token's ITL in the 10–25 ms bucket."""
    labels = 'engine="0",model_name="meta-llama/Llama-3.1-8B"'
    return "\n".join([
        f"# scrape_time {time_s}",
        f"vllm:num_requests_running{{{labels}}} 32",
        f"vllm:num_requests_waiting{{{labels}}} 0",
        f"vllm:kv_cache_usage_perc{{{labels}}} 0.3",
        f"vllm:num_preemptions_total{{{labels}}} 0",
        f"vllm:prompt_tokens_total{{{labels}}} {prompt_tokens}",
        f"vllm:generation_tokens_total{{{labels}}} {generated}",
        f'vllm:request_success_total{{{labels},finished_reason="length"}} {finished}',
        f'vllm:inter_token_latency_seconds_bucket{{{labels},le="0.01"}} 0',
        f'vllm:inter_token_latency_seconds_bucket{{{labels},le="0.025"}} {generated}',
        f'vllm:inter_token_latency_seconds_bucket{{{labels},le="+Inf"}} {generated}',
        f"vllm:inter_token_latency_seconds_count{{{labels}}} {generated}",
        f"vllm:inter_token_latency_seconds_sum{{{labels}}} {itl_sum_s}", ""])


def test_an_emitted_decode_row_says_how_much_its_prompt_tokens_slow_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The audit's window: 60 s, 1,000 prompt and 1,600 generated tok/s at batch 32, 20 ms a
    token. The row is written as decode alone; the note had called the 20 prompt tokens a
    step "a little slow": it says how much slower ridgeline's mean step is than decode
    alone, the figure validate scores the row against — each 1,000-token prompt in a step
    of its own, one step in 50 (4 %; 26 % when every step carried 20 of its tokens)."""
    window = tmp_path / "window.txt"
    window.write_text(scrape(1000, 100_000, 50_000, 100, 1000.0)
                      + scrape(1060, 160_000, 146_000, 160, 2920.0))
    rows = tmp_path / "rows.csv"
    report = run_json(capsys, "observe", str(window), "--model", "llama-3.1-8b", "--gpu",
                      "h100", "--emit-measurements", str(rows))
    note = next(n for n in report["notes"] if n.startswith("wrote 1 row"))
    dep, profile = h100("llama-3.1-8b"), profile_for("vllm")
    alone_ms = step_time_s(dep, decode_batch(32, report["context_len"]), profile) * 1e3
    mixed_ms = report["predicted_itl_s"] * 1e3
    each = report["prompts_per_step"]  # 1,000-token prompts, each in a step of its own
    assert report["prompt_step_tokens"] == [1000] and each and mixed_ms > alone_ms
    assert (round(mixed_ms, 1), round(alone_ms, 1), round(1 / each)) == (11.4, 10.9, 50)
    assert (f"includes the steps that run its prompts beside the decodes (about 1 in "
            f"{1 / each:,.0f})" in note)
    assert (f"ridgeline prices the mean step at {mixed_ms:,.1f} ms, decode alone at "
            f"{alone_ms:,.1f} ms, so the row reads {mixed_ms / alone_ms - 1:.0%} slow") in note
    assert "a little slow" not in note
    # validate prices the row as decode alone: the figure the note sets the mixed step against
    (row,) = read_measurements(rows).rows
    predicted = predict(row).predicted
    assert predicted is not None and 1e3 / predicted == pytest.approx(alone_ms, rel=1e-3)


# --- 10: the page's conversations, reproducible from what --explain shows -------------------


def page_explain(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> dict:
    return run_json(capsys, "page", *argv, "--explain", "-o", str(tmp_path / "page.html"))


def inputs_of(step: dict) -> dict[str, float]:
    return {i["name"]: i["value"] for i in step["inputs"]}


def test_the_pages_conversations_are_the_pool_over_one_conversation(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Llama-3.1-8B on an H100 at 2,048 tokens: the pool (54.6 GiB) ÷ one conversation (0.25
    GiB) = 218, each shown; the opening batch, no input of this division, is gone."""
    data = page_explain(capsys, tmp_path, "llama-3.1-8b", "--gpu", "h100", "--counts", "1")
    step = next(s for s in data["explain"] if s["label"].startswith("conversations of"))
    v = inputs_of(step)
    assert "opening batch" not in v
    assert step["result"]["value"] == math.floor(v["pool"] / v["one conversation"])
    dep = h100("llama-3.1-8b")
    pool = kv_pool(dep, EngineSettings(max_model_len=2048))
    assert v["pool"] == pytest.approx(pool.kv_cache_bytes / GIB)
    assert v["one conversation"] == pytest.approx(conversation_bytes(pool, dep, 2048) / GIB)
    assert v["max_num_seqs"] == pool.max_num_seqs
    assert step["result"]["value"] == held_conversations(pool, dep, 2048)


def test_the_pages_batch_to_the_ridge_is_roofline_s_whole_batch(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = page_explain(capsys, tmp_path, "llama-3.1-8b", "--gpu", "h100", "--counts", "1")
    step = next(s for s in data["explain"] if s["label"] == "batch to reach it")
    roof = run_json(capsys, "roofline", "--gpu", "h100")
    weights = next(p for p in roof["points"] if p["first_whole_batch_to_ridge"] is not None)
    assert step["result"]["value"] == weights["first_whole_batch_to_ridge"] \
        == first_whole_batch(data["batch_to_ridge"])


def test_where_the_engine_holds_fewer_than_the_division_the_page_says_so(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """gpt-oss-120b's window groups: vLLM's admission gate holds one fewer than pool ÷ one
    conversation (vLLM 0.32's pool; 0.34's divides evenly there); both figures are shown."""
    data = page_explain(capsys, tmp_path, "gpt-oss-120b", "--gpu", "h100", "--counts", "1",
                        "--engine-version", "0.32")
    step = next(s for s in data["explain"] if s["label"].startswith("conversations of"))
    v = inputs_of(step)
    division = math.floor(v["pool"] / v["one conversation"])
    assert v["pool ÷ one conversation"] == division > step["result"]["value"]


# --- 12: moe --batch is the table's rows ----------------------------------------------------


def test_moe_batch_replaces_the_ladder_and_the_json_agrees(
        capsys: pytest.CaptureFixture[str]) -> None:
    one = run_json(capsys, "moe", "deepseek-v3", "--gpu", "h100", "--batch", "64")
    assert one["batches"] == [r["batch"] for r in one["rows"]] == [64]
    three = run_json(capsys, "moe", "gpt-oss-120b", "--gpu", "b200", "--batch", "1,64,4096")
    assert three["batches"] == [r["batch"] for r in three["rows"]] == [1, 64, 4096]
    code, out, _ = run_cli(capsys, "moe", "deepseek-v3", "--gpu", "h100", "--batch", "64")
    table = [line.split()[0] for line in out.splitlines() if re.match(r"\d+ ", line)]
    assert code == 0 and table == ["64"]


def test_moe_without_a_batch_shows_the_ladder_and_explains_the_articles_batch(
        capsys: pytest.CaptureFixture[str]) -> None:
    ladder = run_json(capsys, "moe", "qwen3.6-35b-a3b", "--weights", "bf16", "--explain")
    assert ladder["batches"] == [r["batch"] for r in ladder["rows"]] == list(TABLE_BATCHES)
    touched = next(s for s in ladder["explain"] if s["label"] == "experts touched by the batch")
    assert inputs_of(touched)["B"] == EXPLAIN_BATCH
    code, out, _ = run_cli(capsys, "moe", "--help")
    assert code == 0 and "(default 32)" not in out
    assert ", ".join(map(str, TABLE_BATCHES)) in " ".join(out.split())


# --- 13: evalstats says which gap it sized ---------------------------------------------------


def test_evalstats_names_the_reported_gap_it_sizes_and_what_the_tests_counts_need(
        capsys: pytest.CaptureFixture[str]) -> None:
    """39.02 % and 47.56 % of 10: the tests use 4 and 5 items (40 % and 50 %); the benchmark
    to come is sized for the 8.54 points reported (528 items), and the line says so beside
    what the counts' 10 points need (388, what --pct-a 40 --pct-b 50 sizes)."""
    argv = ["evalstats", "--pct-a", "39.02", "--pct-b", "47.56", "--n", "10"]
    data = run_json(capsys, *argv)
    reported = items_needed_unpaired(0.3902, 0.4756).num_items
    counts = items_needed_unpaired(4 / 10, 5 / 10).num_items
    assert data["unpaired_items_needed"]["num_items"] == reported
    assert data["unpaired_items_needed_counts"]["num_items"] == counts
    plain = run_json(capsys, "evalstats", "--pct-a", "40", "--pct-b", "50", "--n", "100")
    assert plain["unpaired_items_needed"]["num_items"] == counts
    assert "unpaired_items_needed_counts" not in plain
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    assert (f"items needed to detect the reported gap, 39.02% vs 47.56% (alpha 0.05, power "
            f"0.8): {reported:,} per model, unpaired; the counts the tests use, 40% vs 50%, "
            f"would need {counts:,}") in out


def test_scores_that_are_whole_counts_size_one_gap(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "evalstats", "--pct-a", "39.02", "--pct-b", "47.56",
                           "--n", "164")
    assert code == 0 and "items needed to detect the counts' gap, 64/164 vs 78/164" in out
    assert "the counts the tests use" not in out


# --- 14: utilization gives no share for a batch the pool cannot run --------------------------


def test_utilization_gives_no_share_for_a_batch_the_pool_cannot_hold(
        capsys: pytest.CaptureFixture[str]) -> None:
    """200 running at 8K on an H100 against a pool of 54: the headline had read 67.7 % of the
    arithmetic; it now leads with the verdict, as fit's DOES NOT FIT does, and gives none."""
    argv = ["utilization", "--gpu", "h100", "--running", "200", "--model", "llama-3.1-8b",
            "--context", "8K"]
    data = run_json(capsys, *argv, "--explain")
    assert data["over_pool"] and data["conversations"] < data["running"]
    assert data["fraction_of_arithmetic"] is None and data["step_fraction_of_peak"] is None
    # the ridge, and the pool count the verdict names
    assert [s["label"] for s in data["explain"]] == ["ridge point", "conversations the pool holds"]
    assert data["explain"][1]["result"]["value"] == data["conversations"]
    code, out, _ = run_cli(capsys, *argv)
    first = out.splitlines()[0]
    assert code == 0 and first.startswith("DOES NOT RUN AT ONCE: 200 running")
    assert f"the {data['conversations']} conversations the pool holds" in first
    assert "% of the arithmetic" not in out and "peak busy at its floor" not in out


def test_utilization_within_the_pool_still_gives_its_share(
        capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "utilization", "--gpu", "h100", "--running", "8", "--model",
                    "llama-3.1-8b", "--context", "8K")
    assert not data["over_pool"] and data["running"] <= data["conversations"]
    assert data["fraction_of_arithmetic"] == pytest.approx(
        arithmetic_share(8, 2.0, data["ridge_flop_per_byte"]))
    assert data["step_fraction_of_peak"] is not None


@pytest.mark.parametrize(("gpus", "whose"), [("1", "of the card's bf16 peak"),
                                             ("4", "of the 4 cards' bf16 peak")])
def test_utilizations_whole_step_share_names_the_cards_it_is_of(
        capsys: pytest.CaptureFixture[str], gpus: str, whose: str) -> None:
    """One H100 read "keeps 2.6% of the cards' peak busy", a plural for one card; four say
    how many cards the peak is of (the explain step's FLOPs ÷ (floor × 4 × 989.4 TFLOP/s)),
    and the dtype it is the peak of."""
    code, out, _ = run_cli(capsys, "utilization", "--gpu", "h100", "--num-gpus", gpus,
                           "--running", "8", "--model", "llama-3.1-70b" if gpus == "4"
                           else "llama-3.1-8b", "--context", "1152")
    assert code == 0 and f"{whose} busy at its floor" in out
