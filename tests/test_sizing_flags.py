"""The launch flags that change how an engine sizes its memory: SGLang's
--max-mamba-cache-size and --mamba-ssm-dtype (a hybrid's state pool), vLLM's
--max-cudagraph-capture-size (its graphs' memory) and SGLang's --cuda-graph-max-bs (its
default reserve), each refused in one line where it has no use."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.kvcache import state_elements
from ridgeline.layouts import LINEAR
from ridgeline.memory import EngineSettings, KVPool, kv_pool
from ridgeline.sglang_hybrid import sglang_state_dtypes
from ridgeline.sglang_memory import sglang_memory_defaults
from ridgeline.vllm_graphs import capture_sizes
from tests.conftest import run_cli

NEXT = "qwen3-next-80b-a3b-thinking"
FIT_NEXT = ("fit", NEXT, "--engine", "sglang", "--gpu", "h200", "--tp-size", "4",
            "--context-length", "262144")


def next_on_h200(**settings: Any) -> tuple[Deployment, KVPool]:
    """Qwen3-Next on four H200s under SGLang at 256K, its pool under ``settings``."""
    dep = Deployment.build(resolve_model(NEXT), resolve_accelerator("h200"), num_gpus=4,
                           engine="sglang")
    return dep, kv_pool(dep, EngineSettings(max_model_len=262144, **settings))


def per_request_bytes(dep: Deployment, ssm_bytes: int) -> float:
    """Qwen3-Next's recurrent state per request per GPU: bf16 conv, the SSM at ``ssm_bytes``."""
    model = dep.model
    linear = [layer for layer in model.layers if layer.mixer == LINEAR]
    conv, ssm = state_elements(model, linear[0])
    return len(linear) * (conv * 2 + ssm * ssm_bytes) / dep.tensor_parallel_size


def test_max_mamba_cache_size_sets_the_state_pool_and_the_kv_cache_gets_the_rest() -> None:
    """--max-mamba-cache-size 256: the state pool is 256 requests' states (bf16 conv, fp32
    SSM), not mamba_full_memory_ratio's 0.9 ÷ 1.9 of the static pool, and the KV cache
    grows by what the carve had taken beyond them; with the radix cache on (0.5.7+) a
    running request takes three of the slots, so 85 run."""
    dep, carved = next_on_h200()
    _, pool = next_on_h200(max_mamba_cache_size=256)
    per = per_request_bytes(dep, 4)
    assert pool.state_request_bytes == pytest.approx(per)
    assert pool.state_slots == 256 and pool.state_pool_fixed
    assert pool.slot_cache_bytes == pytest.approx(256 * per)
    assert pool.pool_bytes == carved.pool_bytes  # the static pool is the same either way
    assert pool.state_kv_bytes - carved.state_kv_bytes == pytest.approx(
        carved.slot_cache_bytes - pool.slot_cache_bytes)
    assert pool.max_num_seqs == 256 // 3


def test_before_0_5_7_the_radix_cache_overwrites_the_flag_with_the_ratios_carve() -> None:
    """SGLang 0.5.3.post2-0.5.6 reads --max-mamba-cache-size only with its radix cache off;
    with it on, the ratio's carve overwrites it (handle_max_mamba_cache)."""
    _, carved = next_on_h200(engine_version="0.5.6")
    _, flagged = next_on_h200(engine_version="0.5.6", max_mamba_cache_size=256)
    _, radix_off = next_on_h200(engine_version="0.5.6", max_mamba_cache_size=256,
                                prefix_caching=False)
    assert flagged == carved
    assert radix_off.state_slots == 256 and radix_off.max_num_seqs == 256


def test_bfloat16_ssm_state_halves_the_ssm_part_of_each_requests_state() -> None:
    """--mamba-ssm-dtype bfloat16 keeps the SSM state at 2 B an element, the conv state
    staying bf16: Qwen3-Next's state per request drops from 24,576 × 2 + 524,288 × 4 B a
    layer to 24,576 × 2 + 524,288 × 2 B, and the carved pool holds about twice the slots."""
    dep, fp32 = next_on_h200()
    _, bf16 = next_on_h200(mamba_ssm_dtype="bfloat16")
    assert sglang_state_dtypes(dep.model, "bfloat16") == ("bf16", "bf16")
    assert fp32.state_request_bytes == pytest.approx(per_request_bytes(dep, 4))
    assert bf16.state_request_bytes == pytest.approx(per_request_bytes(dep, 2))
    ssm_fp32 = fp32.state_request_bytes - per_request_bytes(dep, 0)
    assert fp32.state_request_bytes - bf16.state_request_bytes == pytest.approx(ssm_fp32 / 2)
    assert bf16.state_slots > 1.9 * fp32.state_slots


