"""Commands that report the same quantity report the same number (a cross-command audit
found each of these disagreeing once)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.cost import Seq, step_cost
from ridgeline.floors import decode_floor, prefill_floor
from ridgeline.kvcache import kv_footprint
from ridgeline.quantization import (
    ATTENTION,
    EXPERTS,
    LINEAR_ATTENTION,
    LM_HEAD,
    SHARED_EXPERTS,
)
from ridgeline.step_work import step_work
from tests.conftest import run_cli


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    data: dict = json.loads(capsys.readouterr().out)
    return data


def test_utilization_reads_an_moe_batch_as_roofline_and_fit_do(
        capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-120b stores its experts in MXFP4 (0.53 B) and its attention in bf16: the
    share of the arithmetic is the dense weights' (2 B), as roofline's dense row and fit's
    ridge batch read it, not the all-weights average (0.55 B, which read 251 as 100 %)."""
    util = run_json(capsys, "utilization", "--gpu", "h100", "--num-gpus", "2", "--running", "64",
                    "--model", "gpt-oss-120b", "--context", "8192")
    roof = run_json(capsys, "roofline", "--gpu", "h100", "--num-gpus", "2", "--model",
                    "gpt-oss-120b", "--batch", "64")
    dense = next(p for p in roof["points"] if p["name"].startswith("dense weight matrices"))
    assert util["fraction_of_arithmetic"] == pytest.approx(dense["fraction_of_peak"])
    assert util["bytes_per_weight"] == pytest.approx(2.0, rel=0.01)
    experts = next(p for p in roof["points"] if p["name"] == "MoE expert layers")
    assert f"near batch {experts['first_whole_batch_to_ridge']:,}" in util["experts"]  # 2,510.4: 2,511
    fit = run_json(capsys, "fit", "gpt-oss-120b", "--gpu", "h100", "--num-gpus", "2",
                   "--max-model-len", "8192")
    assert fit["verdict"] == "fits, under the ridge" and fit["engine_max_batch"] < fit["batch_to_ridge"]
    full = run_json(capsys, "utilization", "--gpu", "h100", "--num-gpus", "2", "--running",
                    str(fit["engine_max_batch"]), "--model", "gpt-oss-120b", "--context", "8192")
    assert full["fraction_of_arithmetic"] < 1.0  # under the ridge, as fit says


def test_bf16_weights_in_an_fp8_step_keep_the_bf16_rate() -> None:
    """gpt-oss as stored on a B200 under SGLang: its MoE kernel quantizes the activations to
    MXFP8, so the MXFP4 experts run at the fp8 peak; its bf16 attention cannot. The ridge
    batch fit judges by is the bf16 one (281), and the prefill floor counts the attention
    projections at 2,250 TFLOP/s, not 4,500."""
    b200 = resolve_accelerator("b200")
    d = Deployment.build(resolve_model("gpt-oss-120b"), b200, engine="sglang")
    assert (d.compute_dtype, d.dense_compute_dtype, d.expert_compute_dtype) == \
        ("fp8", "bf16", "fp8")
    assert d.compute_dtype_of(ATTENTION) == "bf16" and d.compute_dtype_of(EXPERTS) == "fp8"
    assert dict(d.matmul_slowdowns)[ATTENTION] == pytest.approx(b200.peak("fp8")
                                                                / b200.peak("bf16"))
    assert d.matmuls_label.startswith("fp8 (") and "attention" in d.matmuls_label
    floor = prefill_floor(d, 8000)
    everything_at_fp8 = floor.flops / (b200.peak("fp8") * d.tensor_parallel_size)
    assert floor.compute_time_s > 1.2 * everything_at_fp8
    bf16 = prefill_floor(Deployment.build(resolve_model("gpt-oss-120b"), b200, "bf16",
                                          engine="sglang"), 8000)
    assert floor.compute_time_s < bf16.compute_time_s  # the experts still gain from fp8


@pytest.mark.parametrize("gpu", ["b200", "mi355x", "h200"])
def test_vllm_runs_gpt_oss_mxfp4_experts_at_bf16_on_any_card(gpu: str) -> None:
    """vLLM's default MXFP4 MoE backends for gpt-oss all take bf16 activations
    (engines.json vllm.mxfp4_moe_matmul: FlashInfer's TRT-LLM MXFP4xBF16 kernel on a B200,
    AITER's W4A16 on an MI355X, Triton on an H200), so a card's fp4 peak never prices the
    experts: the whole prefill floor runs at the bf16 peak."""
    acc = resolve_accelerator(gpu)
    d = Deployment.build(resolve_model("gpt-oss-120b"), acc)
    assert d.engine == "vllm"
    assert (d.compute_dtype, d.expert_compute_dtype, d.dense_compute_dtype) == \
        ("bf16", "bf16", "bf16")
    assert not d.matmul_slowdowns and d.matmuls_label.startswith("bf16")
    floor = prefill_floor(d, 8000)
    assert floor.compute_time_s >= floor.flops / (acc.peak("bf16") * d.tensor_parallel_size)


@pytest.mark.parametrize("gpu", ["h200", "b200", "rtx-5090"])
def test_fp8_projections_in_a_w4a16_step_run_at_the_fp8_rate(gpu: str) -> None:
    """nvidia/Qwen3.6-35B-A3B-NVFP4 stores its experts, shared experts and LM head as
    W4A16_NVFP4 (vLLM's Marlin FP4 kernel: bf16 activations, on Blackwell too) and its
    attention and linear-attention projections as FP8 with static input scales (vLLM's
    ModelOptFp8LinearMethod: an fp8 GEMM). The step is bf16; the projections count at the
    fp8 peak, faster than the step's, in the floor and the step cost alike, and the header
    names them."""
    acc = resolve_accelerator(gpu)
    d = Deployment.build(resolve_model("qwen3.6-35b-a3b"), acc)
    assert d.compute_dtype == "bf16"
    assert [d.compute_dtype_of(c) for c in (ATTENTION, LINEAR_ATTENTION, EXPERTS,
                                             SHARED_EXPERTS, LM_HEAD)] == \
        ["fp8", "fp8", "bf16", "bf16", "bf16"]
    factor = acc.peak("bf16") / acc.peak("fp8")  # the step's peak ÷ theirs: below 1
    assert factor < 1
    assert dict(d.matmul_slowdowns) == pytest.approx({ATTENTION: factor,
                                                      LINEAR_ATTENTION: factor})
    assert d.matmuls_label == "bf16 (attention, linear_attention at fp8)"
    prompt = [Seq(8192)]
    ops = step_cost(d, prompt).ops
    fp8_ops = [op for op in ops if op.name in ("attention projections", "linear attention")]
    fp8_flops = sum(op.flops for op in fp8_ops) * d.tensor_parallel_size
    work = step_work(d, prompt)
    assert work.paced_flops == pytest.approx(work.flops - (1 - factor) * fp8_flops)
    floor = prefill_floor(d, 8192)
    assert floor.compute_time_s == pytest.approx(work.paced_flops / d.peak_flops_per_s)
    assert floor.compute_time_s < work.flops / d.peak_flops_per_s  # all at bf16: slower
    for op in fp8_ops:  # an 8,192-token prompt's projections are compute-bound
        assert op.bound == "compute"
        assert op.time_s == pytest.approx(op.flops / acc.peak("fp8"))


