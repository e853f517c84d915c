"""Each engine in its own words where a command names its settings: utilization's pool, seats
flag and running gauge follow --engine; SGLang's --tp and --ep-size/--ep and trtllm-serve's
--ep_size are taken as pasted (expert parallelism at 1 or at every GPU, the layouts modelled);
simulate's engine line names SGLang's and TensorRT-LLM's knobs; prefix's block follows the
engine's own default."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ridgeline.capacity import held_conversations
from ridgeline.catalog import resolve_model
from ridgeline.datafiles import engine_defaults
from ridgeline.deployment import Deployment
from ridgeline.engine_metrics import RUNNING, running_metric
from ridgeline.engine_versions import engine_name
from ridgeline.hardware import resolve_accelerator
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.prefix import BLOCK_SETTINGS, prefix_reuse
from ridgeline.vllm_memory import default_block_size, vllm_accounting
from tests.conftest import run_cli


def answer(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    return out


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


# -- utilization --------------------------------------------------------------------------
UTILIZATION = ("utilization", "--gpu", "h100", "--running", "8", "--model", "llama-3.1-8b",
               "--context", "8k")


@pytest.mark.parametrize(("engine", "seats"), [("sglang", "--max-running-requests"),
                                                ("trtllm", "--max_batch_size"),
                                                ("llama.cpp-cuda", "-np/--parallel")])
def test_utilization_advises_the_chosen_engines_own_flag_and_gauge(
        capsys: pytest.CaptureFixture[str], engine: str, seats: str) -> None:
    out = answer(capsys, *UTILIZATION, "--engine", engine)
    gauge = running_metric(engine)
    assert gauge in RUNNING and f"Read it from {gauge}" in out
    assert f"{seats} is only a ceiling" in out and f"settings ({seats})" in out
    assert "vllm:" not in out and "--max-num-seqs" not in out and "vLLM" not in out
    if not engine.startswith("llama.cpp"):  # the flag is the one plan's launch line prints
        assert seats == engine_defaults(engine)["cli"]["max_num_seqs"]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_utilization_sizes_the_chosen_engines_pool(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           engine=engine)
    pool = kv_pool(dep, EngineSettings(max_model_len=8000))
    report = json.loads(answer(capsys, *UTILIZATION, "--engine", engine, "--json"))
    assert report["conversations"] == held_conversations(pool, dep, 8000) > 8


def test_utilization_defaults_to_vllm_and_to_llamacpp_on_a_mac(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert answer(capsys, *UTILIZATION) == answer(capsys, *UTILIZATION, "--engine", "vllm")
    out = answer(capsys, "utilization", "--gpu", "apple-m2-ultra-76c", "--running", "4")
    assert f"Read it from {running_metric('llama.cpp-metal')}" in out and "vllm" not in out


def test_utilization_refuses_an_engine_the_card_does_not_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "utilization", "--gpu", "apple-m2-ultra-76c", "--running", "4",
                  "--engine", "sglang")
    assert "does not run on" in err


# -- pasted parallel flags ----------------------------------------------------------------
DEEPSEEK = ("fit", "deepseek-v3", "--gpu", "h200", "--max-model-len", "8k", "--json")


def fit(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    return dict(json.loads(answer(capsys, *DEEPSEEK, *argv)))


def test_sglangs_tp_alias_is_its_tp_size(capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek's model card launches SGLang with --tp 8 --dp 8 --enable-dp-attention."""
    card = fit(capsys, "--engine", "sglang", "--tp", "8", "--dp", "8", "--enable-dp-attention")
    assert card == fit(capsys, "--engine", "sglang", "--tp-size", "8", "--dp-size", "8",
                       "--enable-dp-attention")
    assert card["data_parallel"]["data_parallel_size"] == 8