def test_fit_prints_the_flags_state_pool(capsys: pytest.CaptureFixture[str]) -> None:
    """fit's budget, its lines and --explain name the flag that set the state pool, and the
    three slots each running request takes beside the radix cache."""
    code, default, _ = run_cli(capsys, *FIT_NEXT)
    code_set, flagged, _ = run_cli(capsys, *FIT_NEXT, "--max-mamba-cache-size", "256",
                                   "--explain")
    assert code == code_set == 0
    # the flag is named in the default's levers (fit_state_levers), not in its budget
    budget = default.split("\nlevers:")[0]
    assert "--max-mamba-cache-size" not in budget and "mamba_full_memory_ratio 0.9" in budget
    assert "− state pool (256 requests' state" in flagged
    assert "a running request takes 3 slots" in flagged
    assert "state slots = 256" in flagged


def test_max_cudagraph_capture_size_caps_vllms_captured_sizes_and_their_memory() -> None:
    """vLLM v0.11.1+ captures 1, 2, 4, every 8 below 256, every 16 to the cap: 51 sizes to
    the default 512, 19 to --max-cudagraph-capture-size 128; the v0.21+ graph estimate falls
    in step and the pool grows by the difference."""
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           engine="vllm")
    default = kv_pool(dep, EngineSettings(max_model_len=8192))
    capped = kv_pool(dep, EngineSettings(max_model_len=8192, max_cudagraph_capture_size=128))
    assert capture_sizes(256) == 51 and capture_sizes(256, 128) == 19
    assert capped.cuda_graph_bytes == pytest.approx(default.cuda_graph_bytes * 19 / 51)
    assert capped.rest_bytes - default.rest_bytes == pytest.approx(
        default.cuda_graph_bytes - capped.cuda_graph_bytes)


def test_vllm_captures_no_batch_past_its_token_budget() -> None:
    """vLLM caps the captured sizes at max_num_batched_tokens after the flag or its default
    (_set_cudagraph_sizes): under a 1,024-token budget a cap of 2,048 captures what 1,024 does,
    and a 256-token budget trims the default 512 to 256 (35 sizes, not 51)."""
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           engine="vllm")
    at, past = (kv_pool(dep, EngineSettings(max_model_len=8192, max_num_batched_tokens=1024,
                                            max_cudagraph_capture_size=cap))
                for cap in (1024, 2048))
    assert past.cuda_graph_bytes == at.cuda_graph_bytes and past.rest_bytes == at.rest_bytes
    small = kv_pool(dep, EngineSettings(max_model_len=8192, max_num_batched_tokens=256))
    full = kv_pool(dep, EngineSettings(max_model_len=8192, max_num_batched_tokens=8192))
    trimmed = capture_sizes(small.max_num_seqs, None, 256)
    assert small.max_num_seqs == 256 and trimmed == capture_sizes(256, 256) == 35
    assert small.cuda_graph_bytes == pytest.approx(
        full.cuda_graph_bytes * trimmed / capture_sizes(full.max_num_seqs))


def test_cuda_graph_max_bs_moves_sglangs_default_reserve_2_mib_a_batch() -> None:
    """From 0.5.3 SGLang reserves cuda_graph_max_bs × 2 MiB of the card for its graphs when
    mem_fraction_static is unset: on an H100 at TP1, 256 by default; --cuda-graph-max-bs 64
    reserves 384 MiB less and the fraction rises. The tier reserve before 0.5.3 ignores it."""
    h100 = 81_559 * 2**20
    default = sglang_memory_defaults(h100)
    given = sglang_memory_defaults(h100, cuda_graph_max_bs=64)
    assert default.cuda_graph_max_bs == 256 and given.cuda_graph_max_bs == 64
    assert default.reserved_mib - given.reserved_mib == (256 - 64) * 2
    assert given.mem_fraction_static > default.mem_fraction_static
    tier = sglang_memory_defaults(h100, version="0.5.2", cuda_graph_max_bs=64)
    assert tier.reserved_mib == sglang_memory_defaults(h100, version="0.5.2").reserved_mib
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           engine="sglang")
    pool = kv_pool(dep, EngineSettings(max_model_len=8192, max_cudagraph_capture_size=64))
    assert pool.reserved_fraction == given.mem_fraction_static
    assert pool.pool_bytes > kv_pool(dep, EngineSettings(max_model_len=8192)).pool_bytes


