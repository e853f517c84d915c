"""vLLM's -dcp (decode_context.py): the pool holds N times the tokens where vLLM multiplies
them, each rank reads 1/N of every sequence's cache in a step, fit offers it as a lever for
an MLA model, and the releases, engines and models vLLM refuses it on are refused here."""

from __future__ import annotations

import json

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.cost import DCP_EXCHANGE, attention_rates, decode_batch, step_terms
from ridgeline.cost import batch_shape as shape_of_batch
from ridgeline.decode_context import DCP_FROM, GQA_FROM, dcp_log_line, release_name
from ridgeline.deployment import Deployment
from ridgeline.hardware import resolve_accelerator
from ridgeline.memory import EngineSettings, kv_pool
from tests.conftest import run_cli

# the vLLM recipe's Kimi-K2-Thinking on 8 x H200 (vllm-project/recipes PR #115), int4 weights,
# in the release it was run on: 715,072 tokens at -tp 8, 5,721,088 at -tp 8 -dcp 8
KIMI = ("fit", "kimi-k2", "--gpu", "h200", "--tensor-parallel-size", "8", "--weights",
        "awq-int4", "--engine-version", "0.11.0", "--max-model-len", "131072", "--json")
DSV3 = ("fit", "deepseek-v3", "--gpu", "h200", "--tensor-parallel-size", "8",
        "--max-model-len", "32768", "--json")


def _deployment(name: str, gpu: str, dcp: int) -> Deployment:
    return Deployment.build(resolve_model(name), resolve_accelerator(gpu), num_gpus=8,
                            engine="vllm", decode_context_parallel_size=dcp)


def test_kimi_k2_at_tp8_dcp8_holds_eight_times_the_tokens_as_the_recipe_logged(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, plain, _ = run_cli(capsys, *KIMI)
    assert code == 0
    code, dealt, _ = run_cli(capsys, *KIMI, "-dcp", "8")
    assert code == 0
    plain_fit, dealt_fit = json.loads(plain), json.loads(dealt)
    block = dealt_fit["block_size"]  # 8 x the rank's own block
    assert block == 8 * plain_fit["block_size"]
    # the recipe's logs: 5,721,088 ÷ 715,072 = 8.0007, one 64-token block a rank apart
    assert abs(dealt_fit["tokens"] - 8 * plain_fit["tokens"]) <= block
    assert dealt_fit["blocks_per_gpu"] == plain_fit["blocks_per_gpu"]  # the same memory
    assert dealt_fit["vllm_max_concurrency"] == pytest.approx(
        8 * plain_fit["vllm_max_concurrency"], rel=0.01)


def test_the_pool_explains_the_multiplication_with_vllms_own_log_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a for a in KIMI if a != "--json"]
    code, out, _ = run_cli(capsys, *argv, "-dcp", "8", "--explain")
    assert code == 0
    assert "Multiplying the GPU KV cache size by the dcp_world_size 8." in out
    dep = _deployment("deepseek-v3", "h200", 8)
    newer = kv_pool(dep, EngineSettings(engine_version="0.20", max_model_len=32768))
    assert "cp_world_size 8 (pcp_world_size 1 * dcp_world_size 8)" in dcp_log_line(newer, 8)
    newest = kv_pool(dep, EngineSettings(max_model_len=32768))  # counts from concurrency
    assert dcp_log_line(newest, 8) == ""


def test_each_rank_reads_an_eighth_of_the_cache_per_decode_step() -> None:
    plain, dealt = _deployment("deepseek-v3", "h200", 1), _deployment("deepseek-v3", "h200", 8)
    assert attention_rates(dealt)[2] * 8 == pytest.approx(attention_rates(plain)[2])
    batch = decode_batch(64, 32000)
    kv = {}
    for dep in (plain, dealt):
        terms = step_terms(dep, shape_of_batch(dep, batch))
        kv[dep.decode_context_parallel_size] = sum(
            b * n for name, _, b, n in terms.work if name == "attention")
        links = dict(terms.link)
        assert (DCP_EXCHANGE in links) == (dep.decode_context_parallel_size > 1)
    assert kv[8] < kv[1] / 7  # the latent read once over the ranks, not on each of them


