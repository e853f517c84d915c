"""SGLang's drafters release by release: EAGLE, NEXTN, EAGLE3, STANDALONE and NGRAM refused on
the releases before they came (after 0.4.1, 0.4.3.post1, 0.4.4.post2, 0.5.2, 0.5.3), and the
headroom of draft and verify tokens SGLang 0.4.3.post3 to
0.5.6.post2 allocates its pool past what the profile sized."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engine_spec import EngineSpec
from ridgeline.engine_versions import speculative_problem
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sglang_memory import (
    sglang_algorithm_from,
    sglang_drafter_headroom_tokens,
    sglang_speculative_requests,
)
from tests.conftest import run_cli

L8 = ("--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang")
STANDALONE = ("--speculative-algorithm", "STANDALONE", "--speculative-num-steps", "3")


def l8(dp: int = 1) -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                            num_gpus=dp, engine="sglang", data_parallel_size=dp)


def drafting(version: str | None, method: str = "eagle", drafts: int = 3,
             **given: int) -> EngineSettings:
    return EngineSettings(max_model_len=4096, engine_version=version,
                          drafter=EngineSpec(drafts, method), speculative_decoding=True, **given)


# -- STANDALONE and NGRAM exist from the release that brought them -------------------------
@pytest.mark.parametrize(("method", "before", "first"), [
    # 0.5.1.post3's --speculative-algorithm choices are EAGLE, EAGLE3, NEXTN; 0.5.2's add
    # STANDALONE, 0.5.3's NGRAM (server_args.py, the release wheels)
    ("draft-model", "0.5.1.post3", "0.5.2"), ("ngram", "0.5.2", "0.5.3")])
def test_sglang_refuses_a_drafter_on_releases_before_it_came(method: str, before: str,
                                                               first: str) -> None:
    assert sglang_algorithm_from(method) == first
    problem = speculative_problem("sglang", before, method)
    assert f"SGLang {before} has no" in problem and f"came in v{first}" in problem
    assert speculative_problem("sglang", first, method) == ""
    assert speculative_problem("sglang", None, method) == ""  # the newest modelled
    assert speculative_problem("vllm", "0.4.0", method) == ""  # vLLM's own releases
    with pytest.raises(InputError, match=f"came in v{first}"):
        kv_pool(l8(), drafting(before, method))
    assert kv_pool(l8(), drafting(first, method)).max_num_seqs \
        == sglang_speculative_requests(method, first)


# -- EAGLE, NEXTN and EAGLE3 too: the 0.4 releases' choices ---------------------------------
V3 = ("--model", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--engine", "sglang",
      "--max-model-len", "32k")


@pytest.mark.parametrize(("algorithm", "method", "before", "first"), [
    # server_args.py in the release wheels: no --speculative-algorithm in 0.4.1, ["EAGLE"] in
    # 0.4.2 and 0.4.3, NEXTN added in 0.4.3.post1, EAGLE3 in 0.4.4.post2 (0.4.4.post1 lacks it)
    ("EAGLE", "eagle", "0.4.1", "0.4.1.post1"), ("NEXTN", "mtp", "0.4.3", "0.4.3.post1"),
    ("EAGLE3", "eagle", "0.4.4.post1", "0.4.4.post2")])
def test_sglang_refuses_eagle_nextn_and_eagle3_before_their_releases(
        algorithm: str, method: str, before: str, first: str) -> None:
    assert sglang_algorithm_from(method, algorithm) == first
    problem = speculative_problem("sglang", before, method, algorithm)
    assert f"SGLang {before} has no --speculative-algorithm {algorithm} " in problem
    assert f"came in v{first}" in problem
    assert speculative_problem("sglang", first, method, algorithm) == ""
    assert speculative_problem("sglang", None, method, algorithm) == ""
    with pytest.raises(InputError, match=f"came in v{first}"):
        kv_pool(l8(), replace(drafting(before, method),
                              drafter=EngineSpec(3, method, algorithm=algorithm)))


def test_every_mtp_spelling_is_gated_as_nextn() -> None:
    for method in ("mtp", "deepseek_mtp", "qwen3_next_mtp"):
        assert sglang_algorithm_from(method) == sglang_algorithm_from("mtp", "NEXTN")


@pytest.mark.parametrize(("command", "before", "first"), [
    (("fit", *L8, "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"),
     "0.4.0", "0.4.2"),
    (("fit", *L8, "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"),
     "0.4.4", "0.4.5"),
    (("fit", *V3, "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1"),
     "0.4.3", "0.4.3.post2")])
def test_fit_refuses_an_sglang_drafter_before_its_release_in_one_line(
        capsys: pytest.CaptureFixture[str], command: tuple[str, ...], before: str,
        first: str) -> None:
    code, _, err = run_cli(capsys, *command, "--engine-version", before)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert command[command.index("--speculative-algorithm") + 1] in err and before in err
    code, _, err = run_cli(capsys, *command, "--engine-version", first)
    assert code == 0, err


def test_eagle_priced_before_0_4_1_is_refused_by_decode_and_simulate_too(
        capsys: pytest.CaptureFixture[str]) -> None:
    for command in (("decode", "llama-3.1-8b", *L8[2:], "--batch", "1", "--context", "4000"),
                    ("simulate", *L8, "--concurrency", "4", "--num-requests", "10")):
        code, _, err = run_cli(capsys, *command, "--spec-tokens", "3", "--engine-version",
                               "0.4.0")
        assert code == 2 and len(err.strip().splitlines()) == 1 and "EAGLE" in err, err


@pytest.mark.parametrize("command", [
    ("fit", *L8), ("decode", "llama-3.1-8b", *L8[2:], "--batch", "1", "--context", "4000"),
    ("simulate", *L8, "--concurrency", "4", "--num-requests", "10")])
def test_fit_decode_and_simulate_refuse_standalone_on_0_5_1_in_one_line(
        capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    code, _, err = run_cli(capsys, *command, *STANDALONE, "--engine-version", "0.5.1")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "STANDALONE" in err and "v0.5.2" in err
    code, _, err = run_cli(capsys, *command, *STANDALONE, "--engine-version", "0.5.2")
    assert code == 0, err


def test_fit_refuses_ngram_on_0_5_2_and_prices_it_on_0_5_3(
        capsys: pytest.CaptureFixture[str]) -> None:
    ngram = ("--spec-tokens", "3", "--spec-method", "ngram")
    code, _, err = run_cli(capsys, "fit", *L8, *ngram, "--engine-version", "0.5.2")
    assert code == 2 and "NGRAM" in err and "v0.5.3" in err
    code, _, err = run_cli(capsys, "fit", *L8, *ngram, "--engine-version", "0.5.3")
    assert code == 0, err


# -- 0.4.3.post3-0.5.6.post2: the pool allocated past its profile for a drafter -------------
def test_sglang_0_5_3_pool_holds_436_tokens_more_for_eagle_drafting_3_than_0_5_7() -> None:
    """Both releases follow the v0.5.3+ rule with the same 2 GiB reserve for the drafter;
    0.5.3 then adds max_running_requests × (3 drafts + 4 verified) + 100 tokens: 48 × 7 + 100
    = 436 (page_size 1)."""
    with_headroom = kv_pool(l8(), drafting("0.5.3"))
    without = kv_pool(l8(), drafting("0.5.7"))
    assert with_headroom.reserved_fraction == without.reserved_fraction
    assert with_headroom.tokens - without.tokens == 436 == with_headroom.headroom_tokens
    assert without.headroom_tokens == 0
    assert kv_pool(l8(), drafting("0.5.9")).tokens == without.tokens
    # the memory it takes lies past the fraction's budget, out of what SGLang holds back
    assert with_headroom.pool_bytes - without.pool_bytes == pytest.approx(
        with_headroom.headroom_bytes)


def test_the_headroom_grows_with_the_seats_and_the_drafts() -> None:
    base = kv_pool(l8(), drafting("0.5.7", drafts=5, max_num_seqs=100)).tokens
    grown = kv_pool(l8(), drafting("0.5.3", drafts=5, max_num_seqs=100))
    # 100 given seats, 5 drafts and 6 verified a step, and the buffer
    assert grown.tokens - base == sglang_drafter_headroom_tokens("eagle", 5, 100, "0.5.3")
    assert grown.headroom_tokens > kv_pool(l8(), drafting("0.5.3")).headroom_tokens


@pytest.mark.parametrize(("method", "version"), [
    ("ngram", "0.5.3"),  # n-gram lookup shares nothing of a draft model's
    ("eagle", "0.4.3.post2"),  # only the draft worker's cache was larger
    ("eagle", None), ("eagle", "0.5.7")])
def test_no_headroom_where_sglang_allocates_none(method: str, version: str | None) -> None:
    assert kv_pool(l8(), drafting(version, method)).headroom_tokens == 0
    assert sglang_drafter_headroom_tokens(method, 3, 48, version) == 0


def test_the_headroom_comes_before_max_total_tokens_caps_the_pool() -> None:
    """min(profiled + headroom, --max-total-tokens): a cap between the two binds on 0.5.3,
    and not on 0.5.7, whose pool is the profile's."""
    profiled = kv_pool(l8(), drafting("0.5.7")).tokens
    cap = profiled + 200  # under the 436 tokens of headroom
    capped = kv_pool(l8(), drafting("0.5.3", max_total_tokens=cap))
    assert capped.tokens == cap and capped.capped
    assert kv_pool(l8(), drafting("0.5.7", max_total_tokens=cap)).tokens == profiled


