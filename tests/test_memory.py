"""Engine-aware memory and the capacity verdict (`ridgeline fit`)."""

from __future__ import annotations

import json
import re

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import max_batch
from ridgeline.cli import main
from ridgeline.errors import InputError
from ridgeline.hardware import VISIBLE_MEMORY_FRACTION
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.reports.fit import CLEARS_RIDGE, DOES_NOT_FIT, UNDER_RIDGE, fit_report
from ridgeline.roofline import ridge_point
from ridgeline.sglang_memory import sglang_memory_defaults
from ridgeline.units import GIB
from ridgeline.vllm_pool import vllm_batch_defaults


def dep(model: str, gpu: str = "h100", n: int = 1, weights: str | None = None,
        engine: str = "vllm", kv: str | None = None) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights, kv, n,
                            engine=engine)


def test_gpt_oss_120b_on_two_h100s_at_128k_is_short_of_32_conversations() -> None:
    report = fit_report(dep("gpt-oss-120b", n=2), 131_072, EngineSettings(), target=32)
    assert report.verdict == DOES_NOT_FIT
    assert 10 < report.conversations < 32
    assert report.shortfall_bytes > 0


def test_gpt_oss_120b_on_two_h100s_clears_the_ridge_at_4k_but_not_at_8k() -> None:
    at_4k = fit_report(dep("gpt-oss-120b", n=2), 4096, EngineSettings())
    at_8k = fit_report(dep("gpt-oss-120b", n=2), 8192, EngineSettings())
    assert at_4k.verdict == CLEARS_RIDGE and at_4k.batch >= 296
    assert at_8k.verdict == UNDER_RIDGE and at_8k.batch < 296


@pytest.mark.parametrize(("model", "gpu", "weights", "engine"), [
    ("llama-3.1-70b", "h100", "fp8", "vllm"),  # fp8 matmuls: twice the ridge, half the bytes
    ("llama-3.1-8b", "rtx-4090", "q4_k_m", "llama.cpp-cuda"),  # 4-bit weights at fp16 matmuls
    ("gpt-oss-120b", "h100", None, "vllm"),  # bf16 attention beside MXFP4 experts
])
def test_the_ridge_batch_is_where_the_weights_every_token_reads_reach_the_ridge(
        capsys: pytest.CaptureFixture[str], model: str, gpu: str, weights: str | None,
        engine: str) -> None:
    """fit's ridge is the batch at which the roofline command's weight matrices reach it: at
    their matmuls' peak, blended where they run at several dtypes (the fp8 checkpoint's bf16
    LM head), one dtype's where they share it."""
    d = dep(model, gpu, 2 if model == "gpt-oss-120b" else 1, weights, engine)
    report = fit_report(d, 4096, EngineSettings())
    argv = ["roofline", "--gpu", gpu, "--model", model, "--engine", engine, "--json"]
    assert main(argv + (["--weights", weights] if weights else [])) == 0
    point = json.loads(capsys.readouterr().out)["points"][0]
    assert report.ridge_batch == pytest.approx(point["batch_to_ridge"])
    dense_bpw = d.bytes_per_weight_split[0]
    assert report.ridge_batch == pytest.approx(
        ridge_point(d.dense_peak_flops_per_s,
                    d.accelerator.memory_bandwidth_bytes_per_s) * dense_bpw / 2, rel=1e-6)
    assert d.dense_blended == (weights == "fp8")
    if not d.dense_blended:
        # the peak the step is priced at: llama.cpp's CUDA build's fp16 accumulate on a 4090
        assert d.dense_peak_flops_per_s == d.peak_at(d.dense_compute_dtype) \
            == d.peak_flops_per_s / d.tensor_parallel_size


def test_the_fp8_ridge_batch_is_near_the_bf16_one_not_double() -> None:
    """fp8 matmuls double the ridge in FLOP per byte; fp8 weights halve the bytes a token's
    2 FLOP per weight stand on: the batch to the ridge stays near 300 on an H100."""
    fp8 = fit_report(dep("llama-3.1-70b", n=2, weights="fp8"), 4096, EngineSettings())
    bf16 = fit_report(dep("llama-3.1-70b", n=2), 4096, EngineSettings())
    assert 295 <= fp8.ridge_batch < 305 and bf16.ridge_batch == pytest.approx(295.3, abs=0.1)


def test_levers_each_carry_their_number() -> None:
    report = fit_report(dep("gpt-oss-120b", n=2), 131_072, EngineSettings(), target=32)
    by_name = {lv.name.split(" (")[0]: lv.conversations for lv in report.levers}
    # half the bytes a block: twice the blocks; the admission charge (a prompt is admitted
    # only with its window groups' prefill room free, vLLM v0.19+) is paid once, not twice
    assert 2 * report.conversations - 1 <= by_name["fp8 KV cache"] <= 2 * report.conversations + 2
    assert by_name["half the context"] >= 2 * report.conversations
    assert by_name["4 GPUs"] > report.conversations


