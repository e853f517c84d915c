"""Model specs from every bundled config: geometry, layer kinds, parameter counts."""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgeline.catalog import load_data, model_entries, model_entry, resolve_model
from ridgeline.config_reader import spec_from_hf_config
from ridgeline.errors import InputError
from ridgeline.model import ModelSpec
from ridgeline.params import count_params

ENTRIES = model_entries()
IDS = [e.id for e in ENTRIES]


def card_figure(text: str) -> tuple[float, float]:
    """'70.6B' -> (70.6e9, 0.05e9): the figure and half a unit of its last printed digit."""
    match = re.fullmatch(r"(\d+(?:\.(\d+))?)([BT])", text)
    assert match, text
    scale = 1e9 if match.group(3) == "B" else 1e12
    decimals = len(match.group(2) or "")
    return float(match.group(1)) * scale, 0.5 * 10**-decimals * scale


@pytest.mark.parametrize("model_id", IDS)
def test_total_params_match_the_model_card(model_id: str) -> None:
    entry = model_entry(model_id)
    total = count_params(resolve_model(model_id)).total
    card, half_digit = card_figure(entry.card_total_params)
    if entry.card_kind == "exact":
        assert total == pytest.approx(card, rel=0.01)
    else:
        # The card names a size class ("7B", "70B") or counts parts this text-only config
        # lacks (vision tower, MTP layer): the exact recount below is the real pin.
        assert abs(total - card) <= max(0.05 * card, half_digit)


@pytest.mark.parametrize("model_id", [e.id for e in ENTRIES if e.reference_total_params])
def test_total_params_equal_the_independent_recount(model_id: str) -> None:
    entry = model_entry(model_id)
    assert count_params(resolve_model(model_id)).total == entry.reference_total_params


@pytest.mark.parametrize("model_id", [e.id for e in ENTRIES if e.hf_reported_total_params])
def test_the_hub_s_total_is_kept_apart_from_the_card_s_words(model_id: str) -> None:
    """phi-4's card says "14B"; the Hub's 14.7B is the safetensors recount rounded, so it sits
    under hf_reported_total_params, rounds the independent recount (SOURCES.md's) to its last
    digit, and is never what the card figure or its "exact" check stands on."""
    entry = model_entry(model_id)
    assert entry.hf_reported_total_params is not None and entry.reference_total_params
    hub, half_digit = card_figure(entry.hf_reported_total_params)
    assert abs(entry.reference_total_params - hub) <= half_digit
    assert entry.card_kind == "size-class"
    assert entry.card_total_params != entry.hf_reported_total_params


