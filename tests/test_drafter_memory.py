"""A drafter's memory beyond vLLM's MTP layers: TensorRT-LLM's MTP layers in its pool,
SGLang's reserve for a drafter it loads after its pool, and the separate drafters (a draft
model, an EAGLE-3 head) vLLM's pool holds where their config reads offline; fit's caution
naming a drafter left out."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import held_conversations
from ridgeline.draft_model_memory import (
    drafter_weight_bytes_per_gpu,
    eagle3_layer_bytes_per_gpu,
    read_drafter,
)
from ridgeline.drafter_memory import mtp_kv_bytes_per_token, mtp_weight_bytes_per_gpu
from ridgeline.engine_spec import EngineSpec, vllm_speculative_config
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.params import layer_params
from ridgeline.sglang_memory import (
    sglang_memory_defaults,
    sglang_speculative_requests,
    sglang_speculative_reserve_mib,
)
from tests.conftest import run_cli

V3 = ("deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--max-model-len", "32k", "--json")
MTP3 = EngineSettings(draft_mtp=True, drafter=EngineSpec(3, "mtp"))
DRAFT_1B = '{"method": "draft_model", "model": "meta-llama/Llama-3.2-1B", ' \
    '"num_speculative_tokens": 4}'
L70 = ("llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4", "--max-model-len", "32k", "--json")


def fit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict, str]:
    code, out, err = run_cli(capsys, "fit", *argv)
    assert code == 0, err
    return json.loads(out), err


def v3_on(engine: str) -> Deployment:
    return Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                            num_gpus=8, engine=engine)


# -- TensorRT-LLM: the one-model MTP path holds its layer and caches one a draft ------------
def test_trtllm_holds_one_mtp_layer_and_caches_one_a_draft_as_the_docstring_says() -> None:
    """DeepSeek-V3 drafting 3 on 8 GPUs: one MTP layer's weights (its eh_proj split over the
    8, where vLLM keeps it whole), and three layers more cache a token: 64/61."""
    dep, model = v3_on("trtllm"), resolve_model("deepseek-v3")
    plain, drafting = kv_pool(dep), kv_pool(dep, MTP3)
    added = drafting.weight_bytes - plain.weight_bytes
    assert added == pytest.approx(mtp_weight_bytes_per_gpu(dep, 3))
    vllm_added = mtp_weight_bytes_per_gpu(v3_on("vllm"))  # the same one layer, eh_proj whole
    eh_proj = 2 * model.hidden_size**2 * 2  # bytes at bf16
    assert added == pytest.approx(vllm_added - eh_proj * 7 / 8)
    grown = drafting.kv_bytes_per_token / plain.kv_bytes_per_token
    assert grown == pytest.approx((model.num_layers + 3) / model.num_layers)
    assert drafting.kv_bytes_per_token - plain.kv_bytes_per_token == pytest.approx(
        mtp_kv_bytes_per_token(dep, dep.kv_replication, dep.tensor_parallel_size, 3))
    assert drafting.tokens < plain.tokens
    # MTP runs on the PyTorch backend only: the engine backend builds no DeepseekV3ForCausalLM
    # at all, and where it builds an MLA model (under DeepSeek-V2's name) its pool is left as
    # it was
    engine_backend = EngineSettings(backend="tensorrt")
    mtp = EngineSettings(backend="tensorrt", draft_mtp=True, drafter=EngineSpec(3, "mtp"))
    with pytest.raises(InputError, match="builds no DeepseekV3ForCausalLM"):
        kv_pool(dep, mtp)
    v2 = replace(dep, model=replace(model, architecture="DeepseekV2ForCausalLM"))
    assert kv_pool(v2, mtp) == kv_pool(v2, engine_backend)


def test_trtllm_with_a_checkpoint_of_more_mtp_layers_holds_one_a_draft() -> None:
    """Vanilla MTP (a checkpoint of several MTP layers) builds one layer per draft."""
    dep = v3_on("trtllm")
    two = replace(resolve_model("deepseek-v3"), mtp_layers=2)  # as a two-layer checkpoint
    several = Deployment.build(two, resolve_accelerator("h200"), num_gpus=8, engine="trtllm")
    assert mtp_weight_bytes_per_gpu(several, 3) == pytest.approx(
        3 * mtp_weight_bytes_per_gpu(dep, 3))
    assert mtp_kv_bytes_per_token(several, 1, 8, 3) == mtp_kv_bytes_per_token(dep, 1, 8, 3)


def test_fit_on_trtllm_counts_the_mtp_layers_from_its_yaml_and_says_nothing(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trt = (*V3, "--engine", "trtllm")
    plain, _ = fit(capsys, *trt)
    path = tmp_path / "extra.yaml"
    path.write_text("speculative_config:\n  decoding_type: MTP\n  num_nextn_predict_layers: 3\n")
    for spelling in (("--config", str(path)), ("--spec-method", "mtp", "--spec-tokens", "3")):
        drafting, err = fit(capsys, *trt, *spelling)
        assert "caution" not in err
        assert drafting["per_conversation_bytes_per_gpu"] == pytest.approx(
            plain["per_conversation_bytes_per_gpu"] * 64 / 61)
        assert drafting["taken_bytes_per_gpu"]["weights"] > plain["taken_bytes_per_gpu"]["weights"]
        assert drafting["conversations"] < plain["conversations"]


# -- SGLang: the default fraction holds more back for a drafter ----------------------------
@pytest.mark.parametrize(("method", "version", "mib"), [
    ("mtp", "0.5.9", 2048), ("eagle", "0.5.3", 2048), ("draft-model", "0.5.9", 6144),
    ("draft-model", "0.5.1", 2048), ("eagle", "0.4.7.post1", 2048), ("eagle", "0.4.7", 0),
    ("mtp", "0.5.13", 4096), ("draft-model", "0.5.13", 6144), ("mtp", "0.5.14", 0),
    ("mtp", None, 0), ("draft-model", None, 0), ("ngram", None, 0), ("", None, 0)])
def test_sglangs_default_reserve_grows_by_the_drafters_share(
        method: str, version: str | None, mib: int) -> None:
    """server_args.py: 2 GiB for EAGLE, EAGLE3 and NEXTN from v0.4.7.post1 (none in the 0.4.x
    table before it), 4 GiB from v0.5.10, 6 GiB for STANDALONE from v0.5.2, none for NGRAM;
    added after the 10 GiB floor of the v0.5.3+ rule; none at all from v0.5.14."""
    assert sglang_speculative_reserve_mib(method, version) == mib
    h200_mib = 143_771 * 2**20
    plain = sglang_memory_defaults(h200_mib, 8, version=version)
    drafting = sglang_memory_defaults(h200_mib, 8, version=version, draft_method=method)
    assert drafting.reserved_mib - plain.reserved_mib == mib == drafting.drafter_mib
    card = 24_000 * 2**20  # below the floor
    small = sglang_memory_defaults(card, 1, version=version, draft_method=method)
    assert small.reserved_mib - sglang_memory_defaults(card, 1, version=version).reserved_mib \
        == pytest.approx(mib)


def test_sglangs_pool_shrinks_by_the_reserve_unless_the_fraction_is_given(
        capsys: pytest.CaptureFixture[str]) -> None:
    dep = v3_on("sglang")  # SGLang 0.5.9, whose default holds 2 GiB back for the drafter
    old = EngineSettings(engine_version="0.5.9")
    plain, drafting = kv_pool(dep, old), kv_pool(dep, replace(MTP3, engine_version="0.5.9"))
    assert plain.reserved_fraction - drafting.reserved_fraction == pytest.approx(
        round(2048 / 143_771, 3), abs=0.0011)
    assert drafting.weight_bytes == plain.weight_bytes  # its drafter is loaded after the pool
    assert drafting.tokens < plain.tokens
    given = EngineSettings(gpu_memory_utilization=0.85, engine_version="0.5.9")
    given_drafting = kv_pool(dep, replace(MTP3, gpu_memory_utilization=0.85,
                                          engine_version="0.5.9"))
    # the same pool; only the seats differ, SGLang's default under a drafter (its own test)
    assert given_drafting.max_num_seqs == sglang_speculative_requests("mtp")
    assert replace(given_drafting, max_num_seqs=kv_pool(dep, given).max_num_seqs) \
        == kv_pool(dep, given)
    nextn = ("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
             "--speculative-eagle-topk", "1")
    base, _ = fit(capsys, *V3, "--engine", "sglang", "--engine-version", "0.5.9")
    drafting_fit, err = fit(capsys, *V3, "--engine", "sglang", "--engine-version", "0.5.9",
                            *nextn)
    assert drafting_fit["conversations"] < base["conversations"]
    assert "SGLang loads them after sizing its pool" in err
    # from 0.5.14 (and the newest) no reserve: the draft weights come out of the pool instead
    # (sglang_drafter.py, its own tests), and no caution
    newest, err = fit(capsys, *V3, "--engine", "sglang", *nextn)
    assert newest["pool_bytes_per_gpu"] < fit(capsys, *V3, "--engine", "sglang")[0][
        "pool_bytes_per_gpu"]
    assert "caution" not in err


# -- vLLM: a separate drafter read offline -------------------------------------------------
def test_a_bundled_draft_model_adds_its_weights_and_cache_as_the_docstring_says() -> None:
    """Llama-3.2-1B drafting for Llama-3.1-70B on 4 GPUs: 2.47 GB of weights, 0.62 GB a GPU;
    32 KiB of cache a token (16 layers of 8 KV heads of 64), 8 KiB a GPU."""
    target, h100 = resolve_model("llama-3.1-70b"), resolve_accelerator("h100")
    dep = Deployment.build(target, h100, num_gpus=4, engine="vllm")
    draft = resolve_model("meta-llama/Llama-3.2-1B")
    plain = kv_pool(dep)
    drafting = kv_pool(dep, EngineSettings(drafter=EngineSpec(4, "draft-model",
                                                              "meta-llama/Llama-3.2-1B")))
    added = drafting.weight_bytes - plain.weight_bytes
    whole = Deployment.build(draft, h100).weight_bytes
    assert added == pytest.approx(whole / 4, rel=0.01)
    assert whole == pytest.approx(2.47e9, rel=0.01)
    att = draft.attention
    assert att is not None
    per_token = draft.num_layers * 2 * att.num_kv_heads * att.head_dim * 2  # K and V, bf16
    assert per_token == 32 * 1024
    assert drafting.kv_bytes_per_token - plain.kv_bytes_per_token == pytest.approx(per_token / 4)
    assert drafting.tokens < plain.tokens


def test_fit_holds_a_draft_model_vllm_reads_and_names_one_it_cannot(
        capsys: pytest.CaptureFixture[str]) -> None:
    plain, _ = fit(capsys, *L70)
    counted, err = fit(capsys, *L70, "--speculative-config", DRAFT_1B)
    assert "caution" not in err
    assert counted["conversations"] < plain["conversations"]
    assert counted["per_conversation_bytes_per_gpu"] == pytest.approx(
        plain["per_conversation_bytes_per_gpu"] * (80 * 8 * 128 + 16 * 8 * 64) / (80 * 8 * 128))
    # decode's engine_max_batch is the same pool
    code, out, err = run_cli(capsys, "decode", *L70[:-3], "--batch", "1", "--context", "32000",
                             "--max-model-len", "32k", "--json", "--speculative-config", DRAFT_1B)
    assert code == 0, err
    assert json.loads(out)["engine_max_batch"][0]["engine_max_batch"] == counted["conversations"]
    unknown = '{"method": "eagle3", "model": "someone/EAGLE3-head", "num_speculative_tokens": 3}'
    left_out, err = fit(capsys, *L70, "--speculative-config", unknown)
    assert "the eagle drafter's (someone/EAGLE3-head) weights and cache are not in this pool" \
        in err and "fetches nothing" in err
    assert {k: v for k, v in left_out.items() if k != "cautions"} == \
        {k: v for k, v in plain.items() if k != "cautions"}
    # on SGLang the draft model is the reserve's, said so
    _, err = fit(capsys, *L70[:-3], "--engine", "sglang", "--max-model-len", "32k", "--json",
                 "--engine-version", "0.5.13", "--spec-method", "draft-model",
                 "--spec-tokens", "3")
    assert "SGLang loads them after sizing its pool" in err


def test_simulate_and_decode_caution_as_fit_does_about_a_drafter_left_out(
        capsys: pytest.CaptureFixture[str]) -> None:
    """An EAGLE-3 head whose config ridgeline cannot read offline is not in the pool decode
    and simulate price either: each says so, in fit's words (one function, said once); one
    it reads (a bundled draft model) draws no caution."""
    unknown = '{"method": "eagle3", "model": "someone/EAGLE3-head", "num_speculative_tokens": 3}'
    _, fit_err = fit(capsys, *L70, "--speculative-config", unknown)
    said = [line for line in fit_err.splitlines() if "weights and cache are not in" in line]
    assert len(said) == 1
    runs = {"decode": ("--batch", "1", "--context", "1000"),
            "simulate": ("--rate", "2", "--num-requests", "20", "--input-len", "500",
                         "--output-len", "50")}
    for command, load in runs.items():
        code, _, err = run_cli(capsys, command, *L70[:-1], *load,
                               "--speculative-config", unknown)
        assert code == 0, err
        assert [line for line in err.splitlines() if line in said] == said
        code, _, err = run_cli(capsys, command, *L70[:-1], *load,
                               "--speculative-config", DRAFT_1B)
        assert code == 0 and "weights and cache are not in" not in err


def test_an_eagle3_heads_config_on_disk_counts_its_layer_fc_and_own_vocabulary(
        tmp_path: Path) -> None:
    """An EAGLE-3 head for Llama-3.1-8B (one decoder layer, draft_vocab_size 32,000): its
    layer split over TP, its qkv_proj over 2 × 4,096 input features, fc (3 × 4,096 → 4,096)
    whole on every GPU, its own lm_head of 32,000 rows split; the embedding the target's."""
    head = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
            "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_key_value_heads": 8, "num_hidden_layers": 1, "vocab_size": 128256,
            "draft_vocab_size": 32000, "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(head))
    drafter = read_drafter(str(path), "eagle")
    assert drafter is not None and drafter.eagle
    assert (drafter.fc_input_size, drafter.draft_vocab_size) == (3 * 4096, 32000)
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           num_gpus=2, engine="vllm")
    plain = kv_pool(dep)
    drafting = kv_pool(dep, EngineSettings(drafter=EngineSpec(3, "eagle", str(path))))
    layer = sum(layer_params(drafter.model, drafter.model.layers[0]).values())
    widened = 4096 * (32 + 2 * 8) * 128 * 2 / 2 + 4096 * 2  # the qkv's second h, hidden_norm
    expected = layer * 2 / 2 + widened + 3 * 4096 * 4096 * 2 + 32000 * 4096 * 2 / 2
    assert drafting.weight_bytes - plain.weight_bytes == pytest.approx(expected, rel=0.001)
    assert drafting.kv_bytes_per_token - plain.kv_bytes_per_token == pytest.approx(
        2 * 8 * 128 * 2 / 2)  # one layer's K and V, its 8 heads over 2 GPUs
    assert read_drafter("someone/not-bundled", "eagle") is None


