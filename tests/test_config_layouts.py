"""Configs that leave a layout field out, or state one in a form ridgeline once ignored:
each reads as transformers builds it, or is refused by name. Small hand-written configs;
every expected figure is worked by hand beside it."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ridgeline.catalog import load_data, model_entry, resolve_model
from ridgeline.config_reader import spec_from_hf_config
from ridgeline.errors import InputError
from ridgeline.kvcache import attention_kv_bytes_per_token, state_elements
from ridgeline.model import ModelSpec
from ridgeline.model_types import KNOWN_MODEL_TYPES
from ridgeline.params import count_params
from ridgeline.tensor_parallel import tensor_parallel_problem
from ridgeline.units import GIB
from tests.conftest import run_cli


def spec_of(config: dict[str, Any]) -> ModelSpec:
    return spec_from_hf_config(config, "m")


def kinds(spec: ModelSpec, what: str = "mixer") -> list[str]:
    return [getattr(layer, what) for layer in spec.layers]


GPT_OSS = {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "hidden_size": 64,
           "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "intermediate_size": 32, "num_local_experts": 4,
           "num_experts_per_tok": 2, "vocab_size": 100}
QWEN3_NEXT = {"model_type": "qwen3_next", "hidden_size": 64, "num_hidden_layers": 8,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "intermediate_size": 64, "moe_intermediate_size": 16,
              "shared_expert_intermediate_size": 16, "num_experts": 4,
              "num_experts_per_tok": 2, "vocab_size": 100, "linear_num_key_heads": 2,
              "linear_num_value_heads": 4, "linear_key_head_dim": 8,
              "linear_value_head_dim": 8}
JAMBA = {"model_type": "jamba", "hidden_size": 64, "num_hidden_layers": 16,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64,
         "num_experts": 4, "num_experts_per_tok": 2, "vocab_size": 100, "mamba_d_state": 4,
         "mamba_d_conv": 4, "mamba_expand": 2}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 5,
               "num_attention_heads": 4, "intermediate_size": 128, "moe_intermediate_size": 16,
               "n_routed_experts": 8, "num_experts_per_tok": 2, "vocab_size": 100,
               "kv_lora_rank": 32, "q_lora_rank": 48, "qk_nope_head_dim": 16,
               "qk_rope_head_dim": 8, "v_head_dim": 16}
NEMOTRON_H = {"model_type": "nemotron_h", "hidden_size": 64, "num_hidden_layers": 4,
              "hybrid_override_pattern": "M*M-", "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
              "vocab_size": 100, "mamba_num_heads": 8, "mamba_head_dim": 16, "n_groups": 2,
              "ssm_state_size": 16, "conv_kernel": 4}
LLAMA4 = {"model_type": "llama4_text", "hidden_size": 64, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
          "intermediate_size": 32, "intermediate_size_mlp": 64, "num_local_experts": 4,
          "num_experts_per_tok": 1, "vocab_size": 100, "attention_chunk_size": 32,
          "interleave_moe_layer_step": 1}


# -- a layout field left out takes transformers' config-class default ---------------

def test_gpt_oss_without_layer_types_alternates_sliding_128_and_full_as_gpt_oss_config() -> None:
    """GptOssConfig: 'sliding_attention' if (i + 1) % 2 else 'full_attention', window 128.
    KV per token: 2 full layers × 2 KV heads × 16 × 2 (K, V) × 2 bytes = 256 B (it was 0 B,
    every layer read as a 128-token window)."""
    spec = spec_of(GPT_OSS)
    assert kinds(spec) == ["sliding", "full", "sliding", "full"]
    assert {layer.window_tokens for layer in spec.layers if layer.mixer == "sliding"} == {128}
    assert spec.count(mixer="full") * attention_kv_bytes_per_token(spec, 2) == 2 * 2 * 16 * 2 * 2
    # a config that names its layer_types keeps them
    stated = spec_of({**GPT_OSS, "layer_types": ["full_attention"] * 4})
    assert kinds(stated) == ["full"] * 4


def test_qwen3_next_without_an_interval_has_a_full_layer_every_fourth() -> None:
    """Qwen3NextConfig: full_attention_interval 4, so layers 3 and 7 of 8 are full attention
    and 6 are Gated DeltaNet, each holding (2·16 + 32)·(4 − 1) = 192 conv and 4·8·8 = 256
    state elements (it was 8 full layers and no state)."""
    spec = spec_of(QWEN3_NEXT)
    assert [i for i, m in enumerate(kinds(spec)) if m == "full"] == [3, 7]
    assert spec.count(mixer="linear") == 6
    linear = next(layer for layer in spec.layers if layer.mixer == "linear")
    assert state_elements(spec, linear) == ((2 * 2 * 8 + 4 * 8) * 3, 4 * 8 * 8)


def test_jamba_without_periods_puts_attention_at_4_mod_8_and_experts_on_odd_layers() -> None:
    """JambaConfig: attn_layer_period 8, offset 4; expert_layer_period 2, offset 1. 16 layers:
    attention at 4 and 12, 14 Mamba, 8 MoE (it was 16 attention layers, every one MoE)."""
    spec = spec_of(JAMBA)
    assert [i for i, m in enumerate(kinds(spec)) if m == "full"] == [4, 12]
    assert spec.count(mixer="mamba") == 14
    assert kinds(spec, "ffn") == ["dense", "moe"] * 8
    # a config that names only its period takes the offset 4 transformers gives it
    spec = spec_of({**JAMBA, "attn_layer_period": 8})
    assert [i for i, m in enumerate(kinds(spec)) if m == "full"] == [4, 12]


def test_deepseek_v3_without_first_k_or_shared_experts_takes_three_dense_and_one_shared() -> None:
    """DeepseekV3Config: first_k_dense_replace 3, n_shared_experts 1. 5 layers: 3 dense, 2
    MoE, each MoE with one shared expert of 3 × 64 × 16 weights: 2 × 3,072 = 6,144."""
    spec = spec_of(DEEPSEEK_V3)
    assert kinds(spec, "ffn") == ["dense"] * 3 + ["moe"] * 2
    assert spec.moe is not None and spec.moe.num_shared_experts == 1
    assert count_params(spec).by_category["shared_experts"] == 2 * 3 * 64 * 16
    stated = spec_of({**DEEPSEEK_V3, "first_k_dense_replace": 1, "n_shared_experts": 0})
    assert kinds(stated, "ffn") == ["dense"] + ["moe"] * 4
    assert count_params(stated).by_category["shared_experts"] == 0


def test_nemotron_h_without_its_pattern_is_refused_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No reading of a Nemotron-H config without hybrid_override_pattern matches an engine's:
    it was 4 attention layers and dense MLPs."""
    config = {k: v for k, v in NEMOTRON_H.items() if k != "hybrid_override_pattern"}
    with pytest.raises(InputError, match="hybrid_override_pattern"):
        spec_of(config)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = run_cli(capsys, "model", str(path))
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "hybrid_override_pattern" in err


