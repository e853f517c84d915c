"""The review's findings 1, 2, 5, 6 and two of 10: one start-up judgement for decode, fit and
simulate; SGLang's KV cache, not its static pool, wherever a pool size is printed; the weights
named before the state slots; TensorRT-LLM refused on GGUF by every command; one refusal line
per decode; no ratio to a queueing time that rounds to nothing."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from ridgeline.capacity import start_check
from ridgeline.catalog import resolve_model
from ridgeline.deployment import Deployment
from ridgeline.hardware import resolve_accelerator
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.reports.fit import fit_report
from tests.conftest import run_cli

SERVE_70B = ("llama-3.1-70b", "h100", 2)  # 141 GB of bf16 weights on 2 x 80 GB
SERVE_8B = ("llama-3.1-8b", "h100", 1)  # room for the model's whole context


def _flags(model: str, gpu: str, count: int, engine: str) -> list[str]:
    return [model, "--gpu", gpu, "--num-gpus", str(count), "--engine", engine]


def _verdicts(capsys: pytest.CaptureFixture[str], case: tuple[str, str, int],
              engine: str) -> tuple[bool, bool, bool, str, str]:
    """(decode runs a 1,100-token sequence, fit finds the engine starts, simulate runs), each
    at the engine's default max_model_len under vllm serve's defaults, and decode's and
    simulate's refusals."""
    model, gpu, count = case
    flags = _flags(model, gpu, count, engine)
    code, out, err = run_cli(capsys, "decode", *flags, "--context", "1100", "--json",
                             *(["--usage", "serve"] if engine == "vllm" else []))
    assert code == 0, err
    point = json.loads(out)["points"][0]
    decode_runs = point["expected"] is not None
    dep = Deployment.build(resolve_model(model), resolve_accelerator(gpu), num_gpus=count,
                           engine=engine)
    length = 131072  # the model's context, each engine's default max_model_len
    report = fit_report(dep, length, EngineSettings(max_model_len=length))
    fit_starts = not report.refused_start and report.pool.blocks > 0
    code, _, sim_err = run_cli(capsys, "simulate", *flags, "--rate", "0.2", "--num-requests",
                               "20")
    return (decode_runs, fit_starts, code == 0, point["expected_none_reason"] or "",
            sim_err)


@pytest.mark.parametrize(("case", "engine", "starts"), [
    (SERVE_70B, "vllm", False),  # vLLM refuses a pool short of one max_model_len sequence
    (SERVE_70B, "sglang", False),  # the weights leave SGLang's static pool nothing
    (SERVE_70B, "trtllm", True),  # TensorRT-LLM trims max_seq_len to its pool and starts
    (SERVE_8B, "vllm", True), (SERVE_8B, "sglang", True), (SERVE_8B, "trtllm", True)])
def test_decode_fit_and_simulate_agree_on_whether_the_engine_starts(
        capsys: pytest.CaptureFixture[str], case: tuple[str, str, int], engine: str,
        starts: bool) -> None:
    decode_runs, fit_starts, simulate_runs, decode_why, simulate_why = \
        _verdicts(capsys, case, engine)
    assert decode_runs is fit_starts is simulate_runs is starts
    if engine == "vllm" and not starts:  # both name the same longest length that starts
        (decoded,) = re.findall(r"give --max-model-len ≤ ([\d,]+)", decode_why)
        (simulated,) = re.findall(r"give --max-model-len ≤ ([\d,]+)", simulate_why)
        assert decoded == simulated
        assert "would refuse to start at its default max_model_len" in simulate_why