EAGLE3_70B = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
              "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
              "num_key_value_heads": 8, "num_hidden_layers": 1, "vocab_size": 128256,
              "draft_vocab_size": 32000, "max_position_embeddings": 2048,
              "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def test_an_eagle3_heads_wider_first_layer_is_about_42_mb_a_gpu_for_a_70b_head_at_tp4(
        tmp_path: Path) -> None:
    """Llama-3.3-70B's EAGLE-3 head: its first layer's qkv_proj reads [embedding; hidden
    state], 8,192 features more than a plain layer's, times (64 + 2 × 8) × 128 outputs, in
    bf16 split over 4 GPUs (the docstring's 42 MB), and a hidden_norm whole; an EAGLE-1 head
    of the same shape has none of it."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(EAGLE3_70B))
    head = read_drafter(str(path), "eagle")
    assert head is not None and head.first_layer_input_size == 2 * 8192
    dep = Deployment.build(resolve_model("llama-3.3-70b"), resolve_accelerator("h100"),
                           num_gpus=4, engine="vllm")
    run = Deployment.build(head.model, dep.accelerator, num_gpus=4)
    widened = eagle3_layer_bytes_per_gpu(run, head)
    assert widened == pytest.approx(8192 * (64 + 2 * 8) * 128 * 2 / 4 + 8192 * 2)
    assert 41e6 < widened < 43e6
    eagle1 = replace(head, fc_input_size=2 * 8192, draft_vocab_size=0, first_layer_input_size=0)
    assert eagle3_layer_bytes_per_gpu(run, eagle1) == 0
    # the pool holds it: the head's weights less the EAGLE-1 reading's are its fc, its own
    # lm_head and the wider layer
    gap = drafter_weight_bytes_per_gpu(dep, head, 4) - drafter_weight_bytes_per_gpu(dep, eagle1, 4)
    assert gap == pytest.approx(8192 * 8192 * 2 + 32000 * 8192 * 2 / 4 + widened)


def test_draft_tensor_parallel_size_is_read_and_checked() -> None:
    spec = vllm_speculative_config('{"method": "draft_model", "model": "m", '
                                   '"num_speculative_tokens": 3, "draft_tensor_parallel_size": 2}')
    assert spec == EngineSpec(3, "draft-model", "m", 2)
    with pytest.raises(InputError, match="draft_tensor_parallel_size"):
        vllm_speculative_config('{"method": "draft_model", "model": "m", '
                                '"num_speculative_tokens": 3, "draft_tensor_parallel_size": 0}')


# -- fit names the drafter's weights as the drafter's, not a vision tower -------------------
@pytest.mark.parametrize(("argv", "engine"), [
    ((*V3, "--engine", "trtllm", "--spec-method", "mtp", "--spec-tokens", "3"), "trtllm"),
    ((*V3, "--spec-method", "mtp", "--spec-tokens", "3"), "vllm"),
    ((*L70, "--speculative-config", DRAFT_1B), "vllm")])
def test_fit_counts_the_drafters_weights_as_its_own_not_a_vision_towers(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], engine: str) -> None:
    """DeepSeek-V3 and Llama-3.1-70B have no vision tower: the weights a drafter adds to the
    pool are the drafter's, in --json and in --explain's note on the weights."""
    drafting, _ = fit(capsys, *argv)
    plain, _ = fit(capsys, *argv[:argv.index("--json") + 1],
                   *(("--engine", engine) if engine == "trtllm" else ()))
    added = drafting["taken_bytes_per_gpu"]["weights"] - plain["taken_bytes_per_gpu"]["weights"]
    assert added > 0
    assert drafting["vision_tower_bytes_per_gpu"] == 0
    assert drafting["drafter_weight_bytes_per_gpu"] == pytest.approx(added)
    assert plain["drafter_weight_bytes_per_gpu"] == 0
    code, out, err = run_cli(capsys, "fit", *(a for a in argv if a != "--json"), "--explain")
    assert code == 0, err
    weights_line = next(line for line in out.splitlines() if "weights per GPU =" in line)
    assert "vision tower" not in weights_line
    assert f"{added / 2**30:,.2f} GiB of the drafter's weights" in weights_line


@pytest.mark.parametrize(("draft_tp", "version", "share", "refusal"), [
    (4, None, 4, ""), (1, None, None, "only at the target's"),
    (2, None, None, "only at the target's"), (1, "0.10.1 V0", 1, ""),
    (4, "0.10.1 V0", 4, ""), (2, "0.10.1 V0", None, "neither 1 nor the target's")])
def test_a_draft_model_runs_at_the_targets_tp_on_v1_and_also_replicated_on_v0(
        capsys: pytest.CaptureFixture[str], draft_tp: int, version: str | None,
        share: int | None, refusal: str) -> None:
    """V1's DraftModelProposer takes only the target's draft_tensor_parallel_size; V0's
    SpeculativeConfig also 1 (every rank loads the whole draft model). Any other is refused,
    by the library and by fit, in one line."""
    target, h100 = resolve_model("llama-3.1-70b"), resolve_accelerator("h100")
    dep = Deployment.build(target, h100, num_gpus=4, engine="vllm")
    whole = Deployment.build(resolve_model("meta-llama/Llama-3.2-1B"), h100).weight_bytes
    base = EngineSettings(engine_version=version)
    settings = replace(base, drafter=EngineSpec(4, "draft-model", "meta-llama/Llama-3.2-1B",
                                                draft_tp))
    if share is None:
        with pytest.raises(InputError, match=refusal):
            kv_pool(dep, settings)
        config = DRAFT_1B.replace("}", f', "draft_tensor_parallel_size": {draft_tp}}}')
        release = ("--engine-version", version) if version else ()
        code, _, err = run_cli(capsys, "fit", *L70, "--speculative-config", config, *release)
        assert code == 2 and refusal in err and len(err.strip().splitlines()) == 1
        return
    added = kv_pool(dep, settings).weight_bytes - kv_pool(dep, base).weight_bytes
    assert added == pytest.approx(whole / share, rel=0.01)


def test_fit_offers_more_gpus_to_a_draft_model_given_at_the_targets_tp(
        capsys: pytest.CaptureFixture[str]) -> None:
    """draft_tensor_parallel_size given as the target's (the one V1 takes) is the user's
    "as the target": fit answers, and its more-GPUs lever splits the drafter as it splits the
    target, where pricing the lever at the old split would refuse the whole command."""
    config = DRAFT_1B.replace("}", ', "draft_tensor_parallel_size": 2}')
    argv = ("llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2", "--weights", "fp8",
            "--max-model-len", "8k", "--speculative-config", config)
    code, out, err = run_cli(capsys, "fit", *argv)
    assert code == 0, err
    lever = next(line for line in out.splitlines() if line.strip().startswith("4 GPUs"))
    wider = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"), "fp8",
                             num_gpus=4, engine="vllm")
    spec = vllm_speculative_config(config.replace(": 2}", ": 4}"))
    pool = kv_pool(wider, EngineSettings(max_model_len=8000, drafter=spec))
    assert pool.drafter_weight_bytes > 0  # the lever prices the drafter, split over 4
    assert f"{held_conversations(pool, wider, 8000):,} conversations" in lever


def test_a_draft_model_split_vllm_refuses_is_refused_though_its_config_is_not_read() -> None:
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"),
                           num_gpus=4, engine="vllm")
    unread = EngineSpec(4, "draft-model", "someone/not-bundled", 1)
    assert read_drafter("someone/not-bundled", "draft-model") is None
    with pytest.raises(InputError, match="only at the target's"):
        kv_pool(dep, EngineSettings(drafter=unread))
    assert kv_pool(dep, EngineSettings(drafter=replace(unread, draft_tensor_parallel_size=4))
                   ).weight_bytes == kv_pool(dep).weight_bytes  # not read: not counted


def test_an_unread_speculative_config_key_is_refused_naming_every_key_read(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The refusal lists the keys ridgeline does read, draft_tensor_parallel_size among them."""
    from ridgeline.engine_spec import VLLM_KEYS_READ

    code, _, err = run_cli(capsys, "fit", *L70, "--speculative-config",
                           '{"method": "ngram", "num_speculative_tokens": 3, "foo": 1}')
    assert code == 2 and "'foo' is not modelled" in err
    assert all(key in err for key in VLLM_KEYS_READ)


