"""vLLM's --no-enable-chunked-prefill and --swap-space, read rather than refused: without
chunked prefill a prompt runs whole, so the token budget (and the profile that sizes the
activations) holds max_model_len and a smaller budget is refused as vLLM refuses it; the swap
space is host memory the pool never sees (engines.json vllm.chunked_prefill_off, swap_space)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.datafiles import engine_defaults
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sim.config import sim_config
from ridgeline.vllm_memory import vllm_accounting
from ridgeline.vllm_pool import budget_cap, vllm_batch_defaults, vllm_scheduler_budget
from ridgeline.vllm_v0_chunking import v1_honours_off, whole_budget_refusal
from tests.conftest import run_cli, same_answer

LENGTH = 32768  # 32K: past an H100's default budget of 8,192 tokens
FIT = ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", str(LENGTH), "--json")
SIM = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", str(LENGTH),
       "--rate", "2", "--num-requests", "30", "--input-len", "12000", "--output-len", "50")


def llama() -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), None,
                            None, 1)


def settings(**knobs: object) -> EngineSettings:
    return EngineSettings(max_model_len=LENGTH, **knobs)  # type: ignore[arg-type]


def test_without_chunking_the_profile_holds_the_whole_max_model_len() -> None:
    """Llama-3.1-8B at 32K on an H100: the unset budget becomes max(max_model_len, the
    card's default) before the seats' cap, as arg_utils sets it, not the default 8,192."""
    d, s = llama(), settings(no_chunked_prefill=True)
    defaults = vllm_batch_defaults(d, "serve")
    seqs, tokens = vllm_scheduler_budget(d, s, vllm_accounting(None))
    expected = budget_cap(max(LENGTH, defaults["max_num_batched_tokens"]), seqs, LENGTH, True)
    assert kv_pool(d, s).profile_tokens == tokens == expected
    assert expected > defaults["max_num_batched_tokens"]  # the flag does move it here
    assert kv_pool(d, settings()).profile_tokens == defaults["max_num_batched_tokens"]


def test_the_pool_loses_exactly_the_larger_profiles_activations() -> None:
    """What the budget sizes and nothing else: the profile's peak (the forward pass over
    32,768 tokens, not 8,192) and Model Runner V2's per-token input buffers (13 B a token,
    held from start-up: vllm_memory.mrv2_state_bytes)."""
    chunked, whole = kv_pool(llama(), settings()), kv_pool(llama(), settings(
        no_chunked_prefill=True))
    grown = whole.activation_bytes - chunked.activation_bytes
    inputs = whole.seat_buffer_bytes - chunked.seat_buffer_bytes
    assert grown > 0 and 0 < inputs < grown / 1000
    assert whole.forward_bytes == chunked.forward_bytes * LENGTH / chunked.profile_tokens
    # and, sized after warm-up (v0.34), the larger margin 0.75 × the peak keeps free
    margin = whole.kept_free_bytes - chunked.kept_free_bytes
    assert margin == pytest.approx(0.75 * grown, rel=1e-9)
    assert chunked.pool_bytes - whole.pool_bytes == pytest.approx(grown + inputs + margin,
                                                                  rel=1e-9)
    assert (whole.cuda_graph_bytes, whole.non_torch_bytes) == \
        (chunked.cuda_graph_bytes, chunked.non_torch_bytes)


def test_a_budget_below_max_model_len_is_refused_in_vllms_words() -> None:
    with pytest.raises(InputError) as caught:
        kv_pool(llama(), settings(no_chunked_prefill=True, max_num_batched_tokens=8192))
    assert whole_budget_refusal(8192, LENGTH) in str(caught.value)
    # a budget that holds the prompt whole stands, and is profiled as given
    pool = kv_pool(llama(), settings(no_chunked_prefill=True, max_num_batched_tokens=LENGTH))
    assert pool.profile_tokens == LENGTH


def test_fit_refuses_it_on_the_command_line_with_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *FIT, "--no-enable-chunked-prefill",
                             "--max-num-batched-tokens", "8192")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert whole_budget_refusal(8192, LENGTH) in err


def test_v1_before_0_12_turns_chunking_back_on_and_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    """V1 through 0.11 set enable_chunked_prefill True for a generative model whatever was
    asked: the pool is the chunked one, and the note names the flag."""
    old = "0.11"
    assert not v1_honours_off(vllm_accounting(old))
    assert kv_pool(llama(), settings(engine_version=old, no_chunked_prefill=True)).pool_bytes \
        == kv_pool(llama(), settings(engine_version=old)).pool_bytes
    code, out, err = run_cli(capsys, *FIT, "--engine-version", old,
                             "--no-enable-chunked-prefill")
    assert code == 0 and same_answer(out, run_cli(capsys, *FIT, "--engine-version", old)[1])
    since = engine_defaults("vllm")["chunked_prefill_off"]["v1_honoured_from"]
    assert "--no-enable-chunked-prefill" in err and since in err


def test_v0_runs_a_prompt_whole_with_the_flag_past_32k_too() -> None:
    """V0 chunks a dense Llama past 32K by default (use_long_context); an explicit False
    skips that rule, so the profile holds the whole prompt."""
    v0 = "0.6.6"
    long = 40000
    chunked = kv_pool(llama(), EngineSettings(max_model_len=long, engine_version=v0))
    whole = kv_pool(llama(), EngineSettings(max_model_len=long, engine_version=v0,
                                            no_chunked_prefill=True))
    assert chunked.profile_tokens < long == whole.profile_tokens


def test_simulate_admits_a_prompt_only_whole(capsys: pytest.CaptureFixture[str]) -> None:
    d = llama()
    assert sim_config(d, settings()).chunked_prefill
    whole = sim_config(d, settings(no_chunked_prefill=True))
    assert not whole.chunked_prefill
    assert whole.max_num_batched_tokens == kv_pool(d, settings(
        no_chunked_prefill=True)).profile_tokens
    code, out, _ = run_cli(capsys, *SIM, "--no-enable-chunked-prefill")
    assert code == 0 and "each prompt whole" in out
    assert "each prompt whole" not in run_cli(capsys, *SIM)[1]


def test_another_engine_has_no_such_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, *FIT, "--engine", "sglang", "--no-enable-chunked-prefill")
    assert code == 2 and "sglang has no such flag" in err


@pytest.mark.parametrize("version", [None, "0.11", "0.8.5 V0"])
def test_swap_space_gives_the_same_pool_as_without(
        capsys: pytest.CaptureFixture[str], version: str | None) -> None:
    """V1 allocates no swap blocks and V0 pins host memory: the GPU's pool is the same."""
    pinned = ("--engine-version", version) if version else ()
    code, out, err = run_cli(capsys, *FIT, *pinned, "--swap-space", "4")
    assert code == 0 and same_answer(out, run_cli(capsys, *FIT, *pinned)[1])
    assert "--swap-space 4" in err and "host memory" in err