def test_vllms_short_tp_is_its_tensor_parallel_size(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's recipes write -tp 8 (and -dp, -pp); a pasted -tp is --tensor-parallel-size."""
    short = fit(capsys, "-tp", "8")
    assert short == fit(capsys, "--tensor-parallel-size", "8") != fit(capsys, "-tp", "4")
    assert short["num_gpus"] == short["tensor_parallel_size"] == 8


@pytest.mark.parametrize(("engine", "spelling"), [
    ("sglang", ("--ep-size", "8")), ("sglang", ("--ep", "8")), ("sglang", ("--ep=8",)),
    ("sglang", ("--expert-parallel-size", "8")), ("trtllm", ("--ep_size", "8")),
    ("trtllm", ("--moe_expert_parallel_size", "8"))])
def test_an_expert_parallel_size_of_every_gpu_is_expert_parallelism(
        capsys: pytest.CaptureFixture[str], engine: str, spelling: tuple[str, ...]) -> None:
    assert fit(capsys, "--engine", engine, "--tp", "8", *spelling) == fit(
        capsys, "--engine", engine, "--tp", "8", "--enable-expert-parallel")
    step = ("decode", "deepseek-v3", "--gpu", "h200", "--engine", engine, "--tp", "8", "--json")
    given = json.loads(answer(capsys, *step, *spelling))  # whole experts: a step of its own
    assert given == json.loads(answer(capsys, *step, "--enable-expert-parallel"))
    assert given != json.loads(answer(capsys, *step))


def test_an_expert_parallel_size_of_one_is_the_default(
        capsys: pytest.CaptureFixture[str]) -> None:
    plain = fit(capsys, "--engine", "trtllm", "--tp", "8")
    assert fit(capsys, "--engine", "trtllm", "--tp", "8", "--ep_size", "1") == plain


def test_vllms_data_parallel_ranks_count_in_the_expert_parallel_size(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert fit(capsys, "-dp", "8", "--ep-size", "8") == fit(capsys, "-dp", "8", "--ep")


@pytest.mark.parametrize(("argv", "said"), [
    (("--engine", "sglang", "--tp", "8", "--ep-size", "4"), "--ep-size 4"),
    (("--engine", "sglang", "--tp", "8", "--ep", "16"), "--ep-size 16"),
    (("--engine", "sglang", "--tp", "8", "--ep-size", "1", "--enable-expert-parallel"),
     "give one"),
    (("--engine", "sglang", "--tp", "8", "--ep", "0"), "must be positive")])
def test_an_expert_parallel_size_not_modelled_is_refused(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], said: str) -> None:
    assert said in refused(capsys, *DEEPSEEK, *argv)


def test_simulate_takes_the_expert_parallel_size(capsys: pytest.CaptureFixture[str]) -> None:
    run = ("simulate", "qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "2", "--concurrency", "4",
           "--num-requests", "12", "--input-len", "256", "--output-len", "32", "--json")
    sized = json.loads(answer(capsys, *run, "--ep-size", "2"))
    assert sized["settings"]["expert_parallel"] is True
    assert sized == json.loads(answer(capsys, *run, "--enable-expert-parallel"))


# -- simulate's engine line ---------------------------------------------------------------
@pytest.mark.parametrize(("engine", "seats", "tokens"), [
    ("sglang", "max_running_requests", "chunked_prefill_size"),
    ("trtllm", "max_batch_size", "max_num_tokens")])
def test_simulate_names_the_engines_own_settings(
        capsys: pytest.CaptureFixture[str], engine: str, seats: str, tokens: str) -> None:
    run = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", engine, "--concurrency",
           "4", "--num-requests", "8", "--input-len", "256", "--output-len", "16")
    settings = json.loads(answer(capsys, *run, "--json"))["settings"]
    line = next(x for x in answer(capsys, *run).splitlines() if x.startswith("engine:"))
    assert f"{seats} {settings['max_num_seqs']:,}," in line  # the JSON keeps vLLM's keys
    assert settings["max_num_seqs"] >= 1000  # grouped as the blocks and the budget are
    assert f"{tokens} {settings['max_num_batched_tokens']:,}" in line
    assert "max_num_seqs" not in line and "max_num_batched_tokens" not in line


# -- prefix -------------------------------------------------------------------------------
A = ",".join(str(t) for t in range(1, 41))
B = ",".join(str(t) for t in [*range(1, 37), 99, 100])