def test_decode_steps_faster_with_dcp_at_long_context(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("decode", "deepseek-v3", "--gpu", "h200", "--tensor-parallel-size", "8",
            "--batch", "16", "--context", "32000", "--json")
    code, plain, _ = run_cli(capsys, *argv)
    code2, dealt, _ = run_cli(capsys, *argv, "-dcp", "8")
    assert code == code2 == 0
    before, after = json.loads(plain)["points"][0], json.loads(dealt)["points"][0]
    assert after["kv_bytes_read"] == pytest.approx(before["kv_bytes_read"] / 8)
    assert after["step_time_s"] < before["step_time_s"]
    assert any("-dcp 8" in c for c in json.loads(dealt)["cautions"])


def test_fit_offers_dcp_for_an_mla_model_at_tp8_with_the_pool_a_run_with_it_gets(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, *DSV3)
    assert code == 0
    lever = next(lv for lv in json.loads(out)["levers"] if lv["name"].startswith("-dcp 8"))
    code, run, _ = run_cli(capsys, *DSV3, "-dcp", "8")
    assert code == 0 and json.loads(run)["conversations"] == lever["conversations"]
    assert lever["conversations"] > 7 * json.loads(out)["conversations"]


@pytest.mark.parametrize("argv", [
    ("fit", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "8", "--json"),  # GQA
    (*DSV3, "--engine-version", "0.10.1"),  # before -dcp
    (*DSV3, "--engine", "sglang"),
])
def test_no_dcp_lever_where_vllm_has_none_to_give(capsys: pytest.CaptureFixture[str],
                                                  argv: tuple[str, ...]) -> None:
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    assert not any(lv["name"].startswith("-dcp") for lv in json.loads(out)["levers"])


@pytest.mark.parametrize(("argv", "words"), [
    (("fit", "deepseek-v3", "--gpu", "h200", "--tensor-parallel-size", "8", "-dcp", "3"),
     "does not divide --tensor-parallel-size 8"),
    (("fit", "deepseek-v3", "--gpu", "h200", "--tensor-parallel-size", "8", "-dcp", "8",
      "--engine", "sglang"), "is vLLM's"),
    (("decode", "deepseek-v3", "--gpu", "h200", "--tensor-parallel-size", "8", "-dcp", "8",
      "--engine-version", "0.10.1"), "came in vLLM v0.10.2"),
    (("fit", "deepseek-v3", "--gpu", "h200", "--tensor-parallel-size", "8", "-dcp", "8",
      "--engine-version", "0.10.2 V0"), "V0 engine"),
    (("fit", "deepseek-v3", "--gpu", "a100", "--tensor-parallel-size", "8", "-dcp", "8",
      "--engine-version", "0.10.2"), "Triton MLA"),
    (("fit", "deepseek-v3", "--gpu", "b200", "--tensor-parallel-size", "8", "-dcp", "8",
      "--engine-version", "0.20"), "FlashInfer MLA"),
    (("fit", "deepseek-v3", "--gpu", "h200", "--tensor-parallel-size", "8", "-dcp", "8",
      "--kv-dtype", "fp8", "--engine-version", "0.24"), "fp8"),
    (("fit", "qwen3-235b-a22b", "--gpu", "h200", "--tensor-parallel-size", "8", "-dcp", "2",
      "--engine-version", "0.11.0"), "v0.11.1"),
    (("fit", "qwen3-235b-a22b", "--gpu", "h200", "--tensor-parallel-size", "8", "-dcp", "4"),
     "tp_size ÷ KV heads = 2"),
    (("prefill", "gpt-oss-120b", "--gpu", "h200", "--tensor-parallel-size", "8", "-dcp", "2",
      "--prompt-len", "4000"), "sliding window"),
])
def test_dcp_is_refused_where_vllm_refuses_it(capsys: pytest.CaptureFixture[str],
                                              argv: tuple[str, ...], words: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert words in err and len(err.strip().splitlines()) == 1


def test_gqa_dcp_deals_only_the_copies_tp_made() -> None:
    """Qwen3-235B's 4 KV heads at TP8: each head on 2 ranks; -dcp 2 leaves one copy."""
    plain = Deployment.build(resolve_model("qwen3-235b-a22b"), resolve_accelerator("h200"),
                             num_gpus=8, engine="vllm")
    dealt = Deployment.build(resolve_model("qwen3-235b-a22b"), resolve_accelerator("h200"),
                             num_gpus=8, engine="vllm", decode_context_parallel_size=2)
    assert plain.kv_replication == 2 and dealt.kv_replication == 1
    settings = EngineSettings(max_model_len=40960)
    assert kv_pool(dealt, settings).tokens == pytest.approx(
        2 * kv_pool(plain, settings).tokens, abs=kv_pool(dealt, settings).block_size)


def test_dcp_on_an_mi250x_counts_vllms_ranks_its_dies() -> None:
    """4 x MI250X run at vLLM's --tensor-parallel-size 8: -dcp 8 divides it and is taken, and
    its exchange gathers every head, as 8 H200s' -dcp 8 does; -dcp 16 is refused."""
    from ridgeline.decode_context import dcp_exchange_bytes
    from ridgeline.errors import InputError

    model, mi250x = resolve_model("deepseek-v3"), resolve_accelerator("mi250x")
    dies = Deployment.build(model, mi250x, "awq-int4", num_gpus=4, engine="vllm",
                            decode_context_parallel_size=8)
    assert dies.engine_tensor_parallel_size == 8 == 4 * mi250x.runtime_devices
    h200 = Deployment.build(model, resolve_accelerator("h200"), "awq-int4", num_gpus=8,
                            engine="vllm", decode_context_parallel_size=8)
    assert dcp_exchange_bytes(dies, 64) == dcp_exchange_bytes(h200, 64)
    with pytest.raises(InputError, match="does not divide --tensor-parallel-size 8"):
        Deployment.build(model, mi250x, "awq-int4", num_gpus=4, engine="vllm",
                         decode_context_parallel_size=16)


@pytest.mark.parametrize(("first", "argv"), [
    (DCP_FROM, ("fit", "deepseek-v3", "--gpu", "h200", "--tensor-parallel-size", "8",
                "-dcp", "8", "--max-model-len", "32768")),
    (GQA_FROM, ("fit", "qwen3-235b-a22b", "--gpu", "h200", "--tensor-parallel-size", "8",
                "-dcp", "2", "--max-model-len", "40960")),
])
def test_dcp_is_read_from_the_first_release_that_shipped_it_and_refused_before(
        capsys: pytest.CaptureFixture[str], first: tuple[int, ...],
        argv: tuple[str, ...]) -> None:
    """MLA's -dcp from v0.10.2 (PR #23734 in its highlights), GQA's from v0.11.1 (PR #24864,
    merged after v0.11.0 was out): the first release prices it, the patch before refuses it."""
    major, minor, patch = first
    assert patch > 0  # the release before is the same minor's previous patch
    since, before = release_name(first), f"{major}.{minor}.{patch - 1}"
    code, out, err = run_cli(capsys, *argv, "--engine-version", since, "--json")
    assert code == 0, err
    assert json.loads(out)["decode_context_parallel_size"] == int(argv[argv.index("-dcp") + 1])
    code, out, err = run_cli(capsys, *argv, "--engine-version", before)
    assert code == 2 and out == ""
    assert f"came in vLLM v{since}" in err and f"vLLM {before} " in err