def test_model_prints_the_card_s_own_figure_not_the_hub_s(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`ridgeline model phi-4` printed "(card: 14.7B)", the Hub's count, where the card says 14B;
    the listing's "parameters (card)" column likewise."""
    from tests.conftest import run_cli

    for entry in (e for e in ENTRIES if e.hf_reported_total_params):
        code, out, _ = run_cli(capsys, "model", entry.id)
        assert code == 0
        assert f"(card: {entry.card_total_params})" in out
        assert f"(card: {entry.hf_reported_total_params}" not in out
    code, out, _ = run_cli(capsys, "model")
    rows = {line.split()[0]: line.split()[-1] for line in out.splitlines() if line.strip()}
    assert all(rows[e.id] == e.card_total_params for e in ENTRIES if e.hf_reported_total_params)


@pytest.mark.parametrize("model_id", [e.id for e in ENTRIES if e.card_active_params])
def test_active_params_match_the_card(model_id: str) -> None:
    entry = model_entry(model_id)
    params = count_params(resolve_model(model_id))
    active = params.active
    if entry.card_active_convention == "without-input-embedding":
        active -= params.embedding
    if entry.card_active_convention == "without-embedding-and-head":
        active -= params.embedding + params.by_category["lm_head"]
    assert entry.card_active_params is not None
    card, half_digit = card_figure(entry.card_active_params)
    # Cards round active counts to two digits ("37B", "3.3B"): 3% or half the last digit.
    assert abs(active - card) <= max(0.03 * card, half_digit)
    if entry.reference_active_params:
        assert params.active == entry.reference_active_params


def test_every_model_parses_with_consistent_layers() -> None:
    for entry in ENTRIES:
        spec = resolve_model(entry.id)
        assert spec.num_layers > 0
        if spec.attention:
            assert spec.attention.num_heads % spec.attention.num_kv_heads == 0


def mixers(model_id: str) -> Counter[str]:
    return Counter(layer.mixer for layer in resolve_model(model_id).layers)


def test_gpt_oss_alternates_sliding_128_and_full_attention() -> None:
    spec = resolve_model("gpt-oss-120b")
    assert [layer.mixer for layer in spec.layers[:4]] == ["sliding", "full", "sliding", "full"]
    assert {layer.window_tokens for layer in spec.layers if layer.mixer == "sliding"} == {128}
    assert spec.attention is not None and spec.attention.head_dim == 64  # not 2880 / 64
    assert spec.hidden_size == 2880


def test_gemma_3_is_five_local_layers_to_one_global() -> None:
    spec = resolve_model("gemma-3-27b")
    assert mixers("gemma-3-27b") == Counter(sliding=52, full=10)
    assert spec.layers[5].mixer == "full" and spec.layers[4].mixer == "sliding"
    assert spec.vocab_size == 262208  # a transformers default, absent from the file


def test_gemma_2_alternates_local_and_global() -> None:
    assert mixers("gemma-2-9b") == Counter(sliding=21, full=21)


def test_mistral_v0_1_slides_every_layer_over_4096_tokens() -> None:
    spec = resolve_model("mistral-7b")
    assert {(layer.mixer, layer.window_tokens) for layer in spec.layers} == {("sliding", 4096)}


def test_qwen2_5_sliding_window_is_off_as_its_config_says() -> None:
    assert mixers("qwen2.5-7b") == Counter(full=28)


def test_llama_4_uses_chunked_attention_on_three_of_four_layers() -> None:
    spec = resolve_model("llama-4-scout")
    assert mixers("llama-4-scout") == Counter(chunked=36, full=12)
    assert {layer.window_tokens for layer in spec.layers if layer.mixer == "chunked"} == {8192}


def test_llama_4s_chunk_is_reported_as_a_chunk_not_a_sliding_window() -> None:
    """model llama-4-scout said "36 chunked attention (window 8192)" and --json put 8192 under
    sliding_window_tokens: a chunked layer's query sees its own chunk, not the 8,192 keys
    before it."""
    from ridgeline.reports.model import model_report

    for name in ("llama-4-scout", "gemma-3-27b"):
        spec = resolve_model(name)
        report = model_report(spec)
        data = report.to_dict()
        chunks = {layer.window_tokens for layer in spec.layers if layer.mixer == "chunked"}
        slides = {layer.window_tokens for layer in spec.layers if layer.mixer == "sliding"}
        assert data["attention_chunk_tokens"] == sorted(chunks)
        assert data["sliding_window_tokens"] == sorted(slides)
        text = "\n".join(report.text_lines())
        for tokens in chunks:
            assert f"chunked attention (chunk {tokens})" in text
        # the KV lines too: Llama 4's chunked layers hold their chunks, not windows
        assert ("window" in text.split("KV per token", 1)[1]) == bool(slides), name
        for tokens in slides:
            assert f"sliding-window (window {tokens})" in text
    assert model_report(resolve_model("llama-4-scout")).to_dict()["sliding_window_tokens"] == []


def test_llama_4_maverick_interleaves_moe_and_dense_layers() -> None:
    ffn = Counter(layer.ffn for layer in resolve_model("llama-4-maverick").layers)
    assert ffn == Counter(moe=24, dense=24)


def test_qwen3_next_is_three_linear_attention_layers_per_full_one() -> None:
    spec = resolve_model("qwen3-next-80b-a3b")
    assert mixers("qwen3-next-80b-a3b") == Counter(linear=36, full=12)
    assert spec.linear_attention is not None
    assert spec.attention is not None and spec.attention.output_gate


def test_qwen3_6_reads_nested_text_config_and_layer_types() -> None:
    spec = resolve_model("qwen3.6-35b-a3b")
    assert mixers("qwen3.6-35b-a3b") == Counter(linear=30, full=10)
    assert spec.moe is not None and spec.moe.num_experts == 256
    assert spec.moe.experts_per_token == 8 and spec.moe.num_shared_experts == 1


def test_a_jamba_offset_past_its_period_is_refused() -> None:
    config = {**copy.deepcopy(load_data("models/ai21labs--AI21-Jamba-1.5-Mini.json")),
              "attn_layer_offset": 100}
    with pytest.raises(InputError, match="attn_layer_offset 100 must be below its period 8"):
        spec_from_hf_config(config, "jamba")


def test_jamba_has_one_attention_layer_in_eight_and_moe_on_odd_layers() -> None:
    spec = resolve_model("jamba-1.5-mini")
    assert mixers("jamba-1.5-mini") == Counter(mamba=28, full=4)
    assert spec.layers[4].mixer == "full"
    assert [layer.ffn for layer in spec.layers[:4]] == ["dense", "moe", "dense", "moe"]
    assert spec.mamba is not None and spec.mamba.version == 1


def test_nemotron_h_pattern_has_54_mamba_10_attention_54_mlp_blocks() -> None:
    spec = resolve_model("nemotron-h-56b")
    assert mixers("nemotron-h-56b") == Counter(mamba=54, full=10, none=54)
    assert spec.mamba is not None and spec.mamba.version == 2


def test_deepseek_v3_is_mla_with_three_dense_layers_first() -> None:
    spec = resolve_model("deepseek-v3")
    att = spec.attention
    assert att is not None and att.mla is not None and att.kind == "MLA"
    assert (att.mla.kv_lora_rank, att.mla.qk_rope_head_dim) == (512, 64)
    assert [layer.ffn for layer in spec.layers[:4]] == ["dense", "dense", "dense", "moe"]
    assert spec.mtp_layers == 1
    assert spec.stored_format_map["experts"] == "fp8-block"


def test_kimi_k2_has_one_dense_layer_first() -> None:
    spec = resolve_model("kimi-k2")
    assert [layer.ffn for layer in spec.layers[:2]] == ["dense", "moe"]


def test_falcon_multi_query_has_one_kv_head_and_a_4x_mlp() -> None:
    spec = resolve_model("falcon-7b")
    assert spec.attention is not None and spec.attention.kind == "MQA"
    assert spec.dense_mlp is not None and spec.dense_mlp.intermediate_size == 4 * 4544


def test_gpt_oss_stores_only_its_experts_in_mxfp4() -> None:
    formats = resolve_model("gpt-oss-120b").stored_format_map
    assert formats["experts"] == "mxfp4"
    assert "attention" not in formats and "router" not in formats


def test_qwen3_6_nvfp4_checkpoint_keeps_attention_fp8_and_experts_nvfp4() -> None:
    formats = resolve_model("qwen3.6-35b-a3b").stored_format_map
    assert formats["experts"] == "nvfp4-w4a16"
    assert formats["attention"] == "fp8" and formats["linear_attention"] == "fp8"


def test_tied_embeddings_are_counted_once() -> None:
    tied = resolve_model("llama-3.2-1b")
    assert tied.tie_word_embeddings
    params = count_params(tied)
    assert params.by_category["lm_head"] == 0
    assert params.by_category["embedding"] == tied.vocab_size * tied.hidden_size


def test_names_resolve_by_alias_hf_id_and_path(tmp_path: Any) -> None:
    assert resolve_model("meta-llama/Llama-3.1-70B").name == "llama-3.1-70b"
    assert resolve_model("Llama-3.1-70B").name == "llama-3.1-70b"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(load_data("models/meta-llama--Llama-3.2-1B.json")))
    assert count_params(resolve_model(str(path))).total == 1_235_814_400
    assert count_params(resolve_model(str(tmp_path))).total == 1_235_814_400