def test_sglangs_caution_gives_the_reserve_its_default_holds_back_from_the_data(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang's drafter is loaded into the memory its default fraction holds back: the caution
    names the reserve sglang_speculative_reserve_mib prices, for a model drafter and for
    STANDALONE, with the releases they start from."""
    from ridgeline.sglang_memory import sglang_data, sglang_speculative_reserve_mib

    held = sglang_data()["speculative_reserve_mib"]
    code, _, err = run_cli(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                           "--engine", "sglang", "--max-model-len", "4k",
                           "--engine-version", "0.5.13",
                           "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
                           "--speculative-eagle-topk", "1",
                           "--speculative-num-draft-tokens", "4")
    assert code == 0
    model_gib = sglang_speculative_reserve_mib("eagle", held["from"]) / 1024
    doubled_gib = sglang_speculative_reserve_mib("eagle", held["model_drafter_doubled_from"]) \
        / 1024
    standalone_gib = sglang_speculative_reserve_mib("draft-model", held["standalone_from"]) \
        / 1024
    assert (f"holds {model_gib:g} GiB more for a drafter from v{held['from']} "
            f"({doubled_gib:g} GiB from v{held['model_drafter_doubled_from']}), "
            f"{standalone_gib:g} GiB for STANDALONE from v{held['standalone_from']} "
            f"until v{held['before']}") in err


def test_vllm_releases_whose_v1_engine_had_no_draft_model_refuse_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    """From v0.10.0 (V0 gone) until DraftModelProposer, vLLM raised NotImplementedError for a
    draft model: fit, decode and simulate refuse it there in one line; an EAGLE head still
    prices, and the releases either side run the draft model."""
    runs = {"fit": (), "decode": ("--batch", "1", "--context", "1000"),
            "simulate": ("--rate", "2", "--num-requests", "20", "--input-len", "500",
                         "--output-len", "50")}
    for command, load in runs.items():
        for version in ("0.10.0", "0.14.0"):
            code, _, err = run_cli(capsys, command, *L70[:-1], *load, "--speculative-config",
                                   DRAFT_1B, "--engine-version", version)
            assert code == 2 and f"vLLM {version} runs no separate draft model" in err
            assert len(err.strip().splitlines()) == 1
        for version in ("0.9.2", "0.16.0"):
            code, _, err = run_cli(capsys, command, *L70[:-1], *load, "--speculative-config",
                                   DRAFT_1B, "--engine-version", version)
            assert code == 0, err
    code, _, err = run_cli(capsys, "fit", *L70[:-1], "--spec-method", "eagle", "--spec-tokens",
                           "3", "--engine-version", "0.12.0")
    assert code == 0, err


def test_vllm_0_8_to_0_9_run_a_draft_model_on_v0_as_their_oracle_fell_back(
        capsys: pytest.CaptureFixture[str]) -> None:
    """V1 was the default from 0.8, but _is_v1_supported_oracle fell back to V0 for a draft
    model until 0.10.0: fit prices "0.9.2" as "0.9.2 V0" (V0's profile, and its draft TP of 1
    beside a target over 4 GPUs, which V1 refuses); with VLLM_USE_V1=1 ("0.9.2 V1") vLLM
    raises, and so does ridgeline, in one line. An EAGLE head stays on V1."""
    one_gpu_draft = DRAFT_1B[:-1] + ', "draft_tensor_parallel_size": 1}'
    for version in ("0.8.5", "0.9.2"):
        code, out, err = run_cli(capsys, "fit", *L70, "--speculative-config", DRAFT_1B,
                                 "--engine-version", version)
        assert code == 0, err
        asked = json.loads(out)
        code, out, err = run_cli(capsys, "fit", *L70, "--speculative-config", DRAFT_1B,
                                 "--engine-version", f"{version} V0")
        assert code == 0, err
        assert asked == json.loads(out) and asked["model_runner"] == "V0"
        code, _, err = run_cli(capsys, "fit", *L70, "--speculative-config", one_gpu_draft,
                               "--engine-version", version)
        assert code == 0, err
        code, _, err = run_cli(capsys, "fit", *L70, "--speculative-config", DRAFT_1B,
                               "--engine-version", f"{version} V1")
        assert code == 2 and "VLLM_USE_V1=1" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_cli(capsys, "fit", *L70, "--spec-method", "eagle", "--spec-tokens",
                             "3", "--engine-version", "0.9.2")
    assert code == 0 and json.loads(out)["model_runner"] == "V1", err
    code, _, err = run_cli(capsys, "fit", *L70, "--speculative-config", one_gpu_draft,
                           "--engine-version", "0.16.0")
    assert code == 2 and "draft_tensor_parallel_size 1" in err
    for command, load in (("decode", ("--batch", "1", "--context", "1000")),
                          ("simulate", ("--rate", "2", "--num-requests", "20", "--input-len",
                                        "500", "--output-len", "50"))):
        runs = [run_cli(capsys, command, *L70[:-1], *load, "--speculative-config", DRAFT_1B,
                        "--engine-version", version) for version in ("0.9.2", "0.9.2 V0")]
        assert runs[0][0] == 0 and runs[0] == runs[1], runs[0][2]


def test_a_draft_model_on_vllm_0_9_is_sized_as_on_v0_in_the_library() -> None:
    """kv_pool takes the same fallback: the pool asked of "0.9.2" is "0.9.2 V0"'s."""
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"),
                           None, None, 4)
    drafter = vllm_speculative_config(DRAFT_1B)
    asked = EngineSettings(max_model_len=32_000, engine_version="0.9.2",
                           speculative_decoding=True, drafter=drafter)
    pool = kv_pool(dep, asked)
    assert pool.runner == "V0"
    assert pool == kv_pool(dep, replace(asked, engine_version="0.9.2 V0"))
    assert kv_pool(dep, replace(asked, drafter=None)).runner == "V1"


