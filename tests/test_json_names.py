"""One quantity, one name, its unit in it, across the commands' --json; and the roofline's
wording for a custom card, for an fp8 compute dtype without a model, and calibrate's for an
-o that is a directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.hardware import custom_accelerator, resolve_accelerator
from ridgeline.precision import weight_format
from ridgeline.roofline import batch_for_intensity, first_whole_batch, ridge_point
from tests.conftest import LOWBATCH, run_cli


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def weights_point(roofline: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in roofline["points"] if p["name"].startswith("weight matrices"))


def test_hardware_and_roofline_name_the_peak_rate_alike(
        capsys: pytest.CaptureFixture[str]) -> None:
    """hardware's per-dtype peaks are FLOP/s, so they carry roofline's peak_flops_per_s."""
    record = run_json(capsys, "hardware", "h100")
    roof = run_json(capsys, "roofline", "--gpu", "h100")
    assert "peak_flops" not in record and "peak_flops" not in record["figure_sources"]
    assert record["peak_flops_per_s"] == dict(resolve_accelerator("h100").peak_flops)
    assert record["peak_flops_per_s"]["bf16"] == roof["peak_flops_per_s"]
    assert "peak_flops_per_s" in record["figure_sources"]
    listed = run_json(capsys, "hardware")["accelerators"]
    assert all("peak_flops_per_s" in a and "peak_flops" not in a for a in listed)


def test_fit_page_and_roofline_name_the_batch_to_the_ridge_alike(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """fit and page called roofline's batch_to_ridge (295.34 on an H100 at bf16) ridge_batch."""
    roof = weights_point(run_json(capsys, "roofline", "--gpu", "h100"))
    fit = run_json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k")
    page = run_json(capsys, "page", "llama-3.1-8b", "--gpu", "h100", "--counts", "1",
                    "-o", str(tmp_path / "page.html"))
    for data in (fit, page):
        assert "ridge_batch" not in data
        assert data["batch_to_ridge"] == pytest.approx(roof["batch_to_ridge"])
    assert "expert_ridge_batch" not in fit and fit["expert_batch_to_ridge"] is None  # dense
    assert roof["first_whole_batch_to_ridge"] == first_whole_batch(fit["batch_to_ridge"])
    # the whole batch, as fit names it; page's --json had only the fraction its --explain rounds
    assert page["first_whole_batch_to_ridge"] == fit["first_whole_batch_to_ridge"] \
        == roof["first_whole_batch_to_ridge"]
    # the page's own data names the fraction as they do: no ridge_batch that is not whole
    opening = "|".join(str(v) for v in page["page"]["start"])
    assert page["page"]["combos"][opening]["batch_to_ridge"] == fit["batch_to_ridge"]
    assert not any("ridge_batch" in c for c in page["page"]["combos"].values())


def test_prefill_names_its_rate_of_tokens_tok_s_as_decode_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "2000")
    assert "tokens_per_s" not in data and "tokens_per_s" not in data["expected"]
    assert data["prompt_tok_s"] == pytest.approx(data["batch"] * 2000 / data["time_s"])
    assert data["expected"]["prompt_tok_s"] == pytest.approx(
        data["batch"] * 2000 / data["expected"]["time_s"])


def test_moe_names_the_articles_ridge_in_flop_per_byte(
        capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "moe", "mixtral-8x7b", "--gpu", "h100")
    h100 = resolve_accelerator("h100")
    assert "article_bf16_ridge" not in data
    assert data["article_bf16_ridge_flop_per_byte"] == pytest.approx(
        ridge_point(h100.peak("bf16"), h100.memory_bandwidth_bytes_per_s))