def test_chunked_prefill_off_in_a_config_file_is_the_flag(
        capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "v.yaml"
    path.write_text("enable-chunked-prefill: false\nswap-space: 4\n")
    by_file = run_cli(capsys, *FIT, "--config", str(path))
    by_flag = run_cli(capsys, *FIT, "--no-enable-chunked-prefill")
    assert by_file[0] == by_flag[0] == 0 and same_answer(by_file[1], by_flag[1])
    assert by_flag[1] != run_cli(capsys, *FIT)[1]


def test_settings_default_keeps_chunking() -> None:
    assert not EngineSettings().no_chunked_prefill
    assert replace(settings(), no_chunked_prefill=True).no_chunked_prefill


def test_prefill_runs_the_prompt_in_one_step_without_chunking(
        capsys: pytest.CaptureFixture[str]) -> None:
    """20,000 tokens at an H100's 8,192-token budget run in three chunks; with the flag the
    budget holds max_model_len, and the prompt runs whole."""
    argv = ("prefill", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", str(LENGTH),
            "--prompt-len", "20000")
    assert "in 3 steps of at most 8,192 tokens" in run_cli(capsys, *argv)[1]
    code, out, _ = run_cli(capsys, *argv, "--no-enable-chunked-prefill")
    assert code == 0 and "steps of at most" not in out