def test_each_model_type_default_names_its_source() -> None:
    defaults = load_data("model_type_defaults.json")
    for model_type in ("gpt_oss", "qwen3_next", "jamba", "deepseek_v3", "gpt2", "gpt_neox",
                       "falcon", "gemma3", "cohere", "cohere2", "exaone4"):
        assert "transformers" in defaults[model_type]["_source"], model_type


# -- tensor parallelism must split the Gated DeltaNet heads -------------------------

def test_tensor_parallel_must_divide_the_linear_attention_key_and_value_heads(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM gives each rank num_k_heads // tp key heads: Qwen3.5-397B-A17B's 16 key heads
    (64 value heads) split over 16 ranks, not 32 (its 32 attention heads would)."""
    spec = resolve_model("qwen3.5-397b-a17b")
    problem = tensor_parallel_problem(spec, 32)
    assert "16 linear-attention key heads (64 value heads)" in problem
    assert "use 1, 2, 4, 8, 16 GPUs per replica" in problem
    assert tensor_parallel_problem(spec, 16) == ""
    code, out, err = run_cli(capsys, "kv", "qwen3.5-397b-a17b", "--context", "8192", "--gpu",
                             "h200", "--num-gpus", "32")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "linear-attention key heads" in err
    # a hand config: 16 attention heads split 8 ways, its 4 key heads do not
    small = spec_of({**QWEN3_NEXT, "num_attention_heads": 16, "num_key_value_heads": 16,
                     "linear_num_key_heads": 4, "linear_num_value_heads": 8})
    assert "4 linear-attention key heads (8 value heads)" in tensor_parallel_problem(small, 8)
    assert tensor_parallel_problem(small, 4) == ""


def test_tensor_parallel_must_split_mamba2_heads_and_groups(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's MambaMixer2 needs heads % tp == 0 and groups % tp == 0 unless there is one
    group: Nemotron-H-56B's 8 groups stop at TP8, where its attention would split 16 ways; a
    single-group Mamba-2 splits as far as its heads."""
    spec = resolve_model("nemotron-h-56b")
    assert tensor_parallel_problem(spec, 8) == ""
    problem = tensor_parallel_problem(spec, 16)
    assert "256 Mamba heads in 8 groups" in problem and "use 1, 2, 4, 8 GPUs" in problem
    code, out, err = run_cli(capsys, "fit", "nemotron-h-56b", "--gpu", "h100", "--num-gpus",
                             "16", "--max-model-len", "8k")
    assert code == 2 and not out and "Mamba heads" in err
    one_group = spec_of({**NEMOTRON_H, "n_groups": 1, "num_attention_heads": 16,
                         "num_key_value_heads": 16})
    assert tensor_parallel_problem(one_group, 4) == ""  # 8 heads over 4, the one group copied
    assert "Mamba heads" in tensor_parallel_problem(one_group, 16)  # 8 heads over 16: no


# -- Llama 4's explicit no_rope_layers and moe_layers -------------------------------

def test_llama4_no_rope_layers_decide_which_layers_are_chunked() -> None:
    """is_nope = no_rope_layers[i] == 0 (transformers, vLLM): a NoPE layer is global, a RoPE
    layer chunked. Without the list, every 4th layer is NoPE."""
    assert kinds(spec_of(LLAMA4)) == ["chunked", "chunked", "chunked", "full"]
    alternate = spec_of({**LLAMA4, "no_rope_layers": [1, 0, 1, 0]})
    assert kinds(alternate) == ["chunked", "full", "chunked", "full"]
    assert kinds(spec_of({**LLAMA4, "no_rope_layers": [1, 1, 1, 1]})) == ["chunked"] * 4
    assert kinds(spec_of({**LLAMA4, "no_rope_layers": []})) == kinds(spec_of(LLAMA4))


@pytest.mark.parametrize(("flags", "message"), [
    ([1, 0], "no_rope_layers has 2 flags but num_hidden_layers is 4"),
    ([1, "0", 1, 0], "no_rope_layers must be a list of 0"),
    ([1, 2, 1, 0], "no_rope_layers must be a list of 0"),
    ([1, True, 1, 0], "no_rope_layers must be a list of 0"),
    ("1010", "no_rope_layers must be a list of 0"),
])
def test_a_malformed_no_rope_layers_list_is_refused(flags: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        spec_of({**LLAMA4, "no_rope_layers": flags})


def test_llama4_moe_layers_name_the_layers_that_route_to_experts() -> None:
    """transformers' Llama4TextConfig: a layer is MoE where its number is in moe_layers.
    Layers 1 and 3 of 4: two dense MLPs of 3 × 64 × 64 = 12,288 weights each."""
    spec = spec_of({**LLAMA4, "moe_layers": [1, 3]})
    assert kinds(spec, "ffn") == ["dense", "moe", "dense", "moe"]
    assert count_params(spec).by_category["mlp"] == 2 * 3 * 64 * 64
    with pytest.raises(InputError, match="moe_layers must be a list of layer numbers"):
        spec_of({**LLAMA4, "moe_layers": [7]})


def test_scout_and_maverick_read_the_same_with_their_lists_spelled_out() -> None:
    """The published Scout and Maverick configs leave the lists to their defaults: NoPE every
    4th layer, MoE every (step)th. Spelled out, the layout and count are unchanged."""
    for name, step in (("llama-4-scout", 1), ("llama-4-maverick", 2)):
        config = copy.deepcopy(load_data(f"models/{model_entry(name).file}"))
        text = config.get("text_config", config)
        n = text["num_hidden_layers"]
        text["no_rope_layers"] = [int((i + 1) % 4 != 0) for i in range(n)]
        text["moe_layers"] = list(range(step - 1, n, step))
        spelled, bundled = spec_from_hf_config(config, name), resolve_model(name)
        assert spelled.layers == bundled.layers
        assert count_params(spelled).total == count_params(bundled).total


# -- head geometry no engine can build ----------------------------------------------

def test_mamba2_heads_must_split_into_its_groups() -> None:
    assert spec_of(NEMOTRON_H).mamba is not None
    with pytest.raises(InputError, match=r"mamba_num_heads \(8\) is not a multiple of "
                                         r"n_groups \(3\)"):
        spec_of({**NEMOTRON_H, "n_groups": 3})


def test_gated_deltanet_value_heads_must_be_a_multiple_of_its_key_heads() -> None:
    with pytest.raises(InputError, match=r"linear_num_value_heads \(3\) is not a multiple of "
                                         r"linear_num_key_heads \(2\)"):
        spec_of({**QWEN3_NEXT, "linear_num_value_heads": 3})


# -- model_type is a string ---------------------------------------------------------

@pytest.mark.parametrize("kind", [5, ["llama"], {"a": 1}, 1.5, True])
def test_a_model_type_that_is_not_a_string_is_refused(
        kind: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = copy.deepcopy(load_data("models/meta-llama--Llama-3.2-1B.json"))
    with pytest.raises(InputError, match="model_type must be a string"):
        spec_of({**config, "model_type": kind})
    with pytest.raises(InputError, match="model_type must be a string"):  # nested too
        spec_of({"model_type": "llava", "text_config": {**config, "model_type": kind}})
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "model_type": kind}))
    code, out, err = run_cli(capsys, "model", str(path))
    assert code == 2 and not out and "model_type must be a string" in err


