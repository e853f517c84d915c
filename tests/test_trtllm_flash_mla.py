"""TensorRT-LLM's FlashMLA block: its PyTorch backend pages an MLA model whose latent is 576
wide (DeepSeek-V3) in blocks of 64 on an SM 9.0 card, whatever tokens_per_block asked
(engines.json trtllm.flash_mla); other cards, models and the engine backend keep 32. A split
pool's transfer buffer is then whole 64-token blocks, as the transceiver requires."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import cast

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.candidate import Candidate
from ridgeline.datafiles import engine_defaults
from ridgeline.disaggregated import pool_transceiver
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.plan import PlanResult
from ridgeline.reports.plan_commands import PlanCommands
from ridgeline.serving_load import Load
from ridgeline.trtllm_memory import tokens_per_block
from ridgeline.yaml_subset import parse_yaml
from tests.conftest import run_cli

FLASH = engine_defaults("trtllm")["flash_mla"]
DEFAULT_BLOCK = int(engine_defaults("trtllm")["tokens_per_block"])
LOAD = Load(2.0, "2000", "200")  # a 2,000-token prompt: whole 32-token blocks, not 64-token
MAX_LEN = 16384


def _dep(model: str, gpu: str, n: int) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, None, n,
                            engine="trtllm")


def _block(dep: Deployment, settings: EngineSettings | None = None) -> int:
    return kv_pool(dep, settings or EngineSettings(max_model_len=8192)).block_size


def test_deepseek_v3_on_hopper_pages_in_flash_mlas_blocks_and_elsewhere_in_the_default() -> None:
    """DeepSeek-V3 (kv_lora_rank 512 + qk_rope_head_dim 64) on 8 H200s: 64-token blocks, the
    pool's bytes unchanged; on B200s (SM 10.0), and Llama on an H100, the default 32."""
    mla = resolve_model("deepseek-v3").attention.mla  # type: ignore[union-attr]
    assert mla is not None and mla.kv_lora_rank + mla.qk_rope_head_dim == FLASH["latent_width"]
    hopper = _dep("deepseek-v3", "h200", 8)
    assert hopper.accelerator.family in FLASH["families"]
    assert _block(hopper) == FLASH["tokens_per_block"] != DEFAULT_BLOCK
    blackwell = _dep("deepseek-v3", "b200", 8)
    assert blackwell.accelerator.family not in FLASH["families"]
    assert _block(blackwell) == DEFAULT_BLOCK
    assert _block(_dep("llama-3.1-70b", "h100", 2)) == DEFAULT_BLOCK
    # the TensorRT engine backend has no FlashMLA path, and builds no DeepseekV3ForCausalLM
    assert tokens_per_block(hopper, None, "tensorrt") == DEFAULT_BLOCK
    with pytest.raises(InputError, match="builds no DeepseekV3ForCausalLM"):
        _block(hopper, EngineSettings(max_model_len=8192, backend="tensorrt"))
    # the same bytes, paged in fewer, larger blocks: the tokens differ by under one block
    pool = kv_pool(hopper, EngineSettings(max_model_len=8192))
    assert pool.page_bytes == pytest.approx(pool.kv_bytes_per_token * FLASH["tokens_per_block"])


def test_an_asked_block_is_overridden_on_hopper_and_fit_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--tokens-per-block 32 for DeepSeek-V3 on H200s: TensorRT-LLM still runs 64, and fit says
    so; on B200s the 32 asked stands, unremarked."""
    hopper = _dep("deepseek-v3", "h200", 8)
    asked = EngineSettings(max_model_len=8192, block_size=DEFAULT_BLOCK)
    assert _block(hopper, asked) == FLASH["tokens_per_block"]
    assert _block(_dep("deepseek-v3", "b200", 8), asked) == DEFAULT_BLOCK
    code, out, err = run_cli(capsys, "fit", "deepseek-v3", "--engine", "trtllm", "--gpu", "h200",
                             "--num-gpus", "8", "--max-model-len", "8192",
                             "--tokens-per-block", str(DEFAULT_BLOCK))
    assert code == 0, err
    assert "FlashMLA" in err and f"blocks of {FLASH['tokens_per_block']}" in out
    code, out, err = run_cli(capsys, "fit", "deepseek-v3", "--engine", "trtllm", "--gpu", "b200",
                             "--num-gpus", "8", "--max-model-len", "8192",
                             "--tokens-per-block", str(DEFAULT_BLOCK))
    assert code == 0, err
    assert "FlashMLA" not in err and f"blocks of {DEFAULT_BLOCK}" in out


def test_a_split_pools_transfer_buffer_is_whole_flash_mla_blocks() -> None:
    """A 2,000-token longest prompt: 2,016 tokens (63 blocks of 32) for Llama, but 2,048 (32
    blocks of 64) for DeepSeek-V3 on H200s, in the priced pool and in the YAML plan prints,
    which TensorRT-LLM would refuse at 2,016 (maxNumTokens % tokensPerBlock)."""
    block = int(FLASH["tokens_per_block"])
    hopper = _dep("deepseek-v3", "h200", 8)
    priced = pool_transceiver(hopper, LOAD, MAX_LEN)
    assert priced is not None and priced.max_tokens_in_buffer == math.ceil(2000 / block) * block
    llama = pool_transceiver(_dep("llama-3.1-8b", "h100", 1), LOAD, MAX_LEN)
    assert llama is not None
    assert llama.max_tokens_in_buffer == math.ceil(2000 / DEFAULT_BLOCK) * DEFAULT_BLOCK
    result = cast(PlanResult, SimpleNamespace(engine="trtllm", engine_version=None, load=LOAD))
    launch = PlanCommands(resolve_model("deepseek-v3"), "deepseek-v3", result, MAX_LEN)
    split = Candidate("h200-sxm", 8, 1, "fp8-block", "bf16", None, 64, 0.02, 0.3, 1.0, 3, 2.0,
                      False, "", (1.0, 1.0), disaggregated="1P2D", prefill_replicas=1,
                      max_model_len=MAX_LEN, pool_knobs=((None, None), (64, None)))
    files = launch.pool_files(split)
    buffers = [parse_yaml(text, name)["cache_transceiver_config"]["max_tokens_in_buffer"]
               for name, text in files.items() if "cache_transceiver_config" in text]
    assert buffers and all(b == priced.max_tokens_in_buffer for b in buffers)