def test_16_bit_weights_take_the_steps_16_bit_rate() -> None:
    """Only a format that quantizes its activations narrower runs at its own dtype: an
    AWQ step on an MI100 runs at fp16 (184.6 TFLOP/s, twice its bf16), and the bf16 LM head
    with it, as vLLM casts it to the model's --dtype."""
    mi100 = resolve_accelerator("mi100")
    # no vLLM runs on an MI100 (Deployment.build with no engine there is llama.cpp-rocm's,
    # which reads no AWQ): the H100's layout, with no engine named, on the MI100's rates
    d = replace(Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                                 "awq-int4"), accelerator=mi100)
    assert d.weights.format_of(LM_HEAD).id == "bf16"
    assert d.compute_dtype == d.compute_dtype_of(LM_HEAD) == "fp16"
    assert d.matmul_slowdowns == () and "lm_head" not in d.matmuls_label


@pytest.mark.parametrize(("gpu", "batch"), [("apple-m2-max-38c", 19), ("mi100", 81)])
def test_roofline_reads_a_card_only_llamacpp_serves_as_fit_and_utilization_do(
        capsys: pytest.CaptureFixture[str], gpu: str, batch: int) -> None:
    """Only llama.cpp serves gpt-oss-20b on a Mac or an MI100 (cli_load.default_engine), as
    ggml-org's GGUF: Q8_0 outside the experts. roofline's dense ridge batch is then fit's and
    utilization's for the card; it had read the stored bf16 attention (34 on an M2 Max, 76
    on an MI100, against their 19 and 40), and an MI100 then priced the MXFP4 GGUF at bf16,
    half its fp16 rate, where llama.cpp runs MXFP4 as its own quants (81; llamacpp_matmul_dtypes).
    A checkpoint llama.cpp cannot read is refused
    as fit refuses it, and a tensor-parallel split it does not make is not asked for; side
    by side, the GGUF caution is said once."""
    roof = run_json(capsys, "roofline", "--gpu", gpu, "--model", "gpt-oss-20b")
    dense = next(p for p in roof["points"] if p["name"].startswith("dense weight matrices"))
    fit = run_json(capsys, "fit", "gpt-oss-20b", "--gpu", gpu, "--max-model-len", "4096")
    util = run_json(capsys, "utilization", "--gpu", gpu, "--model", "gpt-oss-20b",
                    "--running", "8")
    assert dense["first_whole_batch_to_ridge"] == fit["first_whole_batch_to_ridge"] \
        == util["first_whole_batch_to_ridge"] == batch
    if gpu == "mi100":
        assert main(["roofline", "--gpu", gpu, "--num-gpus", "8", "--model", "deepseek-r1"]) == 2
        assert "not a GGUF tensor type" in capsys.readouterr().err
        assert main(["roofline", "--gpu", gpu, "--num-gpus", "8", "--model", "falcon-7b"]) == 0
        capsys.readouterr()
        assert main(["roofline", "--gpu", f"h100,{gpu},apple-m2-max-38c", "--model",
                     "gpt-oss-20b"]) == 0
        assert capsys.readouterr().err.count("llama.cpp runs a GGUF") == 1  # once, two cards


def test_fit_judges_gpt_oss_on_a_b200_by_its_bf16_ridge(
        capsys: pytest.CaptureFixture[str]) -> None:
    fit = run_json(capsys, "fit", "gpt-oss-120b", "--gpu", "b200", "--max-model-len", "8192")
    roof = run_json(capsys, "roofline", "--gpu", "b200", "--model", "gpt-oss-120b",
                    "--compute-dtype", "bf16")
    dense = next(p for p in roof["points"] if p["name"].startswith("dense weight matrices"))
    assert fit["batch_to_ridge"] == pytest.approx(dense["batch_to_ridge"]) == pytest.approx(281.25)
    assert fit["verdict"] == "clears the ridge"
    for command in (["decode", "--batch", "1"], ["prefill", "--prompt-len", "2000"]):
        table = run_json(capsys, command[0], "gpt-oss-120b", "--gpu", "b200,h100", *command[1:])
        b200 = table["accelerators"][0]
        assert b200["ridge_flop_per_byte"] == pytest.approx(fit["batch_to_ridge"])