def test_an_unknown_model_type_string_is_still_read_with_a_caution() -> None:
    config = copy.deepcopy(load_data("models/meta-llama--Llama-3.2-1B.json"))
    spec = spec_of({**config, "model_type": "frobnicator"})
    assert "which ridgeline has not checked" in spec.architecture_caution


# -- the ungated-MLP families ridgeline calls checked -------------------------------

def per_layer_with_biases(h: int) -> int:
    """One GPT-2 / GPT-NeoX block: QKV h·3h + 3h, out h·h + h, up h·4h + 4h, down 4h·h + h,
    two LayerNorms of 2h."""
    return (h * 3 * h + 3 * h) + (h * h + h) + (h * 4 * h + 4 * h) + (4 * h * h + h) + 2 * 2 * h


def test_gpt2_small_counts_its_position_table_and_biases_to_the_published_total() -> None:
    """openai-community/gpt2: wte 50,257 × 768 (tied head), wpe 1,024 × 768, 12 blocks,
    final LayerNorm: 124,439,808, the published total (it was 123,570,432)."""
    h = 768
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": h,
              "n_head": 12, "n_layer": 12, "vocab_size": 50257, "n_inner": None}
    spec = spec_of(config)  # n_positions left out: GPT2Config's 1,024
    expected = 50257 * h + 1024 * h + 12 * per_layer_with_biases(h) + 2 * h
    assert count_params(spec).total == expected == 124_439_808
    assert spec.max_position_embeddings == 1024
    assert spec.architecture_caution == ""  # GPT2LMHeadModel is gpt2's own family


