"""A serving engineer's leftovers: each line a reader would take for something else now says
what it is (the weights' share, the weights-alone refusal, the pool's block rounding, the
engine's own knob names, the seat cap, no multiplier on nothing)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import run_cli


def test_utilizations_share_past_the_ridge_says_it_is_the_weight_matrices_not_the_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    """400 running 8B sequences on an H100 clear the ridge for the weight matrices (100%)
    while the whole step keeps about a third of the peak busy: the first line names whose
    share it gives, in the text and in --explain, so it cannot read as the whole step's."""
    argv = ["utilization", "--gpu", "h100", "--running", "400", "--model", "llama-3.1-8b",
            "--context", "1k"]
    code, out, _ = run_cli(capsys, *argv)
    head, whole = out.splitlines()[:2]
    assert code == 0 and "100.0% of the arithmetic" in head and "whole step" in whole
    assert "weight matrices" in head
    code, out, _ = run_cli(capsys, *argv, "--explain")
    share = next(line for line in out.splitlines() if "(2 × running" in line)
    assert "weight matrices" in share


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_simulate_refuses_weights_over_the_card_for_that_reason_on_every_engine(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    """Jamba-1.5-Mini's bf16 weights (about 96 GiB) on one H100: fit says the weights alone
    exceed the card for every engine, and simulate now gives that reason too, with fit's
    weights figure, rather than "leaves no KV pool" for vLLM and TensorRT-LLM."""
    base = ["jamba-1.5-mini", "--gpu", "h100", "--max-model-len", "8k", "--engine", engine]
    code, out, _ = run_cli(capsys, "fit", *base, "--json")
    weights_gib = json.loads(out)["taken_bytes_per_gpu"]["weights"] / 2**30
    code, _, err = run_cli(capsys, "simulate", *base, "--rate", "4", "--num-requests", "40")
    assert code == 2 and "leaves no KV pool" not in err
    assert f"its weights alone ({weights_gib:,.2f} GiB per GPU) are more than" in err


def test_observes_pool_count_is_redone_from_the_division_it_prints(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A one-line vLLM scrape, 12 running at 25% KV usage, Llama-3.1-8B on an H100: the
    pool's tokens ÷ the context make 48, but vLLM holds whole 16-token blocks, so 47. The
    line prints the block division, and it gives the count it states."""
    scrape = tmp_path / "metrics.txt"
    scrape.write_text("vllm:num_requests_running 12\nvllm:kv_cache_usage_perc 0.25\n")
    code, out, _ = run_cli(capsys, "observe", str(scrape), "--model", "llama-3.1-8b",
                           "--gpu", "h100")
    line = next(x for x in out.splitlines() if x.startswith("the KV pool allows"))
    found = re.search(r"allows ([\d,]+) sequences of ([\d,]+) tokens .*pool of ([\d,]+) "
                      r"tokens.*: ([\d,]+) blocks ÷ ([\d,]+) a sequence", line)
    assert code == 0 and found, line
    count, context, tokens, blocks, each = (int(g.replace(",", "")) for g in found.groups())
    assert tokens // context != count  # the tokens' division alone does not give it
    assert blocks // each == count


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_decodes_pool_settings_use_the_engines_own_knob_names(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    """SGLang calls its seat cap max_running_requests and TensorRT-LLM max_batch_size, and
    the line that ends "capped by <that name>" labels the settings with the same name, as
    the engine's launch flags (engines.json) spell the longest request."""
    from ridgeline.candidate import ENGINE_KNOB_NAMES
    from ridgeline.datafiles import engine_defaults

    code, out, _ = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine",
                           engine, "--max-num-seqs", "16", "--max-model-len", "6992",
                           "--batch", "32", "--context", "4k")
    seats = ENGINE_KNOB_NAMES[engine][0]
    length = engine_defaults(engine)["cli"]["max_len"].lstrip("-").replace("-", "_")
    line = next(x for x in out.splitlines() if f"capped by {seats}" in x)
    assert code == 0 and f"({seats} 16, {length} 6,992)" in line
    assert "max_num_seqs" not in out and "max_model_len" not in out


def test_a_given_max_model_len_is_printed_with_its_thousands_separator(
        capsys: pytest.CaptureFixture[str]) -> None:
    """decode prints contexts as 6,992 tokens; the settings beside them print the same."""
    code, out, _ = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "8",
                           "--context", "4k", "--max-model-len", "6992")
    assert code == 0 and "max_model_len 6,992)" in out and "6992" not in out