def test_each_data_parallel_rank_gets_the_servers_headroom() -> None:
    """init_memory_pool reads server_args.max_running_requests, the server's 48, though each
    of two data-parallel attention ranks runs 24."""
    dep = Deployment.build(resolve_model("qwen3-30b-a3b"), resolve_accelerator("h100"),
                           num_gpus=2, engine="sglang", data_parallel_size=2,
                           expert_parallel=True)
    pool = kv_pool(dep, drafting("0.5.3"))
    server = sglang_speculative_requests("eagle", "0.5.3")
    assert server is not None and pool.max_num_seqs == server // 2
    assert pool.headroom_tokens == sglang_drafter_headroom_tokens("eagle", 3, server, "0.5.3")
    assert pool.headroom_tokens > sglang_drafter_headroom_tokens("eagle", 3, server // 2,
                                                                 "0.5.3")


def test_fits_budget_and_explain_show_the_headroom(capsys: pytest.CaptureFixture[str]) -> None:
    spec = (*L8, "--max-model-len", "4k", "--speculative-algorithm", "EAGLE",
            "--speculative-num-steps", "3")
    code, out, err = run_cli(capsys, "fit", *spec, "--engine-version", "0.5.3", "--explain")
    assert code == 0, err
    pool = kv_pool(l8(), replace(drafting("0.5.3"), max_model_len=4000))
    assert f"+ drafter headroom ({pool.headroom_tokens:,} tokens past the fraction" in out
    assert "drafter headroom = " in out
    code, out, err = run_cli(capsys, "fit", *spec, "--engine-version", "0.5.7")
    assert code == 0, err
    assert "drafter headroom" not in out