def test_pythia_160m_counts_its_biases_to_the_published_total() -> None:
    """EleutherAI/pythia-160m (gpt_neox): embed_in and embed_out 50,304 × 768, 12 blocks with
    biases (attention_bias true by default), final LayerNorm: 162,322,944."""
    h = 768
    config = {"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"],
              "hidden_size": h, "num_hidden_layers": 12, "num_attention_heads": 12,
              "intermediate_size": 3072, "vocab_size": 50304, "rotary_pct": 0.25,
              "tie_word_embeddings": False, "use_parallel_residual": True,
              "max_position_embeddings": 2048, "torch_dtype": "float16"}
    expected = 2 * 50304 * h + 12 * per_layer_with_biases(h) + 2 * h
    assert count_params(spec_of(config)).total == expected == 162_322_944
    no_bias = spec_of({**config, "attention_bias": False})
    assert count_params(no_bias).total == expected - 12 * (3 * h + h)


def test_opt_and_bloom_are_not_called_checked() -> None:
    """Neither is read field by field (OPT's ffn_dim, BLOOM's unnamed 4 × hidden FFN): a
    config that reads at all carries the not-checked caution."""
    assert not {"opt", "bloom"} & KNOWN_MODEL_TYPES
    opt = {"model_type": "opt", "architectures": ["OPTForCausalLM"], "hidden_size": 768,
           "num_hidden_layers": 12, "num_attention_heads": 12, "ffn_dim": 3072,
           "n_inner": 3072, "vocab_size": 50272, "max_position_embeddings": 2048}
    assert "model_type 'opt', which ridgeline has not checked" in spec_of(opt).architecture_caution
    counts = Counter(kinds(spec_of(opt)))
    assert counts == Counter(full=12)