def test_a_custom_card_says_its_peak_is_the_flags_read_as_bf16(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--peak-tflops is one number; custom_accelerator files it as the bf16 rate (an fp8
    matmul on it is refused), so the header says so rather than calling it a bf16 figure."""
    assert set(custom_accelerator("custom", 100, 1000, 80).peak_flops) == {"bf16"}
    code, out, _ = run_cli(capsys, "roofline", "--peak-tflops", "100", "--bandwidth-gbs", "1000")
    assert code == 0
    assert out.splitlines()[0].startswith(
        "custom: 100.0 TFLOP/s (dense, --peak-tflops as given, read as bf16) ÷ 1 TB/s")
    code, _, err = run_cli(capsys, "roofline", "--peak-tflops", "100", "--bandwidth-gbs",
                           "1000", "--compute-dtype", "fp8")
    assert code == 2 and "no fp8 peak" in err
    code, out, _ = run_cli(capsys, "roofline", "--help")
    assert code == 0 and "read as its bf16 (16-bit) matmul rate" in " ".join(out.split())


def test_fp8_compute_without_a_model_prices_one_byte_weights(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A step whose matmuls run at fp8 reads fp8 weights (W8A8): on an H100 the fp8 ridge,
    twice bf16's, is reached at the same batch as bf16's (the article's 296), not 591."""
    h100 = resolve_accelerator("h100")
    bw = h100.memory_bandwidth_bytes_per_s
    fp8 = weights_point(run_json(capsys, "roofline", "--gpu", "h100", "--compute-dtype", "fp8"))
    bf16 = weights_point(run_json(capsys, "roofline", "--gpu", "h100"))
    assert fp8["batch_to_ridge"] == pytest.approx(batch_for_intensity(
        ridge_point(h100.peak("fp8"), bw), weight_format("fp8").bytes_per_weight))
    assert bf16["first_whole_batch_to_ridge"] == first_whole_batch(batch_for_intensity(
        ridge_point(h100.peak("bf16"), bw), weight_format("bf16").bytes_per_weight)) == 296
    assert fp8["first_whole_batch_to_ridge"] == bf16["first_whole_batch_to_ridge"]
    assert "fp8 weights, 1 B each" in fp8["note"]
    # --weights still names the weights: bf16 weights priced at 2 bytes against the fp8 peak
    named = weights_point(run_json(capsys, "roofline", "--gpu", "h100", "--compute-dtype",
                                   "fp8", "--weights", "bf16"))
    assert named["batch_to_ridge"] == pytest.approx(2 * fp8["batch_to_ridge"])


def test_calibrate_says_an_output_directory_is_one(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "calibrate", str(LOWBATCH), "-o", str(tmp_path))
    assert code == 2 and f"cannot write {tmp_path}: a folder, not a file" in err
    assert "not a profile JSON" not in err and list(tmp_path.iterdir()) == []


def test_a_record_copied_from_hardware_json_reads_as_the_catalogs(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """hardware --json is a catalog record a user edits into a --gpu-file: its
    peak_flops_per_s (and figure_sources' key) read as the catalog's peak_flops."""
    record = {**run_json(capsys, "hardware", "h100"), "id": "my-h100"}
    card = tmp_path / "card.json"
    card.write_text(json.dumps(record))
    again = run_json(capsys, "hardware", "--gpu-file", str(card))
    assert again["peak_flops_per_s"] == record["peak_flops_per_s"]
    assert again["figure_sources"] == record["figure_sources"]
    card.write_text(json.dumps({**record, "peak_flops": record["peak_flops_per_s"]}))
    code, _, err = run_cli(capsys, "hardware", "--gpu-file", str(card))
    assert code == 2 and "both 'peak_flops' and 'peak_flops_per_s'" in err


@pytest.mark.parametrize("gpu", ["rtx-4090", "l40s", "apple-m2-max-38c"])
def test_hardware_shows_the_total_every_fit_counts_where_no_log_pins_it(
        capsys: pytest.CaptureFixture[str], gpu: str) -> None:
    """kv's budget read "25.4 GB as the runtime reports it" of an RTX 4090 whose record
    showed only its 24 GiB; hardware now gives that figure, in text and --json, and says
    where it comes from, and kv says the same (usable, no runtime total logged; an Apple
    card's, Metal's working set), no longer the runtime's. A card whose runtime total is
    logged (H100) keeps both lines."""
    record = run_json(capsys, "hardware", gpu)
    counted = record["device_memory_bytes"]
    assert record["runtime_total_bytes"] is None and counted < record["memory_bytes"]
    budget = run_json(capsys, "kv", "llama-3.2-1b", "--context", "1k", "--gpu", gpu)["budget"]
    basis = ("Metal's working set" if gpu.startswith("apple") else
             "98.5% of the memory the driver shows, no log pinning the runtime's total")
    assert f"({counted / 1e9:.1f} GB usable: {basis})" in budget
    assert "as the runtime reports it" not in budget
    code, out, err = run_cli(capsys, "hardware", gpu)
    assert code == 0 and f"usable       {counted / 2**30:.2f} GiB, what fit" in out, err
    h100 = run_json(capsys, "hardware", "h100")
    assert h100["device_memory_bytes"] == h100["runtime_total_bytes"]
    assert "  usable  " not in run_cli(capsys, "hardware", "h100")[1]
    h100_budget = run_json(capsys, "kv", "llama-3.2-1b", "--context", "1k", "--gpu", "h100")
    assert (f"({h100['runtime_total_bytes'] / 1e9:.1f} GB as the runtime reports it)"
            in h100_budget["budget"])


@pytest.mark.parametrize(("gpu", "basis"), [
    ("h100", "(the runtime's total)"),
    ("rtx-4090", "(98.5% of the memory the driver shows, no log pinning the runtime's total)"),
])
def test_a_shortfall_names_where_its_capacity_came_from(
        capsys: pytest.CaptureFixture[str], gpu: str, basis: str) -> None:
    """roofline's --explain "short by" step called every card's capacity "the runtime's
    total", an RTX 4090's 98.5 % estimate included; it now says which it is, as hardware
    does (Llama-3.1-70B at bf16 overruns both cards)."""
    code, out, err = run_cli(capsys, "roofline", "--gpu", gpu, "--model", "llama-3.1-70b",
                             "--explain")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.strip().startswith("capacity ="))
    assert line.endswith(f"[the memory an engine finds on the GPUs {basis}]")


# -- one concept, one name across the commands (docs/json.md, "Changes an integrator must know")
L8_8K = ("llama-3.1-8b", "--gpu", "h100")
# plan up to 2 GPUs, in one process: its keys' names are the same at any group size
NARROW = ("--max-gpus", "2", "--workers", "1")
# the one plan the tests below read, each for its own names: searched once (plan_shared)
PLAN = ("plan", "llama-3.1-8b", "--gpus", "h100", *NARROW, "--rate", "2", "--input-len", "500",
        "--output-len", "100", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "100",
        "--min-context", "16384")
FIXTURES = Path(__file__).parent / "fixtures"


def test_the_pools_conversations_and_the_engines_batch_have_one_name_in_every_command(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B on an H100 at 8,192 tokens under vLLM: fit's pool holds 59 conversations;
    decode, prefill, utilization, simulate and observe give the same count as `conversations`
    (were pool_holds, kv_batch_limit, fit_conversations, pool_sequences) and the batch the
    engine runs as `engine_max_batch` (observe's was pool_batch), and the ridge's whole batch
    as `first_whole_batch_to_ridge` (was ridge_batch / whole_batch_to_ridge)."""
    fit = run_json(capsys, "fit", *L8_8K, "--max-model-len", "8192")
    (decode,) = run_json(capsys, "decode", *L8_8K, "--context", "8192", "--max-model-len",
                         "8192", "--batch", "1")["engine_max_batch"]
    prefill = run_json(capsys, "prefill", *L8_8K, "--prompt-len", "8192", "--max-model-len",
                       "8192")
    util = run_json(capsys, "utilization", "--gpu", "h100", "--running", "8", "--model",
                    "llama-3.1-8b", "--context", "8192")
    sim = run_json(capsys, "simulate", *L8_8K, "--rate", "2", "--num-requests", "10",
                   "--max-model-len", "8192")
    seen = run_json(capsys, "observe", str(FIXTURES / "vllm_metrics.txt"), "--model",
                    "llama-3.1-8b", "--gpu", "h100", "--context", "8192")
    held = fit["conversations"]
    assert held > 0
    assert decode["conversations"] == util["conversations"] == sim["conversations"] \
        == seen["conversations"] == held
    # the engine's batch: min(conversations, seats), fit's batch
    assert decode["engine_max_batch"] == prefill["engine_max_batch"] == seen["engine_max_batch"] \
        == min(held, fit["max_num_seqs"]) == fit["engine_max_batch"]
    assert decode["max_num_seqs"] == fit["max_num_seqs"]
    assert seen["engine_max_batch_capped_by"] == "pool"
    assert "conversations" in run_json(capsys, "kv", *L8_8K, "--context", "8192")
    ridge = fit["first_whole_batch_to_ridge"]
    roof = weights_point(run_json(capsys, "roofline", "--gpu", "h100", "--model",
                                  "llama-3.1-8b"))
    for data in (prefill, util, seen, roof):
        assert data["first_whole_batch_to_ridge"] == ridge
    old = {"conversations_that_fit", "kv_batch_limit", "fit_conversations", "pool_sequences",
           "pool_batch", "pool_holds", "seat_limit", "ridge_batch", "whole_batch_to_ridge",
           "price_per_device_hour_usd"}
    for data in (fit, decode, prefill, util, sim, seen, roof):
        assert not old & set(data)


def test_every_latency_in_json_is_in_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    """observe read vllm bench serve's milliseconds as latency_ms; its JSON now gives seconds
    under latency_s (mean TTFT 180.2 ms: 0.1802 s), as simulate's ttft_s; simulate's SLOs, given
    in ms, read back in seconds; the predicted ITL is the text's ms ÷ 1,000."""
    bench = json.loads((FIXTURES / "vllm_bench.json").read_text())
    seen = run_json(capsys, "observe", str(FIXTURES / "vllm_bench.json"), "--model",
                    "llama-3.1-8b", "--gpu", "h100")
    assert "latency_ms" not in seen and "predicted_itl_ms" not in seen
    for kind, key in (("ttft", "ttft"), ("itl", "itl"), ("e2e", "e2el")):
        assert seen["latency_s"][kind]["mean"] == pytest.approx(bench[f"mean_{key}_ms"] / 1e3)
    assert seen["gap"]["itl"] == pytest.approx(
        seen["predicted_itl_s"] / seen["latency_s"]["itl"]["mean"] - 1)
    assert seen["floor_itl_s"] < seen["predicted_itl_s"] < 1  # seconds, not ms
    sim = run_json(capsys, "simulate", *L8_8K, "--rate", "2", "--num-requests", "10",
                   "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--slo-itl-ms", "60")
    settings = sim["settings"]
    assert (settings["slo_ttft_s"], settings["slo_tpot_s"], settings["slo_itl_s"]) == \
        pytest.approx((0.5, 0.05, 0.06))
    assert settings["slo_itl_s"] == sim["itl_slo"]["slo_itl_s"]
    assert not [k for k in settings if k.endswith("_ms")]


def test_sizes_are_bytes_and_rates_take_the_decode_and_simulate_names(
        capsys: pytest.CaptureFixture[str], plan_shared: None) -> None:
    """fit's pool over every card and model's weights per format were GiB and GB (pool_gib_total,
    weight_gb); they are bytes now. plan's Pareto points and observe's generation rate take
    decode's per_user_tok_s and simulate's output_tok_s names."""
    fit = run_json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "2",
                   "--max-model-len", "8k")
    assert fit["pool_bytes_total"] == pytest.approx(2 * fit["pool_bytes_per_gpu"])
    model = run_json(capsys, "model", "llama-3.1-8b")
    assert model["weight_bytes"]["bf16"] == pytest.approx(2 * model["params_total"], rel=1e-9)
    plan = run_json(capsys, *PLAN)
    point = plan["pareto"][0]
    assert point["output_tok_s_per_gpu"] == pytest.approx(
        point["batch"] * point["per_user_tok_s"] / point["tensor_parallel_size"]
        / point["pipeline_parallel_size"] / point["data_parallel_size"])
    log = run_json(capsys, "observe", str(FIXTURES / "vllm_server.log"), "--model",
                   "llama-3.1-8b", "--gpu", "h100")
    assert log["output_tok_s"] > 0 and "generation_tok_s" not in log
    assert "output_tok_s" in log["gap"] and "generation_tok_s" not in log["gap"]


# -- the rest of one name per concept (docs/json.md's 2026-12-06 entry)
def _keys(data: Any) -> set[str]:
    """Every key at any depth of a --json answer (lists' items too)."""
    if isinstance(data, dict):
        return set(data) | {k for v in data.values() for k in _keys(v)}
    if isinstance(data, list):
        return {k for v in data for k in _keys(v)}
    return set()


def test_the_running_batch_and_the_prompt_have_one_name_in_every_command(
        capsys: pytest.CaptureFixture[str], plan_shared: None) -> None:
    """simulate called the running batch running_batch where observe and utilization call it
    running (vLLM's num_requests_running), and plan and simulate called the prompt input_len
    where prefill and roofline call it prompt_len: each now has the one name, whichever flag
    feeds it (--input-len, --prompt-len, --running)."""
    sim = run_json(capsys, "simulate", *L8_8K, "--rate", "4", "--num-requests", "40",
                   "--input-len", "500", "--output-len", "64")
    seen = run_json(capsys, "observe", str(FIXTURES / "vllm_metrics.txt"), "--model",
                    "llama-3.1-8b", "--gpu", "h100")
    util = run_json(capsys, "utilization", "--gpu", "h100", "--running", "24")
    for data in (sim, seen):  # a distribution: over the steps, over the readings
        assert 0 < data["running"]["mean"] <= data["running"]["max"]
    # the sampled series never passes the steps' peak, and names its gauge alike
    assert 0 < max(p["running"] for p in sim["time_series"]) <= sim["running"]["max"]
    assert util["running"] == 24
    prefill = run_json(capsys, "prefill", *L8_8K, "--prompt-len", "500")
    roof = run_json(capsys, "roofline", "--gpu", "h100", "--prompt-len", "500")
    plan = run_json(capsys, *PLAN)
    load = sim["settings"]["workload"]
    assert prefill["prompt_len"] == roof["prompt_len"] == plan["prompt_len"] \
        == load["prompt_len"] == 500
    assert plan["prompt_len_spec"] == load["prompt_len_spec"] == "500"
    # the completed requests' mean prompt is the length asked (one fixed number)
    assert sim["prompt_tokens_mean"] == load["prompt_len"]
    for data in (sim, seen, util, prefill, roof, plan):
        assert not {"running_batch", "input_len", "input_len_spec"} & _keys(data)


def test_lengths_batches_cards_and_budgets_have_one_name_in_every_command(
        capsys: pytest.CaptureFixture[str], plan_shared: None) -> None:
    """fit's context was its max_model_len and its batch every other command's
    engine_max_batch; a conversation's length is context_len wherever one is asked; plan's
    gpus/gpu, observe's engines and prefill's step_budget_tokens take the names the other
    commands give those counts (num_gpus, accelerator, data_parallel_size,
    max_num_batched_tokens)."""
    fit = run_json(capsys, "fit", *L8_8K, "--max-model-len", "8192", "--target-concurrency", "64")
    assert fit["max_model_len"] == 8192 and fit["target_concurrency"] == 64
    assert fit["engine_max_batch"] == min(fit["conversations"], fit["max_num_seqs"])
    assert fit["levers"]
    for lever in fit["levers"]:
        assert lever["engine_max_batch"] == min(lever["conversations"], lever["max_num_seqs"])
        assert 0 < lever["max_model_len"] <= fit["max_model_len"]
    decode = run_json(capsys, "decode", *L8_8K, "--context", "4096", "--batch", "1")
    kv = run_json(capsys, "kv", *L8_8K, "--context", "4096")
    util = run_json(capsys, "utilization", "--gpu", "h100", "--running", "8", "--model",
                    "llama-3.1-8b", "--context", "4096")
    seen = run_json(capsys, "observe", str(FIXTURES / "vllm_metrics.txt"), "--model",
                    "llama-3.1-8b", "--gpu", "h100", "--context", "4096")
    attention = run_json(capsys, "attention", "--model", "llama-3.1-8b", "--context", "4096")
    amdahl = run_json(capsys, "amdahl", "--model", "llama-3.1-8b", "--gpu", "h100",
                      "--context", "4096", "--speedup", "2")["source"]
    assert decode["points"][0]["context_len"] == decode["engine_max_batch"][0]["context_len"] \
        == kv["context_len"] == util["context_len"] == seen["context_len"] \
        == attention["context_len"] == amdahl["context_len"] == 4096
    assert seen["context_len_source"] == "given"
    assert amdahl["accelerator"] == fit["accelerator"] == decode["accelerator"]
    # observe's engines reported: one here, as utilization's ranks without -dp
    assert seen["data_parallel_size"] == util["data_parallel_size"] == 1
    plan = run_json(capsys, *PLAN)
    win = plan["winner"]
    assert win["num_gpus"] == win["replicas"] * win["tensor_parallel_size"] \
        * win["pipeline_parallel_size"] * win["data_parallel_size"]
    (card,) = plan["cards"]
    assert card["accelerator"] == win["accelerator"] and card["num_gpus"] == win["num_gpus"]
    assert card["price"]["price_per_gpu_hour_usd"] == win["price_per_gpu_hour_usd"] \
        == resolve_accelerator("h100").price_per_hour_usd
    prefill = run_json(capsys, "prefill", *L8_8K, "--prompt-len", "8192", "--max-model-len",
                       "8192")
    sim = run_json(capsys, "simulate", *L8_8K, "--rate", "2", "--num-requests", "10",
                   "--max-model-len", "8192")
    assert prefill["max_num_batched_tokens"] == sim["settings"]["max_num_batched_tokens"]
    old = {"context", "context_source", "target", "seats", "gpus", "gpu", "engines",
           "usd_per_gpu_hour", "step_budget_tokens", "data_parallel_ranks"}
    for data in (fit, decode, kv, util, seen, attention, amdahl, plan, prefill):
        assert not old & _keys(data), old & _keys(data)


def test_the_last_pairs_take_the_name_of_their_concept(
        capsys: pytest.CaptureFixture[str], plan_shared: None) -> None:
    """decode's per-context engine batch, fit's and simulate's data-parallel ranks, plan's
    floor on the launch length and its Pareto context, fit's ridge launch length and SGLang's
    pool in tokens take the names the other commands give those figures; observe's priced
    batch stays `batch` (its running gauge's mean here)."""
    fit = run_json(capsys, "fit", *L8_8K, "--max-model-len", "8192")
    (seats,) = run_json(capsys, "decode", *L8_8K, "--context", "8192", "--max-model-len",
                        "8192", "--batch", "1")["engine_max_batch"]
    assert seats["engine_max_batch"] == fit["engine_max_batch"] \
        == min(seats["conversations"], seats["max_num_seqs"])
    assert "batch" not in seats
    ranks = run_json(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--data-parallel-size",
                     "8", "--enable-expert-parallel", "--max-model-len", "32k")
    assert ranks["data_parallel"]["data_parallel_size"] == 8 \
        == ranks["num_gpus"] // ranks["data_parallel"]["gpus_per_rank"]
    # fit's ridge length: the longest --max-model-len at which fit clears the ridge
    mi300x = ("llama-3.1-70b", "--gpu", "mi300x", "--weights", "fp8", "--kv-dtype", "fp8")
    ridge = run_json(capsys, "fit", *mi300x)["ridge_max_model_len"]
    assert ridge > 0
    at, past = (run_json(capsys, "fit", *mi300x, "--max-model-len", str(n))["verdict"]
                for n in (ridge, ridge + 1))
    assert at == "clears the ridge" != past
    plan = run_json(capsys, *PLAN)
    assert plan["constraints"]["min_max_model_len"] == 16384 <= plan["winner"]["max_model_len"]
    assert plan["pareto_context_len"] == 500 + 100 // 2  # the prompt and half the output
    sglang = run_json(capsys, "fit", *L8_8K, "--engine", "sglang")
    sim = run_json(capsys, "simulate", *L8_8K, "--engine", "sglang", "--rate", "2",
                   "--num-requests", "10")["settings"]
    assert sim["tokens"] == sglang["tokens"] == sim["num_blocks"] * sim["block_size"]
    seen = run_json(capsys, "observe", str(FIXTURES / "vllm_metrics.txt"), "--model",
                    "llama-3.1-8b", "--gpu", "h100", "--context", "4096")
    assert seen["batch"] == pytest.approx(seen["running"]["mean"])
    old = {"min_context", "ridge_context_tokens", "pareto_context_tokens",
           "max_total_num_tokens", "data_parallel_ranks"}
    for data in (fit, seats, ranks, plan, sglang, sim, seen):
        assert not old & _keys(data), old & _keys(data)
    assert "size" not in ranks["data_parallel"]