@pytest.mark.parametrize("argv, says", [
    (("--max-mamba-cache-size", "0"), "must be positive"),
    (("--max-mamba-cache-size", "-4"), "must be positive, got '-4'"),
    (("--max-mamba-cache-size", "many"), "whole number"),
    (("--mamba-ssm-dtype", "fp8"), "invalid choice"),
    (("--cuda-graph-max-bs", "0"), "must be positive"),
    (("--max-cudagraph-capture-size", "x"), "whole number"),
    (("--max-mamba-cache-size", "256", "--engine-version", "0.5.2"), "from 0.5.3.post2"),
    (("--mamba-ssm-dtype", "float16", "--engine-version", "0.5.8"), "float16 from 0.5.9"),
    (("--cuda-graph-max-bs", "64", "--engine-version", "0.3.4"), "came in SGLang 0.3.5"),
])
def test_bad_values_and_releases_are_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], says: str) -> None:
    code, out, err = run_cli(capsys, *FIT_NEXT, *argv)
    assert code == 2 and not out and says in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, says", [
    (("fit", NEXT, "--gpu", "h200", "--tp", "4", "--context-length", "262144",
      "--max-mamba-cache-size", "256"), "is SGLang's; vllm has no such setting"),
    (("fit", NEXT, "--gpu", "h200", "--tp", "4", "--context-length", "262144",
      "--mamba-ssm-dtype", "bfloat16"), "is SGLang's; vllm has no such setting"),
    (("fit", "llama-3.1-8b", "--engine", "sglang", "--gpu", "h100", "--context-length", "8192",
      "--max-mamba-cache-size", "256"), "llama-3.1-8b has none"),
    (("fit", "llama-3.1-8b", "--engine", "trtllm", "--gpu", "h100", "--context-length", "8192",
      "--cuda-graph-max-bs", "64"), "trtllm has no such setting"),
    (("decode", "llama-3.1-8b", "--engine", "trtllm", "--gpu", "h100",
      "--cuda-graph-max-bs", "64"), "trtllm has no such setting"),
    (("fit", "llama-3.1-8b", "--gpu", "h100", "--context-length", "8192",
      "--max-cudagraph-capture-size", "64", "--engine-version", "0.10"), "v0.11.1"),
])
def test_each_flag_is_refused_on_an_engine_or_model_without_it(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], says: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out and says in err and len(err.strip().splitlines()) == 1


def test_decode_prefill_and_simulate_take_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    sglang = ("--engine", "sglang", "--gpu", "h200", "--tp", "4")
    code, _, err = run_cli(capsys, "decode", NEXT, *sglang, "--batch", "8",
                           "--max-mamba-cache-size", "256", "--mamba-ssm-dtype", "bfloat16")
    assert code == 0, err
    code, _, err = run_cli(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100",
                           "--prompt-len", "1000", "--max-cudagraph-capture-size", "64")
    assert code == 0, err
    code, out, err = run_cli(capsys, "simulate", NEXT, *sglang, "--max-mamba-cache-size",
                             "30", "--num-requests", "20", "--concurrency", "10",
                             "--input-len", "1000", "--output-len", "20")
    assert code == 0, err
    assert "max_running_requests 10" in out  # 30 slots, three a running request


def test_a_tp_launch_whose_state_pool_no_dp_lever_can_divide_still_gets_its_answer(
        capsys: pytest.CaptureFixture[str]) -> None:
    """fit's DP-attention lever re-sizes the pool over TP-many ranks, each taking the server's
    --max-mamba-cache-size // ranks; a count smaller than the ranks rules that lever out, not
    the TP4 launch the user gave (review R3: 3 slots at TP4 were refused as '// --dp-size')."""
    code, out, err = run_cli(capsys, *FIT_NEXT, "--max-mamba-cache-size", "3", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["data_parallel"] is None and report["engine_max_batch"] == 1  # 3 slots // 3 a request
    assert not any("DP attention" in lever["name"] for lever in report["levers"])
    # the DP lever is still offered where the count divides over the ranks
    code, out, err = run_cli(capsys, *FIT_NEXT, "--max-mamba-cache-size", "256", "--json")
    assert code == 0, err
    assert any("DP attention" in lever["name"] for lever in json.loads(out)["levers"])


def test_more_ranks_than_the_servers_running_requests_is_said_not_raised(
        capsys: pytest.CaptureFixture[str]) -> None:
    """gpus_needed doubles an SGLang DP2 launch's ranks; --max-running-requests 2 runs on 2
    ranks but not on 4, which the answer says instead of refusing the DP2 launch."""
    argv = ("fit", "qwen3-30b-a3b", "--engine", "sglang", "--gpu", "h100", "--tp-size", "2",
            "--dp-size", "2", "--enable-dp-attention", "--max-running-requests", "2",
            "--context-length", "32768", "--target-concurrency", "5000")
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert "not 4 GPUs of h100-sxm as 4 ranks: --max-running-requests 2" in out