# -- interleaved sliding windows, read by sliding_window_pattern as transformers does --

# Command R7B's shape (CohereForAI/c4ai-command-r7b-12-2024): 32 layers, GQA 32/8, head 128
COHERE2 = {"model_type": "cohere2", "architectures": ["Cohere2ForCausalLM"],
           "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 256000,
           "max_position_embeddings": 131072, "sliding_window": 4096,
           "sliding_window_pattern": 4}


def test_cohere2_keeps_every_fourth_layer_global_as_its_config_class_builds_them() -> None:
    """Cohere2Config: 'sliding_attention' if (i + 1) % sliding_window_pattern else
    'full_attention'. At 128K: 8 global layers × 4 KiB × 131,072 = 4 GiB, and 24 windowed ×
    4 KiB × 4,096 = 384 MiB: 4.375 GiB a conversation. Every layer was read as windowed
    (Mistral v0.1's reading): 512 MiB, 8.75× too little."""
    spec = spec_of(COHERE2)
    assert [i for i, kind in enumerate(kinds(spec)) if kind == "full"] == [3, 7, 11, 15, 19, 23,
                                                                          27, 31]
    per_layer = attention_kv_bytes_per_token(spec, 2)  # 2 × 8 heads × 128 × 2 B = 4 KiB
    assert per_layer == 2 * 8 * 128 * 2
    assert (spec.count(mixer="full"), spec.count(mixer="sliding")) == (8, 24)
    assert {layer.window_tokens for layer in spec.layers if layer.mixer == "sliding"} == {4096}


def test_cohere2_per_sequence_kv_at_128k_counts_its_global_layers(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(COHERE2))
    code, out, err = run_cli(capsys, "kv", str(path), "--context", "131072", "--memory-gib",
                             "100", "--json")
    assert code == 0, err
    report = json.loads(out)
    by_kind = {row["kind"]: row for row in report["layer_kinds"]}
    assert by_kind["full attention"]["tokens_kept"] == 131072
    assert by_kind["sliding window"]["tokens_kept"] == 4096
    assert report["bytes_per_sequence"] == sum(r["bytes_at_context"] for r in by_kind.values())
    assert report["bytes_per_sequence"] / GIB == 4.375


@pytest.mark.parametrize(("model_type", "pattern", "global_layers"), [
    ("exaone4", 4, [3, 7]),  # Exaone4Config: the same rule, default 4
    ("gemma3_text", 6, [5]),  # Gemma 3: 5 local, then 1 global
    ("frobnicator", 2, [1, 3, 5, 7]),  # any config that states the field: the same rule
])
def test_sliding_window_pattern_is_read_alike_in_every_family(
        model_type: str, pattern: int, global_layers: list[int]) -> None:
    spec = spec_of({**COHERE2, "model_type": model_type, "num_hidden_layers": 8,
                    "sliding_window_pattern": pattern})
    assert [i for i, kind in enumerate(kinds(spec)) if kind == "full"] == global_layers


def test_layer_types_outrank_sliding_window_pattern_as_in_transformers() -> None:
    """Cohere2Config builds layer_types from the pattern only where the config has none."""
    stated = ["sliding_attention", "full_attention"] * 16
    spec = spec_of({**COHERE2, "layer_types": stated})
    assert kinds(spec) == ["sliding", "full"] * 16


@pytest.mark.parametrize("model_type", ["cohere2", "exaone4", "gemma3_text"])
def test_a_null_pattern_is_refused_not_read_as_every_layer_windowed(model_type: str) -> None:
    """A pattern left out takes the family's default (test_config_cohere2.py); one set to
    null names no layout (transformers' configs fail dividing by it), so it is refused."""
    with pytest.raises(InputError, match="sets it to null and gives no layer_types"):
        spec_of({**COHERE2, "model_type": model_type, "sliding_window_pattern": None})


@pytest.mark.parametrize("pattern", ["LLXG", "", 0, True, 2.5])
def test_a_sliding_window_pattern_that_is_not_a_layer_count_is_refused(pattern: Any) -> None:
    with pytest.raises(InputError, match="sliding_window_pattern must be a whole number"):
        spec_of({**COHERE2, "sliding_window_pattern": pattern})