def test_vllm_defaults_depend_on_the_accelerator_and_usage() -> None:
    assert vllm_batch_defaults(dep("llama-3.1-8b", "h100"), "serve") == {
        "max_num_batched_tokens": 8192, "max_num_seqs": 1024}
    assert vllm_batch_defaults(dep("llama-3.1-8b", "a100"), "serve") == {
        "max_num_batched_tokens": 2048, "max_num_seqs": 256}
    assert vllm_batch_defaults(dep("llama-3.1-8b", "l40s"), "offline")["max_num_seqs"] == 256


def test_vllm_pool_reproduces_the_logged_rtx_3090_pool() -> None:
    # vLLM issue #10517 (V0, v0.6.4): total 23.58 GiB, utilization 0.9, max_model_len 20000
    # (V0 profiles 20000 tokens), non-torch 0.35 GiB -> "KV cache 3.81 GiB".
    settings = EngineSettings(0.9, 20000, engine_version="0.6.4")
    pool = kv_pool(dep("llama-3.1-8b-instruct", "rtx-3090", weights="bf16"), settings,
                   23.58 * GIB)
    assert pool.pool_bytes / GIB == pytest.approx(3.81, rel=0.03)


def test_tensor_parallel_splits_weights_and_kv_heads() -> None:
    one = kv_pool(dep("llama-3.1-70b", "h200"))
    four = kv_pool(dep("llama-3.1-70b", "h200", n=4))
    assert four.weight_bytes == pytest.approx(one.weight_bytes / 4)
    assert four.kv_bytes_per_token == pytest.approx(one.kv_bytes_per_token / 4)


def test_trtllm_gives_the_kv_cache_a_fraction_of_what_is_left() -> None:
    pool = kv_pool(dep("llama-3.1-8b", engine="trtllm"))
    assert pool.free_fraction_of_rest == 0.9 and pool.reserved_fraction == 1.0


def test_max_batch_is_capped_by_the_pool_and_the_seats() -> None:
    assert max_batch(dep("llama-3.1-8b", "h100"), 100) == 1024  # seats bind
    assert 400 < max_batch(dep("llama-3.1-8b", "h100"), 1000) < 1024  # memory binds
    assert max_batch(dep("llama-3.1-70b", "h100", weights="fp8"), 8000) < 5  # memory binds


def test_bad_settings_are_refused() -> None:
    with pytest.raises(InputError):
        EngineSettings(gpu_memory_utilization=1.5)
    with pytest.raises(InputError):
        EngineSettings(usage="batch")


V059 = "0.5.9"  # the last release before the prefill CUDA graphs joined the reserve


def test_sglang_holds_back_memory_by_card_size_and_parallelism() -> None:
    """SGLang v0.5.3-v0.5.9's rule: an 80 GiB card gets 8K prefill chunks and 256 graph batches
    (512 from TP4), and holds back 512 + 1.5·8192 + 2·256 + 1024·TP/8 MiB."""
    card = resolve_accelerator("h100").memory_bytes * VISIBLE_MEMORY_FRACTION
    one = sglang_memory_defaults(card, tp=1, version=V059)
    assert (one.chunked_prefill_size, one.cuda_graph_max_bs, one.reserved_mib) == (8192, 256, 13_440)
    mib = card / 2**20
    assert one.mem_fraction_static == round((mib - 13_440) / mib, 3)
    eight = sglang_memory_defaults(card, tp=8, version=V059)
    assert eight.reserved_mib == 512 + 12_288 + 2 * 512 + 1024
    assert eight.mem_fraction_static < one.mem_fraction_static
    # small prefill chunks on a big card: the 10 GiB floor holds
    assert sglang_memory_defaults(card, chunked_prefill_size=2048, version=V059).reserved_mib == 10_240
    # a bigger card keeps the same absolute reserve, so a larger fraction for the pool
    h200 = resolve_accelerator("h200").memory_bytes * VISIBLE_MEMORY_FRACTION
    assert sglang_memory_defaults(h200, version=V059).mem_fraction_static == 0.905 > one.mem_fraction_static
    t4 = sglang_memory_defaults(resolve_accelerator("t4").memory_bytes, tp=1,
                                version=V059)
    assert (t4.chunked_prefill_size, t4.cuda_graph_max_bs) == (2048, 8)


def test_sglang_pool_is_the_static_fraction_less_weights_and_context() -> None:
    """No activation term: SGLang sizes the pool from memory free after loading, less what
    it holds back (model_runner profile_max_num_token)."""
    pool = kv_pool(dep("llama-3.1-8b", n=8, engine="sglang"))
    # its rule reads the card as nvidia-smi shows it (81,559 MiB), not the runtime's total
    smi = resolve_accelerator("h100").smi_total_bytes
    assert smi is not None and smi > pool.total_bytes
    rule = sglang_memory_defaults(smi, tp=8)
    assert pool.reserved_fraction == rule.mem_fraction_static
    assert pool.activation_bytes == 0
    assert pool.pool_bytes == pytest.approx(
        pool.total_bytes * rule.mem_fraction_static - pool.weight_bytes - pool.non_torch_bytes)
    assert pool.profile_tokens == 8192  # chunked_prefill_size of an 80 GiB card
    # An explicit --mem-fraction-static wins over the rule.
    pinned = kv_pool(dep("llama-3.1-8b", n=8, engine="sglang"),
                     EngineSettings(gpu_memory_utilization=0.7))
    assert pinned.reserved_fraction == 0.7




