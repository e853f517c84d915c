"""Cohere v1 configs (model_type "cohere": Command R, Command R+, Aya Expanse) read as
transformers reads them: attention and MLP in parallel off one bias-less LayerNorm, tied
embeddings unless the config unties them, logit_scale a constant, and Command R+'s
use_qk_norm a LayerNorm weight for every query and key head. The counts are pinned to the
safetensors totals that leaderboard request files list, in billions to three decimals
(open-llm-leaderboard/requests: Command R+ 103.811, Aya Expanse 8.028 and 32.296; Command
R's 34.981 from eduagarcia-temp/llm_pt_leaderboard_requests), and to the cards' size classes
within test_model.py's tolerance.

Shapes from the HF config.json copies of CohereForAI/c4ai-command-r-v01 (TechxGenus AWQ,
prince-canuma 4-bit), c4ai-command-r-plus (alpindale GPTQ, amd FP8-KV, FriendliAI FP8) and
aya-expanse-8b / 32b (kevinbazira AWQ, minyichen FP8): every copy names the original and
agrees on these fields. None of them states tie_word_embeddings, so CohereConfig's default,
tied, applies.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.config_reader import spec_from_hf_config
from ridgeline.context_length import positions_label, served_positions
from ridgeline.datafiles import model_type_defaults
from ridgeline.kvcache import attention_kv_bytes_per_token, kv_footprint
from ridgeline.model import ModelSpec
from ridgeline.params import count_params, qk_norm_params
from ridgeline.units import GIB, MIB
from tests.conftest import run_cli
from tests.test_model import card_figure

COHERE: dict[str, Any] = {
    "model_type": "cohere", "architectures": ["CohereForCausalLM"], "vocab_size": 256000,
    "layer_norm_eps": 1e-05, "attention_bias": False, "use_qk_norm": False,
    "torch_dtype": "bfloat16"}
COMMAND_R: dict[str, Any] = {  # c4ai-command-r-v01: 64 query heads, 64 KV heads (MHA)
    **COHERE, "hidden_size": 8192, "intermediate_size": 22528, "num_hidden_layers": 40,
    "num_attention_heads": 64, "num_key_value_heads": 64, "logit_scale": 0.0625,
    "max_position_embeddings": 8192, "model_max_length": 131072, "rope_theta": 8000000.0}
COMMAND_R_PLUS: dict[str, Any] = {  # c4ai-command-r-plus: GQA and per-head QK norms
    **COHERE, "hidden_size": 12288, "intermediate_size": 33792, "num_hidden_layers": 64,
    "num_attention_heads": 96, "num_key_value_heads": 8, "logit_scale": 0.8333333333333334,
    "max_position_embeddings": 8192, "model_max_length": 131072, "rope_theta": 75000000.0,
    "use_qk_norm": True}
AYA_EXPANSE_8B: dict[str, Any] = {
    **COHERE, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "logit_scale": 0.125,
    "max_position_embeddings": 8192, "rope_theta": 10000}
AYA_EXPANSE_32B: dict[str, Any] = {
    **COHERE, "hidden_size": 8192, "intermediate_size": 24576, "num_hidden_layers": 40,
    "num_attention_heads": 64, "num_key_value_heads": 8, "logit_scale": 0.0625,
    "max_position_embeddings": 8192, "rope_theta": 4000000}
VOCAB = 256000
KV_BYTES = 2  # bf16


def spec_of(config: dict[str, Any]) -> ModelSpec:
    return spec_from_hf_config(config, "m")


def total(config: dict[str, Any]) -> int:
    return count_params(spec_of(config)).total


def layer_params(h: int, heads: int, kv_heads: int, ffn: int, qk_norm: int = 0) -> int:
    """One Cohere layer: q and o h × h, k and v h × kv_heads × 128, a gated MLP of three
    h × ffn matrices, one input norm of h (no bias) and any QK norm weights."""
    attention = h * h + 2 * h * kv_heads * 128 + h * h
    return attention + 3 * h * ffn + h + qk_norm


def within_the_size_class(count: int, card: str) -> bool:
    """test_model.py's tolerance for a card that names a size class: 5%, or half the last
    printed digit."""
    figure, half_digit = card_figure(card)
    return abs(count - figure) <= max(0.05 * figure, half_digit)


def rounds_to(count: int, listed_billions: float) -> bool:
    """A leaderboard request file's figure: the safetensors total in billions, to three
    decimals."""
    return abs(count / 1e9 - listed_billions) <= 0.0005


def test_command_r_counts_34_981_billion_its_cards_35b() -> None:
    """Tied embedding 256,000 × 8,192 = 2,097,152,000; a layer: attention 4 × 8,192² =
    268,435,456 (MHA: k and v as wide as q), MLP 3 × 8,192 × 22,528 = 553,648,128, one norm
    8,192: 822,091,776, × 40 = 32,883,671,040; a final norm 8,192: 34,980,831,232. A
    leaderboard lists 34.981 (CohereForAI/c4ai-command-r-v01); the card says 35 billion."""
    expected = VOCAB * 8192 + 40 * layer_params(8192, 64, 64, 22528) + 8192
    assert total(COMMAND_R) == expected == 34_980_831_232
    assert rounds_to(expected, 34.981)
    assert within_the_size_class(expected, "35B")


def test_command_r_plus_counts_103_811_billion_its_cards_104b() -> None:
    """Tied embedding 256,000 × 12,288 = 3,145,728,000; a layer: attention 2 × 12,288² + 2 ×
    12,288 × 1,024 = 327,155,712, MLP 3 × 12,288 × 33,792 = 1,245,708,288, one norm 12,288,
    QK norms (96 + 8) × 128 = 13,312: 1,572,889,600, × 64 = 100,664,934,400; a final norm
    12,288: 103,810,674,688. The leaderboard lists 103.811; the card says 104B."""
    qk = (96 + 8) * 128
    expected = VOCAB * 12288 + 64 * layer_params(12288, 96, 8, 33792, qk) + 12288
    assert total(COMMAND_R_PLUS) == expected == 103_810_674_688
    assert rounds_to(expected, 103.811)
    assert within_the_size_class(expected, "104B")


def test_command_r_plus_norms_every_query_and_key_head_apart() -> None:
    """CohereAttention's q_norm and k_norm are LayerNorms over (heads, head_dim): 13,312
    weights a layer, not the 2 × 128 of a norm shared by the heads (Qwen3's). Shared, the
    total would be 103,809,839,104, which the leaderboard's 103.811 does not round from;
    without the norms it is 103,809,822,720."""
    spec = spec_of(COMMAND_R_PLUS)
    assert spec.attention is not None
    assert qk_norm_params(spec.attention) == (96 + 8) * 128
    without = total({**COMMAND_R_PLUS, "use_qk_norm": False})
    assert total(COMMAND_R_PLUS) - without == 64 * (96 + 8) * 128
    shared = without + 64 * 2 * 128
    assert not rounds_to(shared, 103.811) and rounds_to(total(COMMAND_R_PLUS), 103.811)


def test_aya_expanse_8b_counts_8_028_billion() -> None:
    """Embedding 256,000 × 4,096 = 1,048,576,000 (tied); a layer 41,943,040 attention,
    176,160,768 MLP, 4,096 norm; × 32, a final norm: 8,028,033,024, the leaderboard's 8.028
    and Command R7B's count (the same shapes, as cohere2)."""
    expected = VOCAB * 4096 + 32 * layer_params(4096, 32, 8, 14336) + 4096
    assert total(AYA_EXPANSE_8B) == expected == 8_028_033_024
    assert rounds_to(expected, 8.028)
    assert within_the_size_class(expected, "8B")


def test_aya_expanse_32b_counts_32_296_billion() -> None:
    """Embedding 2,097,152,000 (tied); a layer 150,994,944 attention, 603,979,776 MLP, 8,192
    norm; × 40, a final norm: 32,296,476,672, the leaderboard's 32.296."""
    expected = VOCAB * 8192 + 40 * layer_params(8192, 64, 8, 24576) + 8192
    assert total(AYA_EXPANSE_32B) == expected == 32_296_476_672
    assert rounds_to(expected, 32.296)
    assert within_the_size_class(expected, "32B")


@pytest.mark.parametrize("config", [COMMAND_R, COMMAND_R_PLUS, AYA_EXPANSE_8B],
                         ids=["command-r", "command-r-plus", "aya-expanse-8b"])
def test_a_cohere_layer_is_one_bias_less_norm_feeding_attention_and_mlp(
        config: dict[str, Any]) -> None:
    """CohereDecoderLayer has only input_layernorm, read by attention and MLP in parallel;
    CohereLayerNorm has a weight and no bias. It was read as two RMSNorms a layer, with an
    untied head and the not-checked caution."""
    spec = spec_of(config)
    assert spec.parallel_block and spec.norms_per_layer == 1 and not spec.layer_norm
    assert spec.tie_word_embeddings
    assert spec.architecture_caution == ""


def test_an_untied_cohere_config_adds_the_head() -> None:
    """CohereConfig ties by default (model_type_defaults.json); a config that unties adds
    an lm_head of vocab × hidden = 256,000 × 8,192."""
    assert model_type_defaults("cohere")["tie_word_embeddings"] is True
    untied = total({**COMMAND_R, "tie_word_embeddings": False})
    assert untied - total(COMMAND_R) == VOCAB * 8192


def test_logit_scale_multiplies_the_logits_and_weighs_nothing() -> None:
    """CohereForCausalLM keeps logit_scale as a number, not a parameter."""
    assert total({**COMMAND_R_PLUS, "logit_scale": 1.0}) == total(COMMAND_R_PLUS)
    no_scale = {k: v for k, v in COMMAND_R_PLUS.items() if k != "logit_scale"}
    assert total(no_scale) == total(COMMAND_R_PLUS)


@pytest.mark.parametrize(("model_type", "extra"), [
    ("cohere", {}), ("cohere2", {"sliding_window": 4096})])
def test_a_cohere_config_without_positions_takes_transformers_8192(
        model_type: str, extra: dict[str, Any]) -> None:
    """CohereConfig and Cohere2Config default max_position_embeddings to 8192; a config
    that leaves it out read as None (no context limit)."""
    config = {k: v for k, v in AYA_EXPANSE_8B.items() if k != "max_position_embeddings"}
    spec = spec_of({**config, **extra, "model_type": model_type})
    assert spec.max_position_embeddings == 8192


def test_command_r_keeps_eight_times_command_r_plus_kv_per_token() -> None:
    """Command R's 64 KV heads: 2 (K, V) × 64 × 128 × 2 B = 32 KiB a token a layer, × 40 =
    1.25 MiB a token, 10 GiB at its 8,192 positions. Command R+'s 8: 4 KiB × 64 layers =
    256 KiB a token, 2 GiB at 8,192."""
    r, plus = spec_of(COMMAND_R), spec_of(COMMAND_R_PLUS)
    assert attention_kv_bytes_per_token(r, KV_BYTES) == 2 * 64 * 128 * KV_BYTES
    assert attention_kv_bytes_per_token(plus, KV_BYTES) == 2 * 8 * 128 * KV_BYTES
    r_seq = kv_footprint(r, 8192, KV_BYTES).bytes_per_sequence
    plus_seq = kv_footprint(plus, 8192, KV_BYTES).bytes_per_sequence
    assert r_seq == 40 * 32 * 1024 * 8192 and r_seq / GIB == 10
    assert plus_seq / GIB == 2 and r_seq / 8192 / MIB == 1.25


def test_command_r_plus_reads_through_the_cli(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(COMMAND_R_PLUS))
    code, out, err = run_cli(capsys, "model", str(path), "--json")
    assert code == 0, err
    assert json.loads(out)["params_total"] == total(COMMAND_R_PLUS)


@pytest.mark.parametrize("model_type", ["gemma2", "gemma3_text", "falcon", "gpt2", "cohere",
                                        "cohere2"])
def test_families_tied_by_default_take_it_from_model_type_defaults(model_type: str) -> None:
    """model_type_defaults.json alone says which families tie where a config is silent, or
    sets the key to null; a Llama-shaped config of the same fields stays untied."""
    assert model_type_defaults(model_type)["tie_word_embeddings"] is True
    config = {**AYA_EXPANSE_8B, "model_type": model_type, "architectures": [],
              "sliding_window": 4096}
    assert spec_of(config).tie_word_embeddings
    assert spec_of({**config, "tie_word_embeddings": None}).tie_word_embeddings
    assert not spec_of({**config, "tie_word_embeddings": False}).tie_word_embeddings
    assert "tie_word_embeddings" not in model_type_defaults("llama")
    assert not spec_of({**config, "model_type": "llama"}).tie_word_embeddings


SERVING = ("vllm", "sglang", "trtllm", "llama.cpp-cuda")


def test_command_r_serves_the_128k_its_model_max_length_states_in_every_engine() -> None:
    """Command R's config states 8,192 max_position_embeddings beside model_max_length 131,072
    (its card: a 128K context). vLLM takes model_max_length over every other length key
    (_get_and_verify_max_len), SGLang reads it before max_position_embeddings
    (get_context_length), and llama.cpp's converter writes it as Cohere's n_ctx_train
    (CommandR2Model): each serves 131,072 by default. It had been read as 8,192. Aya Expanse
    states no model_max_length: its 8,192 positions stand."""
    for config in (COMMAND_R, COMMAND_R_PLUS):
        spec = spec_of(config)
        assert spec.max_position_embeddings == 8192
        for engine in SERVING:
            assert served_positions(spec, engine) == config["model_max_length"], engine
            assert positions_label(spec, engine) == "model_max_length"
    aya = spec_of(AYA_EXPANSE_8B)
    assert aya.model_max_length is None
    assert {served_positions(aya, e) for e in SERVING} == {aya.max_position_embeddings} == {8192}
    assert positions_label(aya, "vllm") == "max_position_embeddings"


def test_model_max_length_rules_vllm_for_any_family_and_llama_cpp_for_cohere_alone() -> None:
    """vLLM's override is not Cohere's alone, and it replaces the positions rather than
    taking the shorter: a Llama-shaped config stating model_max_length 4,096 beside 8,192
    positions serves 4,096 under vLLM and SGLang, and its 8,192 under llama.cpp, whose
    converter reads model_max_length for Cohere alone. A linear rope factor stretches
    model_max_length in vLLM as it stretches the positions."""
    llama = spec_of({**AYA_EXPANSE_8B, "model_type": "llama",
                     "architectures": ["LlamaForCausalLM"], "model_max_length": 4096})
    assert served_positions(llama, "vllm") == served_positions(llama, "sglang") == 4096
    assert served_positions(llama, "llama.cpp-cuda") == llama.max_position_embeddings == 8192
    stretched = spec_of({**COMMAND_R, "rope_scaling": {"type": "linear", "factor": 2}})
    assert served_positions(stretched, "vllm") == 2 * COMMAND_R["model_max_length"]
    assert positions_label(stretched, "vllm") == "model_max_length 131,072 × rope_scaling " \
                                                   "linear factor 2"


def test_fit_defaults_command_r_to_its_model_max_length(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`fit` without --max-model-len takes the context the engines default to: Command R's
    131,072, said as model_max_length; 100,000 tokens were refused as past 8,192 positions."""
    (tmp_path / "command-r").mkdir()
    path = tmp_path / "command-r" / "config.json"  # the model goes by its folder's name
    path.write_text(json.dumps(COMMAND_R))
    code, out, err = run_cli(capsys, "fit", str(path), "--gpu", "h200", "--num-gpus", "2")
    assert code == 0, err
    assert out.splitlines()[0].startswith(
        "--max-model-len not given: 131,072, command-r's model_max_length, as vLLM, SGLang and "
        "TensorRT-LLM default it")
    code, out, err = run_cli(capsys, "fit", str(path), "--gpu", "h200", "--num-gpus", "2",
                             "--max-model-len", "100000")
    assert code == 0, err
    assert "refuses" not in out and out.startswith("fits")
    code, out, err = run_cli(capsys, "fit", str(path), "--gpu", "h200", "--num-gpus", "2",
                             "--max-model-len", "140000")
    assert "past command-r's 131,072 positions (model_max_length)" in out


def test_command_rs_long_prompts_are_judged_against_the_context_the_engines_serve(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`attention` (no engine), `kv` and `roofline` (vLLM's) caution a prompt past Command R's
    served 131,072 (model_max_length), not past its 8,192 max_position_embeddings: 32,768
    tokens had been cautioned as past an 8,192-token context."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(COMMAND_R))
    served = served_positions(spec_of(COMMAND_R), "vllm")
    assert served is not None and served > COMMAND_R["max_position_embeddings"]
    for tokens in (4 * COMMAND_R["max_position_embeddings"], served + 1):
        for argv in (("attention", "--model", str(path), "--context", str(tokens)),
                     ("kv", str(path), "--context", str(tokens)),
                     ("roofline", "--gpu", "h100", "--model", str(path), "--prompt-len",
                      str(tokens))):
            code, out, err = run_cli(capsys, *argv, "--json")
            assert code == 0, err
            cautions = [c for c in json.loads(out)["cautions"] if "context" in c]
            if tokens <= served:
                assert cautions == [], argv
            else:
                assert len(cautions) == 1 and cautions[0].startswith(f"{tokens:,} tokens")
                assert f"{served:,}-token context (model_max_length)" in cautions[0], argv
