"""observe sets the pool the engine reports beside the one `ridgeline fit` models for the
deployment described, and cautions where they part (reports/observe_pool.py POOL_APART)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.reports.observe_pool import POOL_APART
from tests.conftest import run_cli

CONTEXT = 4000
FLAGS = ("--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4", "--weights", "fp8",
         "--kv-dtype", "fp8", "--context", str(CONTEXT))


def modelled_blocks() -> int:
    """The blocks vLLM's defaults leave for Llama-3.1-70B fp8 on 4 H100s, KV fp8, as fit
    sizes them (84,780 of 16)."""
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"), "fp8",
                           "fp8", num_gpus=4, engine="vllm")
    return kv_pool(dep, EngineSettings(max_model_len=CONTEXT)).blocks


def scrape(tmp_path: Path, blocks: int, cache_dtype: str = "fp8") -> str:
    m = 'engine="0",model_name="meta-llama/Llama-3.1-70B"'
    path = tmp_path / "m.prom"
    path.write_text(f"vllm:num_requests_running{{{m}}} 40\n"
                    f"vllm:num_requests_waiting{{{m}}} 0\n"
                    f"vllm:kv_cache_usage_perc{{{m}}} 0.1\n"
                    f'vllm:cache_config_info{{block_size="16",cache_dtype="{cache_dtype}",{m},'
                    f'num_gpu_blocks="{blocks}"}} 1\n')
    return str(path)


def observed(capsys: pytest.CaptureFixture[str], source: str,
             flags: tuple[str, ...] = FLAGS) -> tuple[str, dict]:
    code, text, _ = run_cli(capsys, "observe", source, *flags)
    assert code == 0
    code, out, _ = run_cli(capsys, "observe", source, *flags, "--json")
    assert code == 0
    return text, json.loads(out)


def test_a_pool_the_deployment_described_leaves_gets_no_caution(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = modelled_blocks()
    text, data = observed(capsys, scrape(tmp_path, blocks))
    assert data["pool_blocks_reported"] == data["pool_blocks_modelled"] == blocks
    assert not any("the engine reports a pool" in c for c in data["cautions"])
    assert "the engine reports a pool" not in text


def test_a_reported_pool_far_from_fits_is_cautioned_with_both_counts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An engine reporting 70 % of the blocks fit models (started at a lower
    --gpu-memory-utilization, say) used to pass without a word: its pool sized the batch and
    the flags' deployment priced the step, the two never set side by side."""
    blocks = modelled_blocks()
    reported = int(blocks * 0.7)
    text, data = observed(capsys, scrape(tmp_path, reported))
    assert data["pool_blocks_reported"] == reported and data["pool_blocks_modelled"] == blocks
    share = 1 - reported * 16 / (blocks * 16)
    words = (f"caution: the engine reports a pool of {reported * 16:,} tokens, {share:.0%} less "
             f"than the {blocks * 16:,} tokens modelled for llama-3.1-70b on 4 x h100-sxm")
    assert words in text
    assert any(c.startswith(words) for c in data["cautions"])


def test_a_pool_within_the_models_scatter_is_not_cautioned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = modelled_blocks()
    text, _ = observed(capsys, scrape(tmp_path, int(blocks * (1 + POOL_APART * 0.9))))
    assert "the engine reports a pool" not in text
    text, _ = observed(capsys, scrape(tmp_path, int(blocks * (1 + POOL_APART * 1.1)) + 1))
    assert "more than the" in text


@pytest.mark.parametrize(("cache_dtype", "kv", "cautioned"), [
    ("fp8", "bf16", True), ("fp8_e4m3", "fp8", False), ("auto", "bf16", False),
    ("auto", "fp8", True)])
def test_a_cache_dtype_label_of_another_size_than_described_is_cautioned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], cache_dtype: str, kv: str,
        cautioned: bool) -> None:
    """vLLM's cache_config_info carries the server's --kv-cache-dtype: a server at fp8
    observed as bf16 had its steps priced reading twice the KV it reads, with no word."""
    flags = tuple(kv if f == "fp8" and i == FLAGS.index("--kv-dtype") + 1 else f
                  for i, f in enumerate(FLAGS))
    text, data = observed(capsys, scrape(tmp_path, modelled_blocks(), cache_dtype), flags)
    words = f"cache_config_info says cache_dtype={cache_dtype}, not the KV {kv} described"
    assert (words in text) is cautioned
    assert any(words in c for c in data["cautions"]) is cautioned


@pytest.mark.parametrize("label", ["fp8_inc", "fp8_ds_mla"])
def test_vllms_other_fp8_cache_spellings_are_cautioned_as_its_fp8(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], label: str) -> None:
    """vLLM's --kv-cache-dtype takes fp8_inc and fp8_ds_mla beside fp8, fp8_e4m3 and fp8_e5m2
    (vllm/config/cache.py CacheDType); its cache_config_info labels them as given. Observed as
    bf16, such a server passed without a word (the label named no KV dtype ridgeline knows),
    though its cache is the one-byte fp8 one; described as fp8 it is what the server runs."""
    from ridgeline.precision import kv_dtype

    bf16_flags = FLAGS[:FLAGS.index("--kv-dtype")] + FLAGS[FLAGS.index("--kv-dtype") + 2:]
    assert kv_dtype("fp8").bytes_per_element != kv_dtype("bf16").bytes_per_element
    source = scrape(tmp_path, modelled_blocks(), cache_dtype=label)
    text, data = observed(capsys, source, bf16_flags)
    words = (f"caution: the engine's cache_config_info says cache_dtype={label}, not the KV "
             f"bf16 described: give --kv-dtype as the server runs it (fp8, its size)")
    assert words in text and any(c.startswith(words) for c in data["cautions"])
    text, _ = observed(capsys, source)  # --kv-dtype fp8: the server's cache, no caution
    assert "cache_dtype=" not in text