def test_a_shortfall_counts_weights_that_overflow_the_reservation() -> None:
    # Qwen3-30B-A3B in bf16 (about 57 GiB) on one L40S: the weights alone exceed what the
    # engine reserves, so the pool is short by that overflow plus one conversation.
    report = fit_report(dep("qwen3-30b-a3b", "l40s"), 32_768, EngineSettings(), target=1)
    pool = report.pool
    assert report.verdict == DOES_NOT_FIT and pool.pool_bytes == 0 and pool.rest_bytes < 0
    overflow = pool.weight_bytes - pool.total_bytes * pool.reserved_fraction
    assert report.shortfall_bytes > overflow + report.per_conversation_bytes
    assert "the weights alone" in report.text_lines()[0] \
        and "exceed the card" in report.text_lines()[0]  # vLLM could not even load them


def test_sglang_before_v0_5_fixed_its_fraction_by_tensor_parallel_size() -> None:
    # v0.3-v0.4: 0.88 at TP1 (printed in the SGLang docs' January 2025 notebook), 0.85 at
    # TP4, 0.81 at TP8; v0.5 derives it from the card's memory instead.
    for n, legacy in ((1, 0.88), (4, 0.85), (8, 0.81)):
        d = dep("llama-3.1-70b" if n > 1 else "llama-3.1-8b", n=n, engine="sglang")
        old = kv_pool(d, EngineSettings(engine_version="0.4.1"))
        assert old.reserved_fraction == legacy
        assert kv_pool(d).reserved_fraction != legacy
    pinned = kv_pool(dep("llama-3.1-8b", engine="sglang"),
                     EngineSettings(gpu_memory_utilization=0.7, engine_version="0.4"))
    assert pinned.reserved_fraction == 0.7  # a stated fraction wins
    with pytest.raises(InputError):
        kv_pool(dep("llama-3.1-8b", engine="trtllm"), EngineSettings(engine_version="0.19"))
    # the docs' log: 0.88 x 78.81 GiB visible - 15.09 GiB of weights = 54.26 GiB of K + V
    docs = kv_pool(dep("llama-3.1-8b-instruct", engine="sglang"),
                   EngineSettings(engine_version="0.4"), 79.21 * GIB)
    assert docs.pool_bytes / GIB == pytest.approx(54.26, rel=0.01)


@pytest.mark.parametrize(("model", "gpu", "n", "engine", "target"), [
    ("gpt-oss-120b", "h100", 2, "vllm", 32),  # 128K holds 16: the longest for 32 is shorter
    ("llama-3.1-8b", "h100", 1, "sglang", 100),
    ("qwen3-30b-a3b", "rtx-4090", 2, "llama.cpp-cuda", 12),
])
def test_the_longest_context_holds_the_target_and_one_token_more_does_not(
        model: str, gpu: str, n: int, engine: str, target: int) -> None:
    from ridgeline.reports.fit import longest_context

    d = dep(model, gpu, n, engine=engine,
            weights="q4_k_m" if engine.startswith("llama.cpp") else None)
    found = longest_context(d, EngineSettings(), target)
    assert found.conversations >= target and found.verdict != DOES_NOT_FIT
    assert f"{found.context:,} tokens" in found.searched
    assert fit_report(d, found.context + 1, EngineSettings(), target).conversations < target


def test_the_longest_context_search_says_when_no_context_holds_the_target() -> None:
    from ridgeline.reports.fit import longest_context

    found = longest_context(dep("llama-3.1-70b"), EngineSettings(), 8)  # 141 GB on 80 GB
    assert found.verdict == DOES_NOT_FIT and found.searched.startswith("no context holds 8")
    # and a small model reaches its own limit: the answer is the model's window, said so
    small = longest_context(dep("llama-3.2-1b", "b200"), EngineSettings(), 1)
    assert small.context == resolve_model("llama-3.2-1b").max_position_embeddings
    assert "the model's limit" in small.searched


