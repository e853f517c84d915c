"""The first hour's loose ends: `fit --json` gives the pool's token slots beside vLLM's logged
token count, `decode` says a --context it refuses is its own default where none was typed, a
short conversation reads in its own unit in the engines' table too, a multi-card `decode`
cautions a card's profile rows only where that card's row is priced, and plan's chained
disaggregated TTFT reads its percentile as simulate does (numpy's linear)."""

from __future__ import annotations

import json
import math

import pytest

from ridgeline.cli_types import DEFAULT_CONTEXT_TOKENS
from ridgeline.split_runs import chained_percentile_s
from ridgeline.units import GIB, fmt_binary_bytes
from ridgeline.vllm_memory import vllm_accounting
from tests.conftest import run_cli

BLOCK = vllm_accounting().block_size  # vLLM's default block size (64 from v0.34)


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("length", [17, 1])
def test_fit_json_gives_the_slots_beside_vllms_logged_tokens_off_the_block(
        capsys: pytest.CaptureFixture[str], length: int) -> None:
    """At a max_model_len off the block vLLM (v0.24+) logs concurrency × max_model_len, each
    request holding ⌈L ÷ block⌉ blocks; the slots are blocks × block, the figure the key
    lacked."""
    fit = _json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", str(length))
    blocks = fit["blocks_per_gpu"]
    assert fit["block_size"] == BLOCK
    assert fit["token_slots_per_gpu"] == blocks * BLOCK
    assert fit["tokens"] == int(blocks / math.ceil(length / BLOCK) * length)
    assert fit["tokens"] < fit["token_slots_per_gpu"]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_on_the_block_the_slots_are_the_logged_tokens(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    fit = _json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192",
                "--engine", engine)
    assert fit["token_slots_per_gpu"] == fit["tokens"] \
        == fit["blocks_per_gpu"] * fit["block_size"]


