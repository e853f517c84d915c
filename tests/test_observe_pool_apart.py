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


def modelled_pool() -> tuple[int, int]:
    """The blocks vLLM's defaults leave for Llama-3.1-70B fp8 on 4 H100s, KV fp8, as fit
    sizes them, and the tokens a block holds (v0.34: 64)."""
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"), "fp8",
                           "fp8", num_gpus=4, engine="vllm")
    pool = kv_pool(dep, EngineSettings(max_model_len=CONTEXT))
    return pool.blocks, pool.block_size


def modelled_blocks() -> int:
    return modelled_pool()[0]


BLOCK = modelled_pool()[1]


def scrape(tmp_path: Path, blocks: int, cache_dtype: str = "fp8") -> str:
    m = 'engine="0",model_name="meta-llama/Llama-3.1-70B"'
    path = tmp_path / "m.prom"
    path.write_text(f"vllm:num_requests_running{{{m}}} 40\n"
                    f"vllm:num_requests_waiting{{{m}}} 0\n"
                    f"vllm:kv_cache_usage_perc{{{m}}} 0.1\n"
                    f'vllm:cache_config_info{{block_size="{BLOCK}",cache_dtype="{cache_dtype}",{m},'
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
    share = 1 - reported / blocks
    words = (f"caution: the engine reports a pool of {reported * BLOCK:,} tokens, {share:.0%} "
             f"less than the {blocks * BLOCK:,} tokens modelled for llama-3.1-70b on 4 x "
             "h100-sxm")
    assert words in text
    assert any(c.startswith(words.removeprefix("caution: ")) for c in data["cautions"])


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


@pytest.mark.parametrize("label", ["fp8_inc"])
def test_vllms_other_fp8_cache_spellings_are_cautioned_as_its_fp8(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], label: str) -> None:
    """vLLM's --kv-cache-dtype takes fp8_inc beside fp8, fp8_e4m3 and fp8_e5m2
    (vllm/config/cache.py CacheDType); its cache_config_info labels it as given. Observed as
    bf16, such a server passed without a word (the label named no KV dtype ridgeline knows),
    though its cache is the one-byte fp8 one; described as fp8 it is what the server runs.
    (fp8_ds_mla, DeepSeek-V3.2's 656-byte records, is read as those: test_ds_mla_cache.)"""
    from ridgeline.precision import kv_dtype

    bf16_flags = FLAGS[:FLAGS.index("--kv-dtype")] + FLAGS[FLAGS.index("--kv-dtype") + 2:]
    assert kv_dtype("fp8").bytes_per_element != kv_dtype("bf16").bytes_per_element
    source = scrape(tmp_path, modelled_blocks(), cache_dtype=label)
    text, data = observed(capsys, source, bf16_flags)
    words = (f"caution: the engine's cache_config_info says cache_dtype={label}, not the KV "
             f"bf16 described: give --kv-dtype as the server runs it (fp8, its size)")
    assert words in text and any(c.startswith(words.removeprefix("caution: "))
                                 for c in data["cautions"])
    text, _ = observed(capsys, source)  # --kv-dtype fp8: the server's cache, no caution
    assert "cache_dtype=" not in text


def checkpoint_scrape(tmp_path: Path, cache_dtype: str) -> str:
    """A vLLM server of Llama-3.1-8B on one H100 that has not sized its pool yet
    (num_gpu_blocks None), its cache labelled ``cache_dtype``."""
    m = 'model_name="x"'
    path = tmp_path / f"{cache_dtype}.prom"
    path.write_text(f"vllm:num_requests_running{{{m}}} 10\n"
                    f"vllm:num_requests_waiting{{{m}}} 0\n"
                    f"vllm:kv_cache_usage_perc{{{m}}} 0.1\n"
                    f'vllm:cache_config_info{{block_size="16",cache_dtype="{cache_dtype}",{m},'
                    f'num_gpu_blocks="None"}} 1\n')
    return str(path)


@pytest.mark.parametrize("kv", [(), ("--kv-dtype", "fp8")])
def test_a_compressed_tensors_kv_scheme_under_auto_is_the_fp8_cache_it_sets(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], kv: tuple[str, ...]) -> None:
    """An llm-compressor checkpoint's kv_cache_scheme makes vLLM's cache fp8 as the model
    loads (Attention.__init__), after the API server labelled cache_config_info 'auto': a
    server observed with --kv-dtype fp8, what it runs, was cautioned that its cache was 16-bit;
    described without --kv-dtype it was sized at bf16."""
    from tests.test_checkpoint_kv import COMPRESSED_TENSORS_FP8_KV, checkpoint

    model = checkpoint(tmp_path, COMPRESSED_TENSORS_FP8_KV)
    flags = ("--model", model, "--gpu", "h100", "--context", str(CONTEXT), *kv)
    text, data = observed(capsys, checkpoint_scrape(tmp_path, "auto"), flags)
    assert "cache_dtype=" not in text
    assert not any("cache_dtype=" in c for c in data["cautions"])
    # described as bf16, the caution says what its auto is
    text, _ = observed(capsys, checkpoint_scrape(tmp_path, "auto"),
                       (*flags[:6], "--kv-dtype", "bf16"))
    assert ("cache_dtype=auto, not the KV bf16 described: give --kv-dtype as the server runs "
            "it (its 'auto' is the fp8 cache the checkpoint's kv_cache_scheme sets") in text


def test_a_modelopt_fp8_kv_checkpoint_is_described_with_the_cache_vllm_labels(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM resolves a ModelOpt checkpoint's kv_cache_quant_algo FP8 before it labels its
    cache (fp8_e4m3): described without --kv-dtype, such a server was sized at bf16 and
    cautioned; an 'auto' label is a vLLM that left the checkpoint's fp8 aside, and says so."""
    from tests.test_checkpoint_kv import MODELOPT_FP8_KV, checkpoint

    flags = ("--model", checkpoint(tmp_path, MODELOPT_FP8_KV), "--gpu", "h100", "--context",
             str(CONTEXT))
    text, data = observed(capsys, checkpoint_scrape(tmp_path, "fp8_e4m3"), flags)
    assert "cache_dtype=" not in text
    assert not any("cache_config_info says" in c for c in data["cautions"])
    text, _ = observed(capsys, checkpoint_scrape(tmp_path, "auto"), flags)
    assert ("cache_dtype=auto, not the KV fp8 described: give --kv-dtype as the server runs it "
            "('auto' is the model's own dtype here: this vLLM left the checkpoint's fp8 KV") in text