def reuse(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    out = answer(capsys, "prefix", "--tokens-a", A, "--tokens-b", B, *argv, "--json")
    return dict(json.loads(out))


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_prefix_matches_in_the_engines_own_block(capsys: pytest.CaptureFixture[str],
                                                 engine: str) -> None:
    block = int(engine_defaults(engine)[BLOCK_SETTINGS[engine]])
    got = reuse(capsys, "--engine", engine)["prefix_reuse"]
    a, b = [int(t) for t in A.split(",")], [int(t) for t in B.split(",")]
    assert got["block_size"] == block != default_block_size(vllm_accounting(None), "nvidia")
    assert got["tokens_reused"] == prefix_reuse(a, b, block).tokens_reused
    text = answer(capsys, "prefix", "--tokens-a", A, "--tokens-b", B, "--engine", engine)
    assert f"with {BLOCK_SETTINGS[engine]} {block} ({engine_name(engine)}'s default):" in text


def test_prefix_defaults_to_vllms_block_and_a_given_size_wins(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's block as its pool takes it: the release a run is priced as (0.34: 64) on an
    NVIDIA GPU."""
    assert reuse(capsys) == reuse(capsys, "--engine", "vllm")
    assert reuse(capsys)["prefix_reuse"]["block_size"] == default_block_size(
        vllm_accounting(None), "nvidia")
    assert reuse(capsys, "--engine", "sglang", "--page-size", "4")["prefix_reuse"][
        "block_size"] == 4


def test_prefix_sglang_page_of_one_reuses_all_but_the_last_token(
        capsys: pytest.CaptureFixture[str]) -> None:
    got = reuse(capsys, "--engine", "sglang")["prefix_reuse"]
    assert got["tokens_reused"] == got["common_prefix_tokens"]  # 36 of B's 38, none left out


def test_prefix_says_trtllm_may_reuse_a_partial_block(
        capsys: pytest.CaptureFixture[str]) -> None:
    got = reuse(capsys, "--engine", "trtllm")
    left = got["prefix_reuse"]["common_prefix_tokens"] - got["prefix_reuse"]["tokens_reused"]
    assert left > 0 and f"up to {left} more tokens" in got["notes"][0]


def test_prefix_refuses_llamacpp(capsys: pytest.CaptureFixture[str]) -> None:
    assert "llama-server" in refused(capsys, "prefix", "--tokens-a", A, "--tokens-b", B,
                                     "--engine", "llama.cpp")


@pytest.mark.parametrize(("engine", "block"), [("trtllm", "12"), ("trtllm", "1")])
def test_prefix_refuses_a_block_the_engine_refuses_as_simulate_does(
        capsys: pytest.CaptureFixture[str], engine: str, block: str) -> None:
    """TensorRT-LLM takes powers of two past 1 (its pool refuses the rest); prefix had matched
    in such a block, a cache no engine starts with. The one message is the pool's own."""
    sim = refused(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", engine,
                  "--rate", "2", "--num-requests", "4", "--max-model-len", "8192",
                  "--block-size", block)
    assert refused(capsys, "prefix", "--tokens-a", A, "--tokens-b", B, "--engine", engine,
                   "--block-size", block) == sim


@pytest.mark.parametrize("block", [24, 2048])
def test_prefix_takes_any_vllm_block_the_default_release_takes_as_simulate_does(
        capsys: pytest.CaptureFixture[str], block: int) -> None:
    """vLLM 0.32, the release a run is priced as, takes any positive --block-size (from
    v0.18.0, engine_choices.json block_size); vLLM 0.17.0 took only its BlockSize choices.
    prefix had refused 24 and 2048 under every release. (A block under 16, 7, finds no
    attention backend on a card: vllm_attention_block.)"""
    got = reuse(capsys, "--engine", "vllm", "--block-size", str(block))["prefix_reuse"]
    assert got["block_size"] == block
    assert got["tokens_reused"] == (36 // block) * block  # 36 common tokens, whole blocks
    code, _, err = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2",
                           "--num-requests", "4", "--max-model-len", "8192", "--block-size",
                           str(block), "--json")
    assert code == 0, err
    assert "--block-size is one of" in refused(
        capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests",
        "4", "--max-model-len", "8192", "--block-size", str(block), "--engine-version", "0.17.0")


SIMULATE = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests", "4",
            "--max-model-len", "8192")


@pytest.mark.parametrize(("flags", "block"), [
    (("--engine", "vllm", "--engine-version", "0.17"), 15),
    (("--engine", "vllm", "--engine-version", "0.17"), 24),
    (("--engine", "vllm", "--engine-version", "0.17"), 512),
    (("--engine", "vllm", "--engine-version", "0.17"), 99999999999),
    (("--engine", "trtllm"), 24),
    (("--engine", "trtllm"), 1),
    (("--engine", "llama.cpp"), 16),
    (("--engine", "llama.cpp"), 17),
])
def test_prefix_refuses_the_block_simulate_and_fit_refuse_in_their_words(
        capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], block: int) -> None:
    """prefix checks --block-size with fit's and simulate's function
    (engine_choices.block_size_refusal), under the --engine-version it now takes: vLLM 0.17's
    BlockSize list, TensorRT-LLM's powers of two, llama.cpp's single-token cells, one line
    each, the same in every command that takes the flag: decode and prefill too, which said
    of llama.cpp's that --block-size "sizes a serving engine's pool" where fit said "caches
    single-token cells"."""
    from tests.conftest import refused_line

    sized = ("--block-size", str(block))
    line = refused_line(capsys, "prefix", "--tokens-a", A, "--tokens-b", B, *flags, *sized)
    assert "--block-size" in line or "tokens_per_block" in line
    assert refused_line(capsys, *SIMULATE, *flags, *sized) == line
    assert refused_line(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                        "8192", *flags, *sized) == line
    for command in (("decode", "--context", "2000"), ("prefill", "--prompt-len", "2000")):
        assert refused_line(capsys, command[0], "llama-3.1-8b", "--gpu", "h100", *command[1:],
                            *flags, *sized) == line, command