def test_decode_names_its_default_context_where_none_was_typed(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`decode --max-model-len 1` had read "--context 2,000 is past --max-model-len 1", a
    flag the user never gave."""
    code, _, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100",
                           "--max-model-len", "1")
    assert code == 2
    assert (f"decode's default --context {DEFAULT_CONTEXT_TOKENS:,} (none was given) is past "
            "--max-model-len 1") in err
    assert "give a --context of at most 1, or a --max-model-len of at least " \
        f"{DEFAULT_CONTEXT_TOKENS:,}" in err
    code, _, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--context",
                           str(DEFAULT_CONTEXT_TOKENS), "--max-model-len", "1")
    assert code == 2 and "default" not in err
    assert f"--context {DEFAULT_CONTEXT_TOKENS:,} is past --max-model-len 1" in err


def test_decode_still_prices_its_default_context(capsys: pytest.CaptureFixture[str]) -> None:
    report = _json(capsys, "decode", "llama-3.1-8b", "--gpu", "h100")
    assert [p["context_len"] for p in report["points"]] == [DEFAULT_CONTEXT_TOKENS]


def test_the_engines_table_gives_a_short_conversation_in_its_own_unit(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang's page is one token: a 1-token conversation of Llama-3.1-8B is one token's
    cache, under 0.0005 GiB, which the table had printed as 0.000."""
    argv = ("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm,sglang",
            "--max-model-len", "1")
    rows = {r["engine"]: r for r in _json(capsys, *argv)["engines"]}
    small = rows["sglang"]["per_conversation_bytes_per_gpu"]
    assert 0 < small < GIB / 2000
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    (sglang,) = [line for line in out.splitlines() if line.startswith("sglang ")]
    assert f" {fmt_binary_bytes(small)} " in sglang and "0.000" not in sglang
    (vllm,) = [line for line in out.splitlines() if line.startswith("vllm ")]
    assert f" {rows['vllm']['per_conversation_bytes_per_gpu'] / GIB:,.3f} " in vllm
    assert "conversations of 1 token by engine" in out


PROFILE_ROWS = "the vllm profile saw no rows on nvidia-geforce cards"


def test_a_geforce_row_that_prices_nothing_gets_no_profile_caution(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B in bf16 fits neither an RTX 4090 nor an H100: no row is priced, so the
    caution about the GeForce rows the profile lacks says nothing; where the 4090 row is
    priced (Llama-3.1-8B at 8,192 tokens), it is said, and the one-card report keeps it."""
    code, out, _ = run_cli(capsys, "decode", "llama-3.1-70b", "--gpu", "rtx-4090,h100",
                           "--context", "8192")
    assert code == 0 and "does not fit" in out and PROFILE_ROWS not in out
    priced = ("decode", "llama-3.1-8b", "--context", "8192", "--max-model-len", "8192")
    code, out, _ = run_cli(capsys, *priced, "--gpu", "rtx-4090,h100")
    assert code == 0 and PROFILE_ROWS in out
    code, out, _ = run_cli(capsys, *priced, "--gpu", "rtx-4090")
    assert code == 0 and PROFILE_ROWS in out


@pytest.mark.parametrize("batches", ["1", "1,2"])
def test_a_one_card_report_that_prices_nothing_gets_no_profile_caution(
        capsys: pytest.CaptureFixture[str], batches: str) -> None:
    """Gemma-2-9B in bf16 does not fit a 12 GiB RTX 3060: the one-card report, a point or a
    table, prints no expected time, so it says nothing of the GeForce rows the profile lacks
    (as the comparison above), while its JSON keeps every caution; a priced 3060 row (Llama-3.2-1B)
    still says it."""
    argv = ("decode", "gemma-2-9b", "--gpu", "rtx-3060", "--batch", batches)
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and out.startswith("DOES NOT FIT") and PROFILE_ROWS not in out
    code, out, _ = run_cli(capsys, *argv, "--json")
    assert code == 0 and any(PROFILE_ROWS in c for c in json.loads(out)["cautions"])
    code, out, _ = run_cli(capsys, "decode", "llama-3.2-1b", "--gpu", "rtx-3060",
                           "--batch", batches, "--max-model-len", "8192")
    assert code == 0 and "DOES NOT FIT" not in out and PROFILE_ROWS in out


def test_the_chained_ttft_reads_its_percentile_linearly() -> None:
    """Ten equal-weight values 1 … 10 s (one part): p90 is 9.1 s, numpy's linear reading
    (position 0.9 × 9 = 8.1), as simulate's Histogram.percentile reads 1 … 10; nearest rank
    read 9 s. Two parts of 0 and 1 s each: sums 0, 1, 1, 2 — p50 at position 1.5, 1 s; p90 at
    2.7, 1.7 s."""
    from ridgeline.sim.histogram import Histogram

    values = [float(v) for v in range(1, 11)]
    assert chained_percentile_s((values,), 90) == pytest.approx(9.1)
    h = Histogram()
    for v in values:
        h.add(v)
    assert h.percentile(90) == pytest.approx(chained_percentile_s((values,), 90), rel=3e-3)
    coin = [0.0, 1.0]
    assert chained_percentile_s((coin, coin), 50) == pytest.approx(1.0)
    assert chained_percentile_s((coin, coin), 90) == pytest.approx(0.7 + 1.0)


def test_decode_and_prefill_name_expert_parallel_in_their_deployment_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 on 8 x H200 with --enable-expert-parallel: decode's and prefill's first
    line read as TP8's did, though the step moved (batch 1's floor) — simulate said EP, they
    did not. Now they say it; without the flag they do not, and a data-parallel layout's own
    label names its experts' split once."""
    dep = ("deepseek-v3", "--gpu", "h200", "--num-gpus", "8")
    decode = ("decode", *dep, "--batch", "1", "--context", "4000", "--json")
    code, out, _ = run_cli(capsys, *decode, "--enable-expert-parallel")
    ep = json.loads(out)
    code_tp, out, _ = run_cli(capsys, *decode)
    tp = json.loads(out)
    assert code == code_tp == 0
    assert "experts spread over the GPUs (EP)" in ep["deployment"]
    assert "(EP)" not in tp["deployment"]
    assert ep["points"][0]["step_time_s"] != tp["points"][0]["step_time_s"]
    code, out, _ = run_cli(capsys, "prefill", *dep, "--prompt-len", "1000",
                           "--enable-expert-parallel")
    assert code == 0 and "on 8 x h200-sxm, experts spread over the GPUs (EP), weights" in out
    code, out, _ = run_cli(capsys, "decode", *dep, "--engine", "sglang", "--enable-dp-attention",
                           "--data-parallel-size", "8", "--enable-expert-parallel", "--batch", "64")
    assert code == 0 and "(EP)" not in out.splitlines()[0] and "EP8" in out.splitlines()[0]