def test_a_llama_3_1_repo_under_its_former_name_resolves_as_the_hub_redirects_it() -> None:
    """meta-llama/Meta-Llama-3.1-8B-Instruct, the name vLLM's and many guides' examples
    still use, was unknown, its closest guess Llama 3's llama-3-8b."""
    from ridgeline.catalog import hub_id

    assert resolve_model("meta-llama/Meta-Llama-3.1-8B-Instruct").name == "llama-3.1-8b-instruct"
    assert resolve_model("Meta-Llama-3.1-70B-Instruct").name == "llama-3.1-70b"
    assert resolve_model("meta-llama/Meta-Llama-3.1-405B").name == "llama-3.1-405b"
    # plan launches the repo by the name it has now
    assert hub_id("meta-llama/Meta-Llama-3.1-70B-Instruct") == "meta-llama/Llama-3.1-70B-Instruct"


@pytest.mark.parametrize(("name", "first"), [
    ("mistral-7b-instruct", "mistral-7b"), ("qwen2.5-7b-instruct", "qwen2.5-7b"),
    ("llama-3.1-8bb", "llama-3.1-8b")])
def test_an_unknown_model_names_its_own_family_first(name: str, first: str) -> None:
    """'mistral-7b-instruct' suggested falcon-7b first (its alias falcon-7b-instruct shares
    more letters), mistral-7b fourth."""
    with pytest.raises(InputError, match=rf"closest: {re.escape(first)},"):
        resolve_model(name)


def test_ambiguous_and_unknown_models_name_the_closest() -> None:
    with pytest.raises(InputError, match="ambiguous"):
        resolve_model("llama-3.1")
    with pytest.raises(InputError, match="unknown model"):
        resolve_model("no-such-model-anywhere")


