"""Weight formats with their scales, and what stays unquantized."""

from __future__ import annotations

import re

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.errors import InputError
from ridgeline.params import count_params
from ridgeline.precision import kv_dtype, weight_bytes, weight_format, weight_plan
from ridgeline.units import GB, GIB


@pytest.mark.parametrize(
    ("name", "bits"),
    [("bf16", 16), ("FP8", 8), ("nvfp4", 4.5), ("mxfp4", 4.25), ("q8_0", 8.5), ("q4_0", 4.5),
     ("Q4_K_M", 4.84), ("awq", 4.15625)],
)
def test_bits_per_weight_include_scales(name: str, bits: float) -> None:
    assert weight_format(name).bits_per_weight == pytest.approx(bits)


def test_fp8_keeps_embeddings_and_lm_head_in_bf16() -> None:
    spec = resolve_model("llama-3.1-70b")
    params = count_params(spec)
    fp8 = weight_bytes(spec, weight_plan(spec, "fp8"))
    bf16 = sum(params.by_category[c] for c in ("embedding", "lm_head", "other"))  # norms too
    assert fp8 == pytest.approx(params.total + bf16)  # 1 byte each, one more where bf16


def test_gguf_mix_covers_every_tensor() -> None:
    spec = resolve_model("llama-2-7b")
    q4 = weight_bytes(spec, weight_plan(spec, "q4_k_m"))
    assert q4 == pytest.approx(count_params(spec).total * 4.84 / 8)


def test_gpt_oss_120b_as_stored_is_about_61_gib() -> None:
    # llama.cpp reports 59.02 GiB for the MXFP4 GGUF (validation notes); the HF checkpoint
    # keeps attention, router, embeddings and lm_head in bf16.
    spec = resolve_model("gpt-oss-120b")
    stored = weight_bytes(spec, weight_plan(spec))
    assert stored / GIB == pytest.approx(60.7, abs=1.0)


def test_w4a16_formats_run_their_matmuls_at_16_bits() -> None:
    assert weight_format("awq").compute_dtypes[0] in ("fp16", "bf16")
    assert weight_format("fp8").compute_dtypes[0] == "fp8"


def test_unknown_formats_are_refused_with_the_closest() -> None:
    with pytest.raises(InputError, match="unknown weight format"):
        weight_format("int3-magic")
    with pytest.raises(InputError, match="unknown KV-cache dtype"):
        kv_dtype("fp7")


def test_kv_dtype_aliases() -> None:
    assert kv_dtype("fp8_e4m3").bytes_per_element == 1
    assert kv_dtype("auto").bytes_per_element == 2
    assert 70e9 / GB == 70


@pytest.mark.parametrize(("model", "logged_gib"), [("gpt-oss-20b", 11.27), ("gpt-oss-120b", 59.02)])
def test_the_mxfp4_moe_gguf_is_the_size_llama_bench_reports(model: str, logged_gib: float) -> None:
    """GGUF 'MXFP4 MoE': experts in MXFP4, every other tensor Q8_0; llama-bench prints the
    file's size (validation notes, build 6918)."""
    spec = resolve_model(model)
    plan = weight_plan(spec, "mxfp4_moe")
    assert plan.format_of("experts").id == "mxfp4" and plan.format_of("attention").id == "q8_0"
    assert plan.format_of("lm_head").id == "q8_0" and plan.label == "mxfp4_moe"
    assert weight_bytes(spec, plan) / GIB == pytest.approx(logged_gib, rel=0.01)


