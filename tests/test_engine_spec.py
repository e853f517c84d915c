"""Speculative decoding as the engines spell it: vLLM's --speculative-config (and its older
--speculative-model), SGLang's --speculative-algorithm and steps, read into --spec-tokens and
--spec-method on decode, simulate and fit, each only on its own engine; and what an MTP
drafter adds to vLLM's pool."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.drafter_memory import mtp_kv_bytes_per_token, mtp_weight_bytes_per_gpu
from ridgeline.engine_spec import (
    EngineSpec,
    sglang_speculative,
    trtllm_speculative_config,
    vllm_speculative_config,
    vllm_unnamed_drafter_problem,
)
from ridgeline.errors import InputError
from ridgeline.launch_flags import launch_flags
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.params import layer_params
from ridgeline.vllm_mrv2_drafter import ngram_token_table_bytes
from tests.conftest import run_cli

V3 = ("deepseek-v3", "--gpu", "h200", "--num-gpus", "8")
SIM = ("simulate", *V3, "--rate", "2", "--num-requests", "20", "--json")
DECODE = ("decode", *V3, "--batch", "1,32", "--context", "4096", "--json")
FIT = ("fit", *V3, "--max-model-len", "32k", "--json")
MTP2 = ("--spec-method", "mtp", "--spec-tokens", "2")
VLLM_MTP2 = ("--speculative-config", '{"method": "deepseek_mtp", "num_speculative_tokens": 2}')
SGLANG_MTP2 = ("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2",
               "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3")


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    return out


@pytest.mark.parametrize("command", [SIM, DECODE], ids=["simulate", "decode"])
def test_vllms_deepseek_mtp_config_is_spec_method_mtp_with_two_drafts(
        capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    asked = ok(capsys, *command, *MTP2)
    assert ok(capsys, *command, *VLLM_MTP2) == asked
    assert ok(capsys, *command, "-sc", '{"method": "mtp", "num_speculative_tokens": 2}') == asked
    # no num_speculative_tokens: vLLM drafts one per MTP layer (DeepSeek-V3 has one)
    one = ok(capsys, *command, "--spec-method", "mtp", "--spec-tokens", "1")
    assert ok(capsys, *command, "--speculative-config", '{"method": "deepseek_mtp"}') == one
    assert one != asked


@pytest.mark.parametrize("command", [SIM, DECODE], ids=["simulate", "decode"])
def test_sglangs_nextn_chain_is_spec_method_mtp_with_its_steps(
        capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    on_sglang = (*command, "--engine", "sglang")
    assert ok(capsys, *on_sglang, *SGLANG_MTP2) == ok(capsys, *on_sglang, *MTP2)


def test_vllms_older_speculative_model_flags_read_as_the_config(
        capsys: pytest.CaptureFixture[str]) -> None:
    sim = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "4", "--num-requests", "30",
           "--json")
    assert ok(capsys, *sim, "--speculative-model", "[ngram]", "--num-speculative-tokens", "3") \
        == ok(capsys, *sim, "--spec-method", "ngram", "--spec-tokens", "3")


@pytest.mark.parametrize("config, says", [
    ('{"method": "eagle", "num_speculative_tokens": }', "takes a JSON object"),
    ("[3]", "JSON object"),
    ('{"method": "medusa", "num_speculative_tokens": 3}', "'medusa' is not modelled"),
    ('{"method": "eagle"}', "give num_speculative_tokens"),
    ('{"method": "eagle", "num_speculative_tokens": 0}', "at least 1"),
    ('{"method": "ngram", "num_speculative_tokens": 3, "disable_by_batch_size": 8}',
     "'disable_by_batch_size' is not modelled"),
])
def test_a_config_ridgeline_cannot_price_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], config: str, says: str) -> None:
    for command in (SIM, DECODE, FIT):
        assert says in refused(capsys, *command, "--speculative-config", config)


def test_each_spelling_is_taken_only_on_its_engine(capsys: pytest.CaptureFixture[str]) -> None:
    assert "vLLM's; sglang has no such flag" in refused(capsys, *SIM, "--engine", "sglang",
                                                        *VLLM_MTP2)
    assert "SGLang's; vllm has no such flag" in refused(capsys, *SIM, *SGLANG_MTP2)
    assert "SGLang's; trtllm" in refused(capsys, *FIT, "--engine", "trtllm", *SGLANG_MTP2)
    assert "leave out --spec-tokens" in refused(capsys, *DECODE, *VLLM_MTP2, "--spec-tokens", "2")
    # a tree of drafts, and NGRAM's, are not what ridgeline prices
    wide = [*SGLANG_MTP2[:5], "4"]
    assert "tree" in refused(capsys, *SIM, "--engine", "sglang", *wide)
    assert "tree" in refused(capsys, *SIM, "--engine", "sglang", "--speculative-algorithm",
                             "NGRAM", "--speculative-num-steps", "3")
    # an MTP drafter needs MTP layers, however it is spelled
    assert "has none" in refused(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                                 "--max-model-len", "8k", "-sc", '{"method": "mtp"}')


def test_vllm_infers_the_method_as_its_speculative_config_does() -> None:
    """Inferred, and marked so (vLLM 0.8 to 0.9.x ran such a config on V0), but for model
    "[ngram]", which that engine oracle read as ngram."""
    assert vllm_speculative_config('{"num_speculative_tokens": 2}') \
        == EngineSpec(2, "mtp", method_inferred=True)
    assert vllm_speculative_config('{"num_speculative_tokens": 4, "prompt_lookup_max": 3}') \
        == EngineSpec(4, "ngram", method_inferred=True)
    eagle = '{"model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'
    assert vllm_speculative_config(eagle).method == "eagle"
    assert vllm_speculative_config(eagle).method_inferred
    small = '{"model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 5}'
    assert vllm_speculative_config(small) == EngineSpec(5, "draft-model", "meta-llama/Llama-3.2-1B",
                                                        method_inferred=True)
    assert vllm_speculative_config('{"model": "[ngram]", "num_speculative_tokens": 3}') \
        == EngineSpec(3, "ngram")
    assert not vllm_speculative_config(
        '{"method": "eagle", "model": "m", "num_speculative_tokens": 3}').method_inferred
    assert vllm_speculative_config('{"method": "qwen3_next_mtp", "num_speculative_tokens": 1}'
                                   ).method == "mtp"


def test_sglang_and_tensorrt_llm_read_a_chain_of_drafts() -> None:
    # priced as eagle, and its own name kept: its release gates it (speculative_problem)
    assert sglang_speculative("EAGLE3", 3, 1, 4) == EngineSpec(3, "eagle", algorithm="EAGLE3")
    with pytest.raises(InputError, match="num-steps \\+ 1"):
        sglang_speculative("EAGLE", 3, 1, 8)
    assert trtllm_speculative_config({"decoding_type": "MTP", "num_nextn_predict_layers": 3}) \
        == EngineSpec(3, "mtp")
    assert trtllm_speculative_config({"decoding_type": "Eagle3", "max_draft_len": 3,
                                      "speculative_model_dir": "d"}) == EngineSpec(3, "eagle", "d")


def test_prefill_refuses_each_drafter_spelling_the_other_commands_read() -> None:
    from ridgeline.cli_spec import ENGINE_FLAGS

    refused_flags = {f for r in launch_flags() if not r.modelled_away for f in r.flags}
    assert {f for flags, *_ in ENGINE_FLAGS for f in flags} <= refused_flags


def test_an_mtp_drafter_adds_its_layer_to_vllms_pool_as_the_docstring_says() -> None:
    """DeepSeek-V3 on 8 H200s: the MTP layer is a MoE decoder layer and eh_proj, 11.7 GB; a GPU
    holds an eighth of the layer and eh_proj whole (2 x 7,168 x 7,168 at bf16, 0.21 GB):
    1.64 GB; the cache a token grows by one layer in 61."""
    model = resolve_model("deepseek-v3")
    dep = Deployment.build(model, resolve_accelerator("h200"), num_gpus=8, engine="vllm")
    plain, drafting = kv_pool(dep), kv_pool(dep, EngineSettings(draft_mtp=True))
    added = drafting.weight_bytes - plain.weight_bytes
    assert added == pytest.approx(mtp_weight_bytes_per_gpu(dep))
    assert added == pytest.approx(1.64e9, rel=0.01)
    eh_proj = 2 * model.hidden_size**2 * 2  # bytes, whole on every GPU
    assert added - eh_proj == pytest.approx(1.64e9 - 0.2055e9, rel=0.01)
    moe_layer = sum(layer_params(model, model.layers[-1]).values())
    assert added * 8 > moe_layer  # at least a byte a weight of the MoE layer (FP8)
    grown = drafting.kv_bytes_per_token / plain.kv_bytes_per_token
    assert grown == pytest.approx((model.num_layers + model.mtp_layers) / model.num_layers)
    assert drafting.kv_bytes_per_token - plain.kv_bytes_per_token == pytest.approx(
        mtp_kv_bytes_per_token(dep, dep.kv_replication, dep.rank_gpus))
    assert drafting.page_bytes / plain.page_bytes == pytest.approx(grown)
    assert drafting.blocks < plain.blocks


def test_fit_with_an_mtp_drafter_holds_fewer_conversations_as_its_pool_is_computed(
        capsys: pytest.CaptureFixture[str]) -> None:
    plain = json.loads(ok(capsys, *FIT))
    for spelling in (MTP2, VLLM_MTP2):
        code, out, err = run_cli(capsys, *FIT, *spelling)
        assert code == 0 and not err
        drafting = json.loads(out)
        assert drafting["taken_bytes_per_gpu"]["weights"] > plain["taken_bytes_per_gpu"]["weights"]
        assert drafting["per_conversation_bytes_per_gpu"] == pytest.approx(
            plain["per_conversation_bytes_per_gpu"] * 62 / 61)
        assert drafting["conversations"] < plain["conversations"]
    # an n-gram drafter holds no weights and no cache; on Model Runner V2 (0.32, the default)
    # it keeps every seat's token ids on the GPU; an EAGLE head's config is not read: said,
    # not counted
    code, out, err = run_cli(capsys, *FIT, "--spec-tokens", "3", "--spec-method", "ngram")
    assert code == 0 and not err
    ngram = json.loads(out)
    assert ngram["taken_bytes_per_gpu"]["weights"] == plain["taken_bytes_per_gpu"]["weights"]
    assert ngram["per_conversation_bytes_per_gpu"] == plain["per_conversation_bytes_per_gpu"]
    assert plain["model_runner"] == ngram["model_runner"] == "MRV2"
    seats = ngram["max_num_seqs"]
    assert ngram["taken_bytes_per_gpu"]["drafter_buffers"] >= \
        ngram_token_table_bytes(seats, ngram["max_model_len"]) > 0 == plain["taken_bytes_per_gpu"][
            "drafter_buffers"]
    code, out, err = run_cli(capsys, *FIT, "--spec-tokens", "3")
    assert code == 0 and "caution: the eagle drafter's weights" in err
    assert {k: v for k, v in json.loads(out).items() if k != "cautions"} == \
        {k: v for k, v in plain.items() if k != "cautions"}


def test_decode_holds_the_mtp_drafter_in_its_pool_as_fit_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """decode's engine_max_batch is fit's pool: at 32K of context, -dcp 8 (160 conversations
    with the MTP layer, 167 without) shows the drafter's share, with no other pool flag given."""
    at_32k = ("decode", *V3, "--batch", "1", "--context", "32768", "--json",
              "-dcp", "8", "--max-model-len", "32768")
    fit_32k = ("fit", *V3, "-dcp", "8", "--max-model-len", "32768", "--json")
    plain = json.loads(ok(capsys, *at_32k))["engine_max_batch"][0]["engine_max_batch"]
    drafting = json.loads(ok(capsys, *at_32k, *VLLM_MTP2))["engine_max_batch"][0]["engine_max_batch"]
    assert drafting < plain
    assert plain == json.loads(ok(capsys, *fit_32k))["conversations"]
    assert drafting == json.loads(ok(capsys, *fit_32k, *VLLM_MTP2))["conversations"]