BASE = load_data("models/meta-llama--Llama-3.1-8B.json")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_attention_heads": 0}, "num_attention_heads"),
        ({"num_key_value_heads": 3}, "multiple"),
        ({"hidden_size": -4096}, "hidden_size"),
        ({"num_hidden_layers": "32"}, "whole number"),
        ({"vocab_size": None}, "vocab_size"),
        ({"hidden_size": 4097, "head_dim": None}, "multiple"),
        ({"quantization_config": {"quant_method": "hqq"}}, "not supported"),
        ({"quantization_config": {"quant_method": "bitsandbytes",
                                  "bnb_4bit_quant_storage": "float16"}}, "uint8 only"),
        ({"layer_types": ["full_attention", "weird"]}, "unknown layer type"),
        ({"torch_dtype": "float99"}, "not a dtype a checkpoint is stored in"),
        # a falsy torch_dtype of the wrong type was read as absent: bf16, silently
        ({"torch_dtype": 0}, "torch_dtype 0 is not a dtype a checkpoint is stored in"),
        ({"torch_dtype": []}, r"torch_dtype \[\] is not a dtype"),
        ({"torch_dtype": {}}, r"torch_dtype \{\} is not a dtype"),
        ({"torch_dtype": ""}, "torch_dtype '' is not a dtype"),
        ({"torch_dtype": False}, "torch_dtype False is not a dtype"),
        ({"torch_dtype": None, "dtype": 0}, "torch_dtype 0 is not a dtype"),
        ({"hidden_size": 10**400}, "at most 2,147,483,647"),
        ({"quantization_config": {"quant_method": "gptq", "bits": 0}}, "0-bit"),
        ({"quantization_config": {"quant_method": "awq", "bits": "4"}},
         r"bits must be a whole number"),
        ({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": "128"}},
         r"group_size must be a whole number"),
        ({"quantization_config": {"quant_method": "fp8", "weight_block_size": "x"}},
         r"weight_block_size must be two whole numbers"),
        ({"qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "kv_lora_rank": None},
         "DeepSeek's attention without its latent KV"),
        ({"rope_scaling": "yarn"}, "rope_scaling must be a JSON object"),
        ({"rope_scaling": {"factor": 4}}, "rope_scaling has no type or rope_type"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": -8,
                           "original_max_position_embeddings": 8192}},
         "rope_scaling's factor must be a positive number"),
        ({"rope_scaling": {"rope_type": "linear", "factor": float("nan")}},
         "rope_scaling's factor must be a positive number"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4,
                           "original_max_position_embeddings": "32k"}},
         "original_max_position_embeddings must be a whole number"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 1e9,
                           "original_max_position_embeddings": 8192}}, "stretches 8,192"),
    ],
)
def test_bad_configs_get_a_message_naming_the_problem(change: dict[str, Any], message: str) -> None:
    config = {**copy.deepcopy(BASE), **change}
    config = {k: v for k, v in config.items() if v is not None}
    with pytest.raises(InputError, match=message):
        spec_from_hf_config(config, "bad")


@pytest.mark.parametrize("experts", [0, None])
def test_an_moe_architecture_without_experts_is_refused_not_read_as_dense(
        experts: int | None) -> None:
    config = {**copy.deepcopy(BASE), "model_type": "mixtral",
              "architectures": ["MixtralForCausalLM"], "num_experts_per_tok": 2}
    if experts is not None:
        config["num_local_experts"] = experts
    with pytest.raises(InputError, match="routes each token to experts"):
        spec_from_hf_config(config, "bad")
    # a dense architecture without experts is dense
    assert not spec_from_hf_config({**copy.deepcopy(BASE), "num_experts": 0}, "ok").is_moe


def test_an_expert_width_of_its_own_is_required_where_the_architecture_has_one() -> None:
    """Qwen3-MoE sizes its experts by moe_intermediate_size (768 for Qwen3-30B-A3B) beside a
    dense intermediate_size (6,144): a config without the first is refused, not read as
    experts eight times wider. Mixtral's experts are intermediate_size wide, and stay so."""
    config = next(c for c in CONFIGS if c.get("model_type") == "qwen3_moe")
    spec = spec_from_hf_config(config, "qwen3")
    assert spec.moe is not None
    assert spec.moe.expert_intermediate_size == config["moe_intermediate_size"]
    missing = {k: v for k, v in config.items() if k != "moe_intermediate_size"}
    with pytest.raises(InputError, match="sizes its experts by moe_intermediate_size"):
        spec_from_hf_config(missing, "bad")
    with pytest.raises(InputError, match="sizes its experts by moe_intermediate_size"):
        spec_from_hf_config({**config, "moe_intermediate_size": None}, "null")  # not 233B
    mixtral = spec_from_hf_config(
        {**copy.deepcopy(BASE), "model_type": "mixtral", "architectures": ["MixtralForCausalLM"],
         "num_local_experts": 8, "num_experts_per_tok": 2}, "mixtral")
    assert mixtral.moe is not None
    assert mixtral.moe.expert_intermediate_size == BASE["intermediate_size"]