def test_llama_cpp_counts_its_matmuls_at_16_bits_where_others_use_fp4_units() -> None:
    """llama.cpp's MMQ multiplies on int8 tensor cores or dequantizes to fp16; a Blackwell's
    fp4 units are not its rate (native MXFP4 only from PR #17906). vLLM's W4A4 NVFP4 GEMM
    uses them; its gpt-oss MoE kernel does not (bf16 activations: mxfp4_matmul)."""
    from ridgeline import Deployment, resolve_accelerator

    spec, gb10 = resolve_model("gpt-oss-20b"), resolve_accelerator("dgx-spark-gb10")
    nvfp4 = Deployment.build(resolve_model("llama-3.1-8b"), gb10, "nvfp4", engine="vllm")
    assert nvfp4.compute_dtype == "fp4"
    assert Deployment.build(spec, gb10, engine="vllm").compute_dtype == "bf16"
    assert Deployment.build(spec, gb10, engine="llama.cpp-cuda").compute_dtype in ("bf16", "fp16")


def test_a_kv_dtype_an_engine_does_not_have_is_refused() -> None:
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.errors import InputError

    model, card = resolve_model("llama-3.1-8b"), resolve_accelerator("h100")
    with pytest.raises(InputError, match=re.escape("llama.cpp-cuda has no fp8 KV cache; it "
                                                   "caches in bf16, fp16, fp32, q8_0, q4_0")):
        Deployment.build(model, card, None, "fp8", engine="llama.cpp-cuda")
    with pytest.raises(InputError, match="vllm has no q8_0 KV cache"):
        Deployment.build(model, card, None, "q8_0", engine="vllm")
    assert Deployment.build(model, card, None, "fp8", engine="sglang").kv.id == "fp8"
    mac = resolve_accelerator("apple-m2-ultra-76c")
    assert Deployment.build(model, mac, None, "q8_0", engine="llama.cpp-metal").kv.id == "q8_0"