def test_decode_refuses_llamacpps_block_beside_its_other_pool_flags(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--max-total-tokens by the pool it sizes, --block-size in fit's words, on one line
    (--max-num-seqs is llama-server's -np there, its slots, as fit reads it)."""
    from tests.conftest import refused_line

    line = refused_line(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine",
                        "llama.cpp", "--max-total-tokens", "4096", "--block-size", "16")
    assert line.startswith("ridgeline: error: --max-total-tokens sizes SGLang's and "
                           "TensorRT-LLM's pools")
    assert line.endswith("--block-size sizes a serving engine's blocks (vLLM's block_size, "
                         "SGLang's page_size, TensorRT-LLM's tokens_per_block); llama.cpp "
                         "caches single-token cells")


@pytest.mark.parametrize("version", ["1.0", "0.2"])
def test_prefix_refuses_an_sglang_release_fit_and_simulate_refuse(
        capsys: pytest.CaptureFixture[str], version: str) -> None:
    """engine_versions.check_engine_version reads SGLang's releases as its pool does
    (sglang_era): no 1.x, nothing before 0.3. Before, prefix took any version of SGLang."""
    from tests.conftest import refused_line

    flags = ("--engine", "sglang", "--engine-version", version)
    line = refused_line(capsys, "prefix", "--tokens-a", A, "--tokens-b", B, *flags)
    assert f"SGLang {version} is" in line
    assert refused_line(capsys, *SIMULATE, *flags) == line
    assert refused_line(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", *flags) == line


@pytest.mark.parametrize(("engine", "setting"), [
    ("vllm", "block_size"), ("sglang", "page_size"), ("trtllm", "tokens_per_block")])
def test_decodes_pool_line_names_the_block_in_the_engines_own_word(
        capsys: pytest.CaptureFixture[str], engine: str, setting: str) -> None:
    """decode's line said SGLang's "KV pool (block_size 32)": each engine's name for it, as
    prefix names it (prefix.BLOCK_SETTINGS)."""
    assert BLOCK_SETTINGS[engine] == setting
    out = answer(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine", engine,
                 "--block-size", "32")
    (line,) = [line for line in out.splitlines() if f"{engine_name(engine)}'s KV pool (" in line]
    assert f"{setting} 32" in line
    assert engine == "vllm" or "block_size" not in line


@pytest.mark.parametrize(("flags", "block"), [
    (("--engine", "vllm", "--engine-version", "0.18"), 24),
    (("--engine", "vllm", "--engine-version", "0.18"), 17),
    (("--engine", "vllm", "--engine-version", "0.17"), 16),
    (("--engine", "sglang"), 15),
    (("--engine", "trtllm"), 64),
])
def test_prefix_and_simulate_take_the_same_blocks(
        capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], block: int) -> None:
    """What the engine's flag takes, both commands take: vLLM 0.18 any positive block (17
    on FlexAttention with a 16-bit cache), 0.17 its list, SGLang any page, TensorRT-LLM a
    power of two."""
    sized = ("--block-size", str(block))
    assert reuse(capsys, *flags, *sized)["prefix_reuse"]["block_size"] == block
    answer(capsys, *SIMULATE, *flags, *sized)


@pytest.mark.parametrize("block", ["0", "-1"])
def test_prefix_and_simulate_refuse_a_block_of_no_tokens_alike(
        capsys: pytest.CaptureFixture[str], block: str) -> None:
    from tests.conftest import refused_line

    lines = [refused_line(capsys, *argv, f"--block-size={block}").split(" (see ")[0]
             for argv in (("prefix", "--tokens-a", A, "--tokens-b", B), SIMULATE)]
    assert lines[0] == lines[1] and "block size must be positive" in lines[0]


def test_prefix_keeps_sglangs_any_page_size_and_an_engines_valid_block(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert reuse(capsys, "--engine", "sglang", "--page-size", "7")["prefix_reuse"][
        "block_size"] == 7
    assert reuse(capsys, "--engine", "trtllm", "--block-size", "8")["prefix_reuse"][
        "tokens_reused"] == 32  # 36 common of B's 38: 4 whole blocks of 8
