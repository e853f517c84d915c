"""vLLM's scheduler settings as each release sets and checks them: a default token budget no
larger than max_num_seqs × max_model_len, V0's start-up refusals, a running request's
positions and lookahead slots ending at max_model_len, and --long-prefill-token-threshold."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.chunked_prefill import step_budget
from ridgeline.cli import main
from ridgeline.engine_scheduling import long_prefill_threshold
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.config import sim_config
from ridgeline.sim.request import Request
from ridgeline.sim.scheduler import Scheduler, SchedulerConfig
from ridgeline.vllm_pool import vllm_batch_defaults

DEP = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
BS = 16


def _budget(version: str, **knobs: int) -> int:
    return kv_pool(DEP, EngineSettings(engine_version=version, **knobs)).profile_tokens


# -- the default budget's cap ------------------------------------------------------------

def test_v1_default_budget_is_capped_at_seats_times_length_from_0_11_1() -> None:
    default = vllm_batch_defaults(DEP, "serve")["max_num_batched_tokens"]
    length = default // 2  # one seat holds half the default budget
    assert _budget("0.11.1", max_num_seqs=1, max_model_len=length) == length
    assert _budget("0.32", max_num_seqs=1, max_model_len=length) == length
    # 0.11.0 set the device's default on EngineArgs first: the config's cap never saw it
    assert _budget("0.11.0", max_num_seqs=1, max_model_len=length) == default


def test_a_budget_given_or_seats_that_hold_it_are_not_capped() -> None:
    default = vllm_batch_defaults(DEP, "serve")["max_num_batched_tokens"]
    length = default // 2
    assert _budget("0.32", max_num_seqs=2, max_model_len=length) == default
    asked = default + 1024
    assert _budget("0.32", max_num_seqs=1, max_model_len=length,
                   max_num_batched_tokens=asked) == asked


def test_v1_cap_reads_the_models_context_when_no_length_is_given() -> None:
    short = replace(DEP, model=replace(DEP.model, max_position_embeddings=2048))
    default = vllm_batch_defaults(short, "serve")["max_num_batched_tokens"]
    pool = kv_pool(short, EngineSettings(max_num_seqs=1))
    assert pool.profile_tokens == min(default, short.model.max_position_embeddings)


def test_v0_default_budget_is_capped_from_0_9() -> None:
    length = 1024  # below V0's 2,048-token floor, one seat
    assert _budget("0.9.2 V0", max_num_seqs=1, max_model_len=length) == length
    assert _budget("0.8.5 V0", max_num_seqs=1, max_model_len=length) > length


def test_step_budget_says_the_default_was_lowered() -> None:
    length = vllm_batch_defaults(DEP, "serve")["max_num_batched_tokens"] // 4
    tokens, source = step_budget(DEP, EngineSettings(max_num_seqs=1, max_model_len=length))
    assert tokens == length
    assert "lowered to max_num_seqs × max_model_len" in source
    assert "lowered" not in step_budget(DEP, EngineSettings())[1]


# -- V0's refusals ---------------------------------------------------------------------

def test_v0_refuses_more_seats_than_its_budget() -> None:
    length = 2048  # V0 runs it whole: a budget of max(length, 2,048)
    with pytest.raises(InputError, match="must be at least --max-num-seqs"):
        _budget("0.10.2 V0", max_num_seqs=2 * length, max_model_len=length)
    assert _budget("0.10.2 V0", max_num_seqs=length, max_model_len=length) == length


def test_v0_refuses_a_budget_below_the_context_it_runs_whole() -> None:
    with pytest.raises(InputError, match="below max_model_len"):
        _budget("0.10.2 V0", max_model_len=8192, max_num_batched_tokens=4096)
    # past 32K tokens V0 chunks prompts: a smaller budget starts
    assert _budget("0.10.2 V0", max_model_len=64 * 1024, max_num_batched_tokens=4096) == 4096


def test_v0_refusal_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "2048",
                 "--max-num-seqs", "4096", "--engine-version", "0.10.2 V0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "refuses to start" in err
    assert main(["fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "2048",
                 "--max-num-seqs", "2048", "--engine-version", "0.10.2 V0"]) == 0


# -- positions and lookahead end at max_model_len ----------------------------------------

def _last_verify_step(max_model_len: int, drafts: int = 3) -> tuple[int, int]:
    """A prompt 4 tokens short of max_model_len, its first token out; the next step
    verifies 1 + drafts with as many lookahead slots. Returns (the step's tokens, the
    blocks the request then holds)."""
    s = Scheduler(SchedulerConfig(64, 8192, spec_tokens=drafts, lookahead_tokens=drafts,
                                  max_model_len=max_model_len), BlockPool(1000, BS))
    prompt = 4 * BS - 4
    r = Request(0, 0.0, prompt, 4)
    s.add(r)
    (first,) = s.schedule(0.0)
    r.num_computed, r.num_generated = first.tokens, 1
    (verify,) = s.schedule(0.1)
    return verify.tokens, r.blocks_held


def test_a_verify_step_near_max_model_len_is_cut_to_the_positions_left() -> None:
    length = 4 * BS
    tokens, held = _last_verify_step(length)
    assert tokens == length - 1 - (length - 4)  # positions up to max_model_len − 1
    assert held == length // BS  # the lookahead ends at max_model_len
    uncapped_tokens, uncapped_held = _last_verify_step(0)
    assert uncapped_tokens > tokens and uncapped_held > held


def test_only_vllm_caps_positions() -> None:
    assert sim_config(DEP).positions_capped
    assert not sim_config(replace(DEP, engine="sglang")).positions_capped


# -- --long-prefill-token-threshold ------------------------------------------------------

def _first_step(prompts: list[int], cap: int, alone: bool) -> list[int]:
    s = Scheduler(SchedulerConfig(64, 8192, long_prefill_tokens=cap,
                                  long_prefill_alone=alone), BlockPool(10_000, BS))
    for i, p in enumerate(prompts):
        s.add(Request(i, 0.0, p, 8))
    return [b.tokens for b in s.schedule(0.0)]


def test_a_long_prefill_takes_at_most_the_threshold_a_step() -> None:
    cap = 512
    assert _first_step([4 * cap, 4 * cap], cap, alone=False) == [cap, cap]
    assert _first_step([cap // 2, 4 * cap], cap, alone=False) == [cap // 2, cap]
    assert _first_step([4 * cap, 4 * cap], 0, alone=False) == [4 * cap, 4 * cap]


def test_a_lone_request_is_waived_from_0_31() -> None:
    cap = 512
    assert _first_step([4 * cap], cap, alone=False) == [4 * cap]
    assert _first_step([4 * cap], cap, alone=True) == [cap]
    assert long_prefill_threshold("vllm", "0.31", cap, 8192) == (cap, False)
    assert long_prefill_threshold("vllm", "0.30", cap, 8192) == (cap, True)
    assert long_prefill_threshold("vllm", None, None, 8192)[0] == 0  # unset: off


def test_threshold_checks_follow_vllm() -> None:
    with pytest.raises(InputError, match="vLLM's"):
        long_prefill_threshold("sglang", None, 512, 8192)
    with pytest.raises(InputError, match="max_model_len"):
        long_prefill_threshold("vllm", "0.27", 8193, 8192)
    assert long_prefill_threshold("vllm", "0.26", 8193, 8192)[0] == 8193


def test_the_threshold_is_refused_where_vllm_lacks_it_or_runs_v0_with_it() -> None:
    """The flag came in 0.7.3 (PR #10235, V0's partial prefills); 0.8.0-0.8.2 ran V0 when it
    was set, and V1 caps a request's tokens at it from 0.8.3."""
    cap = 512
    for version in ("0.6.4", "0.7.2"):
        with pytest.raises(InputError, match="has no --long-prefill-token-threshold"):
            long_prefill_threshold("vllm", version, cap, 8192)
    for version in ("0.7.3", "0.8.0", "0.8.2", "0.8.5 V0"):
        with pytest.raises(InputError, match="runs its V0 engine"):
            long_prefill_threshold("vllm", version, cap, 8192)
    assert long_prefill_threshold("vllm", "0.8.3", cap, 8192) == (cap, True)
    assert long_prefill_threshold("vllm", "0.6.4", None, 8192) == (0, False)  # unset: fine


def _simulate(capsys: pytest.CaptureFixture[str], *extra: str) -> int:
    return main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "4",
                 "--num-requests", "40", "--input-len", "4000", "--output-len", "32",
                 "--max-model-len", "8192", *extra])


def test_simulate_takes_the_flag_and_prompts_wait_longer(
        capsys: pytest.CaptureFixture[str]) -> None:
    def ttft_s(*extra: str) -> tuple[float, dict[str, object]]:
        assert _simulate(capsys, "--json", *extra) == 0
        out = json.loads(capsys.readouterr().out)
        return out["ttft_s"]["mean"], out["settings"]

    plain, settings = ttft_s()
    assert "long_prefill_token_threshold" not in settings
    capped, settings = ttft_s("--long-prefill-token-threshold", "256")
    assert settings["long_prefill_token_threshold"] == 256
    assert capped > plain  # a 4,000-token prompt now runs in 16 steps, not one
    assert _simulate(capsys, "--long-prefill-token-threshold", "9000") == 2
    assert "max_model_len" in capsys.readouterr().err
    assert _simulate(capsys, "--engine", "sglang", "--long-prefill-token-threshold",
                     "256") == 2
    capsys.readouterr()
    assert _simulate(capsys, "--long-prefill-token-threshold", "256", "--engine-version",
                     "0.6.4") == 2
    assert "vLLM 0.6.4 has no --long-prefill-token-threshold" in capsys.readouterr().err