def test_llamacpp_slots_are_raised_to_the_target_and_hold_their_window_cache(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Eight Gemma-2 conversations need -np 8: each slot's window cache counts, not 4's."""
    argv = ["fit", "gemma-2-9b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda",
            "--max-model-len", "2048", "--target-concurrency", "8", "--json"]
    assert main(argv) == 0
    auto = json.loads(capsys.readouterr().out)
    assert main([*argv, "--parallel", "8"]) == 0
    given = json.loads(capsys.readouterr().out)
    assert auto["max_num_seqs"] == 8 and auto["conversations"] == given["conversations"] >= 8
    assert auto["slot_cache_bytes_per_gpu"] == given["slot_cache_bytes_per_gpu"]


def test_the_shortfall_counts_what_the_verdict_counts(capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp: the slots' window cache is paid before any conversation; vLLM: one request
    of a window model asks window + max_num_batched_tokens of each window group at start."""
    assert main(["fit", "gemma-2-9b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda",
                 "--max-model-len", "4096", "--target-concurrency", "8", "--json",
                 "-ngl", "all"]) == 0  # every layer on the GPU: --fit would place the 8
    r = json.loads(capsys.readouterr().out)
    need = 8 * r["per_conversation_bytes_per_gpu"] + r["slot_cache_bytes_per_gpu"]
    assert r["verdict"] == DOES_NOT_FIT
    assert r["shortfall_bytes_per_gpu"] == pytest.approx(need - r["pool_bytes_per_gpu"])
    report = fit_report(dep("gemma-3-27b", "rtx-4090", weights="awq-int4"), 32768,
                        EngineSettings(language_model_only=True), target=1)
    assert report.conversations == 0 and report.refused_start
    assert report.pool.pool_bytes > report.per_conversation_bytes  # bytes alone would say 1
    assert report.shortfall_bytes == pytest.approx(
        report.start_bytes / report.pool.free_fraction_of_rest - report.pool.rest_bytes)
    assert report.shortfall_bytes > 0.3 * GIB
    assert "vLLM refuses to start" in report.text_lines()[0]


@pytest.mark.parametrize(("model", "gpu", "n", "context"), [
    ("gemma-3-27b", "l40s", 1, 131072),  # a lever over-promised past the start-up check
    ("gemma-3-27b", "rtx-4090", 2, 131072),
    ("gemma-2-9b", "rtx-4090", 1, 2048),
])
def test_every_lever_is_what_fit_says_once_it_is_pulled(
        model: str, gpu: str, n: int, context: int) -> None:
    engine = "llama.cpp-cuda" if model == "gemma-2-9b" else "vllm"
    base = dep(model, gpu, n, engine=engine)
    report = fit_report(base, context, EngineSettings(), target=8)
    for lever in report.levers:
        assert lever.conversations > report.conversations or lever.batch > report.batch
        if lever.name.startswith("fp8 weights"):
            pulled = fit_report(dep(model, gpu, n, "fp8", engine), context, EngineSettings(),
                                target=8)
            assert (pulled.conversations, pulled.batch) == (lever.conversations, lever.batch)


def test_llamacpp_window_cache_is_capped_at_the_cells_of_c() -> None:
    from ridgeline.llamacpp_memory import slot_cache_bytes

    spec = resolve_model("gemma-2-9b")
    free = slot_cache_bytes(spec, 2.0, 8, 512)
    capped = slot_cache_bytes(spec, 2.0, 8, 512, n_ctx=8 * 2048)
    assert capped == pytest.approx(free * 8 * 2048 / (4096 * 8 + 512))
    assert slot_cache_bytes(spec, 2.0, 8, 512, n_ctx=10**6) == free


def test_cautions_reach_the_json_as_they_reach_the_text(
        capsys: pytest.CaptureFixture[str]) -> None:
    for argv, words in (
            (["fit", "qwen3-30b-a3b", "--gpu", "mi300x", "--max-model-len", "4096",
              "--target-concurrency", "200"], "reach the ridge only near batch"),
            (["fit", "llama-2-70b", "--gpu", "a100-sxm-80gb", "--num-gpus", "4",
              "--max-model-len", "4096", "--engine-version", "0.2.5"], "record_stream")):
        assert main(argv) == 0
        text = capsys.readouterr().out
        assert main([*argv, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert any(words in c for c in data["cautions"]) and words in text
    assert data["expert_batch_to_ridge"] is None  # a dense model


def test_levers_stay_on_what_the_hardware_runs() -> None:
    """No fp8 weights on a V100 (vLLM needs Turing's Marlin or Ada's fp8; its wheels carry
    Volta kernels through 0.19: vllm_gpu_floors), no second GPU in a Mac; fp8 weights on a
    T4 run weight-only through Marlin."""
    volta = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("v100-sxm-32gb"),
                             engine="vllm", engine_version="0.19")
    names = {lv.name for lv in fit_report(volta, 32768, EngineSettings(engine_version="0.19"),
                                          target=8).levers}
    assert not any("fp8 weights" in n for n in names) and "2 GPUs (tensor parallel)" in names
    assert any("fp8 weights" in lv.name for lv in fit_report(
        dep("llama-3.1-8b", "t4"), 16384, EngineSettings(), target=8).levers)
    mac = fit_report(dep("llama-3.1-70b", "apple-m3-max-40c", engine="llama.cpp-metal"),
                     16384, EngineSettings(), target=2)
    assert not any("GPUs" in lv.name for lv in mac.levers)


def test_no_fp8_cache_lever_where_the_engine_refuses_that_cache_on_the_card() -> None:
    """TensorRT-LLM keeps no fp8 KV cache on Ampere (an A100): the lever would be a layout
    `--kv-dtype fp8` refuses; on an H100 the same lever is offered, and holds more."""
    with pytest.raises(InputError, match=r"no fp8 KV cache before compute capability 8\.9"):
        dep("llama-3.1-8b", "a100-sxm-40gb", engine="trtllm", kv="fp8")
    ampere = fit_report(dep("llama-3.1-8b", "a100-sxm-40gb", engine="trtllm"), 32768,
                        EngineSettings(), target=8)
    assert ampere.levers and not any("fp8 KV cache" in lv.name for lv in ampere.levers)
    hopper = fit_report(dep("llama-3.1-8b", "h100", engine="trtllm"), 32768, EngineSettings(),
                        target=8)
    fp8 = next(lv for lv in hopper.levers if lv.name.startswith("fp8 KV cache"))
    assert fp8.conversations > hopper.conversations


def test_explain_carries_the_blocks_the_shortfall_and_each_lever() -> None:
    report = fit_report(dep("gemma-3-27b", "rtx-4090", weights="awq-int4"), 32768,
                        EngineSettings(), target=1)
    steps = {st.label: st for st in report.steps}
    blocks = steps["blocks the pool holds"]
    assert blocks.result.value == report.pool.blocks
    short = steps["shortfall per GPU"]
    assert short.result.value * GIB == pytest.approx(report.shortfall_bytes)
    assert report.levers
    for lv in report.levers:
        lever = steps[f"lever, {lv.name}"]
        assert lever.result.value == lv.batch
        assert {i.name: i.value for i in lever.inputs} == {"conversations": lv.conversations,
                                                           "seats": lv.seats}


def test_the_fit_lever_is_what_ngl_auto_places_for_the_targets_slots(
        capsys: pytest.CaptureFixture[str]) -> None:
    """32 Mistral-7B conversations need -np 32, each slot its own window cache: --fit places
    for those 32 slots, as the lever did."""
    argv = ["fit", "mistral-7b", "--gpu", "rtx-4090", "--max-model-len", "8192",
            "--target-concurrency", "32", "--engine", "llama.cpp-cuda", "--json"]
    assert main([*argv, "-ngl", "all"]) == 0  # --fit off: the lever is what it would do
    lever = next(lv for lv in json.loads(capsys.readouterr().out)["levers"]
                 if lv["name"].startswith("llama.cpp --fit"))
    assert main([*argv, "-ngl", "auto", "--host-bandwidth-gbs", "76.8"]) == 0
    placed = json.loads(capsys.readouterr().out)
    assert (placed["conversations"], placed["engine_max_batch"]) == \
        (lever["conversations"], lever["engine_max_batch"])
    assert placed["max_num_seqs"] == 32 and placed["llama_server_c"] == 32 * 8192


def test_a_dense_model_refused_at_start_is_not_told_of_window_layers() -> None:
    report = fit_report(dep("llama-3.2-3b", "rtx-4090"), 131072,  # 0.9 and up fit it
                        EngineSettings(gpu_memory_utilization=0.896, engine_version="0.26"),
                        target=1)
    head = report.text_lines()[0]
    assert "vLLM refuses to start" in head and "window" not in head
    assert "short by 0.08 GiB" in head  # two decimals where one would read 0.1


def test_a_tpu_pool_says_it_is_sized_with_the_cuda_accounting() -> None:
    tpu = fit_report(dep("llama-3.1-8b", "tpu-v5e"), 4096, EngineSettings())
    assert any("CUDA accounting" in c for c in tpu.cautions)
    assert not any("CUDA accounting" in c
                   for c in fit_report(dep("llama-3.1-8b"), 4096, EngineSettings()).cautions)


def test_a_serving_engine_loads_the_vision_tower_llama_cpp_does_not() -> None:
    """vLLM and SGLang load a multimodal checkpoint's vision tower (Gemma-3's 0.85 GB) beside
    the text weights; vLLM's --language-model-only and llama.cpp (its mmproj is a separate
    file) do not."""
    d = dep("gemma-3-27b", "h100")
    tower = d.model.vision_params * 2
    vllm = kv_pool(d, EngineSettings(max_model_len=8192))
    text_only = kv_pool(d, EngineSettings(max_model_len=8192, language_model_only=True))
    assert vllm.weight_bytes - text_only.weight_bytes == pytest.approx(tower)
    sglang = kv_pool(dep("gemma-3-27b", "h100", engine="sglang"), EngineSettings())
    assert sglang.weight_bytes == pytest.approx(d.weight_bytes + tower)
    cpp = dep("gemma-3-27b", "h100", engine="llama.cpp-cuda", weights="q4_k_m")
    assert kv_pool(cpp, EngineSettings(max_model_len=8192)).weight_bytes <= cpp.weight_bytes
    with pytest.raises(InputError, match="vLLM's; sglang"):
        kv_pool(dep("gemma-3-27b", "h100", engine="sglang"),
                EngineSettings(language_model_only=True))


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_the_explained_pool_is_its_formula_over_its_inputs(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    """--explain's pool step repeats: TensorRT-LLM's fraction of what is free after loading
    is an input of the formula, not a silent × 0.9."""
    from tests.conftest import run_cli

    _code, out, _ = run_cli(capsys, "fit", "qwen3-30b-a3b", "--gpu", "h100", "--engine", engine,
                           "--max-model-len", "32768", "--explain", "--json")
    pool = next(s for s in json.loads(out)["explain"] if s["label"] == "KV pool per GPU")
    v = {i["name"]: i["value"] for i in pool["inputs"]}
    # the activation peak's parts: the larger of the forward pass (with a cold compile) and
    # the sampler (with the MoE workspace still held)
    parts = ("forward pass", "cold compile", "MoE workspace", "sampler") \
        if "activation peak" in v else ()
    taken = sum(value for name, value in v.items() if name not in (
        "total", "reserved fraction", "free fraction of the rest", "accounting", *parts)
        and isinstance(value, float))
    rest = v["total"] * v["reserved fraction"] - taken
    assert pool["result"]["value"] == pytest.approx(
        rest * v.get("free fraction of the rest", 1.0), rel=1e-3)
    assert ("free fraction of the rest" in v) == (engine == "trtllm")


@pytest.mark.parametrize("gpu", ["h100", "l40s"])
def test_the_explained_ridge_batch_is_the_whole_batch_the_verdict_names(
        capsys: pytest.CaptureFixture[str], gpu: str) -> None:
    """The verdict names the first whole batch past the ridge (420 on an L40S, whose ridge
    batch is 419.04); --explain's ridge batch printed 419, the fraction rounded the other way."""
    import math

    from tests.conftest import run_cli

    argv = ("fit", "llama-3.1-8b", "--gpu", gpu, "--max-model-len", "8k")
    _code, out, _ = run_cli(capsys, *argv, "--explain", "--json")
    data = json.loads(out)
    step = next(s for s in data["explain"] if s["label"] == "ridge batch")
    v = {i["name"]: i["value"] for i in step["inputs"]}
    assert step["result"]["value"] == math.ceil(v["ridge"] * v["bytes per weight"] / 2)
    assert step["result"]["value"] == math.ceil(data["batch_to_ridge"])
    _code, text, _ = run_cli(capsys, *argv)
    assert f"under the ridge ({int(step['result']['value']):,})" in text.splitlines()[0]


def test_fit_explains_a_refused_length_and_has_no_shortfall_for_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import run_cli

    _code, out, _ = run_cli(capsys, "fit", "gemma-2-9b", "--gpu", "h100", "--engine", "sglang",
                           "--max-model-len", "32768", "--explain")
    assert "conversations: none: sglang refuses --context-length 32,768 (ridgeline's" in out
    assert "shortfall" not in out
    _code, out, _ = run_cli(capsys, "fit", "gemma-2-9b", "--gpu", "h100", "--engine", "sglang",
                           "--max-model-len", "32768", "--json")
    data = json.loads(out)
    assert data["shortfall_bytes_per_gpu"] is None and "8,192 positions" in data["refusal"]


@pytest.mark.parametrize(("engine", "said"), [
    ("vllm", "vllm refuses --max-model-len 32,768, past"),
    ("sglang", "sglang refuses --context-length 32,768 (ridgeline's --max-model-len), past"),
    ("trtllm", "trtllm refuses --max_seq_len 32,768 (ridgeline's --max-model-len), past")])
def test_a_length_past_the_models_positions_is_refused_in_the_engines_own_flag(
        capsys: pytest.CaptureFixture[str], engine: str, said: str) -> None:
    """SGLang has no --max-model-len (its flag is --context-length, trtllm-serve's
    --max_seq_len): each refusal names the engine's flag, and ridgeline's beside it."""
    from tests.conftest import run_cli

    _code, out, _ = run_cli(capsys, "fit", "gemma-2-9b", "--gpu", "h100", "--engine", engine,
                            "--max-model-len", "32768")
    assert out.startswith(f"DOES NOT FIT: {said} gemma-2-9b's 8,192 positions")


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_fit_json_adds_up_as_its_table_does(capsys: pytest.CaptureFixture[str],
                                            engine: str) -> None:
    """(memory × reserved fraction − what is taken) × the free fraction of the rest (1 but
    for TensorRT-LLM) = the pool, in the JSON as in the table."""
    from tests.conftest import run_cli

    _code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                            "8192", "--engine", engine, "--json")
    d = json.loads(out)
    assert d["reserved_bytes_per_gpu"] == pytest.approx(
        d["memory_bytes_per_gpu"] * d["reserved_fraction"])
    assert (d["reserved_bytes_per_gpu"] - sum(d["taken_bytes_per_gpu"].values())) \
        * d["free_fraction_of_rest"] == pytest.approx(d["pool_bytes_per_gpu"])
    assert (d["free_fraction_of_rest"] == 1) == (engine != "trtllm")


def test_sglangs_seats_follow_its_capacity_per_context() -> None:
    """SGLang's max_running_requests: 512 per context_len of token capacity, clamped to
    2,048–4,096, at most half the capacity; before v0.5 one more. Its docs' January 2025
    notebook logged max_running_requests=2049 beside 444,500 tokens at context_len 131,072."""
    from ridgeline.sglang_memory import sglang_max_running_requests

    sglang = dep("llama-3.1-8b", engine="sglang")
    assert kv_pool(sglang, EngineSettings(engine_version="0.4")).max_num_seqs == 2049
    assert kv_pool(sglang, EngineSettings()).max_num_seqs == 2048  # 411,917 / 131,072 × 512
    assert kv_pool(sglang, EngineSettings(max_model_len=4096)).max_num_seqs == 4096
    assert kv_pool(sglang, EngineSettings(max_model_len=65536)).max_num_seqs == int(
        kv_pool(sglang, EngineSettings()).tokens / 65536 * 512)  # inside the clamp
    assert sglang_max_running_requests(3000, 4096) == 1500  # half a small pool
    assert sglang_max_running_requests(3000, 4096, given=64) == 64


def test_a_moe_forward_holds_the_fused_experts_caches_of_every_top_k_copy() -> None:
    """vLLM's fused_experts keeps, for each of a token's top-k expert copies, one buffer
    shared by the gate-up output and the down output (the larger of 2 × intermediate ÷ TP
    and hidden) beside the activated product: at TP4, Qwen3-235B-A22B (hidden 4096, experts
    of 1536, top-8) holds 8 × (4096 + 384) + 3 × 4096 bf16 values a token, where the three
    MLP tensors alone would be 8 × 3 × 384 + 3 × 4096."""
    from ridgeline.vllm_memory import activation_bytes_per_token

    model = resolve_model("qwen3-235b-a22b")
    dep = Deployment.build(model, resolve_accelerator("h100"), "fp8", num_gpus=4)
    assert activation_bytes_per_token(dep) == 2 * (8 * (4096 + 384) + 3 * 4096)
    dense = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))
    assert activation_bytes_per_token(dense) == 2 * (3 * 14336 + 3 * 4096)


