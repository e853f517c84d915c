"""A serving engineer's read of decode, utilization, roofline and hardware: an expert-parallel
read said for what it is, llama-server's answer to a full pool, the flag that fixes a card
without a bf16 rate, one tensor-parallel size, one default context, a list of cards, and
counts printed as the text beside them prints theirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline.cli_types import DEFAULT_CONTEXT_TOKENS
from ridgeline.hardware import resolve_accelerator
from ridgeline.units import GB
from tests.conftest import run_cli

QWEN_MOE_TP2 = ("qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "2", "--batch", "64")


def _ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    return out


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Exit 2 with one line on stderr; the line."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def _point(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    return json.loads(_ok(capsys, "decode", *argv, "--json"))["points"][0]


# -- 1: under expert parallelism, the figure priced is not what the GPUs read in all ---------
def test_an_expert_parallel_decode_says_its_weight_read_is_the_busiest_gpus_and_the_total(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The floor prices the busiest rank's read × the ranks; the GPUs between them read what
    the same deployment reads without expert parallelism, and the text gives both."""
    ep = _point(capsys, *QWEN_MOE_TP2, "--enable-expert-parallel")
    plain = _point(capsys, *QWEN_MOE_TP2)
    assert ep["weight_bytes_read"] > ep["weight_bytes_read_in_all"]
    assert ep["weight_bytes_read_in_all"] == pytest.approx(plain["weight_bytes_read"], rel=1e-4)
    assert plain["weight_bytes_read_in_all"] is None  # without EP the two are one figure
    text = _ok(capsys, "decode", *QWEN_MOE_TP2, "--enable-expert-parallel")
    reads = next(line for line in text.splitlines() if line.strip().startswith("reads"))
    assert f"{ep['weight_bytes_read'] / GB:,.1f} GB of weights (the busiest expert-parallel " \
           f"GPU's read × 2; {ep['weight_bytes_read_in_all'] / GB:,.1f} GB read in all)" in reads


# -- 2: llama-server queues; it does not preempt ----------------------------------------------
def test_utilization_past_a_llama_cpp_pool_says_what_llama_server_does_not_preemption(
        capsys: pytest.CaptureFixture[str]) -> None:
    flags = ("utilization", "--model", "llama-3.1-8b", "--context", "8K")
    llama = _ok(capsys, *flags, "--running", "400", "--gpu", "rtx-4090", "--engine", "llama.cpp",
                "--weights", "q4_k_m").splitlines()[0]
    held = json.loads(_ok(capsys, *flags, "--running", "400", "--gpu", "rtx-4090", "--engine",
                          "llama.cpp", "--weights", "q4_k_m", "--json"))["conversations"]
    assert "expect preemption" not in llama and "does not preempt" in llama
    assert f"at most {held:,} conversations of 8,192 tokens at once" in llama \
        and "wait in its queue" in llama and "-c ÷ -np" not in llama
    vllm = _ok(capsys, *flags, "--gpu", "h100", "--running", "4000").splitlines()[0]
    assert "expect preemption" in vllm  # vLLM's own behaviour stays said


def test_llama_cpp_utilization_past_its_pool_counts_conversations_as_fit_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B q4_k_m on an RTX 4090 at 4K: fit starts --kv-unified with one slot (-np
    1) for the cache that holds 1 conversation; utilization's refusal said "at most 1 slot of
    4,096 tokens fit (-c ÷ -np each)", a cache cut per slot that fit's command does not start."""
    model = ("--weights", "q4_k_m", "--gpu", "rtx-4090", "--engine", "llama.cpp")
    fit = json.loads(_ok(capsys, "fit", "llama-3.1-70b", *model, "--max-model-len", "4K",
                         "--json"))
    text = _ok(capsys, "fit", "llama-3.1-70b", *model, "--max-model-len", "4K")
    start = next(line for line in text.splitlines() if line.startswith("start it with"))
    held = fit["conversations"]
    assert f"-np {held} --kv-unified" in start
    assert f"as {held} conversation of 4,096 tokens fits at once" in start
    util = _ok(capsys, "utilization", "--model", "llama-3.1-70b", *model, "--running", "8",
               "--context", "4K").splitlines()[0]
    assert f"at most {held} conversation of 4,096 tokens at once" in util
    assert "--kv-unified" in util and "-c ÷ -np" not in util and "slot of" not in util


def test_utilization_past_a_trtllm_pool_says_it_queues_rather_than_preempts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM's GUARANTEED_NO_EVICT starts a request only with its whole output's blocks
    free, so it never preempts (as simulate counts it: preemptions 0); it had read "expect
    preemption" as vLLM's does."""
    trt = _ok(capsys, "utilization", "--model", "llama-3.1-8b", "--gpu", "h100", "--engine",
              "trtllm", "--running", "4000", "--context", "8K").splitlines()[0]
    assert trt.startswith("DOES NOT RUN AT ONCE")
    assert "expect preemption" not in trt and "does not preempt" in trt
    assert "wait in its queue" in trt