def test_a_card_without_bf16_runs_a_bf16_checkpoint_in_fp16() -> None:
    """vLLM's dtype auto falls back to float16 below compute capability 8.0: a T4 holds
    Llama-3.1-8B's weights and cache in fp16 (the same bytes), not in a dtype it lacks."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model

    model = resolve_model("llama-3.1-8b")
    t4 = Deployment.build(model, resolve_accelerator("t4"))
    h100 = Deployment.build(model, resolve_accelerator("h100"))
    assert (t4.weights.label, t4.kv.id) == ("fp16", "fp16")
    assert (h100.weights.label, h100.kv.id) == ("bf16", "bf16")
    assert t4.weight_bytes == h100.weight_bytes


def test_a_float32_checkpoint_is_served_at_16_bits_unless_asked_for_fp32() -> None:
    """vLLM's dtype auto serves a float32 checkpoint in the platform's 16-bit type (bf16 on
    an H100, fp16 on a T4), and its KV cache follows: half the bytes of fp32. --weights fp32
    (vLLM's --dtype float32) keeps 4 bytes, and the cache follows that."""
    from dataclasses import replace

    from ridgeline import Deployment, resolve_accelerator

    bf16 = resolve_model("llama-3.1-8b")
    fp32 = replace(bf16, dtype="fp32")
    h100 = Deployment.build(fp32, resolve_accelerator("h100"))
    t4 = Deployment.build(fp32, resolve_accelerator("t4"))
    assert (h100.weights.label, h100.kv.id) == ("bf16", "bf16")
    assert (t4.weights.label, t4.kv.id) == ("fp16", "fp16")
    assert h100.weight_bytes == Deployment.build(bf16, resolve_accelerator("h100")).weight_bytes
    asked = Deployment.build(fp32, resolve_accelerator("h100"), "fp32")
    assert (asked.weights.label, asked.kv.id) == ("fp32", "fp32")
    assert asked.weight_bytes == pytest.approx(2 * h100.weight_bytes)


@pytest.mark.parametrize(("gpu", "dtype"), [("b200", "fp4"), ("h100", "bf16"), ("l40s", "bf16"),
                                            ("a100", "bf16")])
def test_nvfp4_runs_at_fp4_on_blackwell_and_weight_only_at_bf16_below_it(gpu: str,
                                                                          dtype: str) -> None:
    """Hopper and Ada have fp8 units but the engines run NVFP4 there through Marlin (W4A16),
    so its matmuls are priced at bf16, never fp8: the same as the W4A16 checkpoint."""
    from ridgeline import Deployment, resolve_accelerator

    spec = resolve_model("llama-3.1-8b")
    acc = resolve_accelerator(gpu)
    assert Deployment.build(spec, acc, "nvfp4").compute_dtype == dtype
    assert Deployment.build(spec, acc, "nvfp4-w4a16").compute_dtype == (
        "bf16" if dtype == "fp4" else dtype)


# ggml/src/ggml-common.h: 32 elements a block in an fp16 scale (2 B), an fp16 min (2 B) where
# the type has one, q5's 4 B of fifth bits and 16 B of 4-bit values
GGML_KV_BLOCK_BYTES = {"q4_1": 2 + 2 + 16, "q5_0": 2 + 4 + 16, "q5_1": 2 + 2 + 4 + 16,
                       "iq4_nl": 2 + 16}


@pytest.mark.parametrize(("kv", "block_bytes"), GGML_KV_BLOCK_BYTES.items())
def test_llama_cpp_kv_types_cost_their_ggml_block_per_32_elements(kv: str,
                                                                  block_bytes: int) -> None:
    """Llama-3.1-8B keeps 32 layers × K and V × 8 KV heads × 128 elements a token: at q5_1's
    24 bytes per 32 elements, 48 KiB, which the pool holds and a decode step reads."""
    from ridgeline import Deployment, resolve_accelerator
    from ridgeline.cost import attention_rates
    from ridgeline.kvcache import kv_footprint
    from ridgeline.units import KIB

    spec = resolve_model("llama-3.1-8b")
    dep = Deployment.build(spec, resolve_accelerator("rtx-4090"), "q4_k_m", kv,
                           engine="llama.cpp-vulkan")
    att = spec.attention
    assert att is not None
    per_token = spec.num_layers * 2 * att.num_kv_heads * att.head_dim * block_bytes / 32
    assert kv_footprint(dep.model, 1, dep.kv.bytes_per_element).bytes_per_token_growing \
        == per_token
    assert attention_rates(dep)[2] * spec.num_layers == per_token  # a step's KV read per token
    assert kv != "q5_1" or per_token == 48 * KIB


def test_llama_cpp_cuda_has_flash_attention_for_q4_0_and_q8_0_caches_only() -> None:
    """ggml-cuda/fattn.cu (HIP builds it for ROCm) reads f16, q4_0 and q8_0 K/V pairs unless
    built with GGML_CUDA_FA_ALL_QUANTS, and iq4_nl in no build: attention goes to the CPU,
    where -fa auto stops at start-up. Metal reads q4_1, q5_0 and q5_1, not iq4_nl; Vulkan all."""
    from ridgeline import Deployment, resolve_accelerator
    from ridgeline.errors import InputError

    model = resolve_model("llama-3.1-8b")
    for engine, gpu in (("llama.cpp-cuda", "rtx-4090"), ("llama.cpp-rocm", "mi300x")):
        for kv in GGML_KV_BLOCK_BYTES:
            words = "in any build" if kv == "iq4_nl" else "GGML_CUDA_FA_ALL_QUANTS=ON"
            with pytest.raises(InputError, match=f"{engine} .*{kv} caches .*{words}.*start-up"):
                Deployment.build(model, resolve_accelerator(gpu), "q4_k_m", kv, engine=engine)
    mac = resolve_accelerator("apple-m2-ultra-76c")
    for kv in ("q4_1", "q5_0", "q5_1"):
        assert Deployment.build(model, mac, "q4_k_m", kv, engine="llama.cpp-metal").kv.id == kv
    with pytest.raises(InputError, match=re.escape("llama.cpp-metal has no flash-attention "
                                                   "kernel for iq4_nl")):
        Deployment.build(model, mac, "q4_k_m", "iq4_nl", engine="llama.cpp-metal")
    card = resolve_accelerator("rtx-4090")
    assert Deployment.build(model, card, "q4_k_m", "iq4_nl",
                            engine="llama.cpp-vulkan").kv.id == "iq4_nl"
