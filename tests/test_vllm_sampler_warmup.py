"""vLLM 0.33's 'warmup-param' sampler pass: Model Runner V2's profile samples its dummy
requests a second time with every sampling feature on, so the logits go to fp32 and through
FlashInfer's top-k/top-p, and that peak comes out of the pool (engines.json memory_versions
0.33, vllm.mrv2.warmup_logit_copies); 0.33 also keeps a GB10 on the small batch defaults."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.units import GIB
from ridgeline.vllm_memory import (
    mrv2_sampler_bytes,
    mrv2_warmup_sampler_bytes,
    past_modelled,
    vllm_accounting,
)
from ridgeline.vllm_pool import vllm_batch_defaults


def dep(model: str, gpu: str = "h100", n: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, None, n)


def pools(d: Deployment, **settings: object) -> tuple:
    return tuple(kv_pool(d, EngineSettings(engine_version=v, **settings))  # type: ignore[arg-type]
                 for v in ("0.32", "0.33"))


def test_the_warmup_pass_holds_three_fp32_copies_of_the_dummy_rows_logits() -> None:
    """Llama-3.1-8B at 1,024 rows: 3 × 1,024 × 128,256 × 4 B = 1.47 GiB."""
    llama = dep("llama-3.1-8b")
    warm = mrv2_warmup_sampler_bytes(llama, 1024)
    assert warm == 3 * 1024 * llama.model.vocab_size * 4
    assert warm / GIB == pytest.approx(1.468, abs=0.001)
    assert vllm_accounting("0.33").mrv2_sampler_warmup
    assert not vllm_accounting("0.32").mrv2_sampler_warmup


def test_the_sampler_peak_grows_by_the_warmup_pass_less_the_greedy_partials() -> None:
    llama = dep("llama-3.1-8b")
    greedy, warm = (mrv2_sampler_bytes(llama, 1024, 8192, w) for w in (False, True))
    partials = 12 * 1024 * -(-llama.model.vocab_size // 1024)
    assert warm - greedy == pytest.approx(mrv2_warmup_sampler_bytes(llama, 1024) - partials)


def test_gpt_oss_120b_on_two_h100s_loses_the_warmup_pass_from_its_pool() -> None:
    """gpt-oss-120b at TP2, 131,072 tokens: its sampler binds on 0.33 (2.73 GiB, above the
    forward pass and a cold compile), so the pool is smaller by its excess over 0.32's peak:
    38.50 → 37.16 GiB a GPU."""
    old, new = pools(dep("gpt-oss-120b", n=2), max_model_len=131072)
    assert old.runner == new.runner == "MRV2"
    assert new.activation_bytes == new.sampler_bytes > old.activation_bytes > old.sampler_bytes
    rows = min(new.max_num_seqs, new.profile_tokens)
    assert new.sampler_bytes - old.sampler_bytes < mrv2_warmup_sampler_bytes(dep("gpt-oss-120b"),
                                                                              rows)
    assert old.pool_bytes - new.pool_bytes == pytest.approx(
        new.sampler_bytes - old.activation_bytes, rel=1e-9)
    assert (old.pool_bytes - new.pool_bytes) / GIB == pytest.approx(1.34, abs=0.01)


def test_a_cold_compile_can_still_hide_the_warmup_pass() -> None:
    """Llama-3.1-8B on an H100: the forward pass and a cold torch.compile (1.84 GiB) still
    exceed the warm-up sampler (1.78 GiB), so 0.33 sizes the same pool; with a warm compile
    cache the sampler binds and the pool shrinks by its excess over the forward pass."""
    llama = dep("llama-3.1-8b")
    cold = pools(llama, max_model_len=8192)
    assert cold[0].pool_bytes == cold[1].pool_bytes
    old, new = pools(llama, max_model_len=8192, warm_compile_cache=True)
    assert new.activation_bytes == new.sampler_bytes > old.activation_bytes == old.forward_bytes
    assert old.pool_bytes - new.pool_bytes == pytest.approx(
        new.sampler_bytes - old.forward_bytes, rel=1e-9)


def test_the_v1_runner_has_no_warmup_pass() -> None:
    """The warm-up pass is Model Runner V2's: a release that runs Llama on the V1 runner
    (0.24) keeps V1's sampler rule."""
    llama = dep("llama-3.1-8b")
    v1 = kv_pool(llama, EngineSettings(engine_version="0.24", max_model_len=8192))
    assert v1.runner == "V1" and not vllm_accounting("0.24").mrv2_sampler_warmup


def test_a_gb10_takes_the_small_batch_defaults_on_0_32_and_0_33() -> None:
    """0.33 keeps a GB10 off the 70 GiB tier by its compute capability; 0.32 could not read
    its memory through NVML and took the small budgets too (test_vllm_batch_tiers)."""
    gb10, l40s = dep("llama-3.1-8b", "gb10"), dep("llama-3.1-8b", "l40s")
    h100 = dep("llama-3.1-8b", "h100")
    assert vllm_batch_defaults(gb10, "serve", "0.32") == vllm_batch_defaults(l40s, "serve")
    assert vllm_batch_defaults(gb10, "serve", "0.33") == vllm_batch_defaults(l40s, "serve")
    assert vllm_batch_defaults(h100, "serve", "0.33") == vllm_batch_defaults(h100, "serve")
    old, new = pools(gb10, max_model_len=8192)
    small = vllm_batch_defaults(l40s, "serve")["max_num_seqs"]
    assert old.max_num_seqs == new.max_num_seqs == small


def test_0_34_is_read_and_a_later_release_cautioned_for_its_sizing_after_warm_up() -> None:
    assert past_modelled(vllm_accounting("0.34")) == ""  # its extensible KV cache is sized
    caution = past_modelled(vllm_accounting("0.35"))
    assert caution.startswith("vLLM 0.35 is newer than 0.34") and "after warm-up" in caution
