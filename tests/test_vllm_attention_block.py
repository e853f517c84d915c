"""vLLM's --block-size against the attention backends that page the cache, from v0.18.0, where
CacheConfig takes any block of 1 token or more: FlashAttention, FlashInfer and Triton attention
take multiples of 16 (MultipleOf(16)); FlexAttention, last in the selector's order, any block
of 16 tokens or more but only a 16-bit cache and no attention sinks (vllm_attention_block.py,
with sources; under 16 its Triton kernel does not compile). A block vLLM finds no backend for
stops in one line; before, any positive block was sized.
"""

from __future__ import annotations

import json

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.deployment import Deployment
from ridgeline.hardware import resolve_accelerator
from ridgeline.vllm_attention_block import (
    BACKEND_PICKS_BLOCK_FROM,
    FLEX_CACHE_BYTES,
    KERNEL_BLOCK_MULTIPLE,
    attention_block_problem,
)
from ridgeline.vllm_memory import vllm_data
from tests.conftest import refused_line, run_cli

RELEASE = ".".join(map(str, BACKEND_PICKS_BLOCK_FROM)) + ".0"


def dep(model: str, gpu: str, kv: str | None = None) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, kv, 1,
                            engine="vllm")


@pytest.mark.parametrize("block", range(1, 70))
def test_a_block_no_multiple_of_16_has_no_backend_for_an_fp8_cache_or_sinks(block: int) -> None:
    fp8 = dep("mistral-7b", "h100", "fp8")
    plain = dep("mistral-7b", "h100")
    sinks = dep("gpt-oss-20b", "h100")
    assert fp8.kv.bytes_per_element < FLEX_CACHE_BYTES <= plain.kv.bytes_per_element
    assert sinks.model.attention is not None and sinks.model.attention.sinks
    off_kernel = block % KERNEL_BLOCK_MULTIPLE != 0
    assert bool(attention_block_problem(fp8, RELEASE, block)) == off_kernel
    assert bool(attention_block_problem(sinks, RELEASE, block)) == off_kernel
    # FlexAttention runs a 16-bit cache in any block of 16 tokens or more, none under it
    assert bool(attention_block_problem(plain, RELEASE, block)) == (block < 16)


def test_the_rule_starts_with_the_release_that_reads_the_block_before_the_backend() -> None:
    fp8 = dep("mistral-7b", "h100", "fp8")
    assert attention_block_problem(fp8, "0.17.1", 8) == ""  # its BlockSize list decides
    assert attention_block_problem(dep("mistral-7b", "mi300x", "fp8"), RELEASE, 8) == ""


def test_fit_refuses_the_block_in_one_line_naming_the_backends_and_takes_a_multiple_of_16(
        capsys: pytest.CaptureFixture[str]) -> None:
    fit = ("fit", "mistral-7b", "--gpu", "h100", "--max-model-len", "8k", "--kv-dtype", "fp8")
    code, out, err = run_cli(capsys, *fit, "--block-size", "8")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "finds no attention backend for --block-size 8" in err
    assert "FlexAttention, which takes any block of 16 tokens or more, keeps no fp8 cache" in err
    # 48: a multiple of 16, paged in blocks of 48 (FlashInfer's split into 16-token kernel
    # blocks changes no memory)
    code, out, err = run_cli(capsys, *fit, "--block-size", "48", "--json")
    assert code == 0, err
    assert json.loads(out)["block_size"] == 48
    # a bf16 cache at block 24 runs on FlexAttention; the fp8-cache lever is left out there
    code, out, err = run_cli(capsys, *fit[:-2], "--block-size", "24", "--json")
    assert code == 0, err
    assert json.loads(out)["block_size"] == 24


@pytest.mark.parametrize("command", [
    ("fit", "--max-model-len", "8k"), ("decode", "--context", "8k", "--batch", "4"),
    ("simulate", "--max-model-len", "8k", "--rate", "2", "--num-requests", "20")])
def test_a_block_under_16_finds_no_backend_even_with_a_16_bit_cache(
        capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    """FlexAttention's Triton kernel does not compile for a block under 16 tokens (vLLM issue
    #41339; the selector refuses it from PR #41363). Before, a bf16 Llama at --block-size 8
    was sized as running on FlexAttention."""
    name, *rest = command
    line = refused_line(capsys, name, "llama-3.1-8b", "--gpu", "h100", *rest,
                        "--block-size", "8")
    default = vllm_data()["default_version"]
    assert line == (f"ridgeline: error: vLLM {default} (the default --engine-version) finds no "
                    "attention backend for --block-size 8 with llama-3.1-8b on h100-sxm: "
                    "FlashAttention, FlashInfer and Triton attention take blocks of a multiple "
                    "of 16 tokens, and FlexAttention, which takes any block of 16 tokens or "
                    "more, takes none under 16 (its Triton kernel does not compile); give a "
                    "--block-size that is a multiple of 16")