EAGLE_8B = '{"model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'
L8 = ("llama-3.1-8b", "--gpu", "h100", "--max-model-len", "32k", "--json")


def test_vllm_0_8_ran_ngram_and_eagle_on_v0_unless_vllm_use_v1_was_set(
        capsys: pytest.CaptureFixture[str]) -> None:
    """0.8.x's oracle let ngram and EAGLE through but sent them to V0 unless VLLM_USE_V1=1
    (_warn_or_fallback): "0.8.5" is priced as "0.8.5 V0", "0.8.5 V1" runs on V1; from 0.9.0
    they stay on V1."""
    for method in ("eagle", "ngram"):
        drafter = ("--spec-method", method, "--spec-tokens", "3")
        asked, _ = fit(capsys, *L8, *drafter, "--engine-version", "0.8.5")
        assert asked["model_runner"] == "V0"
        assert asked == fit(capsys, *L8, *drafter, "--engine-version", "0.8.5 V0")[0]
        assert fit(capsys, *L8, *drafter, "--engine-version", "0.8.5 V1")[0]["model_runner"] \
            == "V1"
        assert fit(capsys, *L8, *drafter, "--engine-version", "0.9.0")[0]["model_runner"] \
            == "V1"


def test_vllm_0_9_0_ran_mtp_on_v0_and_raised_with_vllm_use_v1(
        capsys: pytest.CaptureFixture[str]) -> None:
    """deepseek_mtp joined the oracle's list in 0.9.1: on 0.9.0 DeepSeek-V3's MTP drafter is
    priced on V0, and "0.9.0 V1" is refused in one line naming the release and the method."""
    mtp = ("--spec-method", "mtp", "--spec-tokens", "1")
    asked, _ = fit(capsys, *V3, *mtp, "--engine-version", "0.9.0")
    assert asked["model_runner"] == "V0"
    assert asked == fit(capsys, *V3, *mtp, "--engine-version", "0.9.0 V0")[0]
    code, _, err = run_cli(capsys, "fit", *V3, *mtp, "--engine-version", "0.9.0 V1")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "vLLM 0.9.0 V1" in err and "deepseek_mtp" in err and "VLLM_USE_V1=1" in err
    for version in ("0.9.1", "0.9.2 V1"):
        assert fit(capsys, *V3, *mtp, "--engine-version", version)[0]["model_runner"] == "V1"