def test_amdahls_refusal_past_the_seats_names_the_seat_cap_not_the_pool(
        capsys: pytest.CaptureFixture[str]) -> None:
    """2,000 sequences of 100 tokens of Llama-3.1-8B on an H100: the pool holds them all
    (fit says how many), but vllm serve seats 1,024. amdahl refuses as decode does, naming
    max_num_seqs, not "its KV pool runs 1,024"."""
    from ridgeline.candidate import ENGINE_KNOB_NAMES

    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           "100", "--json")
    fit = json.loads(out)
    assert code == 0 and fit["conversations"] > 2000 > fit["max_num_seqs"]
    code, _, err = run_cli(capsys, "amdahl", "--model", "llama-3.1-8b", "--gpu", "h100",
                           "--batch", "2000", "--context", "100")
    assert code == 2 and "KV pool runs" not in err
    assert (f"{ENGINE_KNOB_NAMES['vllm'][0]} lets at most {fit['max_num_seqs']:,} sequences"
            in err)


def test_roofline_notes_no_tensor_parallel_copies_of_a_cache_it_does_not_count(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 on 8 H100s: roofline's DOES NOT FIT counts the weights alone, so it has no
    KV term, and no "×8: copied over the tensor-parallel ranks" multiplying nothing; decode,
    with a cache to count, still notes the copies."""
    base = ["--gpu", "h100", "--num-gpus", "8", "--batch", "64"]
    code, out, _ = run_cli(capsys, "roofline", "--model", "deepseek-v3", *base)
    head = out.splitlines()[0]
    assert code == 0 and "GB of weights > " in head and "KV cache" not in head \
        and "×8" not in head
    code, out, _ = run_cli(capsys, "decode", "deepseek-v3", *base, "--context", "8k")
    assert "(×8: copied over the tensor-parallel ranks)" in out


def test_llamacpp_prefills_busy_stages_are_set_off_from_the_peaks_citation(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's prefill on 4 H100s multiplies the peak by the stages busy on average; in
    --explain that factor followed the whitepaper's words with no break ("twice these × 2.3
    of 4 …"), reading as part of the source. The citation now ends before it."""
    from ridgeline import resolve_accelerator

    citation = resolve_accelerator("h100").source_of("peak_flops")
    code, out, _ = run_cli(capsys, "prefill", "llama-3.1-70b", "--gpu", "h100", "--num-gpus",
                           "4", "--engine", "llama.cpp", "--prompt-len", "2000", "--explain")
    line = next(x for x in out.splitlines() if "pipeline stages busy" in x)
    assert code == 0 and f"{citation}; " in line and f"{citation} ×" not in line


@pytest.mark.parametrize("size", ["3", "0.125", "8"])
def test_attention_takes_only_the_sizes_a_score_can_be_kept_in(
        capsys: pytest.CaptureFixture[str], size: str) -> None:
    """A score is kept in fp4, fp8, bf16 or fp32: 0.5, 1, 2 or 4 bytes. '3-byte scores' had
    been printed as if a format held them; each size of SCORE_BYTES still runs."""
    from ridgeline.attention_memory import SCORE_BYTES

    base = ["attention", "--model", "llama-3.1-8b", "--context", "4096"]
    code, out, err = run_cli(capsys, *base, "--bytes-per-element", size)
    assert code == 2 and not out and "argument --bytes-per-element: " in err
    for each in SCORE_BYTES:
        code, out, _ = run_cli(capsys, *base, "--bytes-per-element", f"{each:g}")
        assert code == 0 and f"({each:g}-byte scores)" in out


@pytest.mark.parametrize(("flag", "value"), [("--pct-a", "120"), ("--pct-b", "-5")])
def test_evalstats_names_the_flag_whose_percent_is_out_of_range(
        capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    pcts = {"--pct-a": "60", "--pct-b": "50", flag: value}
    code, _, err = run_cli(capsys, "evalstats", *(x for kv in pcts.items() for x in kv),
                           "--n", "100")
    assert code == 2 and f"argument {flag}: percent must be between 0 and 100" in err


def test_simulates_json_gives_no_acceptance_without_a_drafter_and_one_row_a_time(
        capsys: pytest.CaptureFixture[str]) -> None:
    """No drafter (spec_tokens 0): no acceptance rate beside it. The time series had two
    rows at one instant wherever a step began as the last ended (its reading, then the
    arrivals due then): one row a time now, the later state, the one that holds."""
    base = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "4", "--num-requests",
            "40", "--json"]
    code, out, _ = run_cli(capsys, *base)
    report = json.loads(out)
    assert code == 0 and report["settings"]["spec_tokens"] == 0
    assert report["settings"]["spec_acceptance"] is None
    times = [row["t_s"] for row in report["time_series"]]
    assert times == sorted(set(times)) and len(times) > 40


def test_a_second_reading_at_one_instant_replaces_the_first() -> None:
    from ridgeline.sim.time_series import TimeSeries

    series = TimeSeries()
    series.add(0.5, 1, 0, 0.1, 0)
    series.add(0.5, 1, 1, 0.1, 0)  # an arrival due at the step's start
    series.add(0.6, 2, 0, 0.2, 0)
    assert series.points == [(0.5, 1, 1, 0.1, 0), (0.6, 2, 0, 0.2, 0)]