def test_trtllm_runs_what_its_trimmed_max_seq_len_holds_and_no_longer(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM starts 70B on 2 x H100 with a max_seq_len cut to its pool's tokens: a
    1,100-token sequence runs, a 131,072-token conversation (fit) does not."""
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"),
                           num_gpus=2, engine="trtllm")
    check = start_check(dep, EngineSettings())
    assert check is not None and check.length == 131072 and check.defaulted
    assert not check.refused
    pool = kv_pool(dep, EngineSettings(max_model_len=131072))
    assert 1100 < pool.tokens < 131072
    assert fit_report(dep, 131072, EngineSettings(max_model_len=131072)).conversations == 0
    code, out, _ = run_cli(capsys, "decode", *_flags(*SERVE_70B, "trtllm"), "--context",
                           "1100", "--json")
    (seats,) = json.loads(out)["engine_max_batch"]
    assert code == 0 and 0 < seats["engine_max_batch"] <= pool.tokens // 1100


def test_decode_says_a_start_up_refusal_once_for_many_contexts(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "decode", *_flags(*SERVE_70B, "vllm"), "--context",
                           "1000,2000,4000,8000")
    refusals = [line for line in out.splitlines()
                if "would refuse to start at its default max_model_len" in line]
    assert code == 0 and len(refusals) == 1


# --- finding 2: SGLang's KV cache beside its state pool ------------------------------------

HYBRID = ["qwen3-next-80b-a3b", "--num-gpus", "4", "--engine", "sglang", "--max-model-len",
          "32k"]


@pytest.mark.parametrize("cap", [[], ["--max-total-tokens", "200000"]])
def test_the_comparison_prints_each_cards_kv_pool_as_its_own_fit_does(
        capsys: pytest.CaptureFixture[str], cap: list[str]) -> None:
    code, out, err = run_cli(capsys, "fit", *HYBRID, "--gpu", "h100,h200", *cap)
    assert code == 0, err
    compared = {row.split()[2]: row.split()[3] for row in out.splitlines()
                if re.match(r"4 x h[12]00-sxm ", row)}
    assert set(compared) == {"h100-sxm", "h200-sxm"}
    for card, gib in compared.items():
        code, single, _ = run_cli(capsys, "fit", *HYBRID, "--gpu", card, *cap)
        (line,) = [ln for ln in single.splitlines() if ln.startswith("= KV pool")]
        static = [ln for ln in single.splitlines() if ln.startswith("= static pool")]
        assert code == 0 and line.split()[-4] == gib  # "… 14.01 GiB per GPU"
        assert static and static[0].split()[-4] != gib  # not the pool the states share


def test_kv_cache_bytes_is_the_pool_for_a_model_without_a_state_pool() -> None:
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           engine="sglang")
    pool = kv_pool(dep, EngineSettings(max_model_len=8192))
    assert pool.kv_cache_bytes == pool.pool_bytes > 0
    hybrid = Deployment.build(resolve_model("qwen3-next-80b-a3b"), resolve_accelerator("h100"),
                              num_gpus=4, engine="sglang")
    pool = kv_pool(hybrid, EngineSettings(max_model_len=32000))
    assert pool.kv_cache_bytes == pool.state_kv_bytes < pool.pool_bytes


# --- finding 5: the weights, and SGLang's fixed states, named as fit names them -------------

def test_sglang_weights_past_the_card_are_named_before_the_state_slots(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "decode", "qwen3-next-80b-a3b", "--gpu", "h200", "--engine",
                           "sglang")
    dep = Deployment.build(resolve_model("qwen3-next-80b-a3b"), resolve_accelerator("h200"),
                           engine="sglang")
    pool = kv_pool(dep, EngineSettings())
    assert pool.weights_overflow
    assert code == 0 and f"its weights alone ({pool.weight_bytes / 2**30:,.2f} GiB per GPU) " \
        "are more than the card's" in out
    assert "state pool's 0 slots" not in out


def test_simulate_names_sglangs_fixed_states_overrunning_the_static_pool_as_fit_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["nemotron-h-56b", "--gpu", "h100", "--num-gpus", "8", "--engine", "sglang",
            "--engine-version", "0.5.6", "--max-model-len", "8k"]
    code, out, _ = run_cli(capsys, "fit", *base, "--json")
    state = json.loads(out)["state_pool"]
    code, _, err = run_cli(capsys, "simulate", *base, "--rate", "1", "--num-requests", "20")
    assert code == 2 and "leaves no KV pool" not in err
    assert (f"its state pool ({state['slots']:,} requests' states, "
            f"{state['bytes_per_gpu'] / 2**30:,.2f} GiB) is more than the "
            f"{state['static_pool_bytes_per_gpu'] / 2**30:,.2f} GiB static pool") in err


# --- finding 6: TensorRT-LLM loads no GGUF file, whichever command asks ---------------------

@pytest.mark.parametrize("command", [
    ["decode"], ["prefill", "--prompt-len", "1000"], ["fit"],
    ["simulate", "--rate", "1", "--num-requests", "10"]])
def test_every_command_refuses_trtllm_on_gguf_weights(
        capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    name, *rest = command
    args = [name, "llama-3.1-8b", "--gpu", "h100", "--weights", "q4_k_m", *rest]
    code, _, err = run_cli(capsys, *args, "--engine", "trtllm")
    assert code == 2 and "trtllm loads no GGUF file (q4_k_m)" in err
    code, _, err = run_cli(capsys, *args, "--engine", "vllm")
    assert code == 0, err


# --- finding 10: no ratio to a first half that hardly queued --------------------------------

def _overloaded(early: float, late: float) -> SimpleNamespace:
    rec = SimpleNamespace(falls_behind=lambda: (15086, 6820, 0.0), steady_s=(49.5, 200.2),
                          queue_trend=lambda start, last: (early, late), fill_observed=True,
                          fill_reason="kv_cache")
    return SimpleNamespace(rec=rec)


def test_backlog_evidence_reads_no_ratio_to_a_mean_that_rounds_to_nothing() -> None:
    from ridgeline.reports.simulate_overload import SHORT_QUEUE_S, backlog_evidence

    near_zero = backlog_evidence(_overloaded(0.008, 7.4))  # type: ignore[arg-type]
    assert "×" not in near_zero and "0.0 s" not in near_zero
    assert f"queued a mean 7.4 s, where those in the first queued under {SHORT_QUEUE_S:g} s" \
        in near_zero
    ratio = backlog_evidence(_overloaded(2.0, 7.4))  # type: ignore[arg-type]
    assert "queued a mean 7.4 s, 3.7× the 2.0 s of those in the first" in ratio


def test_utilization_says_its_pool_starts_at_the_context(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "utilization", "--gpu", "h100", "--model", "llama-3.1-70b",
                           "--num-gpus", "2", "--running", "8", "--context", "2048")
    assert code == 0 and "started at max_model_len 2,048, this context" in out


def test_utilization_on_llama_cpp_says_slots_as_decode_does_not_max_model_len(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp has no max_model_len: its pool gives each conversation a slot (-np), and the
    count is decode's for the same deployment."""
    deployment = ("--gpu", "rtx-4090", "--engine", "llama.cpp", "--weights", "q4_k_m")
    code, out, _ = run_cli(capsys, "utilization", "--model", "llama-3.1-8b", *deployment,
                           "--running", "4", "--context", "8K")
    assert code == 0 and "max_model_len" not in out
    assert ("one slot (-np) of 8,192 tokens per conversation, --fit-target 1,024 MiB left free,"
            " this context") in out
    _, decoded, _ = run_cli(capsys, "decode", "llama-3.1-8b", *deployment, "--context", "8K",
                            "--json")
    held = json.loads(decoded)["engine_max_batch"][0]["conversations"]  # a slot each
    assert f"holds {held:,} conversations of 8,192 tokens" in out


def test_trtllm_says_it_trims_max_seq_len_to_its_pool(capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM starts where its pool holds less than the model's context, reducing
    max_seq_len to what it holds: decode and prefill say so, with the length fit finds
    (Llama-3.1-70B bf16 on 2 x H100: 71,008 tokens), and say nothing once it is given."""
    from ridgeline.cli import main

    base = ["llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2", "--engine", "trtllm"]
    assert main(["fit", *base, "--target-concurrency", "1", "--json"]) == 0
    longest = json.loads(capsys.readouterr().out)["max_model_len"]
    for argv in (["decode", *base, "--batch", "1", "--context", "1100"],
                 ["prefill", *base, "--prompt-len", "1000"]):
        assert main([*argv, "--json"]) == 0
        said = [c for c in json.loads(capsys.readouterr().out)["cautions"] if "reducing" in c]
        assert len(said) == 1 and f"the {longest:,} tokens its KV pool holds" in said[0]
        assert main([*argv, "--max-model-len", "8192", "--json"]) == 0
        assert not any("reducing" in c for c in json.loads(capsys.readouterr().out)["cautions"])


def test_simulate_gives_no_max_model_len_its_requests_outrun(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM will not start 70B on 2 x H100 at the model's 131,072 tokens; the refusal's advice,
    the longest --max-model-len that starts, had been given for requests of 120,000 + 100
    tokens too, which that length then refuses every one of. The requests past it now get
    fit's levers at their length, none of them a shorter context."""
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"),
                           num_gpus=2, engine="vllm")
    check = start_check(dep, EngineSettings())
    assert check is not None and check.refused and 0 < check.longest < 120_100
    load = ("--rate", "1", "--num-requests", "5", "--output-len", "100")
    code, _, err = run_cli(capsys, "simulate", *_flags(*SERVE_70B, "vllm"), *load,
                           "--input-len", "120000")
    assert code == 2 and "give --max-model-len ≤" not in err
    assert f"the longest it starts at, {check.longest:,} tokens, holds less than one request " \
           "of the 120,100 asked" in err
    assert "4 GPUs (tensor parallel)" in err and "the longest that holds" not in err
    code, _, err = run_cli(capsys, "simulate", *_flags(*SERVE_70B, "vllm"), *load,
                           "--input-len", "10000")  # a length that starts serves these
    assert code == 2 and f"give --max-model-len ≤ {check.longest:,}" in err
