"""prefill prices a serving engine's prompt in steps of its token budget, as simulate runs it:
--max-num-batched-tokens chunks a prompt longer than it (vLLM V1 by default at its own
budget), each chunk a step that re-reads the weights and attends to the chunks before it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from ridgeline.catalog import resolve_model
from ridgeline.chunked_prefill import (
    MAX_PREFILL_STEPS,
    chunks_prefill,
    mla_unchunked_caution,
    prefill_steps,
    prompt_steps_beside,
    refuses_whole_prompt,
    serving_prefill_time_s,
    steady_step_time_s,
    whole_prompt_refusal,
)
from ridgeline.cost import Seq, decode_batch, step_time_s
from ridgeline.deployment import Deployment
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.hardware import resolve_accelerator
from ridgeline.memory import EngineSettings
from ridgeline.reports.expectation import Expectation
from ridgeline.sim.config import sim_config
from ridgeline.vllm_pool import vllm_batch_defaults
from tests.conftest import run_cli

TP4_70B = ["llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4"]
EIGHT_B = ["llama-3.1-8b", "--gpu", "h100"]


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def deployment(model: str, count: int = 1, engine: str = "vllm") -> Deployment:
    return Deployment.build(resolve_model(model, fetchable=False), resolve_accelerator("h100"),
                            None, None, count, engine=engine)


# --- the steps ------------------------------------------------------------------------------


def test_a_32000_token_prompt_at_512_a_step_is_63_steps_the_last_of_256() -> None:
    steps = prefill_steps(32_000, 1, 512)
    assert len(steps) == math.ceil(32_000 / 512)
    assert [s[0].new_tokens for s in steps[:-1]] == [512] * (len(steps) - 1)
    assert steps[-1] == [Seq(32_000 - 512 * (len(steps) - 1), 512 * (len(steps) - 1))]
    assert [s[0].context_tokens for s in steps] == [512 * i for i in range(len(steps))]


@given(st.integers(1, 5_000), st.integers(1, 12), st.integers(1, 4_096), st.booleans())
def test_every_prompt_token_runs_once_within_the_budget(prompt: int, batch: int, budget: int,
                                                         chunked: bool) -> None:
    """Tokens are conserved, no step passes the budget (a whole prompt longer than it runs in
    chunks, as simulate lets it), and each prompt's chunks follow one another."""
    steps = prefill_steps(prompt, batch, budget, chunked)
    assert sum(s.new_tokens for step in steps for s in step) == batch * prompt
    assert all(sum(s.new_tokens for s in step) <= budget for step in steps)
    chunks = [s for step in steps for s in step]
    done = 0
    for s in chunks:  # first come, first served: a prompt's chunks before the next prompt's
        assert s.context_tokens == done % prompt
        done += s.new_tokens
    whole = not chunked and prompt <= budget
    assert len(steps) == (math.ceil(batch / (budget // prompt)) if whole
                          else math.ceil(batch * prompt / budget))


def test_prompts_that_fit_one_step_run_in_one() -> None:
    assert prefill_steps(4_000, 4, 16_384) == [[Seq(4_000, 0)] * 4]


def test_tensorrt_llm_packs_whole_prompts_into_its_steps() -> None:
    """Without chunked prefill a step takes the prompts that fit whole: 8 of 4,000 tokens at
    8,192 a step are 4 steps of 2, where chunking fills 4 steps of 8,192 and a last one."""
    assert prefill_steps(4_000, 8, 8_192, chunked=False) == [[Seq(4_000, 0)] * 2] * 4
    assert len(prefill_steps(4_000, 8, 8_192)) == math.ceil(8 * 4_000 / 8_192)


def test_a_prompt_in_more_steps_than_are_priced_one_by_one_is_refused() -> None:
    with pytest.raises(InputError, match="give a larger step token budget"):
        prefill_steps(MAX_PREFILL_STEPS + 1, 1, 1)


def test_the_steps_are_priced_by_the_one_step_cost() -> None:
    dep, profile = deployment("llama-3.1-70b", 4), profile_for("vllm")
    steps = prefill_steps(32_000, 1, 512)
    assert serving_prefill_time_s(dep, profile, steps) == pytest.approx(
        sum(step_time_s(dep, s, profile) for s in steps))
    assert serving_prefill_time_s(dep, profile, steps) > step_time_s(dep, [Seq(32_000, 0)],
                                                                      profile)


def test_a_prompt_beside_decodes_takes_the_room_they_leave_after_its_cached_tokens() -> None:
    """A 20,000-token prompt, 4,000 of it cached, beside 8 decodes under 8,192 a step: 16,000
    tokens computed in chunks of 8,184, each after the cache and the chunks before it."""
    steps = prompt_steps_beside(16_000, 4_000, 8_192 - 8)
    assert steps == [[Seq(8_184, 4_000)], [Seq(7_816, 4_000 + 8_184)]]
    assert prompt_steps_beside(1_024, 0, 8_184) == [[Seq(1_024, 0)]]


def test_a_prompt_every_32_steps_adds_a_32nd_of_what_its_step_costs_over_decode() -> None:
    """Llama-3.1-8B on an H100 under vLLM, 8 decodes at 1,152 tokens, a 1,024-token prompt
    every 32 steps: about 9.1 ms a step, the decode step plus a 32nd of the prompt step's
    excess over it — not the 11.2 ms of a step that carries 32 of its tokens every time."""
    dep, profile = deployment("llama-3.1-8b"), profile_for("vllm")
    decodes = decode_batch(8, 1_152)
    decode_s = step_time_s(dep, decodes, profile)
    mixed_s = step_time_s(dep, [*decodes, Seq(1_024, 0)], profile)
    steady_s = steady_step_time_s(dep, profile, decodes, [[Seq(1_024, 0)]], 1 / 32)
    assert steady_s == pytest.approx((31 * decode_s + mixed_s) / 32)
    assert steady_s * 1e3 == pytest.approx(9.1, abs=0.05)
    assert steady_step_time_s(dep, profile, decodes, [[Seq(1_024, 0)]], 0.0) == decode_s
    assert steady_s < step_time_s(dep, [*decodes, Seq(32, 512)], profile)


# --- prefill --------------------------------------------------------------------------------


def test_the_audits_32k_prompt_in_512_token_chunks_takes_what_simulate_times(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The audit's case: 70B on 4 x H100, one 32,000-token prompt at a budget of 512 had
    printed one pass (2,927 ms) where simulate, one prompt at a time, takes 3,734 ms; prefill
    now prices the 63 chunks, as simulate does, and the two agree."""
    flags = ["--max-num-batched-tokens", "512", "--max-num-seqs", "256"]
    prefill = run_json(capsys, "prefill", *TP4_70B, "--prompt-len", "32000", *flags)
    sim = run_json(capsys, "simulate", *TP4_70B, "--input-len", "32000", "--output-len", "4",
                   "--rate", "0.02", "--arrival", "constant", "--num-requests", "3", *flags)
    assert prefill["expected"]["time_s"] == pytest.approx(sim["ttft_s"]["p50"], rel=1e-6)
    dep, profile = deployment("llama-3.1-70b", 4), profile_for("vllm")
    assert prefill["expected"]["time_s"] == pytest.approx(
        serving_prefill_time_s(dep, profile, prefill_steps(32_000, 1, 512)))
    assert prefill["prompt_steps"] == math.ceil(32_000 / 512)
    assert prefill["max_num_batched_tokens"] == 512
    one_pass = step_time_s(dep, [Seq(32_000, 0)], profile)
    assert prefill["expected"]["time_s"] > 1.2 * one_pass


def test_a_smaller_budget_costs_more_and_one_past_the_prompt_is_one_pass(
        capsys: pytest.CaptureFixture[str]) -> None:
    """8B, 32,000 tokens: the four budgets the audit tried had printed the same 1,331.8 ms."""
    times = [run_json(capsys, "prefill", *EIGHT_B, "--prompt-len", "32000",
                      "--max-num-batched-tokens", str(b), "--max-num-seqs", "256")
             ["expected"]["time_s"] for b in (512, 2048, 8192, 65536)]
    assert times == sorted(times, reverse=True) and len(set(times)) == 4
    dep, profile = deployment("llama-3.1-8b"), profile_for("vllm")
    assert times[-1] == pytest.approx(step_time_s(dep, [Seq(32_000, 0)], profile))


@pytest.mark.parametrize("usage", ["offline", "serve"])
def test_vllm_chunks_at_its_default_budget_for_the_card_and_usage(
        capsys: pytest.CaptureFixture[str], usage: str) -> None:
    """Without the flag, vLLM V1 chunks at its default max_num_batched_tokens (on an H100
    8,192 for vllm serve, prefill's default as fit's and simulate's, and 16,384 for the
    offline LLM class), which the note names, with the other usage's."""
    dep, profile = deployment("llama-3.1-8b"), profile_for("vllm")
    budget = vllm_batch_defaults(dep, usage)["max_num_batched_tokens"]
    other = vllm_batch_defaults(dep, "serve" if usage == "offline" else "offline")
    flags = ["--usage", usage] if usage == "offline" else []
    report = run_json(capsys, "prefill", *EIGHT_B, "--prompt-len", "32000", *flags)
    assert report["max_num_batched_tokens"] == budget
    assert report["prompt_steps"] == math.ceil(32_000 / budget) > 1
    assert report["expected"]["time_s"] == pytest.approx(
        serving_prefill_time_s(dep, profile, prefill_steps(32_000, 1, budget)))
    code, out, _ = run_cli(capsys, "prefill", *EIGHT_B, "--prompt-len", "32000", *flags)
    assert code == 0
    assert (f"vLLM runs the 32,000-token prompt in {report['prompt_steps']} steps of at most "
            f"{budget:,} tokens (vLLM's default max_num_batched_tokens on h100-sxm") in out
    assert f": {other['max_num_batched_tokens']:,})" in out


def test_a_prompt_within_the_budget_is_priced_as_before(
        capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, "prefill", *EIGHT_B, "--prompt-len", "4000")
    dep, profile = deployment("llama-3.1-8b"), profile_for("vllm")
    assert report["prompt_steps"] == 1
    assert report["expected"]["time_s"] == pytest.approx(
        step_time_s(dep, [Seq(4_000, 0)], profile))
    code, out, _ = run_cli(capsys, "prefill", *EIGHT_B, "--prompt-len", "4000")
    assert code == 0 and "steps of at most" not in out


def test_explain_shows_the_budget_its_source_and_the_steps(
        capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, "prefill", *TP4_70B, "--prompt-len", "32000",
                      "--max-num-batched-tokens", "512", "--max-num-seqs", "256", "--explain")
    total = next(s for s in report["explain"]
                 if s["label"] == "prefill in steps of the token budget")
    inputs = {i["name"]: i for i in total["inputs"]}
    assert inputs["token budget"]["value"] == 512
    assert inputs["token budget"]["source"] == "--max-num-batched-tokens"
    assert inputs["steps"]["value"] == math.ceil(32_000 / 512)
    assert total["result"]["value"] == pytest.approx(report["expected"]["time_s"] * 1e3)
    assert any(s["label"].startswith("first step: ") for s in report["explain"])


def test_a_batch_of_prompts_fills_the_budget_first_come_first_served(
        capsys: pytest.CaptureFixture[str]) -> None:
    """8 prompts of 4,000 tokens at vllm serve's 8,192 a step: 4 steps, not one step of
    32,000 tokens past the budget."""
    report = run_json(capsys, "prefill", *EIGHT_B, "--prompt-len", "4000", "--batch", "8")
    dep, profile = deployment("llama-3.1-8b"), profile_for("vllm")
    budget = report["max_num_batched_tokens"]
    assert budget == vllm_batch_defaults(dep, "serve")["max_num_batched_tokens"]
    assert report["prompt_steps"] == math.ceil(8 * 4_000 / budget) == 4
    assert report["expected"]["time_s"] == pytest.approx(
        serving_prefill_time_s(dep, profile, prefill_steps(4_000, 8, budget)))


@pytest.mark.parametrize(("prompt", "batch"), [(2_000, 16), (20_000, 3)])
def test_several_prompts_over_several_steps_say_whose_ttft_the_expectation_is(
        capsys: pytest.CaptureFixture[str], prompt: int, batch: int) -> None:
    """16 prompts of 2,000 tokens at vllm serve's 8,192 a step take 4 steps: the expectation,
    their sum, is when the last prompt gets its first token; the first prompt's comes at the
    end of the step its last chunk runs in (the first here; the third for 20,000-token
    prompts). The text had called the sum "= TTFT", as if every prompt waited for it."""
    report = run_json(capsys, "prefill", *EIGHT_B, "--prompt-len", str(prompt),
                      "--batch", str(batch))
    dep, profile = deployment("llama-3.1-8b"), profile_for("vllm")
    budget = report["max_num_batched_tokens"]
    steps = prefill_steps(prompt, batch, budget)
    first_s = sum(step_time_s(dep, s, profile) for s in steps[:math.ceil(prompt / budget)])
    assert first_s < report["expected"]["time_s"] == pytest.approx(
        serving_prefill_time_s(dep, profile, steps))
    code, out, err = run_cli(capsys, "prefill", *EIGHT_B, "--prompt-len", str(prompt),
                             "--batch", str(batch))
    assert code == 0, err
    assert (f"{report['expected']['time_s'] * 1e3:,.1f} ms" in out
            and f"= the last prompt's TTFT (the first's: {first_s * 1e3:,.1f} ms)" in out)
    # a table of several lengths (or cards) says it in a note, each row's first prompt
    code, out, err = run_cli(capsys, "prefill", *EIGHT_B, "--prompt-len", f"{prompt},500",
                             "--batch", str(batch))
    assert code == 0, err
    assert (f"expected TTFT: the last of the {batch} prompts' (they run over several steps); "
            f"the first prompt's: {prompt:,}: {first_s * 1e3:,.1f} ms") in out


def test_one_prompt_or_one_step_is_everyones_ttft(capsys: pytest.CaptureFixture[str]) -> None:
    """A prompt alone over 13 steps, or 4 prompts in one step, end together: '= TTFT'."""
    for prompt, batch in ((100_000, 1), (2_000, 4)):
        code, out, err = run_cli(capsys, "prefill", *EIGHT_B, "--prompt-len", str(prompt),
                                 "--batch", str(batch))
        assert code == 0, err
        assert ") = TTFT, " in out and "the last prompt's" not in out


def test_a_prompt_past_a_whole_context_budget_is_refused_and_only_then() -> None:
    """The one rule simulate, prefill, fit and plan read: a prompt longer than the whole
    budget of an engine that runs contexts whole is refused; one at the budget runs, and an
    engine that chunks refuses none."""
    assert refuses_whole_prompt(8_193, 8_192, chunked=False)
    assert not refuses_whole_prompt(8_192, 8_192, chunked=False)
    assert not refuses_whole_prompt(32_000, 8_192, chunked=True)
    assert "should not exceed max_num_tokens" in whole_prompt_refusal("trtllm", 8_192)


def test_tensorrt_llm_prefill_refuses_a_prompt_past_max_num_tokens_as_simulate_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM runs a context whole (enable_chunked_prefill off by default) and refuses a
    32,000-token prompt past its max_num_tokens 8,192, as simulate refuses it: prefill leads
    with DOES NOT RUN, gives no expectation of its own, and prices the run
    --enable_chunked_prefill makes, which is that run's prefill and simulate's TTFT; a prompt
    within the budget runs as before."""
    argv = ("prefill", *EIGHT_B, "--prompt-len", "32000", "--engine", "trtllm")
    report = run_json(capsys, *argv)
    budget = report["max_num_batched_tokens"]
    assert refuses_whole_prompt(32_000, budget, chunked=False)
    assert not report["engine_runs"] and report["time_s"] is None
    assert report["expected_none_code"] == "over_max_num_tokens"
    assert f"max_num_tokens {budget:,}" in report["expected_none_reason"]
    assert not any("as if it were on" in c for c in report["cautions"])
    chunked = run_json(capsys, *argv, "--enable_chunked_prefill")
    alternative = report["with_enable_chunked_prefill"]
    assert chunked["engine_runs"] and chunked["with_enable_chunked_prefill"] is None
    assert alternative["time_s"] == pytest.approx(chunked["time_s"])
    assert alternative["prompt_steps"] == chunked["prompt_steps"] == math.ceil(32_000 / budget)
    sim = ("simulate", *EIGHT_B, "--engine", "trtllm", "--concurrency", "1", "--num-requests",
           "1", "--input-len", "32000", "--output-len", "2")
    code, _, err = run_cli(capsys, *sim)
    assert code == 2 and f"longer than max_num_tokens {budget:,}" in err
    ran = run_json(capsys, *sim, "--enable_chunked_prefill")
    assert ran["ttft_s"]["p50"] == pytest.approx(alternative["time_s"], rel=1e-6)
    code, out, _ = run_cli(capsys, *argv)
    first, last = out.splitlines()[0], out.splitlines()[-1]
    assert code == 0 and first.startswith("DOES NOT RUN on TensorRT-LLM") and "simulate" in first
    assert f"with --enable_chunked_prefill: {chunked['time_s'] * 1e3:,.1f} ms" in last
    within = run_json(capsys, "prefill", *EIGHT_B, "--prompt-len", "4000", "--engine",
                      "trtllm")
    assert within["engine_runs"] and within["with_enable_chunked_prefill"] is None


def test_tensorrt_llm_fit_cautions_that_prompts_past_max_num_tokens_are_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    """fit at a max_model_len of 16,384 under TensorRT-LLM's max_num_tokens 8,192, chunked
    prefill off: a caution says the prompts between are refused, naming both levers with their
    numbers and the conversations the pool holds at the raised budget (fit's own count there);
    none with --enable_chunked_prefill, at a length within the budget, or under vLLM."""
    argv = ("fit", *EIGHT_B, "--engine", "trtllm", "--max-model-len", "16384")
    said = [c for c in run_json(capsys, *argv)["cautions"] if "max_num_tokens" in c]
    raised = run_json(capsys, *argv, "--max-num-tokens", "16384")
    assert len(said) == 1 and "max_num_tokens 8,192" in said[0]
    assert "--enable_chunked_prefill" in said[0] and "--max-num-tokens 16,384" in said[0]
    assert f"holds {raised['conversations']:,} conversations" in said[0]
    for other in (("--enable_chunked_prefill",), ("--max-num-tokens", "16384")):
        assert not [c for c in run_json(capsys, *argv, *other)["cautions"]
                    if "max_num_tokens" in c]
    short = run_json(capsys, "fit", *EIGHT_B, "--engine", "trtllm", "--max-model-len", "8192")
    vllm = run_json(capsys, "fit", *EIGHT_B, "--max-model-len", "16384")
    assert not [c for r in (short, vllm) for c in r["cautions"] if "max_num_tokens" in c]


def test_tensorrt_llm_with_chunked_prefill_prices_its_steps_as_vllm_at_the_same_budget(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Five 5,000-token prompts at max_num_tokens 8,192: whole, one a step (5 steps);
    with enable_chunked_prefill, the budget's worth a step (4), as vLLM V1 runs them at
    --max-num-batched-tokens 8192, priced by the same step cost; past the budget, the
    prompt runs as it is priced, so no caution."""
    argv = ("prefill", *EIGHT_B, "--prompt-len", "5000", "--batch", "5")
    whole = run_json(capsys, *argv, "--engine", "trtllm")
    chunked = run_json(capsys, *argv, "--engine", "trtllm", "--enable_chunked_prefill")
    vllm = run_json(capsys, *argv, "--max-num-batched-tokens", "8192")
    budget = chunked["max_num_batched_tokens"]
    assert budget == whole["max_num_batched_tokens"] == vllm["max_num_batched_tokens"] == 8192
    assert whole["prompt_steps"] == len(prefill_steps(5_000, 5, budget, chunked=False)) == 5
    assert chunked["prompt_steps"] == vllm["prompt_steps"] == math.ceil(5 * 5_000 / budget)
    dep = deployment("llama-3.1-8b", engine="trtllm")
    assert chunked["expected"]["time_s"] == pytest.approx(vllm["expected"]["time_s"]) \
        == pytest.approx(serving_prefill_time_s(dep, profile_for("trtllm"),
                                                prefill_steps(5_000, 5, budget)))
    assert chunked["expected"]["time_s"] != pytest.approx(whole["expected"]["time_s"])
    long = run_json(capsys, "prefill", *EIGHT_B, "--prompt-len", "32000", "--engine",
                    "trtllm", "--enable_chunked_prefill")
    assert not any("runs a context whole" in c for c in long["cautions"])


def test_tensorrt_llm_runs_an_mla_model_whole_outside_sm_90_100_103_120(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM's PyTorch backend turns enable_chunked_prefill off again for an MLA model
    where the card's SM is not 90, 100, 103 or 120: DeepSeek-V3 on A100s (SM 8.0) or L40Ss
    (8.9), five 5,000-token prompts at 8,192 a step run whole with the option as without it,
    in the simulator too, with a caution saying so; on H100s (9.0) they fill the steps, and
    Llama-3.1-8B, no MLA, chunks on an A100."""
    v3 = resolve_model("deepseek-v3", fetchable=False)
    profile, budget = profile_for("trtllm"), (8192, "max_num_tokens")
    asked = EngineSettings(enable_chunked_prefill=True, max_model_len=8192)

    def priced(dep: Deployment, chunked: bool) -> float:
        return Expectation.of_prefill(dep, 5_000, 5, profile, budget=budget,
                                      enable_chunked_prefill=chunked).time_s

    for gpu, weights in (("a100-sxm-80gb", "bf16"), ("l40s", None)):  # no fp8 on an A100
        dep = Deployment.build(v3, resolve_accelerator(gpu), weights, None, 8, engine="trtllm")
        assert not chunks_prefill(dep, True) and not sim_config(dep, asked).chunked_prefill
        assert priced(dep, True) == pytest.approx(priced(dep, False)) == pytest.approx(
            serving_prefill_time_s(dep, profile, prefill_steps(5_000, 5, 8192, chunked=False)))
        assert "MLA" in mla_unchunked_caution(dep, True) and not mla_unchunked_caution(dep, False)
    h100 = Deployment.build(v3, resolve_accelerator("h100"), None, None, 8, engine="trtllm")
    assert chunks_prefill(h100, True) and sim_config(h100, asked).chunked_prefill
    assert priced(h100, True) == pytest.approx(
        serving_prefill_time_s(h100, profile, prefill_steps(5_000, 5, 8192)))
    assert priced(h100, True) != pytest.approx(priced(h100, False))
    assert not mla_unchunked_caution(h100, True)
    llama = Deployment.build(resolve_model("llama-3.1-8b", fetchable=False),
                             resolve_accelerator("a100-sxm-80gb"), engine="trtllm")
    assert chunks_prefill(llama, True) and not mla_unchunked_caution(llama, True)
    argv = ("prefill", "deepseek-v3", "--gpu", "l40s", "--num-gpus", "16", "--engine", "trtllm",
            "--prompt-len", "5000", "--batch", "5")
    on = run_json(capsys, *argv, "--enable_chunked_prefill")
    off = run_json(capsys, *argv)
    assert not on["chunked_prefill"] and on["prompt_steps"] == off["prompt_steps"] == 5
    assert on["expected"]["time_s"] == pytest.approx(off["expected"]["time_s"])
    assert [c for c in on["cautions"] if "turns enable_chunked_prefill off" in c]
    assert not [c for c in off["cautions"] if "turns enable_chunked_prefill off" in c]


def test_simulate_cautions_that_tensorrt_llm_turned_chunked_prefill_off_for_mla(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 on L40Ss with --enable_chunked_prefill: the engine runs contexts whole, so
    the prompts past max_num_tokens (4,000 to 12,000 tokens drawn) are refused, cautioned with
    the one remedy left (a larger budget), and a caution says TensorRT-LLM turned the option
    off; where every prompt is past it, the run is refused in one line saying why."""
    argv = ["simulate", "deepseek-v3", "--gpu", "l40s", "--num-gpus", "16", "--engine",
            "trtllm", "--enable_chunked_prefill", "--rate", "0.5", "--num-requests", "10",
            "--output-len", "20", "--input-len"]
    data = run_json(capsys, *argv, "uniform:4000,12000")
    said = [c for c in data["cautions"] if "turns enable_chunked_prefill off" in c]
    assert len(said) == 1 and "l40s" in said[0]
    over = [c for c in data["cautions"] if "longer than max_num_tokens" in c]
    assert len(over) == 1 and "--enable_chunked_prefill" not in over[0]
    assert 0 < data["completed"] < 10
    code, _, err = run_cli(capsys, *argv, "12000")
    assert code == 2 and err.count("\n") == 1 and "is off for this MLA model" in err


def test_several_cards_say_which_expectations_count_several_steps(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100,a100",
                           "--prompt-len", "1000,32000")
    dep = Deployment.build(resolve_model("llama-3.1-8b", fetchable=False),
                           resolve_accelerator("a100"), None, None, 1, engine="vllm")
    a100 = vllm_batch_defaults(dep, "serve")["max_num_batched_tokens"]
    assert code == 0
    assert f"1 x a100-sxm-80gb at 32,000: {math.ceil(32_000 / a100)} steps of {a100:,}" in out


def test_llama_cpp_keeps_its_ubatches(capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's prompt passes are its ubatches (-ub), not a serving engine's budget."""
    report = run_json(capsys, "prefill", "llama-3.1-8b", "--gpu", "rtx-4090", "--weights",
                      "q4_k_m", "--engine", "llama.cpp-cuda", "--prompt-len", "4000")
    assert report["max_num_batched_tokens"] is None
    assert report["prompt_steps"] == math.ceil(4_000 / 512)


def test_a_prompt_no_pool_holds_is_not_priced_step_by_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A trillion-token prompt is 61 million steps of 16,384: it does not fit, so no step is
    priced, and the answer is the one it had been (no expectation), not a refusal; its step
    count is null as the expectation is, not one step under a budget it is millions past."""
    prompt = 10**12
    assert math.ceil(prompt / 16_384) > MAX_PREFILL_STEPS
    report = run_json(capsys, "prefill", *EIGHT_B, "--prompt-len", str(prompt))
    assert report["expected"] is None and report["expected_none_code"] == "does_not_fit"
    assert report["prompt_steps"] is None


def test_a_deployment_that_does_not_fit_counts_no_prompt_steps(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B bf16 on one H100 (141 GB of weights on 80): a 20,000-token prompt at
    --max-num-batched-tokens 2048 gets no expectation, and no step count beside the budget
    (it had read 1 step of at most 2,048 tokens); on 4 x H100 it runs, in 10 steps."""
    argv = ("prefill", "llama-3.1-70b", "--gpu", "h100", "--prompt-len", "20000",
            "--max-num-batched-tokens", "2048")
    report = run_json(capsys, *argv)
    assert report["expected"] is None and report["max_num_batched_tokens"] == 2048
    assert report["prompt_steps"] is None
    report = run_json(capsys, *argv, "--num-gpus", "4")
    assert report["expected"] is not None and report["prompt_steps"] == math.ceil(20_000 / 2048)


@given(prompt=st.integers(1, 3_000), batch=st.integers(1, 40), budget=st.integers(1, 9_000))
def test_a_prompt_is_said_split_exactly_when_a_step_carries_its_later_chunk(
        prompt: int, batch: int, budget: int) -> None:
    from ridgeline.chunked_prefill import splits_a_prompt

    assume(-(-batch * prompt // budget) <= 2_000)
    steps = prefill_steps(prompt, batch, budget)
    cut = any(seq.context_tokens > 0 for step in steps for seq in step)
    assert splits_a_prompt(prompt, batch, budget) == cut


def test_whole_prompts_filling_the_budget_are_not_said_to_attend_to_earlier_chunks(
        capsys: pytest.CaptureFixture[str]) -> None:
    def text(prompt: str, batch: str) -> str:
        code, out, _ = run_cli(capsys, "prefill", *EIGHT_B, "--prompt-len", prompt, "--batch",
                               batch, "--usage", "serve")
        assert code == 0
        return " ".join(out.split())

    whole, cut = text("512", "32"), text("5000", "3")
    assert "steps of at most 8,192" in whole and "attending to the chunks" not in whole
    assert "attending to the chunks before it" in cut


def test_prefill_json_says_whether_a_long_prompt_runs_in_chunks(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """TensorRT-LLM runs a context whole unless enable_chunked_prefill is on; vLLM always
    chunks: --json says which, and a config file's non-boolean value is refused as such."""

    base = ("prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "20000", "--json")
    chunked = {}
    for name, extra in (("trtllm", ()), ("trtllm-on", ("--enable_chunked_prefill",)),
                        ("vllm", ())):
        code, out, _ = run_cli(capsys, *base, "--engine", name.split("-")[0], *extra)
        assert code == 0
        chunked[name] = json.loads(out)["chunked_prefill"]
    assert chunked == {"trtllm": False, "trtllm-on": True, "vllm": True}
    conf = tmp_path / "opts.yaml"
    for value, said in (("null", "null"), ("1", "1")):
        conf.write_text(f"enable_chunked_prefill: {value}\n")
        code, _, err = run_cli(capsys, *base, "--engine", "trtllm", "--extra_llm_api_options",
                               str(conf))
        assert code == 2 and f"takes true or false, got {said}" in err