def test_a_token_cap_bounds_sglangs_and_tensorrt_llms_pools() -> None:
    # SGLang --max-total-tokens: min(profiled, cap) (its _apply_token_constraints);
    # TensorRT-LLM kv_cache_config.max_tokens: "memory corresponding to the minimum"
    for engine, block in (("sglang", 1), ("trtllm", 32)):
        d = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                             engine=engine)
        free = kv_pool(d, EngineSettings(max_model_len=8192))
        capped = kv_pool(d, EngineSettings(max_model_len=8192, max_total_tokens=100_000))
        assert free.tokens > 100_000 and not free.capped
        assert capped.capped and capped.tokens == 100_000 // block * block
        assert capped.pool_bytes == pytest.approx(100_000 // block * block * 128 * 1024)
        loose = kv_pool(d, EngineSettings(max_model_len=8192, max_total_tokens=10**7))
        assert loose.tokens == free.tokens and not loose.capped  # the smaller one holds
        report = fit_report(d, 8192, EngineSettings(max_total_tokens=100_000))
        assert report.conversations == 100_000 // block * block // 8192
    with pytest.raises(InputError, match="--kv-cache-memory-bytes sets vLLM's pool"):
        kv_pool(dep("llama-3.1-8b"), EngineSettings(max_total_tokens=1000))


def test_a_pool_flag_is_refused_where_engines_are_compared_at_their_defaults(
        capsys: pytest.CaptureFixture[str]) -> None:
    for flag, value in (("--max-total-tokens", "200000"), ("--kv-cache-memory-bytes", "20G")):
        code = main(["fit", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4",
                     "--max-model-len", "32k", "--engine", "sglang,trtllm", flag, value])
        assert code == 2 and f"{flag} names one engine's settings" in capsys.readouterr().err


def test_a_pool_that_holds_none_says_why_and_names_the_way_out(
        capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM at the model's whole context on a 24 GB card refuses to start and names the longest
    # context that fits ("the estimated maximum model length is …"): fit offers it as a lever,
    # and prints no start-up advice, which vLLM never gets to log
    code = main(["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["verdict"] == DOES_NOT_FIT and report["vllm_advice"] is None
    longest = [lv for lv in report["levers"] if lv["name"].startswith("--max-model-len ")]
    assert longest and longest[0]["conversations"] == 1
    context = int(longest[0]["name"].split()[1].replace(",", ""))
    assert 8192 < context < 131_072
    # SGLang starts with a pool shorter than the context, capping a request at the pool
    sglang = dep("llama-3.1-8b", engine="sglang")
    small = kv_pool(sglang, EngineSettings(max_model_len=65_536, max_total_tokens=32_000))
    from ridgeline.capacity import no_sequence_reason, refuses_to_start

    assert not refuses_to_start(small, sglang, 65_536)
    assert "caps a request at its pool's 31,999 tokens" in no_sequence_reason(small, sglang,
                                                                              65_536)
    # a set pool past the room: the reason, and the lever that sizes it to the room
    over = kv_pool(dep("llama-3.1-8b"), EngineSettings(max_model_len=32_000,
                                                       kv_cache_memory_bytes=70 * 2**30))
    assert "overruns the room the card leaves" in no_sequence_reason(over, dep("llama-3.1-8b"),
                                                                      32_000)
    code = main(["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "32k",
                 "--kv-cache-memory-bytes", "70G", "--json"])
    names = [lv["name"] for lv in json.loads(capsys.readouterr().out)["levers"]]
    assert any(n.startswith("--kv-cache-memory-bytes ") and "the card's room" in n
               for n in names)


def test_a_pool_overflowed_by_the_graphs_names_them_not_the_profiling_pass(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The article's deployment, Llama-3.1-70B FP8 on one H100 under the LLM class: the
    weights and the profiling pass fit the 0.92 budget (vLLM 0.33); the CUDA graphs and the
    sampler's seats are what overflow it (an audit found the headline blaming the first two)."""
    from tests.conftest import run_cli
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8",
                           "--max-model-len", "2000", "--usage", "offline",
                           "--engine-version", "0.33")
    head = out.splitlines()[0]
    assert code == 0 and head.startswith("DOES NOT FIT")
    taken, budget = map(float, re.findall(r"take ([\d.]+) of the ([\d.]+) GiB", head)[0])
    assert taken < budget and "the CUDA graphs and the sampler's seats" in head
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "h100",
                           "--max-model-len", "2000")
    assert "the weights alone" in out.splitlines()[0]


def test_prefill_gives_a_throughput_where_decode_gives_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A deployment that fits the card but that vLLM would not start: prefill, as decode,
    leads with the refusal and gives no throughput; one that does not fit has none, in the
    text and in --json alike (the JSON had carried 6,960 tok/s)."""
    from tests.conftest import run_cli
    _, out, _ = run_cli(capsys, "prefill", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8",
                        "--prompt-len", "8")
    assert out.startswith("DOES NOT FIT on vLLM ")
    assert "  throughput none: vLLM would not run it (first line)" in out
    _, out, _ = run_cli(capsys, "prefill", "llama-3.1-70b", "--gpu", "h100", "--prompt-len",
                        "4000", "--json")
    assert json.loads(out)["prompt_tok_s"] is None and json.loads(out)["fits"] is False


def test_a_context_lever_is_offered_only_where_it_is_a_way_out() -> None:
    """Llama-3.1-8B on an L4 at 128K for two: 13,136 tokens hold them, a tenth of the ask, and
    is offered; Llama-3.1-70B fp8 on one H100 at 8K holds one conversation only at a few dozen
    tokens under vLLM 0.33 (0.92 of the card), which no one would serve, and is not."""
    l4 = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("l4"))
    short = fit_report(l4, 131072, EngineSettings(max_model_len=131072), target=2)
    lever = next(lv for lv in short.levers if lv.name.startswith("--max-model-len"))
    length = int(lever.name.split()[1].replace(",", ""))
    assert 131072 // 16 <= length < 131072 and lever.conversations >= 2
    h100 = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"), "fp8")
    tight = fit_report(h100, 8192, EngineSettings(max_model_len=8192, engine_version="0.33"))
    assert tight.verdict == DOES_NOT_FIT
    assert not any(lv.name.startswith("--max-model-len") for lv in tight.levers)


def test_a_batch_past_the_ridge_says_when_the_whole_step_stays_memory_bound(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B on an H100 at 1,000 tokens: 444 conversations clear the 295 ridge in
    the weights, but their private caches (58 GB) outweigh the weights (15 GB) four to one,
    and decode calls that batch memory-bound; fit now says so beside its verdict."""
    from ridgeline.cli import main

    argv = ["llama-3.1-8b", "--gpu", "h100", "--max-model-len", "1000"]
    assert main(["fit", *argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    batch = report["engine_max_batch"]
    assert report["verdict"] == "clears the ridge"
    said = [c for c in report["cautions"] if "the whole step does not" in c]
    flags = f"--batch {batch} --context 1000 --max-model-len 1000 --usage serve"
    assert len(said) == 1 and f"`ridgeline decode {flags}`" in said[0]
    # the command it names runs that batch, with fit's settings, and finds it memory-bound
    assert main(["decode", "llama-3.1-8b", "--gpu", "h100", *flags.split(), "--json"]) == 0
    point = json.loads(capsys.readouterr().out)["points"][0]
    assert point["bound"] == "memory bandwidth" and point["expected"] is not None
    assert f"read {point['kv_bytes_read'] / 1e9:,.1f} GB of KV cache" in said[0]
    # under PP the floor is a micro-batch's trip, as decode prices it
    assert main(["fit", *argv, "--num-gpus", "2", "-pp", "2", "--json"]) == 0
    piped = json.loads(capsys.readouterr().out)
    trip = next(c for c in piped["cautions"] if "the whole step does not" in c)
    assert main(["decode", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "2", "-pp", "2",
                 "--batch", str(piped["engine_max_batch"]), "--context", "1000", "--json"]) == 0
    point = json.loads(capsys.readouterr().out)["points"][0]
    assert f"read {point['kv_bytes_read'] / 1e9:,.1f} GB of KV cache" in trip
    assert f"micro-batch of {point['micro_batch']:,} conversations" in trip
    # where the cache is small beside the weights, the batch is compute-bound: no caution
    assert main(["fit", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "8",
                 "--max-model-len", "256", "--json"]) == 0
    short = json.loads(capsys.readouterr().out)
    assert short["verdict"] == "clears the ridge"
    assert not any("the whole step does not" in c for c in short["cautions"])


def test_a_pool_is_sized_once_per_deployment_and_settings() -> None:
    """kv_pool remembers a pool per (deployment, settings): equal records (built apart) read
    the same pool, the one sizing them afresh gives; other settings size their own; and a
    dict for settings is still refused by name, not hashed."""
    from dataclasses import replace

    from ridgeline.memory import _sized_pool

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100-sxm"))
    settings = EngineSettings(max_model_len=8192)
    pool = kv_pool(dep, settings)
    again = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100-sxm"))
    assert kv_pool(again, replace(settings)) is pool
    assert pool == _sized_pool(dep, settings, None)
    shorter = kv_pool(dep, replace(settings, max_model_len=4096))
    assert shorter == _sized_pool(dep, replace(settings, max_model_len=4096), None)
    assert shorter.max_num_seqs == pool.max_num_seqs and shorter is not pool
    with pytest.raises(InputError, match="settings"):
        kv_pool(dep, {"max_model_len": 8192})  # type: ignore[arg-type]