def test_the_recurrent_state_is_not_replicated_across_tensor_parallel_ranks(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-Next at TP8 has 2 KV heads: its attention KV is copied 4 ×, its Gated DeltaNet
    state (32 value heads) shards. kv, decode's fit check and fit count it the same way."""
    kv = run_json(capsys, "kv", "qwen3-next-80b-a3b", "--gpu", "h200", "--num-gpus", "8",
                  "--weights", "fp8", "--context", "1024")
    model = resolve_model("qwen3-next-80b-a3b")
    f = kv_footprint(model, 1024, 2)
    assert kv["tp_replication"] == 4
    assert kv["bytes_per_sequence"] == pytest.approx(4 * f.bytes_per_token_growing * 1024
                                                     + f.state_bytes)
    dec = run_json(capsys, "decode", "qwen3-next-80b-a3b", "--gpu", "h200", "--num-gpus", "8",
                   "--weights", "fp8", "--batch", "1", "--context", "1024")
    assert dec["points"][0]["kv_bytes"] == pytest.approx(kv["bytes_per_sequence"])


def test_prefill_gives_no_engine_time_where_the_engine_cannot_hold_the_prompts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's pool on an H100 holds 59 prompts of 8,192 Llama-3.1-8B tokens (vllm serve's
    defaults, as decode and fit ask; 54 before v0.34): one more gets no TTFT, fewer do."""
    fit = run_json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192")
    over = run_json(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "8192",
                    "--batch", str(fit["engine_max_batch"] + 1))
    assert over["expected"] is None and over["engine_max_batch"] == fit["engine_max_batch"] == 59
    under = run_json(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len",
                     "8192", "--batch", str(fit["engine_max_batch"] - 4))
    assert under["expected"] is not None
    dec = run_json(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1",
                   "--context", "8192")
    assert dec["engine_max_batch"][0]["engine_max_batch"] == fit["engine_max_batch"]
    assert main(["prefill", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8",
                 "--prompt-len", "8", "--usage", "offline", "--engine-version", "0.33"]) == 0
    out = capsys.readouterr().out
    # (vLLM 0.33, at 0.92 of the card; 0.34's whole-card pool holds 2,304 tokens)
    # the offline class at its default max_model_len (131,072) leaves no pool; at 8 tokens
    # vLLM (v0.11.1+) profiles 1,024 seats × 8 = 8,192 tokens, not 16,384, and a pool is left
    assert "would refuse to start at its default max_model_len" in out
    assert "give --max-model-len ≤ 8 " in out
    # the floor's time is the article's arithmetic, as decode's floor gives its step here;
    # no rate: the engine would not run it, which the first line says
    assert "(arithmetic only: vLLM would not run this)" in out and "21.1 ms" in out
    assert out.startswith("DOES NOT FIT on vLLM 0.33: ") and "379 prompt tok/s" not in out
    assert "  throughput none: vLLM would not run it (first line)" in out
    assert main(["prefill", "llama-3.1-70b", "--gpu", "h100", "--prompt-len", "4000"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("DOES NOT FIT") and "prompt tok/s" not in out


def test_prefill_chunks_a_long_prompt_as_simulate_does_without_a_flag(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A 32,000-token Llama-3.1-8B prompt on an H100: prefill and simulate both size vLLM as
    vllm serve by default, so both run it in steps of 8,192 tokens, to one TTFT (1,346.9 ms);
    --usage offline moves prefill to the LLM class's larger step."""
    pre = run_json(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "32000")
    sim = run_json(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--input-len", "32000",
                   "--output-len", "1", "--num-requests", "1", "--rate", "1")
    assert sim["settings"]["usage"] == "serve"
    assert pre["max_num_batched_tokens"] == sim["settings"]["max_num_batched_tokens"]
    assert pre["expected"]["time_s"] == pytest.approx(sim["ttft_s"]["mean"], rel=1e-6)
    batch = run_json(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len",
                     "32000", "--usage", "offline")
    assert batch["max_num_batched_tokens"] > pre["max_num_batched_tokens"]


def test_llama_cpp_attends_over_every_token_of_a_gguf_it_gives_no_window(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Mistral-7B-v0.1's GGUF loads as plain "llama": llama.cpp caches and reads all 16,384
    tokens in every layer, in decode as in fit (vLLM keeps the 4,096-token window)."""
    dec = run_json(capsys, "decode", "mistral-7b", "--gpu", "rtx-4090", "--engine",
                   "llama.cpp-cuda", "--weights", "q4_k_m", "--batch", "1", "--context", "16384")
    fit = run_json(capsys, "fit", "mistral-7b", "--gpu", "rtx-4090", "--engine",
                   "llama.cpp-cuda", "--weights", "q4_k_m", "--max-model-len", "16384")
    assert dec["points"][0]["kv_bytes"] == fit["per_conversation_bytes_per_gpu"] == 2 * 2**30
    vllm = Deployment.build(resolve_model("mistral-7b"), resolve_accelerator("rtx-4090"))
    assert decode_floor(vllm, 1, 16384).kv_bytes_read < dec["points"][0]["kv_bytes_read"] / 3


def test_decode_reads_the_norms_and_biases_as_moe_counts_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss's 40 M "other" parameters (expert biases, norms) are read every step: decode's
    weight bytes equal moe's at the same batch."""
    moe = run_json(capsys, "moe", "gpt-oss-120b", "--gpu", "h200", "--num-gpus", "8",
                   "--batch", "2048")
    dec = run_json(capsys, "decode", "gpt-oss-120b", "--gpu", "h200", "--num-gpus", "8",
                   "--batch", "2048", "--context", "100")
    row = next(r for r in moe["rows"] if r["batch"] == 2048)
    assert dec["points"][0]["weight_bytes_read"] == pytest.approx(row["weight_bytes_read"],
                                                                  rel=1e-3)


def test_fit_explain_names_what_the_weights_per_gpu_add_or_leave(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "gpt-oss-20b", "--gpu", "b200", "--max-model-len", "8192",
                 "--explain"]) == 0
    assert "vLLM pads the MXFP4 experts" in capsys.readouterr().out
    assert main(["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda",
                 "--weights", "q4_k_m", "--max-model-len", "8192", "--explain"]) == 0
    assert "the input embedding" in capsys.readouterr().out