def test_vllm_0_9_ran_a_speculative_config_naming_no_method_on_v0(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The oracle read the config before vLLM inferred a method: an EAGLE head known by its
    name, or no model (MTP, a DeepSeek-V3 target) fell back to V0 on 0.9.2, and raised
    with VLLM_USE_V1=1; naming the method, or model "[ngram]", kept V1, as 0.10.0 does.
    prompt_lookup keys alone name no model either, which SpeculativeConfig then refuses for
    a Llama target (test_engine_spec)."""
    lookup = '{"prompt_lookup_max": 4, "num_speculative_tokens": 3}'
    for argv, config in ((L8, EAGLE_8B), (V3, '{"num_speculative_tokens": 1}')):
        asked, _ = fit(capsys, *argv, "--speculative-config", config, "--engine-version", "0.9.2")
        assert asked["model_runner"] == "V0"
        assert asked == fit(capsys, *argv, "--speculative-config", config,
                            "--engine-version", "0.9.2 V0")[0]
        code, _, err = run_cli(capsys, "fit", *argv, "--speculative-config", config,
                               "--engine-version", "0.9.2 V1")
        assert code == 2 and "naming no method" in err and len(err.strip().splitlines()) == 1
        assert fit(capsys, *argv, "--speculative-config", config,
                   "--engine-version", "0.10.0")[0]["model_runner"] == "V1"
    named = EAGLE_8B.replace('{', '{"method": "eagle", ')
    ngram = lookup.replace('{', '{"model": "[ngram]", ')
    for config in (named, ngram):
        assert fit(capsys, *L8, "--speculative-config", config,
                   "--engine-version", "0.9.2")[0]["model_runner"] == "V1"


def test_an_mtp_drafter_on_vllm_0_9_0_is_sized_as_on_v0_in_the_library() -> None:
    """kv_pool takes the same fallback for the MTP layers: 0.9.0's pool is "0.9.0 V0"'s,
    0.9.1's stays V1."""
    dep = v3_on("vllm")
    asked = replace(MTP3, max_model_len=32_000, engine_version="0.9.0",
                    speculative_decoding=True)
    pool = kv_pool(dep, asked)
    assert pool.runner == "V0"
    assert pool == kv_pool(dep, replace(asked, engine_version="0.9.0 V0"))
    assert kv_pool(dep, replace(asked, engine_version="0.9.1")).runner == "V1"
    with pytest.raises(InputError, match=r"0\.9\.0 V1.*deepseek_mtp"):
        kv_pool(dep, replace(asked, engine_version="0.9.0 V1"))
