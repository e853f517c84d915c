"""What a drafter changes besides memory: SGLang's default max_running_requests under
speculative decoding (32, then 48, set in server_args before anything sizes a pool), and
vLLM's default CUDA-graph capture cap, scaled by 1 + the drafts from v0.13, and its captured
sizes, rounded up to multiples of 1 + the drafts from v0.11.1."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import engine_seat_limit
from ridgeline.datafiles import engine_defaults
from ridgeline.engine_spec import EngineSpec
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sglang_memory import sglang_max_running_requests, sglang_speculative_requests
from ridgeline.vllm_graphs import (
    capture_cap,
    capture_query_len,
    capture_size_list,
    capture_sizes,
    spec_capture_multiple,
    spec_rounded_sizes,
)
from tests.conftest import run_cli

EAGLE3 = EngineSpec(3, "eagle")
L8 = ("llama-3.1-8b", "--gpu", "h100", "--max-model-len", "4k")


def l8_on(engine: str) -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                            num_gpus=1, engine=engine)


def rule_seats(release: str) -> int:
    """The default engines.json gives the newest row at or before ``release``."""
    rows = engine_defaults("sglang")["speculative_max_running_requests"]["rows"]
    return int({row["from"]: row["requests"] for row in rows}[release])


# -- SGLang: a drafter sets max_running_requests -------------------------------------------
@pytest.mark.parametrize(("method", "version", "first"), [
    ("eagle", "0.4.3.post3", "0.4.3.post3"), ("mtp", "0.4.4.post3", "0.4.3.post3"),
    ("eagle", "0.4.4.post4", "0.4.4.post4"), ("mtp", "0.5.9", "0.4.4.post4"),
    ("draft-model", "0.5.2", "0.4.4.post4"), ("ngram", "0.5.3", "0.4.4.post4"),
    ("eagle", None, "0.4.4.post4")])
def test_sglangs_drafter_default_follows_the_release(method: str, version: str | None,
                                                     first: str) -> None:
    assert sglang_speculative_requests(method, version) == rule_seats(first)


@pytest.mark.parametrize(("method", "version"), [
    ("eagle", "0.4.3.post2"), ("mtp", "0.4.3"), ("draft-model", "0.5.1"), ("ngram", "0.5.2"),
    ("", "0.5.9")])
def test_sglang_sets_no_drafter_default_before_its_release_or_without_a_drafter(
        method: str, version: str) -> None:
    assert sglang_speculative_requests(method, version) is None


@pytest.mark.parametrize("version", ["0.4.4", "0.5.9"])
def test_sglang_seats_under_eagle_default_to_the_cap_where_the_release_has_it(
        version: str) -> None:
    dep, plain_settings = l8_on("sglang"), EngineSettings(max_model_len=4096,
                                                          engine_version=version)
    plain = kv_pool(dep, plain_settings)
    drafting = kv_pool(dep, replace(plain_settings, drafter=EAGLE3))
    # without a drafter SGLang derives far more from its tokens; the cap binds
    assert plain.max_num_seqs == sglang_max_running_requests(plain.tokens, 4096, None, version)
    assert plain.max_num_seqs > drafting.max_num_seqs
    assert drafting.max_num_seqs == sglang_speculative_requests("eagle", version)
    # a value given still wins
    given = kv_pool(dep, replace(plain_settings, drafter=EAGLE3, max_num_seqs=200))
    assert given.max_num_seqs == 200


def test_sglang_seats_under_eagle_are_the_tokens_own_before_the_cap_came() -> None:
    dep = l8_on("sglang")
    old = EngineSettings(max_model_len=4096, engine_version="0.4.3")
    drafting = kv_pool(dep, replace(old, drafter=EAGLE3))
    assert drafting.max_num_seqs == kv_pool(dep, old).max_num_seqs
    assert drafting.max_num_seqs > rule_seats("0.4.4.post4")


def test_sglangs_drafter_default_is_the_servers_split_over_data_parallel_ranks() -> None:
    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                           num_gpus=8, engine="sglang", data_parallel_size=8,
                           expert_parallel=True)
    pool = kv_pool(dep, EngineSettings(max_model_len=4096, draft_mtp=True,
                                       drafter=EngineSpec(3, "mtp")))
    cap = sglang_speculative_requests("mtp")
    assert cap is not None
    assert pool.max_num_seqs == cap // 8
    assert engine_seat_limit(pool, dep) == cap


def test_fit_decode_and_simulate_agree_on_sglangs_drafter_seats(
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = ("--engine", "sglang", "--spec-tokens", "3", "--spec-method", "eagle")
    code, out, err = run_cli(capsys, "fit", *L8, *spec, "--json")
    assert code == 0, err
    fitted = json.loads(out)
    cap = sglang_speculative_requests("eagle")
    assert fitted["conversations"] > cap  # the pool holds more; the default binds
    assert fitted["max_num_seqs"] == fitted["engine_max_batch"] == cap
    code, out, err = run_cli(capsys, "fit", *L8, *spec, "--target-concurrency",
                             str(fitted["conversations"]))
    assert code == 0, err
    assert f"at most {cap} run at once (max_running_requests, SGLang's default with a " \
        "drafter)" in out
    code, out, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", *spec,
                             "--batch", "1", "--context", "4000", "--max-model-len", "4k",
                             "--json")
    assert code == 0, err
    assert json.loads(out)["engine_max_batch"][0]["engine_max_batch"] == cap
    code, out, err = run_cli(capsys, "simulate", *L8, *spec, "--concurrency", "64",
                             "--num-requests", "100", "--seed", "1", "--json")
    assert code == 0, err
    simulated = json.loads(out)
    assert simulated["settings"]["max_num_seqs"] == cap
    assert simulated["running"]["max"] <= cap


# -- vLLM: the default capture cap counts the drafts from v0.13 ----------------------------
def test_vllms_capture_cap_grows_with_drafts_on_0_13_and_not_on_0_12() -> None:
    assert capture_query_len(3, "0.12.0") == 1
    assert capture_query_len(3, "0.13.0") == 4
    assert capture_query_len(0, "0.13.0") == 1
    assert capture_query_len(3) == 4  # the newest modelled
    # 32 seats drafting 3: min(2 × 32 × 4, 512) = 256, not 64
    assert capture_cap(32, query_len=4) == 4 * capture_cap(32)
    # docs/simulate.md's worked number: 1, 2, 4, every 8 below 256 and 256 itself, not 1, 2, 4 and
    # every 8 to 64
    assert (capture_sizes(32, query_len=4), capture_sizes(32)) == (35, 11)
    # 256 seats reach 512 either way; a given cap and the token budget still bound it
    assert capture_cap(256, query_len=4) == capture_cap(256)
    assert capture_cap(32, 64, query_len=4) == capture_cap(32, 64)
    assert capture_cap(32, None, 128, query_len=4) == 128


@pytest.mark.parametrize(("version", "grows"), [("0.12.0", False), ("0.13.0", True)])
def test_vllms_graph_memory_counts_the_drafts_from_0_13(version: str, grows: bool) -> None:
    """A pool --kv-cache-memory-bytes sets is checked against the graphs captured after it,
    in any V1 release: 32 seats drafting 3 capture 33 sizes on v0.13 (35 to the cap of 256,
    1, 2 and 4 rounded to 4), 9 on v0.12 (11 to 64, rounded likewise)."""
    dep = l8_on("vllm")
    base = EngineSettings(max_model_len=4096, max_num_seqs=32, engine_version=version,
                          kv_cache_memory_bytes=20_000_000_000, speculative_decoding=True)
    plain, drafting = kv_pool(dep, base), kv_pool(dep, replace(base, drafter=EAGLE3))
    assert plain.cuda_graph_bytes > 0
    drafted = capture_sizes(32, None, None, capture_query_len(3, version),
                            spec_capture_multiple(3, version), version)
    assert drafted == capture_sizes(32, None, None, capture_query_len(3, version)) - 2
    assert (drafting.cuda_graph_bytes > plain.cuda_graph_bytes) is grows
    assert drafting.cuda_graph_bytes == pytest.approx(
        plain.cuda_graph_bytes * drafted / capture_sizes(32))


# -- vLLM: captured sizes rounded to multiples of 1 + the drafts (v0.11.1+) ----------------
@pytest.mark.parametrize("drafts", [1, 2, 3, 4, 8])
def test_vllm_keeps_each_captured_size_a_multiple_of_the_decode_query_once(drafts: int) -> None:
    """adjust_cudagraph_sizes_for_spec_decode: every size rounded up to a multiple of
    1 + drafts, none past the cap, none twice, and each original size still covered by a
    kept one no larger than its rounding."""
    cap, query = 512, 1 + drafts
    sizes = capture_size_list(cap)
    kept = spec_rounded_sizes(sizes, cap, query)
    assert kept == sorted(set(kept))
    assert all(size % query == 0 and size <= cap for size in kept)
    assert all(any(size <= k < size + query for k in kept) for size in sizes
               if -(-size // query) * query <= cap)
    assert len(kept) < len(sizes)  # 1, 2 and 4 share a multiple at the least


def test_three_drafts_capture_49_sizes_and_two_drop_the_top_size_as_the_docstring_says() -> None:
    sizes = capture_size_list(512)
    four, three = spec_rounded_sizes(sizes, 512, 4), spec_rounded_sizes(sizes, 512, 3)
    assert (len(sizes), len(four), len(three)) == (51, 49, 49)
    assert four[0] == 4 and four[-1] == 512  # 1, 2, 4 → 4; every 8 and 16 already a multiple
    assert three[:3] == [3, 6, 9] and three[-1] == 498  # 512 would round to 513, past the cap


@pytest.mark.parametrize(("version", "runner", "tp", "multiple"), [
    ("0.11.0", "V1", 1, 1), ("0.11.1", "V1", 1, 4), ("0.11.1", "V1", 8, 8),
    ("0.11.2", "V1", 8, 4), ("0.24.0", "MRV2", 1, 4), ("0.25.0", "MRV2", 1, 1),
    ("0.32.0", "V1", 2, 4)])
def test_the_rounding_follows_the_release_the_runner_and_011_1s_tp_rule(
        version: str, runner: str, tp: int, multiple: int) -> None:
    """From v0.11.1 (V1's runner; Model Runner V2 in 0.24 only); 0.11.1 alone widens it to
    the tensor-parallel size."""
    assert spec_capture_multiple(3, version, runner, tp) == multiple
    assert spec_capture_multiple(0, version, runner, tp) == 1


def test_vllm_0_11_1_refuses_drafts_whose_query_and_tp_share_no_size(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two drafts at TP2 on v0.11.1: 3 is no multiple of 2, and vLLM raises;
    0.11.2 rounds to 3, and --enforce-eager captures nothing to round."""
    with pytest.raises(InputError, match=r"the larger of 3 .* must be a multiple of the other"):
        spec_capture_multiple(2, "0.11.1", "V1", 2)
    argv = ("fit", *L8, "--num-gpus", "2", "--spec-tokens", "2", "--spec-method", "ngram")
    code, _, err = run_cli(capsys, *argv, "--engine-version", "0.11.1")
    assert code == 2 and "v0.11.1 refuses to start" in err
    assert len(err.strip().splitlines()) == 1
    for extra in (("--engine-version", "0.11.2"), ("--engine-version", "0.11.1",
                                                   "--enforce-eager")):
        code, _, err = run_cli(capsys, *argv, *extra)
        assert code == 0, err


def test_no_multiple_under_the_cap_warns_on_0_11_and_refuses_from_0_12() -> None:
    sizes = capture_size_list(2)  # --max-cudagraph-capture-size 2, three drafts
    assert spec_rounded_sizes(sizes, 2, 4, "0.11.2") == sizes
    with pytest.raises(InputError, match="multiples of 4"):
        spec_rounded_sizes(sizes, 2, 4, "0.12.0")


def test_fit_on_a_v1_runner_release_takes_fewer_graphs_when_drafting(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.24 (V1's runner for Llama, graphs in the budget): 1,024 seats reach the cap of
    512 with or without drafts, and three drafts keep 49 of its 51 sizes."""
    argv = (*L8, "--engine-version", "0.24.0")
    code, out, err = run_cli(capsys, "fit", *argv, "--spec-tokens", "3", "--spec-method",
                             "ngram", "--explain")
    assert code == 0, err
    kept = len(spec_rounded_sizes(capture_size_list(512), 512, 4))
    assert f"layers × {kept} captured sizes" in out
    assert "each rounded up to a multiple of 4 (vLLM v0.11.1+ under speculative decoding)" in out
    dep = l8_on("vllm")
    base = EngineSettings(max_model_len=4096, engine_version="0.24.0")
    plain, drafting = kv_pool(dep, base), kv_pool(dep, replace(base, drafter=EAGLE3))
    assert drafting.cuda_graph_bytes == pytest.approx(
        plain.cuda_graph_bytes * kept / len(capture_size_list(512)))


def test_fit_explains_the_drafts_in_vllms_capture_cap(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = (*L8, "--max-num-seqs", "32", "--spec-tokens", "3", "--spec-method", "ngram")
    # ngram runs on the V1 runner before 0.32 (Model Runner V2 did not take it yet), which
    # rounds each captured size up to a multiple of 1 + the drafts; on 0.32's MRV2 none is
    for version, runner in (("0.31", "V1"), ("0.32", "MRV2")):
        code, out, err = run_cli(capsys, "fit", *argv, "--engine-version", version, "--explain")
        assert code == 0, err
        multiple = spec_capture_multiple(3, version, runner, 1)
        sizes = capture_sizes(32, None, None, 4, multiple=multiple)
        assert f"layers × {sizes} captured sizes (to min(2 × 32 seats × 4 tokens a decode " \
            f"step, 512) = {capture_cap(32, query_len=4)}" in out
        assert (multiple, "each rounded up to a multiple of 4" in out) == \
            ((4, True) if runner == "V1" else (1, False))
    # both on the V1 runner (0.24: before Model Runner V2), the drafts' larger cap costs pool
    on_v1 = ("--engine-version", "0.24.0", "--json")
    code, plain_out, err = run_cli(capsys, "fit", *L8, "--max-num-seqs", "32", *on_v1)
    code, drafted_out, err = run_cli(capsys, "fit", *argv, *on_v1)
    plain, drafted = json.loads(plain_out), json.loads(drafted_out)
    assert drafted["pool_bytes_per_gpu"] < plain["pool_bytes_per_gpu"]


def test_sglangs_drafter_default_sizes_a_hybrids_state_pool_with_its_radix_cache_off(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-Next without its radix cache: SGLang sets the state pool at max_running_requests,
    which the drafter's default has set by then (model_runner reads server_args after it)."""
    dep = Deployment.build(resolve_model("qwen3-next-80b-a3b"), resolve_accelerator("h200"),
                           num_gpus=2, engine="sglang")
    radix_off = EngineSettings(max_model_len=4096, prefix_caching=False)
    cap = sglang_speculative_requests("eagle")
    drafting = kv_pool(dep, replace(radix_off, drafter=EAGLE3))
    assert drafting.state_pool_fixed
    assert drafting.state_slots == drafting.max_num_seqs == cap
    assert kv_pool(dep, radix_off).state_slots != cap
    code, out, err = run_cli(capsys, "fit", "qwen3-next-80b-a3b", "--gpu", "h200", "--num-gpus",
                             "2", "--max-model-len", "4k", "--engine", "sglang", "--spec-tokens",
                             "3", "--spec-method", "eagle", "--no-prefix-caching", "--explain")
    assert code == 0, err
    assert f"state pool at max_running_requests {cap} (its default with a drafter)" in out


def test_a_drafters_default_seats_too_few_for_the_ranks_are_not_called_a_flag(
        capsys: pytest.CaptureFixture[str]) -> None:
    """64 data-parallel ranks get 48 // 64 = 0 seats each from SGLang's default with a
    drafter: the refusal names that default, not a --max-running-requests never typed."""
    seats = sglang_speculative_requests("mtp")
    argv = ("fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "64", "--engine", "sglang",
            "--max-model-len", "32k", "--spec-method", "mtp", "--spec-tokens", "3",
            "--enable-dp-attention", "--dp-size", "64")
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert f"max_running_requests {seats} (SGLang's default with a drafter)" in err
    assert f"--max-running-requests {seats} " not in err
    code, _, given = run_cli(capsys, *argv, "--max-running-requests", "32")
    assert code == 2 and "--max-running-requests 32 is the server's" in given