def test_decode_gives_no_speed_where_vllm_would_refuse_to_start(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-3-27B at 131,072 tokens on one H100 under vLLM 0.33 (0.34's whole-card pool
    passes): the blocks fit one conversation's decode, but vLLM's start-up check (window
    groups at window + the prefill budget) refuses the pool, so decode and prefill print no
    engine time, as fit says DOES NOT FIT."""
    dec = run_json(capsys, "decode", "gemma-3-27b", "--gpu", "h100", "--batch", "1",
                   "--context", "131072", "--engine-version", "0.33")
    assert dec["engine_max_batch"][0]["engine_max_batch"] == 0 and dec["points"][0]["expected"] is None
    fit = run_json(capsys, "fit", "gemma-3-27b", "--gpu", "h100", "--max-model-len", "131072",
                   "--usage", "offline", "--engine-version", "0.33")
    check = fit["start_up_check"]
    assert fit["verdict"] == "does not fit" and not check["starts"]
    assert check["blocks_asked"] > check["pool_blocks"]
    assert check["window_batches_in_flight"] == 2 and fit["vision_tower_bytes_per_gpu"] > 0


def test_fit_sizes_chunked_attention_in_full_where_vllm_caches_it_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    """v0.10.1 to v0.13 turned the hybrid KV-cache manager off for chunked attention (PR
    #21761): once a caution, now the sizing itself, which --explain names."""
    argv = ["fit", "llama-4-scout", "--gpu", "h100", "--num-gpus", "4", "--max-model-len",
            "131072"]
    old = run_json(capsys, *argv, "--engine-version", "0.13")
    new = run_json(capsys, *argv)
    assert old["conversations"] < new["conversations"]
    assert main([*argv, "--engine-version", "0.13", "--explain"]) == 0
    assert "window and chunked layers cached in full" in capsys.readouterr().out
    assert not any("PR #21761" in c for c in old["cautions"] + new["cautions"])


def test_fit_cautions_a_mamba_hybrid_under_prefix_caching(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM v0.11.1-v0.27 with prefix caching asked for caches a supporting Mamba hybrid's
    state at every block ('all' mode), which is not modelled: fit says so, but not at the
    engine's default (no prefix caching for a hybrid before v0.28), nor before v0.11.1 (forced
    off), nor from v0.28 ('align', modelled)."""
    argv = ["fit", "jamba-1.5-mini", "--gpu", "h100", "--num-gpus", "2", "--max-model-len",
            "32k"]
    asked = [*argv, "--enable-prefix-caching"]
    assert any("mamba_cache_mode 'all'" in c
               for c in run_json(capsys, *asked, "--engine-version", "0.26")["cautions"])
    assert any("mamba_cache_mode 'all'" in c
               for c in run_json(capsys, *asked, "--engine-version", "0.13")["cautions"])
    for quiet in (argv, asked, [*argv, "--engine-version", "0.26"],
                  [*asked, "--engine-version", "0.11.0"],
                  [*asked, "--engine-version", "0.28"]):
        assert not any("'all'" in c for c in run_json(capsys, *quiet)["cautions"])
    qwen = run_json(capsys, "fit", "qwen3.6-35b-a3b", "--gpu", "h100", "--max-model-len", "32k",
                    "--enable-prefix-caching")
    assert not any("'all'" in c for c in qwen["cautions"])  # linear attention: align, modelled


@pytest.mark.parametrize("gpu,count,ngl", [("rtx-4090", 2, None), ("rtx-4090", 1, None),
                                           ("h100", 1, None), ("h100", 1, 8)])
def test_an_expectations_fast_edge_never_beats_the_floor(gpu: str, count: int,
                                                         ngl: int | None) -> None:
    """A profile's band is fitted residuals; its fast edge stops at the floor. llama.cpp on
    two 4090s at batch 8 had banded down to 29.6 ms under a 30.2 ms floor; with 25 of 32
    layers on the host (-ngl 8) the edge must stay at the floor, not at the expected host."""
    from ridgeline.cost import decode_batch
    from ridgeline.engines import profile_for
    from ridgeline.offload import HostOffload
    from ridgeline.reports.expectation import Expectation

    offload = None if ngl is None else HostOffload(ngl, host_bandwidth_bytes_per_s=76.8e9)
    dep = Deployment.build(resolve_model("llama-2-7b"), resolve_accelerator(gpu), None, None,
                           count, engine="llama.cpp-cuda", offload=offload)
    profile = profile_for("llama.cpp-cuda")
    for b in (1, 8, 64):
        e = Expectation.of(dep, decode_batch(b, 4096), profile)
        floor = decode_floor(dep, b, 4096).step_time_s
        assert floor <= e.low_s * (1 + 1e-9)
        assert e.low_s == pytest.approx(max(floor, e.time_s / profile.band_high))
        assert e.low_s <= e.time_s <= e.high_s
    for prompt in (512, 8192):
        e = Expectation.of_prefill(dep, prompt, 1, profile)
        assert prefill_floor(dep, prompt).time_s <= e.low_s * (1 + 1e-9)
        assert e.low_s <= e.time_s <= e.high_s


@pytest.mark.parametrize("argv", [
    ["llama-3.1-8b", "--gpu", "h100", "--batch", "1", "--context", "1"],
    ["qwen3-next-80b-a3b", "--gpu", "h200", "--batch", "32", "--weights", "fp8"],
    ["gemma-3-27b", "--gpu", "h100", "--batch", "8", "--context", "30000"],
    ["gpt-oss-120b", "--gpu", "b200", "--batch", "32", "--weights", "mxfp4"],
    ["llama-3.1-8b", "--gpu", "rtx-4090", "--weights", "q4_k_m", "--engine", "llama.cpp",
     "-ngl", "10", "--host-bandwidth-gbs", "76.8"]])
def test_decode_explain_repeats_from_its_printed_inputs(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """KV read = batch × traffic per sequence, that traffic KV per token × the tokens read and
    written plus what window layers and states move; memory time = bytes ÷ bandwidth; compute
    time = the FLOPs shown ÷ peak — whatever the cache (windows, states), the dtypes or
    offload."""
    steps = {s["label"]: s for s in run_json(capsys, "decode", *argv, "--explain")["explain"]}

    def inputs(label: str) -> list[float]:
        return [i["value"] for i in steps[label]["inputs"]]

    def result(label: str) -> float:
        return float(steps[label]["result"]["value"])

    weights = inputs("weight bytes read")
    if len(weights) == 2:  # params × bytes per weight
        assert result("weight bytes read") == pytest.approx(weights[0] * weights[1], rel=1e-3)
    else:  # every token's + routed × share touched, each at its bytes per weight
        dense, dense_bpw, routed, share, expert_bpw = weights
        assert result("weight bytes read") == pytest.approx(
            dense * dense_bpw + routed * share * expert_bpw, rel=1e-3)
    kv = {i["name"]: i["value"] for i in steps["KV bytes read"]["inputs"]}
    traffic_mb = kv["KV traffic per sequence"]
    assert result("KV bytes read") == pytest.approx(kv["batch"] * traffic_mb / 1e3)
    others_mb = sum(v for k, v in kv.items() if k.endswith("' traffic"))  # windows, states
    assert traffic_mb * 1e6 == pytest.approx(
        kv["KV per token"] * kv["tokens read and written"] + others_mb * 1e6)
    nbytes, *_, bandwidth = inputs("memory time")
    assert result("memory time") == pytest.approx(nbytes / bandwidth)  # GB ÷ TB/s = ms
    compute = {i["name"]: i["value"] for i in steps["compute time"]["inputs"]}
    dtypes = [d for d in (n.removesuffix(" FLOPs") for n in compute) if f"{d} time" in compute]
    if dtypes:  # matmuls at several dtypes: each one's FLOPs ÷ its own peak, summed
        for d in dtypes:
            assert compute[f"{d} time"] == pytest.approx(
                compute[f"{d} FLOPs"] / compute[f"peak {d}"] * 1e3)  # TFLOP ÷ TFLOP/s
        assert result("compute time") == pytest.approx(sum(compute[f"{d} time"] for d in dtypes))
    else:
        flops, *_, peak = inputs("compute time")  # the FLOPs, their terms, the peak
        assert result("compute time") == pytest.approx(flops / peak * 1e3)  # TFLOP ÷ TFLOP/s


@pytest.mark.parametrize("argv", [
    ["deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--batch", "64"],
    ["qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "2", "--batch", "1"],
    # under EPLB the busiest rank's read counts the replicas it holds, past E ÷ R
    ["deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--batch", "64", "--enable-eplb",
     "--eplb-config", '{"num_redundant_experts": 32}'],
    # SGLang's replicas without --enable-eplb: the first ranks serve 36 experts each
    ["deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--batch", "64", "--engine", "sglang",
     "--ep-num-redundant-experts", "32"]])
def test_an_expert_parallel_share_touched_repeats_from_the_busiest_rank_it_names(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """Under expert parallelism the step waits on the busiest rank, so the share of the routed
    experts read is not the experts touched ÷ E the source named (DeepSeek-V3 at batch 64 on
    8 ranks: 0.9467 beside '222.4 of 256'); the source now names the busiest rank's read."""
    import re

    steps = {s["label"]: s for s in run_json(capsys, "decode", *argv, "--context", "4000",
                                             "--enable-expert-parallel", "--explain")["explain"]}
    share = next(i for i in steps["weight bytes read"]["inputs"] if i["name"] == "share touched")
    touched, experts = (float(x) for x in re.match(r"([\d.]+) of (\d+) experts",
                                                   share["source"]).groups())
    assert share["value"] > touched / experts * 1.01  # the busiest rank reads more than that
    most, ranks, e = (float(x) for x in re.search(
        r"experts read: ([\d.]+) × (\d+) ÷ (\d+)", share["source"]).groups())
    assert e == experts
    assert share["value"] == pytest.approx(most * ranks / e, abs=0.01 * ranks / e)


@pytest.mark.parametrize("argv", [
    ["deepseek-v3", "--context", "2000", "--gpu", "a100", "--weights", "awq-int4",
     "--num-gpus", "8"],
    ["gemma-3-27b", "--context", "32000"], ["gemma-3-27b", "--context", "500"],
    ["qwen3-next-80b-a3b", "--context", "1024", "--gpu", "h200", "--num-gpus", "8",
     "--weights", "fp8"],
    ["gpt-oss-120b", "--context", "8192"]])
def test_kv_explain_repeats_from_its_printed_inputs(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """Window layers, tensor-parallel copies and recurrent states are inputs of the bytes a
    sequence holds, so the step repeats: the ×8 of an MLA latent at TP8 is shown, not hidden."""
    explain = run_json(capsys, "kv", *argv, "--explain")["explain"]
    seq = next(s for s in explain if s["label"] == "bytes per sequence")
    v = {i["name"]: i["value"] for i in seq["inputs"]}
    windows = sum(i["value"] * int(i["source"].split("keeps ")[1].split(" ")[0].replace(",", ""))
                  for i in seq["inputs"] if i["name"].endswith("window layers")
                  or i["name"].startswith("chunked"))
    tokens = v["full-attention layers"] * v["context"] + windows
    assert seq["result"]["value"] * 1e9 == pytest.approx(
        v["per layer"] * tokens * v["TP copies"] + v["recurrent states"] * 1e9, rel=1e-3)


def test_explained_shares_roofline_experts_and_renamed_keys_repeat(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The engine's compute share is its base × the card group's multiplier; a fixed cost
    the fit drove to nothing says so; roofline's expert intensity is 2·B·k ÷ (experts touched
    × bytes); moe, roofline and plan name their units; model lists only formats it has."""
    from ridgeline.engines import profile_for
    from ridgeline.hardware import resolve_accelerator

    steps = {s["label"]: s for s in run_json(capsys, "decode", "llama-3.1-8b", "--gpu", "h100",
                                             "--explain")["explain"]}
    share = next(i for i in steps["expected step"]["inputs"] if i["name"] == "compute share")
    vllm = profile_for("vllm")
    assert f"{vllm.compute_efficiency:.4g}" in share["source"]
    assert share["value"] == pytest.approx(vllm.compute_for(resolve_accelerator("h100")))
    # where the card's group has a multiplier (llama.cpp on GeForce), the base × it
    cuda = profile_for("llama.cpp-cuda")
    geforce = {s["label"]: s for s in run_json(
        capsys, "decode", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda",
        "--weights", "q4_k_m", "--explain")["explain"]}
    mixed = next(i for i in geforce["expected step"]["inputs"] if i["name"] == "compute share")
    assert f"{cuda.compute_efficiency:.4g} ×" in mixed["source"]
    assert mixed["value"] == pytest.approx(cuda.compute_for(resolve_accelerator("rtx-4090")))
    per_step = next(i for i in steps["engine overhead"]["inputs"] if i["name"] == "per step")
    assert ("fitted to nothing" in per_step["source"]) == (vllm.step_overhead_s < 1e-7)
    roof = run_json(capsys, "roofline", "--gpu", "h100", "--model", "deepseek-v3", "--batch",
                    "64", "--explain")
    expert = next(s for s in roof["explain"] if s["label"] == "expert intensity")
    v = {i["name"]: i["value"] for i in expert["inputs"]}
    assert expert["result"]["value"] == pytest.approx(
        2 * v["B"] * v["k"] / (v["experts touched"] * v["bytes per expert weight"]))
    assert all("intensity_flop_per_byte" in p for p in roof["points"])
    moe = run_json(capsys, "moe", "qwen3.6-35b-a3b", "--weights", "bf16")
    assert moe["ridge_flop_per_byte"] > 0
    assert moe["rows"][0]["article_tokens_per_expert"] == pytest.approx(
        moe["rows"][0]["batch"] * moe["routed_fraction"])
    model = run_json(capsys, "model", "deepseek-v3")
    assert set(model["stored_formats"]) <= set(model["params_by_category"])


def test_the_page_seats_no_one_where_fit_says_vllm_refuses_to_start(
        capsys: pytest.CaptureFixture[str]) -> None:
    """gemma-3-27b on one H100 at 131,072 tokens under vLLM 0.33: its pool holds one
    conversation's decode blocks, but vLLM's start-up check (one request's blocks, window
    layers at window + 2 × the chunk) refuses it. The page used to draw that conversation's
    speed; it now seats whom fit seats, at every context it offers."""
    from ridgeline.page import CONTEXTS, page_data

    combo = page_data(["gemma-3-27b"], ["h100-sxm"], [1], ["as stored"], ["bf16"],
                      version="0.33")["combos"]["gemma-3-27b|h100-sxm|1|as stored|bf16"]
    for i, context in enumerate(CONTEXTS):
        fit = run_json(capsys, "fit", "gemma-3-27b", "--gpu", "h100", "--max-model-len",
                       str(context), "--engine-version", "0.33")
        assert combo["conversations"][i] == fit["conversations"], context
    assert combo["conversations"][-1] == 0 and not any(combo["fits"][-1])


def test_the_fit_chart_sizes_each_context_with_every_knob_fit_was_given() -> None:
    """The chart behind `fit --plot` rebuilt the engine's settings field by field and lost
    the ones added later (the engine version among them): at fit's own context it must
    draw fit's own batch."""
    from ridgeline.memory import EngineSettings
    from ridgeline.reports.charts import CONTEXTS, chart_for
    from ridgeline.reports.fit import fit_report

    dep = Deployment.build(resolve_model("gemma-3-27b"), resolve_accelerator("h100"))
    for version in ("0.10", "0.32"):
        report = fit_report(dep, 8192, EngineSettings(max_model_len=8192,
                                                      engine_version=version))
        chart = chart_for(report)
        drawn = dict(zip(chart.series[0].x, chart.series[0].y))
        assert 8192 in CONTEXTS and drawn[8192.0] == report.batch, version


def test_utilization_reads_an_idle_engine_as_observe_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vllm:num_requests_running 0 is a normal reading (observe takes it): utilization
    answers 0 % instead of refusing it, for a dense model and for an MoE one, whose experts
    see no tokens."""
    for model in ("llama-3.1-8b", "qwen3-30b-a3b"):
        data = run_json(capsys, "utilization", "--gpu", "h100", "--running", "0", "--model",
                        model, "--context", "2000")
        assert data["running"] == 0 and data["fraction_of_arithmetic"] == 0.0


def test_kv_caches_a_float32_checkpoint_as_the_engine_serves_it(
        capsys: pytest.CaptureFixture[str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A float32 checkpoint is served at 16 bits and its cache follows: kv had priced its
    cache at fp32 (256 KiB per token for Llama-3.1-8B, 33 conversations of 8k on an H100)
    while decode, model and roofline read bf16 (128 KiB)."""
    import pathlib

    config = json.loads(next(pathlib.Path("src/ridgeline/data/models").glob(
        "meta-llama--Llama-3.1-8B.json")).read_text())
    config["torch_dtype"] = "float32"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    kv = run_json(capsys, "kv", str(path), "--context", "8000", "--gpu", "h100")
    model = run_json(capsys, "model", str(path))
    assert kv["kv_dtype"] == "bf16"
    assert kv["bytes_per_token"] == 2 * 32 * 8 * 128 * 2 == model["kv_bytes_per_token_bf16"]
    plain = run_json(capsys, "kv", "llama-3.1-8b", "--context", "8000", "--gpu", "h100")
    # (79.18 GiB the runtime reports − 16.1 GB of weights) ÷ 1.05 GB a conversation
    assert kv["conversations"] == plain["conversations"] == 65


@pytest.mark.parametrize("command", [["decode", "--batch", "16"], ["prefill", "--prompt-len", "2000"]])
def test_explain_counts_the_cards_behind_its_peak_as_behind_its_bandwidth(
        capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """Llama-3.1-70B at TP4 on H100s: the peak an explanation divides by is four cards' (3,958
    TFLOP/s, also the datasheet's sparse fp8 figure for one), so its source says '4 x
    h100-sxm' as the bandwidth's does, and the value is four times the card's own."""
    name, *flags = command
    steps = run_json(capsys, name, "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4",
                     *flags, "--explain")["explain"]
    inputs = [i for s in steps for i in s["inputs"]
              if i["name"] == "bandwidth" or i["name"].startswith("peak ")]
    h100 = resolve_accelerator("h100")
    peaks = [i for i in inputs if i["name"] == "peak bf16"]
    assert peaks and all(i["value"] == pytest.approx(4 * h100.peak("bf16") / 1e12)
                         for i in peaks)
    assert {i["name"] for i in inputs} == {"bandwidth", "peak bf16"}
    assert all(i["source"].startswith("4 x h100-sxm") for i in inputs), inputs


def test_simulate_runs_a_llama_cpp_layer_split_as_one_batch_as_decode_times_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's layer split passes the whole batch from GPU to GPU (stages.micro_batches
    is 1): Mixtral-8x7B on 8 RTX 4090s with its 4 slots full decodes a batch of 4, at
    decode's expected step (85.8 ms), not as 8 pipeline lanes each running one sequence at
    batch 1's step (36.1 ms) — which read the TPOT 2.4x too fast, under the floor."""
    flags = ["mixtral-8x7b", "--gpu", "rtx-4090", "--num-gpus", "8", "--engine", "llama.cpp"]
    sim = run_json(capsys, "simulate", *flags, "--concurrency", "4", "--input-len", "256",
                   "--output-len", "64", "--num-requests", "8", "--max-model-len", "2048")
    assert sim["running"]["max"] == 4
    four = run_json(capsys, "decode", *flags, "--batch", "4", "--context", "288")["points"][0]
    one = run_json(capsys, "decode", *flags, "--batch", "1", "--context", "288")["points"][0]
    assert sim["tpot_s"]["mean"] == pytest.approx(four["expected"]["time_s"], rel=0.02)
    assert sim["tpot_s"]["mean"] > four["floor_step_time_s"] > one["expected"]["time_s"]


def test_simulate_pipelines_a_llama_cpp_prompts_ubatches_as_prefill_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """One request at a time, simulate's TTFT is prefill's expected TTFT. A 2,000-token
    prompt on Llama-3.1-70B split over 4 H100s is one llama_decode call of four 512-token
    ubatches that llama.cpp pipelines over the 4 GPUs (llamacpp_batching.pipelined_s: 1.75
    ubatch trips, not 4), as prefill prices it; simulate summed the four trips (2.26x
    prefill's TTFT). A single GPU has nothing to overlap, so there the two always agreed."""
    for gpus in ("4", "1"):
        flags = ["llama-3.1-70b", "--gpu", "h100", "--num-gpus", gpus, "--engine", "llama.cpp",
                 "--host-bandwidth-gbs", "60"]
        if gpus == "1":
            flags = ["llama-3.1-8b", *flags[1:]]
        sim = run_json(capsys, "simulate", *flags, "--concurrency", "1", "--num-requests", "2",
                       "--input-len", "2000", "--output-len", "2")
        pre = run_json(capsys, "prefill", *flags, "--prompt-len", "2000")
        assert sim["ttft_s"]["p50"] == pytest.approx(pre["expected"]["time_s"], rel=0.01)


def test_prefill_overlaps_a_vllm_v1_prompts_chunks_in_the_pipeline_as_simulate_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM V1 schedules a prompt's next chunk as soon as its last is sent (its scheduler's
    _update_after_schedule), so under -pp 2 a 20,000-token prompt's three 8,192-token-budget
    chunks overlap in the pipeline, as simulate's one-pool pipeline runs them: prefill summed
    the three trips (3.16 s against simulate's 2.25 s for Llama-3.1-70B on TP2 × PP2 H100s).
    SGLang's and TensorRT-LLM's pipelines (lanes) still run them one trip after another."""
    expected = {}
    for engine in ("vllm", "sglang"):
        flags = ["llama-3.1-70b", "--gpu", "h100", "--engine", engine, "--num-gpus", "2",
                 "-pp", "2", "--max-model-len", "32768"]
        sim = run_json(capsys, "simulate", *flags, "--concurrency", "1", "--num-requests", "2",
                       "--input-len", "20000", "--output-len", "2")
        pre = run_json(capsys, "prefill", *flags, "--prompt-len", "20000")
        assert pre["prompt_steps"] == 3
        assert sim["ttft_s"]["p50"] == pytest.approx(pre["expected"]["time_s"], rel=0.01)
        expected[engine] = pre["expected"]["time_s"]
    # one step profile for both engines: the overlap alone makes vLLM's shorter
    assert expected["vllm"] < 0.8 * expected["sglang"]


def test_fit_simulate_and_decode_hold_a_trtllm_hybrids_state_for_every_seat(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM to 1.2 allocates a hybrid's recurrent state for every max_batch_size seat
    before it sizes the KV pool (trtllm_memory.seat_state_bytes; inside the pool only from PR
    #12185): Nemotron-H-56B fp8 on one H100 at its 2,048 default seats wants 876.7 GiB of
    state, so fit says it does not fit and names the most seats that do; simulate refuses
    the same launch with that lever, runs it at that many seats as fit counts them (no state
    blocks charged a request), and decode refuses it for the same reason. fit had said 27
    conversations, its caution saying the release would not start."""
    from ridgeline.capacity import held_conversations, seats_that_fit, state_blocks
    from ridgeline.memory import EngineSettings, kv_pool

    dep = Deployment.build(resolve_model("nemotron-h-56b"), resolve_accelerator("h100"),
                           "fp8", engine="trtllm")
    settings = EngineSettings(max_model_len=8192)
    pool = kv_pool(dep, settings)
    assert pool.seat_state_bytes == pytest.approx(
        pool.max_num_seqs * served_footprint_state(dep)) and pool.rest_bytes < 0
    assert state_blocks(pool, dep) == 0 and held_conversations(pool, dep, 8192) == 0
    seats = seats_that_fit(dep, settings, 8192, pool.max_num_seqs)
    fewer = kv_pool(dep, replace(settings, max_num_seqs=seats))
    more = kv_pool(dep, replace(settings, max_num_seqs=seats + 1))
    assert 1 < seats < pool.max_num_seqs
    assert held_conversations(fewer, dep, 8192) >= seats
    assert held_conversations(more, dep, 8192) < seats + 1  # the most: one more does not fit
    flags = ["nemotron-h-56b", "--gpu", "h100", "--engine", "trtllm", "--weights", "fp8",
             "--max-model-len", "8192"]
    fit = run_json(capsys, "fit", *flags)
    assert fit["verdict"] == "does not fit" and fit["conversations"] == 0
    assert fit["taken_bytes_per_gpu"]["seat_state"] == pool.seat_state_bytes
    lever = next(lv for lv in fit["levers"] if lv["name"] == f"--max_batch_size {seats}")
    assert lever["engine_max_batch"] == seats
    _, text, _ = run_cli(capsys, "fit", *flags)
    assert f"every one of --max_batch_size {pool.max_num_seqs:,} seats" in text.splitlines()[0]
    code, _, err = run_cli(capsys, "simulate", *flags, "--num-requests", "4")
    assert code == 2 and f"--max_batch_size {seats}: " in err
    sim = run_json(capsys, "simulate", *flags, "--max_batch_size", str(seats), "--input-len",
                   "4096", "--output-len", "4096", "--concurrency", "40", "--num-requests",
                   "40", "--ignore-eos")
    assert sim["settings"]["overhead_blocks_per_request"] == 0
    assert sim["running"]["max"] == min(lever["conversations"], seats)
    _, out, _ = run_cli(capsys, "decode", *flags, "--batch", "1", "--context", "4000")
    assert "reserves Mamba state for every one of --max_batch_size 2,048 seats" in out


def served_footprint_state(dep: Deployment) -> float:
    """One request's recurrent state on one GPU, from the footprint the step reads."""
    from ridgeline.cost import served_footprint

    return served_footprint(dep, 1).state_bytes / dep.rank_gpus


@pytest.mark.parametrize("engine,words", [("vllm", "vLLM's expert parallelism"),
                                          ("sglang", "SGLang's --ep-size"),
                                          ("trtllm", "TensorRT-LLM's --ep_size")])
def test_expert_parallel_on_one_gpu_is_refused_in_the_engines_own_words(
        capsys: pytest.CaptureFixture[str], engine: str, words: str) -> None:
    """fit and simulate refuse --enable-expert-parallel on one GPU with one line naming the
    engine's own flag (SGLang and TensorRT-LLM had been told vLLM's rule)."""
    errors = []
    for command in ("fit", "simulate"):
        code, _, err = run_cli(capsys, command, "deepseek-v3", "--gpu", "h200", "--engine",
                               engine, "--enable-expert-parallel", "--max-model-len", "8192")
        assert code == 2 and len(err.strip().splitlines()) == 1 and words in err
        errors.append(err)
    assert errors[0] == errors[1]


def test_simulate_holds_a_window_only_models_window_as_fit_counts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Mistral-7B attends only through 4,096-token windows; vLLM V1 frees the blocks that
    fall out of them, so fit counts 115 conversations of 32,768 tokens on one H100 (a
    decoding request holds 65 blocks of 64). The simulator holds them so too: 30 conversations
    of 30,000 tokens all run at once, where grown uncapped (2,048 blocks at 32,768 tokens)
    it had stopped near the pool ÷ 2,048 and said so. vLLM's V0 engine (0.6) is still grown
    uncapped, and the run still says so, naming fit's count."""
    from ridgeline.memory import EngineSettings, kv_pool

    flags = ["mistral-7b", "--gpu", "h100", "--engine", "vllm", "--max-model-len", "32768"]
    fit = run_json(capsys, "fit", *flags)
    pool = kv_pool(Deployment.build(resolve_model("mistral-7b"), resolve_accelerator("h100")),
                   EngineSettings(max_model_len=32768))
    b = pool.block_size
    assert pool.groups is not None and pool.groups.decode_blocks(32768) == 4096 // b + 1
    load = ["--input-len", "30000", "--output-len", "200", "--concurrency", "30",
            "--num-requests", "30"]
    sim = run_json(capsys, "simulate", *flags, *load)
    grown = sim["settings"]["num_blocks"] // (32768 // b)
    assert grown + 1 < sim["running"]["max"] == 30 < fit["conversations"]
    assert sim["preemptions"] == 0
    assert not [c for c in sim["cautions"] if "sliding windows" in c]
    v0 = run_json(capsys, "simulate", *flags, "--engine-version", "0.6", *load)
    v0_fit = run_json(capsys, "fit", *flags, "--engine-version", "0.6")
    assert v0["running"]["max"] <= grown + 1 < v0_fit["conversations"]
    said = [c for c in v0["cautions"] if "sliding windows" in c]
    assert len(said) == 1 and f"holds {v0_fit['conversations']:,} conversations" in said[0]


@pytest.mark.parametrize("prompt", ["300", "512", "700"])
def test_prefill_packs_a_llama_cpp_batchs_prompts_into_ubatches_as_simulate_does(
        capsys: pytest.CaptureFixture[str], prompt: str) -> None:
    """Four prompts sent at once to llama-server: their tokens fill its ubatches in order
    (llamacpp_batching.prefill_calls), so the last first token comes when they are all done,
    and prefill --batch 4 prices the same passes. It had priced four prompts that each fit
    one ubatch as a single pass (four 512-token prompts: 220.7 ms beside simulate's 227.4 ms,
    while its own note counted 4 ubatches), and longer ones as each prompt's own ubatches
    (four of 700: 8 passes where llama.cpp runs 6)."""
    flags = ["llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp", "--weights", "q4_k_m"]
    sim = run_json(capsys, "simulate", *flags, "--rate", "inf", "--num-requests", "4",
                   "--input-len", prompt, "--output-len", "1")
    pre = run_json(capsys, "prefill", *flags, "--prompt-len", prompt, "--batch", "4")
    assert sim["ttft_s"]["p99"] == pytest.approx(pre["expected"]["time_s"], rel=0.005)


def test_the_experts_ridge_batch_is_roofline_moe_rows_in_fit_utilization_and_moe(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3.6-35B-A3B-NVFP4 on an H200: its W4A16 experts (0.5625 B, at bf16's ridge) reach
    it at batch 1,855.1, so the first whole batch is 1,856, roofline's MoE row; fit's caution,
    utilization and moe had rounded it to 1,855."""
    argv = ("--gpu", "h200")
    roof = run_json(capsys, "roofline", "--model", "qwen3.6-35b-a3b-nvfp4", *argv)
    row = next(p for p in roof["points"] if p["name"] == "MoE expert layers")
    whole = row["first_whole_batch_to_ridge"]
    assert round(row["batch_to_ridge"]) != whole  # the case that told them apart
    fit = run_json(capsys, "fit", "qwen3.6-35b-a3b-nvfp4", *argv, "--max-model-len", "32000")
    assert fit["expert_batch_to_ridge"] == pytest.approx(row["batch_to_ridge"])
    assert any(f"only near batch {whole:,};" in c for c in fit["cautions"])
    util = run_json(capsys, "utilization", "--running", "120", "--model",
                    "qwen3.6-35b-a3b-nvfp4", *argv, "--context", "32000")
    assert f"near batch {whole:,})" in util["experts"]
    assert main(["moe", "qwen3.6-35b-a3b-nvfp4", *argv]) == 0
    assert f"needs a batch near {whole:,}\n" in capsys.readouterr().out


def test_observe_counts_a_llama_server_pool_as_utilization_and_decode_do(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """gpt-oss-20b on an RTX 4090 under llama.cpp at 32,000 tokens, 14 requests processing:
    with no -np given, observe counts the pool a slot each, as utilization and decode do
    (capacity.decode_held); it had read llama-server's default 4 slots as the pool and
    called the 14 running 'more than the 4 its pool holds: shorter contexts'."""
    metrics = tmp_path / "metrics.txt"
    metrics.write_text("# TYPE llamacpp:requests_processing gauge\n"
                       "llamacpp:requests_processing 14\n"
                       "# TYPE llamacpp:requests_deferred gauge\n"
                       "llamacpp:requests_deferred 0\n")
    dep = ("--model", "gpt-oss-20b", "--gpu", "rtx4090", "--engine", "llama.cpp")
    util = run_json(capsys, "utilization", *dep, "--running", "14", "--context", "32000")
    decode = run_json(capsys, "decode", *dep, "--context", "32000")
    held = util["conversations"]  # decode's pool count (its default 4 slots run)
    assert held == decode["engine_max_batch"][0]["conversations"] >= 14
    seen = run_json(capsys, "observe", *dep, str(metrics), "--context", "32000")
    assert seen["engine_max_batch"] == held
    assert "more than the" not in seen["wall"]
    given = run_json(capsys, "observe", *dep, str(metrics), "--context", "32000",
                     "--max-num-seqs", "4")  # -np 4 given: four slots, as stated
    assert given["engine_max_batch"] == 4


def test_decode_takes_llama_cpps_max_model_len_as_fit_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--max-model-len under llama.cpp is each slot's context (-c ÷ -np) in fit, and decode's
    own -c refusal says to give it; decode had refused it ("give the tokens in each slot as
    --context"). It now sizes slots that long: gpt-oss-20b on an RTX 4090, batch 4 at 2,048
    tokens in slots of 32,768, runs as many as fit's memory holds at 32,768 (its -np lever),
    and more than slots of 2,048 would not. prefill takes it alike."""
    base = ["openai/gpt-oss-20b", "--gpu", "rtx-4090", "--engine", "llama.cpp"]
    fit = run_json(capsys, "fit", *base, "--max-model-len", "32768")
    decode = run_json(capsys, "decode", *base, "--batch", "4", "--context", "2048",
                      "--max-model-len", "32768")
    seats = decode["engine_max_batch"][0]
    # the slots the pool holds (the default 4 of them run)
    assert seats["context_len"] == 2048 and seats["conversations"] == fit["conversations"]
    assert "--max-model-len 32,768" in seats["settings"]
    short = run_json(capsys, "decode", *base, "--batch", "4", "--context", "2048")
    assert short["engine_max_batch"][0]["conversations"] > seats["conversations"]  # slots of 2,048 each
    prefill = run_json(capsys, "prefill", *base, "--prompt-len", "2048", "--max-model-len",
                       "32768")
    assert prefill["max_model_len"] == 32768
