"""How vLLM keeps a hybrid's recurrent state: prefix caching's default by version, the
mamba_cache_mode it picks, the state blocks a request holds, and Nemotron-H's SSM dtype."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.memory import EngineSettings, KVPool, kv_pool
from ridgeline.sim.config import sim_config
from ridgeline.vllm_hybrid import cache_mode, prefix_caching, ssm_state_dtype
from tests.conftest import run_cli


def dep(model: str, gpu: str = "h200", n: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, None, n)


@pytest.mark.parametrize(("version", "asked", "on"), [
    ("0.26", None, False),   # 'Hybrid models support prefix caching but keep it opt-in'
    ("0.28", None, True),    # on by default from v0.28 (PR #50991)
    ("0.26", True, True),
    ("0.14", True, False),   # linear attention: 'without support for prefix caching'
    ("0.15", True, True),    # any hybrid may ask for it from v0.15 ('align')
    ("0.11.0", True, False),  # forced off for every hybrid
])
def test_a_linear_attention_hybrid_runs_prefix_caching_by_version(
        version: str, asked: bool | None, on: bool) -> None:
    qwen = resolve_model("qwen3-next-80b")
    assert prefix_caching(qwen, asked, version) is on
    assert cache_mode(qwen, asked, version) == ("align" if on else "none")


def test_a_dense_model_keeps_prefix_caching_on_by_default() -> None:
    llama = resolve_model("llama-3.1-8b")
    assert prefix_caching(llama, None, "0.11.0") and cache_mode(llama, None, "0.26") == "none"
    assert not prefix_caching(llama, False, "0.26")


def test_qwen36_holds_one_state_block_by_default_and_two_when_asked() -> None:
    """The v0.24 RTX 5090 log (4.33x = 299 / (63 + 3 × 2)) ran with 'enable_prefix_caching':
    True; without the flag v0.24 runs a hybrid without prefix caching: 63 + 3 blocks."""
    d = Deployment.build(resolve_model("qwen3.6-35b-a3b"), resolve_accelerator("rtx-5090"),
                         None, "fp8", 1)
    s = EngineSettings(max_model_len=131_072, max_num_seqs=1, max_num_batched_tokens=8192,
                       engine_version="0.24.0")
    assert kv_pool(d, s).request_blocks(131_072) == 63 + 3
    assert kv_pool(d, replace(s, prefix_caching=True)).request_blocks(131_072) == 63 + 3 * 2
    assert kv_pool(d, replace(s, engine_version="0.28")).request_blocks(131_072) == 63 + 3 * 2


def test_nemotron_h_state_blocks_and_dtype_by_version() -> None:
    """Nemotron-H-56B (10 attention, 54 Mamba-2 layers: 1 attention and 6 state groups of 10)
    on an H200 at 8,192 tokens. Its SSM state is fp16 to v0.19 (8,511,488 B a layer = 2,078
    attention tokens: 2,080-token blocks) and fp32 from v0.20 (16,900,096 B: 4,128). Without
    prefix caching a request holds 8,192 / 4,128 → 2 blocks + 6; from v0.28 'align' keeps 2 a
    state group (14 blocks a request: 8/14 of the concurrency 'none' logs), from v0.32 3."""
    d = dep("nemotron-h-56b")
    model = d.model
    assert not model.ssm_cache_dtype_named
    assert ssm_state_dtype(model, "0.19") == model.state_dtype == "bf16"
    assert ssm_state_dtype(model, "0.20") == "fp32"

    def pool(version: str) -> KVPool:
        return kv_pool(d, EngineSettings(max_model_len=8192, engine_version=version))

    old, new = pool("0.18"), pool("0.26")
    assert (old.block_size, new.block_size) == (2080, 4128)
    assert (old.request_blocks(8192), new.request_blocks(8192)) == (4 + 6, 2 + 6)
    assert pool("0.28").request_blocks(8192) == 2 + 6 * 2
    assert pool("0.32").request_blocks(8192) == 2 + 6 * 3
    assert pool("0.28").concurrency(8192) == pytest.approx(new.concurrency(8192) * 8 / 14)
    # a config that names its SSM cache dtype keeps it
    named = replace(model, state_dtype="bf16", ssm_cache_dtype_named=True)
    assert ssm_state_dtype(named, "0.26") == "bf16"


def test_mamba_all_mode_is_flagged_not_sized(capsys: pytest.CaptureFixture[str]) -> None:
    assert cache_mode(resolve_model("nemotron-h-56b"), True, "0.26") == "all"
    assert cache_mode(resolve_model("nemotron-h-56b"), True, "0.28") == "align"
    code, out, _ = run_cli(capsys, "fit", "nemotron-h-56b", "--gpu", "h200", "--max-model-len",
                           "8192", "--enable-prefix-caching", "--engine-version", "0.26", "--json")
    assert code == 0 and any("mamba_cache_mode 'all'" in c for c in json.loads(out)["cautions"])
    code, out, _ = run_cli(capsys, "fit", "nemotron-h-56b", "--gpu", "h200", "--max-model-len",
                           "8192", "--json")
    assert not any("mamba_cache_mode" in c for c in json.loads(out)["cautions"])


def test_the_simulator_reuses_prompts_as_the_engine_does() -> None:
    s = EngineSettings(max_model_len=32_768, engine_version="0.26")
    assert not sim_config(dep("qwen3-next-80b", n=2), s).prefix_caching
    # on by default from v0.28, the default version's rule
    assert sim_config(dep("qwen3-next-80b", n=2), replace(s, engine_version=None)).prefix_caching
    assert sim_config(dep("qwen3-next-80b", n=2), replace(s, prefix_caching=True)).prefix_caching
    assert sim_config(dep("llama-3.1-8b"), s).prefix_caching


def test_prefix_caching_flags_are_one_line_errors_where_they_do_not_apply(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--max-model-len",
                           "8192", "--engine", "llama.cpp", "--enable-prefix-caching")
    assert code == 2 and "--enable-prefix-caching is vLLM's and SGLang's" in err
    # TensorRT-LLM has it, as kv_cache_config.enable_block_reuse, and its simulation reuses
    # prompts unless told not to
    trt = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           engine="trtllm")
    assert sim_config(trt).prefix_caching
    assert not sim_config(trt, EngineSettings(prefix_caching=False)).prefix_caching
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           "8192", "--enable-prefix-caching", "--no-prefix-caching")
    assert code == 2 and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           "8192", "--engine", "vllm,sglang", "--no-prefix-caching")
    assert code == 2 and "--no-prefix-caching names one engine's settings" in err


def test_only_the_cache_dtype_key_keeps_nemotron_h_state_at_its_dtype() -> None:
    """vLLM reads mamba_ssm_cache_dtype for Nemotron-H; a config naming mamba_ssm_dtype alone
    still gets float32 from v0.20 (Qwen3.5's mamba_ssm_dtype is read by its own rule)."""
    from ridgeline.config_reader import spec_from_hf_config
    from ridgeline.datafiles import load_data

    raw = dict(load_data("models/nvidia--Nemotron-H-56B-Base-8K.json"))
    ssm_only = spec_from_hf_config({**raw, "mamba_ssm_dtype": "bfloat16"}, name="n")
    assert ssm_state_dtype(ssm_only, "0.26") == "fp32"
    cache = spec_from_hf_config({**raw, "mamba_ssm_cache_dtype": "bfloat16"}, name="n")
    assert cache.ssm_cache_dtype_named and ssm_state_dtype(cache, "0.26") == "bf16"


def test_llama4_chunked_layers_are_cached_in_full_from_v0_10_1_to_v0_13() -> None:
    """vLLM PR #21761 turned the hybrid KV-cache manager off for chunked local attention
    unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1, whose default became "1" in
    v0.14: Scout at 128K on 4 H100s holds 2 conversations at v0.11 (every layer a full one),
    7 at v0.10.0 and v0.14 (the chunked layers paged as windows)."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.capacity import held_conversations
    from ridgeline.memory import EngineSettings, kv_pool

    dep = Deployment.build(resolve_model("llama-4-scout"), resolve_accelerator("h100"),
                           num_gpus=4)

    def held(version: str) -> tuple[int, bool]:
        settings = EngineSettings(max_model_len=131072, engine_version=version)
        pool = kv_pool(dep, settings)
        return held_conversations(pool, dep, 131072), pool.windows_in_full

    assert held("0.10") == (7, False)
    for version in ("0.10.1", "0.11", "0.13"):
        assert held(version) == (2, True)
    assert held("0.14") == (7, False) and not held("0.32")[1]


def test_a_hybrid_block_grows_in_steps_of_the_block_size_asked_from_v0_20() -> None:
    """Qwen3-Next on 4 H100s: a page must hold a linear-attention state. Steps of 16 give
    272-token blocks; from v0.20 (PR #37467) --block-size 64 makes the steps 64: 320."""
    d = Deployment.build(resolve_model("qwen3-next-80b-a3b"), resolve_accelerator("h100"),
                         num_gpus=4)

    def block(version: str, asked: int | None) -> int:
        pool = kv_pool(d, EngineSettings(max_model_len=131072, engine_version=version,
                                         block_size=asked))
        assert pool.groups is not None
        return pool.groups.block_size

    assert block("0.32", None) == 272 and block("0.19", 64) == 272
    assert block("0.20", 64) == block("0.32", 64) == 320


def test_trtllm_fit_takes_every_seats_state_before_the_pool(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM's Python Mamba manager allocates state for every seat before its fraction:
    2,048 seats of Qwen3-Next at TP4 is 18.8 GiB a GPU, which fit takes out of the budget (a
    row of its own) and names."""
    _, out, _ = run_cli(capsys, "fit", "qwen3-next-80b-a3b", "--gpu", "h100", "--num-gpus",
                        "4", "--max-model-len", "131072", "--engine", "trtllm")
    assert "2,048 seats × 9.4 MiB = 18.8 GiB per GPU" in out
    assert "− Mamba state (2,048 seats × 9.4 MiB)" in out
    _, plain, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                          "8192", "--engine", "trtllm")
    assert "recurrent state up front" not in plain and "Mamba state" not in plain


def test_nemotron_h_on_two_h100s_holds_19_blocks_a_request_not_7() -> None:
    """What vLLM v0.32 logs for Nemotron-H-56B on two H100s at 4,096 tokens: 189 blocks ÷ 19 =
    9.95x, 9 conversations. get_max_concurrency_for_kv_cache_config sums over the 7 groups
    cdiv(max_memory_usage_bytes, page): the full group cdiv(4,096, 4,128) = 1, each of the 6
    Mamba groups 3 in "align" (MambaSpec: 2 + num_prefill_checkpoint_blocks, which
    MambaMixer2 sets to 1 from v0.32), the mode prefix caching picks, on by default for a
    hybrid from v0.28. One block a group (7 a request, 27 conversations) is what vLLM runs
    with --no-enable-prefix-caching; two a group (13) is v0.31's align."""
    from ridgeline.capacity import held_conversations

    d = dep("nemotron-h-56b", "h100", 2)
    s = EngineSettings(max_model_len=4096, engine_version="0.32")  # the logged release
    pool = kv_pool(d, s)
    g = pool.groups
    assert g is not None and (g.full, g.windows, g.states) == (1, (), 6)
    full_blocks = -(-4096 // g.block_size)  # 4,128-token blocks: one
    assert pool.request_blocks(4096) == full_blocks + g.states * 3 == 19
    assert held_conversations(pool, d, 4096) == int(pool.concurrency(4096)) \
        == pool.blocks // 19 == 9
    off = kv_pool(d, replace(s, prefix_caching=False))
    assert off.blocks == pool.blocks
    assert off.request_blocks(4096) == full_blocks + g.states == 7
    assert held_conversations(off, d, 4096) == off.blocks // 7 == 27
    assert kv_pool(d, replace(s, engine_version="0.31")).request_blocks(4096) \
        == full_blocks + g.states * 2


def test_fit_explain_says_how_many_blocks_each_state_group_holds(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The per-conversation line splits out the state groups' share, and an explanation with
    no window layers names no window rule (v0.26 said Nemotron-H's chunked layers were cached
    in full, from its SSM dtype's replaced model)."""
    args = ("fit", "nemotron-h-56b", "--gpu", "h100", "--num-gpus", "2", "--max-model-len",
            "4096", "--explain")
    _, out, _ = run_cli(capsys, *args)
    assert "19 blocks of" in out and "6 × 3 of them recurrent state" in out
    assert "a Mamba-2 prefill checkpoint" in out
    assert "3 state blocks a request (prefix caching, align mode)" in out
    _, off, _ = run_cli(capsys, *args, "--no-prefix-caching")
    assert "7 blocks of" in off and "6 × 1 of them recurrent state" in off
    _, old, _ = run_cli(capsys, *args, "--engine-version", "0.26")
    assert "6 × 1 of them recurrent state" in old and "chunked-attention" not in old
    assert "chunked-attention" not in out