# -- 3: a card with only an fp32 rate names the flag that runs it -----------------------------
def test_roofline_on_an_fp32_only_card_names_the_kv_dtype_that_runs_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    card = tmp_path / "fp32.json"
    card.write_text(json.dumps({"id": "fp32-card", "peak_flops": {"fp32": 1e14},
                                "memory_bandwidth_bytes_per_s": 3e12, "memory_bytes": 8e10}))
    said = _refused(capsys, "roofline", "--gpu-file", str(card), "--compute-dtype", "fp32")
    assert "no bf16 peak" in said and "--kv-dtype fp32" in said
    assert "--compute-dtype" not in said.split("give", 1)[1].split("(")[0]  # fp32 was given
    # the flag it names runs it, at the card's fp32 ridge
    out = _ok(capsys, "roofline", "--gpu-file", str(card), "--compute-dtype", "fp32",
              "--kv-dtype", "fp32")
    assert "(fp32, dense)" in out
    # with neither flag, both are named
    said = _refused(capsys, "roofline", "--gpu-file", str(card))
    assert "--compute-dtype fp32" in said and "--kv-dtype fp32" in said


# -- 4: two spellings of the tensor-parallel size, two values ---------------------------------
def test_two_different_tensor_parallel_sizes_are_refused_not_the_last_taken(
        capsys: pytest.CaptureFixture[str]) -> None:
    said = _refused(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "8",
                    "--tp", "4")
    assert "--num-gpus 8" in said and "--tp 4" in said and "give it once" in said
    _refused(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--tp=4", "-tp", "2")
    # the same size twice is one answer
    assert "on 4 x h100" in _ok(capsys, "decode", "llama-3.1-70b", "--gpu", "h100",
                                "--num-gpus", "4", "--tensor-parallel-size=4")



def test_two_spellings_of_one_gpu_count_as_the_flag_reads_it_are_one_answer(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The values are compared as --num-gpus reads them: 4.0 is 4, so no refusal; a value it
    cannot read, or none, gets the flag's own error, not the two-sizes one."""
    assert "on 4 x h100" in _ok(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--tp", "4",
                                "--num-gpus", "4.0")
    for bad in (["1e1"], []):
        said = _refused(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--tp", "4",
                        "--num-gpus", *bad)
        assert "argument --num-gpus" in said and "give it once" not in said

# -- 5: utilization's default context is decode's ---------------------------------------------
def test_utilization_with_a_model_defaults_the_context_as_decode_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    flags = ("utilization", "--gpu", "h100", "--model", "llama-3.1-8b", "--running", "64",
             "--json")
    defaulted = json.loads(_ok(capsys, *flags))
    decode_context = _point(capsys, "llama-3.1-8b", "--gpu", "h100")["context_len"]
    assert defaulted["context_len"] == decode_context == DEFAULT_CONTEXT_TOKENS
    assert defaulted == json.loads(_ok(capsys, *flags, "--context", str(decode_context)))


# -- 6: several cards' records --------------------------------------------------------------
def test_hardware_takes_a_list_of_cards_each_record_as_alone(
        capsys: pytest.CaptureFixture[str]) -> None:
    both = json.loads(_ok(capsys, "hardware", "h100,h200", "--json"))
    alone = [json.loads(_ok(capsys, "hardware", name, "--json")) for name in ("h100", "h200")]
    # each record as alone, less the version every --json object carries once
    assert both["accelerators"] == [{k: v for k, v in a.items() if k != "ridgeline_version"}
                                    for a in alone]
    assert [a["id"] for a in alone] == [resolve_accelerator(n).id for n in ("h100", "h200")]
    text = _ok(capsys, "hardware", "h100,h200")
    assert all(_ok(capsys, "hardware", name).strip() in text for name in ("h100", "h200"))
    assert "twice" in _refused(capsys, "hardware", "h100,h100-sxm")


# -- 7: counts with separators where the line's other numbers have them ----------------------
def test_batch_and_prompt_counts_print_with_separators_beside_the_context(
        capsys: pytest.CaptureFixture[str]) -> None:
    decode = _ok(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1000",
                 "--context", "5000")
    assert "batch 1,000 at 5,000 tokens" in decode
    roof = _ok(capsys, "roofline", "--gpu", "h100", "--batch", "100000", "--prompt-len", "4000")
    assert "batch 100,000, prompt 4,000 tokens" in roof
    util = _ok(capsys, "utilization", "--gpu", "h100", "--running", "2000")
    assert util.startswith("2,000 running is past the ridge batch of")
