"""fit's levers on a hybrid's recurrent state, each checked by re-running fit with its flag:
vLLM without prefix caching (one state block a request where "align" mode holds three), and
SGLang's state pool sized by --max-mamba-cache-size at the slots its KV cache can run; and
the data-parallel caution's name for a dense model's ranks (replicas, not data-parallel
attention)."""

from __future__ import annotations

import json

import pytest

from ridgeline.cli import main

NEMOTRON = ["nemotron-h-56b", "--gpu", "h100", "-tp", "2", "--max-model-len", "8192"]
QWEN_NEXT = ["qwen3-next-80b-a3b", "--gpu", "h100", "-tp", "4", "--max-model-len", "65536",
             "--engine", "sglang"]


def fit_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["fit", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def lever(report: dict, start: str) -> dict:
    [found] = [v for v in report["levers"] if v["name"].startswith(start)]
    return found


def test_vllm_hybrid_is_offered_prefix_caching_off_at_the_count_fit_gives_with_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Nemotron-H-56B on 2 H100s at 8K, vLLM 0.32: prefix caching's "align" mode holds 3
    state blocks a request in each of its 6 state groups, so the pool holds 9 conversations;
    without it, one block each, 23. The lever names vLLM's flag and its cost."""
    plain = fit_json(capsys, *NEMOTRON)
    off = lever(plain, "--no-enable-prefix-caching")
    assert "not 3" in off["name"] and "prefix-cache hits" in off["name"]
    rerun = fit_json(capsys, *NEMOTRON, "--no-enable-prefix-caching")
    assert ((off["conversations"], off["engine_max_batch"])
            == (rerun["conversations"], rerun["engine_max_batch"]))
    assert off["conversations"] > plain["conversations"]


def test_no_prefix_caching_lever_where_it_gains_nothing_or_is_off(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A dense model keeps no state: no lever; prefix caching already off: none either; and
    vLLM 0.20, where a hybrid runs without it by default, none."""
    for args in (["llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192"],
                 [*NEMOTRON, "--no-enable-prefix-caching"],
                 [*NEMOTRON, "--engine-version", "0.20"]):
        report = fit_json(capsys, *args)
        assert not [v for v in report["levers"]
                    if v["name"].startswith("--no-enable-prefix-caching")]


def test_sglang_hybrid_is_offered_the_state_pool_its_kv_cache_can_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-Next-80B on 4 H100s at 65K under SGLang: mamba_full_memory_ratio 0.9 carves 701
    slots and leaves the KV cache 18 conversations. The lever's --max-mamba-cache-size is 3
    slots for each request the batch then runs, the largest such batch: fit re-run with it
    gives the lever's figures, and one more request's slots run no more."""
    plain = fit_json(capsys, *QWEN_NEXT)
    sized = lever(plain, "--max-mamba-cache-size")
    flag = int(sized["name"].split()[1])
    assert flag % 3 == 0 and flag < plain["state_pool"]["slots"]
    rerun = fit_json(capsys, *QWEN_NEXT, "--max-mamba-cache-size", str(flag))
    assert ((sized["conversations"], sized["engine_max_batch"])
            == (rerun["conversations"], rerun["engine_max_batch"]))
    assert sized["engine_max_batch"] == flag // 3 > plain["engine_max_batch"]
    more = fit_json(capsys, *QWEN_NEXT, "--max-mamba-cache-size", str(flag + 3))
    assert more["engine_max_batch"] <= sized["engine_max_batch"]
    # at the lever's size the pool is already right: no lever again
    assert not [v for v in rerun["levers"] if v["name"].startswith("--max-mamba-cache-size")]


def test_sglang_state_lever_under_data_parallel_attention_is_the_servers_flag(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Under --enable-dp-attention SGLang divides --max-mamba-cache-size by --dp-size: the
    lever gives the server's flag, and fit re-run with it gives the lever's figures."""
    dp = [*QWEN_NEXT, "--dp-size", "4", "--enable-dp-attention", "--enable-expert-parallel"]
    plain = fit_json(capsys, *dp)
    sized = lever(plain, "--max-mamba-cache-size")
    flag = int(sized["name"].split()[1])
    assert flag % (3 * 4) == 0
    rerun = fit_json(capsys, *dp, "--max-mamba-cache-size", str(flag))
    assert ((sized["conversations"], sized["engine_max_batch"])
            == (rerun["conversations"], rerun["engine_max_batch"]))
    assert sized["engine_max_batch"] > plain["engine_max_batch"]


def test_dense_data_parallel_ranks_are_called_replicas_not_attention(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-dp 2 on a dense model runs two whole replicas; data-parallel attention is a MoE's
    layout (its experts shared over the ranks), and its caution keeps that name."""
    assert main(["fit", "llama-3.1-8b", "--gpu", "h100", "-dp", "2", "--max-model-len",
                 "32768"]) == 0
    dense = capsys.readouterr().out
    assert "data-parallel attention" not in dense
    assert "caution: data parallelism (whole replicas of a dense model): each of the 2 ranks" \
        in dense
    assert main(["fit", "qwen3-30b-a3b", "--gpu", "h100", "-dp", "2", "--max-model-len",
                 "32768", "--enable-expert-parallel"]) == 0
    assert "caution: data-parallel attention: each of the 2 ranks" in capsys.readouterr().out
