"""llama.cpp's low-bit GGUF types: IQ1–IQ3 and TQ block layouts (ggml-common.h), the
llama-quantize file types built from them (llama-quant.cpp llama_tensor_get_type_impl), the
Unsloth dynamic names ridgeline refuses, and a .gguf given as the model."""

from __future__ import annotations

from pathlib import Path

import pytest

from ridgeline import resolve_model
from ridgeline.errors import InputError
from ridgeline.params import count_params
from ridgeline.precision import (
    check_weight_choice,
    weight_bytes,
    weight_bytes_by_category,
    weight_format,
    weight_plan,
)
from ridgeline.quantization import ATTENTION, EMBEDDING, EXPERTS, LM_HEAD, MLP, ROUTER
from tests.conftest import run_cli

QK_K = 256  # ggml's super-block
FP16 = 2  # ggml_half
U16 = 2  # uint16_t
K_SCALE_SIZE = 12

# Bytes of each block as ggml/src/ggml-common.h declares its struct, field by field.
BLOCK_BYTES = {
    "iq2_xxs-block": FP16 + QK_K // 8 * U16,  # d; qs[QK_K/8] uint16
    "iq2_xs-block": FP16 + QK_K // 8 * U16 + QK_K // 32,  # d; qs; scales[QK_K/32]
    "iq2_s-block": FP16 + QK_K // 4 + QK_K // 32 + QK_K // 32,  # d; qs; qh; scales
    "iq3_xxs-block": FP16 + 3 * QK_K // 8,  # d; qs[3*QK_K/8]
    "iq3_s-block": FP16 + QK_K // 4 + QK_K // 32 + QK_K // 8 + QK_K // 64,  # d; qs; qh; signs; scales
    "iq1_s-block": FP16 + QK_K // 8 + QK_K // 32 * U16,  # d; qs; qh[QK_K/32] uint16
    "iq1_m-block": QK_K // 8 + QK_K // 16 + QK_K // 32,  # qs; qh; scales (d packed in them)
    "tq1_0-block": (QK_K - 4 * QK_K // 64) // 5 + QK_K // 64 + FP16,  # qs (5 a byte); qh; d
    "tq2_0-block": QK_K // 4 + FP16,  # qs, 2 bits each; d
    "q2_k-block": QK_K // 16 + QK_K // 4 + 2 * FP16,  # scales; qs; d, dmin
    "q3_k-block": QK_K // 8 + QK_K // 4 + 12 + FP16,  # hmask; qs; scales; d
    "q4_k-block": 2 * FP16 + K_SCALE_SIZE + QK_K // 2,  # d, dmin; scales; qs
    "q5_k-block": 2 * FP16 + K_SCALE_SIZE + QK_K // 8 + QK_K // 2,  # d, dmin; scales; qh; qs
    "q6_k": QK_K // 2 + QK_K // 4 + QK_K // 16 + FP16,  # ql; qh; scales; d
}


def bpw(block: str) -> float:
    return BLOCK_BYTES[block] * 8 / QK_K


@pytest.mark.parametrize("block", sorted(BLOCK_BYTES))
def test_each_block_types_bits_are_its_structs_bytes_over_256_weights(block: str) -> None:
    """IQ2_XXS: an fp16 scale and 32 uint16 = 66 bytes a 256-weight block, 2.0625 bits."""
    assert weight_format(block).bits_per_weight == bpw(block)
    assert weight_format(block).applies_to == "all"


def test_iq2_xxs_keeps_embedding_output_and_router_above_its_two_bits() -> None:
    """llama-quantize's IQ2_XXS on Llama-3.1-8B: token_embd Q2_K, output Q5_K, every linear
    IQ2_XXS; the router-free dense model's norms stay at bf16 (1-D tensors are never quantized)."""
    spec = resolve_model("llama-3.1-8b")
    plan = weight_plan(spec, "iq2_xxs")
    assert plan.label == "iq2_xxs"
    assert plan.format_of(EMBEDDING).bits_per_weight == bpw("q2_k-block")
    assert plan.format_of(LM_HEAD).bits_per_weight == bpw("q5_k-block")
    for category in (ATTENTION, MLP):
        assert plan.format_of(category).bits_per_weight == bpw("iq2_xxs-block")
    assert plan.format_of(ROUTER).id == "bf16"
    params = count_params(spec).by_category
    by_category = weight_bytes_by_category(spec, plan)
    assert by_category[MLP] == pytest.approx(params[MLP] * BLOCK_BYTES["iq2_xxs-block"] / QK_K)
    assert by_category[LM_HEAD] > by_category[EMBEDDING]  # same shape, Q5_K over Q2_K


@pytest.mark.parametrize(("mix", "embedding", "head", "attention", "rest"), [
    ("iq1_s", "q2_k-block", "q5_k-block", "iq2_xxs-block", "iq1_s-block"),
    ("iq1_m", "q2_k-block", "q5_k-block", "iq2_xxs-block", "iq1_m-block"),
    ("iq2_xs", "q2_k-block", "q5_k-block", "iq2_xs-block", "iq2_xs-block"),
    ("iq2_s", "iq3_s-block", "q5_k-block", "iq3_s-block", "iq2_xs-block"),
    ("iq2_m", "iq3_s-block", "q5_k-block", "iq3_s-block", "iq2_s-block"),
    ("iq3_xxs", "iq3_s-block", "q5_k-block", "iq3_s-block", "iq3_xxs-block"),
    ("iq3_s", "iq3_s-block", "q6_k", "iq3_s-block", "iq3_s-block"),
    ("iq3_m", "iq3_s-block", "q6_k", "q4_k-block", "iq3_s-block"),
    ("tq1_0", "q4_k-block", "q6_k", "tq1_0-block", "tq1_0-block"),
])
def test_each_mix_gives_its_tensors_llama_quantizes_types(mix: str, embedding: str, head: str,
                                                           attention: str, rest: str) -> None:
    """The mixes as llama_tensor_get_type_impl picks for an untied model with no 8 experts;
    the embedding and output never fall below the experts' type."""
    plan = weight_plan(resolve_model("deepseek-r1"), mix)
    got = {c: plan.format_of(c).bits_per_weight for c in (EMBEDDING, LM_HEAD, ATTENTION, EXPERTS)}
    assert got == {EMBEDDING: bpw(embedding), LM_HEAD: bpw(head), ATTENTION: bpw(attention),
                   EXPERTS: bpw(rest)}
    assert min(got.values()) == got[EXPERTS]


def test_eight_experts_raise_attention_to_q5_k_and_a_tied_embedding_follows_the_output() -> None:
    """Mixtral (8 experts): attn_output at Q5_K under IQ2_XXS; Llama-3.2-1B shares its
    embedding with the output, which llama-quantize quantizes as the output: Q5_K."""
    mixtral = weight_plan(resolve_model("mixtral-8x7b"), "iq2_xxs")
    assert mixtral.format_of(ATTENTION).bits_per_weight == bpw("q5_k-block")
    assert mixtral.format_of(EXPERTS).bits_per_weight == bpw("iq2_xxs-block")
    tied = weight_plan(resolve_model("llama-3.2-1b"), "iq2_xxs")
    assert tied.format_of(EMBEDDING).bits_per_weight == bpw("q5_k-block")
    untied_moe = weight_plan(resolve_model("deepseek-r1"), "iq2_xxs")
    assert untied_moe.format_of(ATTENTION).bits_per_weight == bpw("iq2_xxs-block")


# Unsloth's DeepSeek-R1 GGUFs, whose attention and dense layers stay at 4–6 bits
# (unsloth.ai/blog/deepseekr1-dynamic): file parts as huggingface.co/unsloth/DeepSeek-R1-GGUF
# lists them, in GB.
UD_IQ2_XXS_GB = (49.1, 49.8, 49.8, 47.5)  # DeepSeek-R1-UD-IQ2_XXS-0000{1..4}-of-00004.gguf
UD_IQ1_S_GB = (49.3, 49.4, 41.5)  # DeepSeek-R1-UD-IQ1_S-0000{1..3}-of-00003.gguf


@pytest.mark.parametrize(("mix", "block", "published_gb"), [
    ("iq2_xxs", "iq2_xxs-block", UD_IQ2_XXS_GB),
    ("iq1_s", "iq1_s-block", UD_IQ1_S_GB),
])
def test_deepseek_r1_at_a_low_bit_mix_sits_between_its_block_floor_and_unsloths_file(
        mix: str, block: str, published_gb: tuple[float, ...]) -> None:
    """DeepSeek-R1 at IQ2_XXS: above every weight at 66 bytes per 256 (the block floor),
    under Unsloth's 196.2 GB UD-IQ2_XXS, which keeps its attention and dense layers at more
    bits, and within 15% of it (the experts, 88% of the file, are IQ2_XXS in both)."""
    spec = resolve_model("deepseek-r1")
    size = weight_bytes(spec, weight_plan(spec, mix))
    floor = count_params(spec).total * BLOCK_BYTES[block] / QK_K
    published = sum(published_gb) * 1e9
    assert floor < size < published
    assert size > 0.85 * published
    if mix == "iq2_xxs":
        assert f"{size / 1e9:.1f} GB" == "173.6 GB"  # docs/fit.md's figure


def test_kimi_k2_at_iq2_xxs_weighs_about_its_bf16_times_2_over_16_bits() -> None:
    """Kimi-K2 (1T parameters, 384 experts): IQ2_XXS stores its experts at 2.0625 of bf16's
    16 bits; the few tensors kept higher add under 5%."""
    spec = resolve_model("kimi-k2")
    low = weight_bytes(spec, weight_plan(spec, "iq2_xxs"))
    full = weight_bytes(spec, weight_plan(spec, "bf16"))
    assert low < full * (bpw("iq2_xxs-block") / 16) * 1.05


@pytest.mark.parametrize(("name", "nearest"), [
    ("ud-q2_k_xl", "q2_k"), ("UD-Q4_K_XL", "q4_k_m"), ("q4_k_xl", "q4_k_m"),
    ("UD-IQ1_S", "iq1_s"), ("ud-iq2_xxs", "iq2_xxs"), ("ud-q8_k_xl", "q8_0"),
])
def test_unsloth_dynamic_names_are_refused_with_the_mix_to_give(name: str, nearest: str) -> None:
    with pytest.raises(InputError) as refused:
        check_weight_choice(name)
    message = str(refused.value)
    assert "Unsloth dynamic quant" in message and f"--weights {nearest} " in message
    assert "\n" not in message
    check_weight_choice(nearest)  # what it names is accepted


def test_the_cli_refuses_a_dynamic_name_and_runs_the_mix_it_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ("decode", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda",
            "--batch", "1")
    code, _, err = run_cli(capsys, *base, "--weights", "ud-q2_k_xl")
    assert code == 2 and "--weights q2_k" in err and len(err.strip().splitlines()) == 1
    code, out, _ = run_cli(capsys, *base, "--weights", "iq2_xxs")
    assert code == 0 and "weights iq2_xxs" in out
    code, out, _ = run_cli(capsys, *base, "--weights", "tq1_0")
    assert code == 0 and "weights tq1_0" in out


@pytest.mark.parametrize("kind", ["present", "missing", "fetch"])
def test_a_gguf_that_cannot_be_read_says_what_to_give_instead(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str) -> None:
    """A llama.cpp user's .gguf that is not here (or with --fetch), or is cut short: one line,
    exit 2, naming what ridgeline reads instead or what is wrong with the file, not 'is not
    valid JSON' or 'unknown model'."""
    path = tmp_path / "DeepSeek-R1-IQ2_XXS.gguf"
    if kind == "present":
        path.write_bytes(b"GGUF\x03\x00\x00\x00")
    argv = ["model", str(path)] + (["--fetch"] if kind == "fetch" else [])
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "not valid JSON" not in err and "unknown model" not in err
    expected = "truncated|cut short|ends" if kind == "present" else "no such GGUF file"
    if kind != "present":
        assert "config.json" in err and "--weights" in err
    with pytest.raises(InputError, match=expected):
        resolve_model(str(path))