def test_exaone4s_letter_pattern_lays_out_windows_with_the_last_layer_global() -> None:
    """EXAONE 4's "LLLG": L windowed, G global, by layer i's letter pattern[i % 4]; the last
    layer global whatever its letter (TensorRT-LLM's check_is_sliding)."""
    spec = spec_of({**COHERE2, "model_type": "exaone4", "num_hidden_layers": 10,
                    "sliding_window_pattern": "LLLG"})
    assert [i for i, kind in enumerate(kinds(spec)) if kind == "full"] == [3, 7, 9]


def test_the_private_pattern_transformers_saves_beside_layer_types_is_read() -> None:
    """transformers 4.53+ saves Gemma 3 configs with _sliding_window_pattern (gemma-3-270m):
    read as sliding_window_pattern, not refused as an unknown window field."""
    base = {k: v for k, v in COHERE2.items() if k != "sliding_window_pattern"}
    alone = spec_of({**base, "model_type": "gemma3_text", "num_hidden_layers": 12,
                     "_sliding_window_pattern": 6})
    assert [i for i, kind in enumerate(kinds(alone)) if kind == "full"] == [5, 11]
    stated = ["sliding_attention"] * 5 + ["full_attention"]
    beside = spec_of({**base, "model_type": "gemma3_text", "num_hidden_layers": 12,
                      "_sliding_window_pattern": 6, "layer_types": stated * 2})
    assert kinds(beside) == kinds(alone)


@pytest.mark.parametrize(("extra", "named"), [
    # MiMo-V2-Flash: 1 marks a windowed layer, whose heads differ from the global ones'
    ({"hybrid_layer_pattern": [0, 1, 1, 1] * 8}, "hybrid_layer_pattern"),
    ({"swa_num_key_value_heads": 4}, "swa_num_key_value_heads"),
    ({"interleaved_sliding_window": 4096}, "interleaved_sliding_window"),
])
def test_a_window_field_ridgeline_does_not_read_is_refused_by_name(
        extra: dict[str, Any], named: str) -> None:
    base = {k: v for k, v in COHERE2.items() if k != "sliding_window_pattern"}
    with pytest.raises(InputError, match=f"does not read the window field {named}, so"):
        spec_of({**base, "model_type": "mistral", **extra})


def test_an_unread_window_field_left_off_is_no_reason_to_refuse() -> None:
    """MiMo-style flags set false or null say nothing: Mistral's every-layer window stands."""
    base = {k: v for k, v in COHERE2.items() if k != "sliding_window_pattern"}
    spec = spec_of({**base, "model_type": "mistral", "add_swa_attention_sink_bias": False,
                    "swa_head_dim": None})
    assert set(kinds(spec)) == {"sliding"}


@pytest.mark.parametrize("model_type", ["cohere2", "gemma3_text"])
def test_a_pattern_with_its_window_set_to_null_windows_nothing(model_type: str) -> None:
    """"sliding_window": null leaves the pattern's 'sliding' layers no window to keep (their
    attention takes config.sliding_window, None): every layer holds the whole context. A
    Gemma 3 config saying so was refused as having no sliding_window."""
    spec = spec_of({**COHERE2, "model_type": model_type, "sliding_window": None})
    assert set(kinds(spec)) == {"full"}


# -- architectures is a list of class names -------------------------------------------

@pytest.mark.parametrize("classes", ["LlamaForCausalLM", [5], {"a": 1}, 7])
def test_architectures_that_are_not_a_list_of_names_are_refused(
        classes: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = copy.deepcopy(load_data("models/meta-llama--Llama-3.2-1B.json"))
    assert spec_of(config).architecture == config["architectures"][0]  # the list form reads
    with pytest.raises(InputError, match="architectures must be a list of class names"):
        spec_of({**config, "architectures": classes})
    with pytest.raises(InputError, match="architectures must be a list of class names"):
        spec_of({"model_type": "llava", "text_config": {**config, "architectures": classes}})
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "architectures": classes}))
    code, out, err = run_cli(capsys, "fit", str(path), "--gpu", "h100", "--max-model-len", "4096")
    assert code == 2 and not out and "architectures must be a list" in err


def test_an_encoder_named_by_a_bare_string_is_refused_not_read_as_a_decoder() -> None:
    """{"architectures": "BertForMaskedLM"} without model_type was read as a nameless decoder;
    the list form is refused as an encoder, and the string form is now refused too."""
    bert = {"hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 12,
            "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512}
    with pytest.raises(InputError, match="is an encoder"):
        spec_of({**bert, "architectures": ["BertForMaskedLM"]})
    with pytest.raises(InputError, match="architectures must be a list"):
        spec_of({**bert, "architectures": "BertForMaskedLM"})