def test_qwen3_nexts_mtp_recipe_drafts_with_its_one_shipped_layer(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's Qwen3-Next recipe, --speculative-config '{"method": "qwen3_next_mtp", ...}': its
    config.json names no MTP layer count, and the checkpoint's one layer is what vLLM builds
    (model_type_defaults.json); the recipe reads as --spec-method mtp in decode and simulate."""
    assert resolve_model("qwen3-next-80b-a3b").mtp_layers == 1
    assert resolve_model("llama-3.1-8b").mtp_layers == 0
    line = ("qwen3-next-80b-a3b", "--gpu", "h200", "--num-gpus", "4")
    recipe = ("--speculative-config", '{"method": "qwen3_next_mtp", "num_speculative_tokens": 2}')
    for command in (("decode", *line, "--batch", "8", "--json"),
                    ("simulate", *line, "--rate", "2", "--num-requests", "10", "--json")):
        code, out, err = run_cli(capsys, *command, *recipe)
        assert code == 0, err
        assert out == run_cli(capsys, *command, *MTP2)[1]


def test_llama_cpp_drafts_with_a_draft_model_unless_told_otherwise(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama-server's drafter is a separate model (-md): decode names it so, and prices it as
    --spec-method draft-model would; a serving engine keeps eagle, and a method given wins."""
    base = ("decode", "llama-3.1-8b", "--gpu", "h100", "--spec-tokens", "3", "--json")
    code, out, err = run_cli(capsys, *base, "--engine", "llama.cpp")
    assert code == 0 and "caution: the draft model's weights and cache" in err
    defaulted = json.loads(out)
    code, out, _ = run_cli(capsys, *base, "--engine", "llama.cpp", "--spec-method", "draft-model")
    assert json.loads(out) == defaulted
    assert defaulted["points"][0]["speculative"]["method"] == "draft-model"
    code, out, _ = run_cli(capsys, *base, "--engine", "llama.cpp", "--spec-method", "eagle")
    assert json.loads(out)["points"][0]["speculative"]["method"] == "eagle"
    code, out, _ = run_cli(capsys, *base, "--engine", "vllm")
    assert json.loads(out)["points"][0]["speculative"]["method"] == "eagle"


@pytest.mark.parametrize("config", ['{"num_speculative_tokens": 2}',
                                    '{"num_speculative_tokens": 3, "prompt_lookup_max": 4}'])
def test_vllm_refuses_a_speculative_config_naming_neither_model_nor_method(
        capsys: pytest.CaptureFixture[str], config: str) -> None:
    """From 0.11 SpeculativeConfig has no draft to take without a model or method; 0.8.5 to
    0.10.x took a DeepSeek-V3 target's own MTP layers (engines.json
    vllm.speculative_unnamed)."""
    for version in ("0.11", "0.32", "0.34"):
        assert vllm_unnamed_drafter_problem(version, "deepseek_v3")
        code, _, err = run_cli(capsys, *FIT, "--speculative-config", config,
                               "--engine-version", version)
        assert code == 2 and "neither model nor method" in err
        assert len(err.strip().splitlines()) == 1
    assert not vllm_unnamed_drafter_problem("0.10.2", "deepseek_v3")
    assert not vllm_unnamed_drafter_problem("0.10.2", "qwen3_next")
    assert vllm_unnamed_drafter_problem("0.10.1", "qwen3_next")
    assert vllm_unnamed_drafter_problem("0.9.2", "llama")
    assert vllm_unnamed_drafter_problem("0.8", "llama")  # 0.8.0-0.8.4 read alike
    assert not vllm_unnamed_drafter_problem("0.7.3", "llama")  # before the releases read
    named = config.replace("{", '{"method": "mtp", ') if "prompt" not in config \
        else config.replace("{", '{"method": "ngram", ')
    code, _, err = run_cli(capsys, *FIT, "--speculative-config", named)
    assert code == 0, err


def test_vllm_reads_a_drafters_method_from_its_name_as_its_rules_do() -> None:
    """"eagle-" an EAGLE head, "eagle3" an EAGLE-3 head (which Model Runner V2's pipeline rule
    reads), dflash and dspark drafters (not modelled), anything else a draft model."""
    def read(model: str) -> EngineSpec:
        return vllm_speculative_config(json.dumps({"model": model,
                                                   "num_speculative_tokens": 3}))

    assert read("yuhuili/EAGLE-LLaMA3-Instruct-8B").method == "eagle"
    assert read("AngelSlim/Qwen3-8B_eagle3").algorithm == "eagle3"
    assert read("someone/llama-eagle-head").method == "eagle"
    assert read("someone/llama_eagle_head").method == "draft-model"  # neither key in it
    with pytest.raises(InputError, match="dflash drafter"):
        read("z-lab/Qwen3-8B-DFlash-b16")


def test_a_drafter_named_without_a_method_is_cautioned(
        capsys: pytest.CaptureFixture[str]) -> None:
    config = '{"model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 3}'
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           "8k", "--speculative-config", config)
    assert code == 0 and "without a method: vLLM detects it" in err
    named = config.replace("{", '{"method": "draft_model", ')
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           "8k", "--speculative-config", named)
    assert code == 0 and "without a method" not in err