def test_truncated_config_file_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(BASE)[:200])
    with pytest.raises(InputError, match="not valid JSON"):
        resolve_model(str(path))
    path.write_text("[1, 2, 3]")
    with pytest.raises(InputError, match="JSON object"):
        resolve_model(str(path))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10**6) | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6),
                                                                      children, max_size=4),
    max_leaves=8,
)
CONFIGS = [load_data(f"models/{e.file}") for e in ENTRIES]


@settings(max_examples=300, deadline=None)
@given(
    index=st.integers(0, len(CONFIGS) - 1),
    drop=st.lists(st.text(min_size=1, max_size=40), max_size=3),
    keys=st.lists(st.sampled_from(sorted({k for c in CONFIGS for k in c})), max_size=4),
    values=st.lists(json_values, min_size=4, max_size=4),
)
def test_fuzzed_configs_parse_or_raise_input_error(
    index: int, drop: list[str], keys: list[str], values: list[Any]
) -> None:
    config = copy.deepcopy(CONFIGS[index])
    for key in drop:
        config.pop(key, None)
    for key in list(config)[: len(drop)]:
        config.pop(key)
    for key, value in zip(keys, values, strict=False):
        config[key] = value
    try:
        spec = spec_from_hf_config(config, "fuzz")
    except InputError:
        return
    params = count_params(spec)  # a parsed spec must also count without crashing
    assert params.total > 0


def test_an_absurd_layer_count_is_refused_not_allocated() -> None:
    """Found by the config fuzz: 4,994,427,557 layers used to build a list until memory ran out."""
    config = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 4_994_427_557, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 256}
    with pytest.raises(InputError, match="num_hidden_layers must be at most 10,000"):
        spec_from_hf_config(config, "huge")
    assert spec_from_hf_config({**config, "num_hidden_layers": 10_000}, "big").num_layers == 10_000


def test_a_torch_prefixed_dtype_is_read() -> None:
    config = {**copy.deepcopy(BASE), "torch_dtype": "torch.float16"}
    assert spec_from_hf_config(config, "prefixed").dtype == "fp16"


def test_explain_multiplies_the_parameters_by_the_article_bytes() -> None:
    from ridgeline.reports.model import model_report

    report = model_report(resolve_model("llama-3.1-70b"))
    for bpp, gb in ((2, 141.1), (1, 70.55), (0.5, 35.28)):
        st = next(s for s in report.steps if s.label == f"weights at {bpp:g} B/param")
        assert st.result.value == pytest.approx(gb, abs=0.01)
        assert st.result.value == pytest.approx(
            next(i.value for i in st.inputs if i.name == "total") * bpp)


def test_a_vision_tower_is_counted_apart_from_the_text_model() -> None:
    """Gemma-3's SigLIP-So400m tower is 428 M parameters (its card); Qwen2-VL's ViT 675 M
    (its paper), read from embed_dim and mlp_ratio. The text model's count is unchanged, and
    a tower described some other way is left at 0 rather than refusing the model."""
    gemma = resolve_model("gemma-3-27b")
    assert gemma.vision_params == pytest.approx(428e6, rel=0.02)
    assert resolve_model("llama-3.1-8b").vision_params == 0
    base = copy.deepcopy(load_data("models/meta-llama--Llama-3.1-8B.json"))
    qwen2_vl = {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                "hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2,
                "temporal_patch_size": 2}
    spec = spec_from_hf_config({**base, "vision_config": qwen2_vl}, "t")
    assert spec.vision_params == pytest.approx(675e6, rel=0.01)
    assert count_params(spec).total == count_params(
        spec_from_hf_config(base, "t")).total
    assert spec_from_hf_config({**base, "vision_config": {"hidden_size": 8}},
                               "t").vision_params == 0


def test_gpt_oss_reads_the_biases_of_only_the_experts_a_token_is_sent_to() -> None:
    params = count_params(resolve_model("gpt-oss-120b"))
    biases = params.by_category["expert_bias"]
    assert biases == 36 * 128 * (2 * 2880 + 2880)  # gate_up (2F) and down (h) per expert
    assert params.by_category["other"] < biases  # norms, sinks and attention biases stay apart
    routed = params.by_category["experts"] + biases
    assert params.active == round(params.total - routed + routed * 4 / 128)
    # the card's 5.1B leaves out the input embedding; all 128 experts' biases would make it 5.17B
    assert (params.active - params.embedding) / 1e9 == pytest.approx(5.133, abs=5e-4)


def test_falcon_7b_takes_the_2048_positions_transformers_gives_it() -> None:
    """tiiuae/falcon-7b's config.json has no max_position_embeddings; FalconConfig defaults
    to 2,048, its training context."""
    assert resolve_model("falcon-7b").max_position_embeddings == 2048


def test_an_architecture_ridgeline_has_not_checked_is_read_with_a_caution(tmp_path: Any) -> None:
    base = copy.deepcopy(load_data("models/meta-llama--Llama-3.1-8B.json"))
    base.update(model_type="foobar", architectures=["FooBarForCausalLM"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(base))
    spec = resolve_model(str(path))
    assert "model_type 'foobar', which ridgeline has not checked" in spec.architecture_caution
    assert count_params(spec).total == count_params(resolve_model("llama-3.1-8b")).total
    # every bundled config reads quietly, Llama-4's with their vision_config among them
    assert not [m for m in IDS if resolve_model(m).architecture_caution]
    # a multimodal config stripped to its text_config is cautioned: its tower goes uncounted
    text_only = copy.deepcopy(load_data("models/meta-llama--Llama-4-Scout-17B-16E-Instruct.json"))
    del text_only["vision_config"]
    stripped = spec_from_hf_config(text_only, "scout-text")
    assert stripped.vision_params == 0
    assert "carries no vision_config" in stripped.architecture_caution


def test_an_unknown_model_type_is_cautioned_with_what_it_was_priced_as() -> None:
    """A model_type ridgeline does not know is priced from its config's shapes, and the
    caution says as what: the layers, width, heads and MLP it read."""
    base = copy.deepcopy(load_data("models/meta-llama--Llama-3.1-8B.json"))
    base.update(model_type="foobar", architectures=["FooBarForCausalLM"])
    spec = spec_from_hf_config(base, "foo")
    caution = spec.architecture_caution
    attention, mlp = spec.attention, spec.dense_mlp
    assert attention is not None and mlp is not None
    assert f"priced from its config's fields as {spec.read_as}" in caution
    assert spec.read_as.startswith(f"a dense decoder of {spec.num_layers} layers of width "
                                   f"{spec.hidden_size:,}")
    assert f"{attention.num_heads} query heads over {attention.num_kv_heads} KV heads" \
        in spec.read_as and f"a gated MLP of {mlp.intermediate_size:,}" in spec.read_as
    moe = spec_from_hf_config({**copy.deepcopy(load_data(
        "models/mistralai--Mixtral-8x7B-v0.1.json")), "model_type": "foomoe"}, "foomoe")
    assert moe.read_as.startswith("an MoE decoder") and "8 experts, 2 a token" in moe.read_as


# plan's caution is the model's, whatever its checks find (plan.py): the search unsimulated
@pytest.mark.usefixtures("unsimulated")
def test_a_config_listing_no_architectures_is_priced_by_model_type_with_a_caution(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """architectures [] (or absent) under a known model_type: priced as that model_type's
    layout, the same parameters, with a caution that the engines pick by architecture; every
    command that prices it says so (decode, prefill, fit, simulate, plan)."""
    from tests.conftest import run_cli

    base = copy.deepcopy(load_data("models/meta-llama--Llama-3.1-8B.json"))
    base["architectures"] = []
    path = tmp_path / "config.json"
    path.write_text(json.dumps(base))
    spec = resolve_model(str(path))
    assert not spec.architectures_named and spec.model_type == "llama"
    assert "lists no architectures" in spec.architecture_caution
    assert "priced as a llama model" in spec.architecture_caution
    assert count_params(spec).total == count_params(resolve_model("llama-3.1-8b")).total
    del base["architectures"]
    assert "lists no architectures" in spec_from_hf_config(base, "x").architecture_caution
    assert resolve_model("llama-3.1-8b").architectures_named
    load = ("--input-len", "100", "--output-len", "100")
    for argv in (("decode", "--gpu", "h100"), ("prefill", "--gpu", "h100", "--prompt-len", "1000"),
                 ("fit", "--gpu", "h100"),
                 ("simulate", "--gpu", "h100", "--rate", "1", *load, "--num-requests", "20"),
                 ("plan", "--gpu", "h100", "--max-gpus", "1", "--slo-ttft-ms", "1000",
                  "--slo-tpot-ms", "50", "--rate", "1", *load)):
        code, out, err = run_cli(capsys, argv[0], str(path), *argv[1:])
        assert code == 0, (argv, err)
        assert "lists no architectures" in out + err, argv


def test_a_known_model_type_under_an_unknown_architecture_is_cautioned(tmp_path: Any) -> None:
    """Engines pick their implementation by architecture; ridgeline reads model_type. A name
    of the model_type's own family (Gemma3ForCausalLM for gemma3_text) passes quietly."""
    def spec(model_type: str, architecture: str) -> Any:
        base = copy.deepcopy(load_data("models/meta-llama--Llama-3.1-8B.json"))
        base.update(model_type=model_type, architectures=[architecture])
        path = tmp_path / "config.json"
        path.write_text(json.dumps(base))
        return resolve_model(str(path))

    odd = spec("llama", "FooForCausalLM").architecture_caution
    assert "architecture 'FooForCausalLM'" in odd and "read as a llama model" in odd
    assert not spec("llama", "LlamaForCausalLM").architecture_caution
    # a bundled architecture under another model_type, a near name of another family
    assert spec("llama", "Qwen3MoeForCausalLM").architecture_caution
    assert spec("qwen2", "Qwen2MoeForCausalLM").architecture_caution
    # its own family's name passes; only the missing vision_config is cautioned
    family = spec("qwen3_5", "Qwen3_5ForConditionalGeneration").architecture_caution
    assert "which no config ridgeline ships names" not in family
    assert "carries no vision_config" in family


def test_model_without_a_name_lists_the_bundled_models(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`ridgeline model` lists what a name can resolve to, and an unrelated name points there
    rather than at five names picked by the alphabet."""
    import json

    from ridgeline.catalog import model_entries
    from ridgeline.cli import main

    assert main(["model", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["models"]
    assert {m["id"] for m in listed} == {e.id for e in model_entries()}
    kinds = {m["id"]: m["kind"] for m in listed}
    assert kinds["llama-3.1-8b"] == "dense" and kinds["mixtral-8x7b"] == "MoE 8 × 2"
    assert kinds["nemotron-h-56b"] == "dense; full + mamba"
    assert main(["model", "zzz"]) == 2
    assert "`ridgeline model` lists them" in capsys.readouterr().err
    assert main(["model", "someorg/some-model"]) == 2
    assert "--fetch reads its config.json" in capsys.readouterr().err


def test_each_engine_reads_its_serving_context_from_rope_scaling_its_own_way() -> None:
    """Qwen3-8B (40,960 positions) given the YaRN block Qwen's card gives for 131,072 tokens:
    vLLM derives original_max_position_embeddings × factor = 131,072; SGLang keeps 40,960
    (it ignores the factor where the block names the original length); llama.cpp's
    n_ctx_train is the config's own. A linear ×2 with no original length doubles the
    positions in both. Llama 3's and Gemma 3's stated positions already count theirs."""
    from ridgeline.context_length import positions_label, served_positions

    qwen = resolve_model("qwen3-8b")
    assert qwen.max_position_embeddings == 40_960 and qwen.rope_scaling is None
    config = load_data(f"models/{model_entry('qwen3-8b').file}")
    yarn = spec_from_hf_config({**config, "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32_768}},
        "qwen3-yarn")
    assert served_positions(yarn, "vllm") == 131_072
    assert positions_label(yarn, "vllm") == ("original_max_position_embeddings 32,768 × "
                                             "rope_scaling yarn factor 4")
    assert served_positions(yarn, "sglang") == 40_960
    assert served_positions(yarn, "llama.cpp-cuda") == 40_960
    linear = spec_from_hf_config({**BASE, "rope_scaling": {"type": "linear",
                                                           "factor": 2}}, "linear")
    assert served_positions(linear, "vllm") == served_positions(linear, "sglang") == 262_144
    for name, positions in (("llama-3.1-8b", 131_072), ("deepseek-v3", 163_840),
                            ("gpt-oss-120b", 131_072), ("gemma-3-27b", 131_072)):
        spec = resolve_model(name)
        assert spec.rope_scaling is not None
        assert {served_positions(spec, e) for e in ("vllm", "sglang")} == {positions}, name


@pytest.mark.parametrize(("config", "what"), [
    ({"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 768,
      "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
      "vocab_size": 30522}, "is an encoder"),
    ({"model_type": "t5", "d_model": 512, "num_layers": 6, "num_heads": 8, "d_ff": 2048,
      "vocab_size": 32128, "is_encoder_decoder": True}, "is an encoder-decoder model"),
    ({"model_type": "xlm-roberta", "hidden_size": 768}, "is an encoder"),
    ({"model_type": "clip", "text_config": {"model_type": "clip_text_model"}}, "is an encoder"),
    ({"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24,
      "vocab_size": 50280}, "pure recurrent"),
    # no model_type: the class name says what it is (it had been read as a 160M decoder)
    ({"architectures": ["BertForMaskedLM"], "hidden_size": 768, "num_hidden_layers": 12,
      "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522},
     r"architecture 'BertForMaskedLM' \(a bert model; the config has no model_type\) is an "
     "encoder"),
    ({"architectures": ["XLMRobertaModel"], "hidden_size": 768}, "is an encoder"),
    ({"architectures": ["T5ForConditionalGeneration"], "d_model": 512}, "encoder-decoder"),
    # a class name is text, not a template; a flag alone still names what it is
    ({"architectures": ["BertForMasked{LM}"], "hidden_size": 768},
     r"architecture 'BertForMasked\{LM\}' \(a bert model"),
    ({"architectures": ["SomethingNew"], "is_encoder_decoder": True, "hidden_size": 768},
     r"architecture 'SomethingNew' \(is_encoder_decoder: true\) is an encoder-decoder"),
    ({"is_encoder_decoder": True, "hidden_size": 768},
     r"its config \(is_encoder_decoder: true\) is an encoder-decoder"),
])
def test_a_model_that_is_not_a_decoder_llm_is_refused_by_name(config: dict[str, Any],
                                                               what: str) -> None:
    """BERT read as a decoder was 160M parameters with a KV cache it does not have; a T5 or
    a Mamba failed on a field it never had. Each is named for what it is."""
    with pytest.raises(InputError, match=what):
        spec_from_hf_config(config, "m")


def test_gpt2_reads_its_library_defaults() -> None:
    """openai-community/gpt2's config leaves n_inner null (4 × hidden) and tie_word_embeddings
    out (tied, the library default): 124,439,808 parameters, its published total, with the
    learned position table (1,024 × 768) and every Conv1D's bias."""
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 768,
              "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257,
              "n_inner": None}
    spec = spec_from_hf_config(config, "gpt2")
    assert spec.layers[0].ffn == "dense" and spec.tie_word_embeddings
    assert count_params(spec).total == 124_439_808
    assert count_params(spec).embedding == (50257 + 1024) * 768


def test_an_all_window_model_reports_what_its_windows_hold(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Mistral-7B's 32 layers all slide over 4,096 tokens: nothing grows per token, and a
    sequence holds at most 32 layers × 4,096 tokens × 8 KV heads × 128 × 2 (K, V) × 2 bytes."""
    from ridgeline.cli import main
    assert main(["model", "mistral-7b", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kv_bytes_per_token_bf16"] == 0
    assert data["kv_windowed_bytes_per_sequence_max_bf16"] == 32 * 4096 * 8 * 128 * 2 * 2
    assert main(["model", "mistral-7b"]) == 0
    assert "at most 512 MiB bf16 per sequence, once its 32 windowed layers hold their windows" \
        in capsys.readouterr().out
    assert main(["model", "llama-3.1-8b", "--json"]) == 0  # no windows: none held
    assert json.loads(capsys.readouterr().out)["kv_windowed_bytes_per_sequence_max_bf16"] == 0


def test_more_kv_heads_than_query_heads_is_named_as_such() -> None:
    config = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2,
              "num_attention_heads": 32, "num_key_value_heads": 64, "intermediate_size": 8192,
              "vocab_size": 1000}
    with pytest.raises(InputError, match=r"num_key_value_heads \(64\) exceeds "
                                         r"num_attention_heads \(32\)"):
        spec_from_hf_config(config, "m")


def test_the_classmethod_reads_a_config_as_the_reader_does() -> None:
    # ModelSpec.from_hf_config is the public route (STYLE.md); it must build the same spec
    # and refuse the same bad input as config_reader's function.
    config = copy.deepcopy(BASE)
    assert ModelSpec.from_hf_config(config, "m") == spec_from_hf_config(config, "m")
    with pytest.raises(InputError, match="config must be a JSON object"):
        ModelSpec.from_hf_config([1, 2], "bad")


@pytest.mark.parametrize("model_id", ["llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b"])
def test_the_weights_table_gives_its_smallest_size_three_figures(
        model_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.2-1B's awq-int4 and mxfp4 weights differ by 11 MB: to one decimal both read
    1.0 GB; to the decimals that give its smallest size, 0.618 GB, three figures, they part.
    A 70B model's sizes keep their one decimal (35.3 GB)."""
    from ridgeline.cli import main

    assert main(["model", model_id, "--json"]) == 0
    sizes = json.loads(capsys.readouterr().out)["weight_bytes"]
    assert main(["model", model_id]) == 0
    printed = dict(re.findall(r"^  (\S+(?: B/param \(all\))?) +([\d,.]+) GB$",
                              capsys.readouterr().out, re.M))
    assert printed.keys() == sizes.keys()
    smallest = min(sizes.values())
    shown = printed[min(sizes, key=lambda k: sizes[k])]
    assert len(shown.replace(",", "").replace(".", "").lstrip("0")) >= 3
    for label, n_bytes in sizes.items():
        places = len(printed[label].split(".")[1])
        assert float(printed[label].replace(",", "")) == pytest.approx(n_bytes / 1e9,
                                                                      abs=0.51 * 10**-places)
    if smallest > 10e9:
        assert all(len(p.split(".")[1]) == 1 for p in printed.values())
    if model_id == "llama-3.2-1b":
        assert round(sizes["awq-int4"] / 1e9, 1) == round(sizes["mxfp4"] / 1e9, 1)
        assert printed["awq-int4"] != printed["mxfp4"]
