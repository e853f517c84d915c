"""prefix matches in the block the engine's pool runs in, as fit and simulate size it: vLLM
0.34's 64 on an NVIDIA GPU (16 on ROCm and before 0.34), SGLang's page of 1, TensorRT-LLM's
32, or the --block-size given, and says whose block it used. It had matched every vLLM
release in blocks of 16: two identical 100-token prompts reused 96 tokens where 0.34 reuses
64. Also: `ridgeline gpus` is pointed at `hardware`, and roofline without a model says
nothing of the weights fitting."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.deployment import Deployment
from ridgeline.engine_choices import block_source, engine_block_size
from ridgeline.engine_versions import engine_name
from ridgeline.hardware import resolve_accelerator
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.prefix import BLOCK_SETTINGS, prefix_reuse
from ridgeline.vllm_memory import vllm_accounting
from tests.conftest import refused_line, run_cli

PROMPT = list(range(1, 101))  # two identical 100-token prompts
IDS = ",".join(map(str, PROMPT))


def reuse(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "prefix", "--tokens-a", IDS, "--tokens-b", IDS, *argv,
                             "--json")
    assert code == 0, err
    return dict(json.loads(out))


def pool_block(gpu: str, engine: str = "vllm", version: str | None = None) -> int:
    """The block fit's pool runs Llama-3.1-8B's cache in (not an MLA model: no kernel's own)."""
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator(gpu),
                           engine=engine)
    return kv_pool(dep, EngineSettings(max_model_len=8192, engine_version=version)).block_size


@pytest.mark.parametrize(("gpu", "version"), [
    ("h100", None), ("h100", "0.34"), ("h100", "0.33"), ("mi300x", None), ("mi300x", "0.33")])
def test_prefix_matches_vllm_in_the_block_fits_pool_runs_in(
        capsys: pytest.CaptureFixture[str], gpu: str, version: str | None) -> None:
    flags = ("--gpu", gpu, *(("--engine-version", version) if version else ()))
    got = reuse(capsys, *flags)["prefix_reuse"]
    block = pool_block(gpu, version=version)
    assert got["block_size"] == block == engine_block_size(
        "vllm", version, resolve_accelerator(gpu).vendor or "")
    assert got["tokens_reused"] == prefix_reuse(PROMPT, PROMPT, block).tokens_reused


def test_two_identical_100_token_prompts_reuse_one_block_of_64_under_vllm_034(
        capsys: pytest.CaptureFixture[str]) -> None:
    """0.34's block is 64: one full block of the 99 tokens before the last, not 6 of 16."""
    block = pool_block("h100", version="0.34")
    assert block == vllm_accounting("0.34").block_size > vllm_accounting("0.33").block_size
    got = reuse(capsys, "--engine-version", "0.34")["prefix_reuse"]
    assert got["full_blocks_reused"] == (len(PROMPT) - 1) // block == 1
    assert got["tokens_reused"] == block
    older = reuse(capsys, "--engine-version", "0.33")["prefix_reuse"]
    assert older["tokens_reused"] > got["tokens_reused"]


def test_without_a_gpu_prefix_takes_nvidias_block_and_says_rocm_keeps_another(
        capsys: pytest.CaptureFixture[str]) -> None:
    plain, h100 = reuse(capsys), reuse(capsys, "--gpu", "h100")
    assert plain["prefix_reuse"]["tokens_reused"] == h100["prefix_reuse"]["tokens_reused"]
    rocm = engine_block_size("vllm", None, "amd")
    assert rocm != plain["prefix_reuse"]["block_size"]
    assert f"on ROCm (an AMD GPU) keeps block_size {rocm}" in plain["notes"][0]
    assert not any("ROCm" in n for n in h100["notes"])
    assert reuse(capsys, "--block-size", "32")["notes"] == []  # none, the list always there
    assert not any("ROCm" in n for n in reuse(capsys, "--engine-version", "0.33")["notes"])


@pytest.mark.parametrize("argv", [(), ("--gpu", "h100"), ("--engine", "trtllm")])
def test_without_a_model_prefix_says_its_block_is_the_engines_for_any_model(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """A model's kernel can force another block (an MLA cache's FlashMLA 64): without
    --model, prefix says the block it assumed is the engine's default, in one line."""
    got = reuse(capsys, *argv)
    block, setting = got["prefix_reuse"]["block_size"], got["prefix_reuse"]["block_setting"]
    said = [n for n in got["notes"] if n.startswith("no --model: ")]
    assert len(said) == 1 and f"{setting} {block} is the engine's default" in said[0]
    given = reuse(capsys, *argv, "--block-size", "64").get("notes", [])
    assert not any(n.startswith("no --model: ") for n in given)


@pytest.mark.parametrize(("model", "gpu", "argv"), [
    ("deepseek-v3", "h100", ("--engine", "trtllm")),  # FlashMLA's 64 over TensorRT-LLM's 32
    ("deepseek-v3", "h100", ("--engine-version", "0.17", "--block-size", "16")),  # FlashMLA's
    ("qwen3-next-80b-a3b", "h100", ()),  # a hybrid's attention blocks grow to its state's page
])
def test_with_a_model_prefix_matches_in_the_block_its_pool_runs_in(
        capsys: pytest.CaptureFixture[str], model: str, gpu: str,
        argv: tuple[str, ...]) -> None:
    """--model (with --gpu): the block fit's pool takes for that model, not the engine's
    default or the one asked, and the source says whose it is."""
    engine = argv[argv.index("--engine") + 1] if "--engine" in argv else "vllm"
    version = argv[argv.index("--engine-version") + 1] if "--engine-version" in argv else None
    asked = int(argv[argv.index("--block-size") + 1]) if "--block-size" in argv else None
    dep = Deployment.build(resolve_model(model), resolve_accelerator(gpu), engine=engine)
    block = kv_pool(dep, EngineSettings(block_size=asked, engine_version=version)).block_size
    assert block != (asked or engine_block_size(engine, version))  # the model forces another
    got = reuse(capsys, *argv, "--model", model, "--gpu", gpu)
    assert got["prefix_reuse"]["block_size"] == block
    assert got["prefix_reuse"]["tokens_reused"] == \
        prefix_reuse(PROMPT, PROMPT, block).tokens_reused
    assert got["prefix_reuse"]["block_source"].startswith(f"{dep.model.name}'s on ")
    assert ("not the 16 asked" in got["prefix_reuse"]["block_source"]) == (asked is not None)
    assert not any(n.startswith("no --model") for n in got["notes"])


def test_a_model_in_the_engines_own_block_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B's cache runs in vLLM 0.34's default block on an H100: the source says the
    block is the model's too, and no note asks for --model."""
    got = reuse(capsys, "--model", "llama-3.1-8b", "--gpu", "h100")
    assert got["prefix_reuse"]["block_size"] == pool_block("h100")
    assert got["prefix_reuse"]["block_source"] == \
        f"{block_source('vllm', None, 'h100-sxm')}; llama-3.1-8b's cache on h100-sxm runs in it"
    assert got["notes"] == []


def test_a_model_without_a_card_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    line = refused_line(capsys, "prefix", "--tokens-a", IDS, "--tokens-b", IDS, "--model",
                        "deepseek-v3")
    assert "--model needs --gpu" in line


@pytest.mark.parametrize(("argv", "source"), [
    ((), block_source("vllm")),
    (("--gpu", "mi300x"), block_source("vllm", None, "mi300x")),
    (("--engine", "sglang"), block_source("sglang")),
    (("--engine", "trtllm"), block_source("trtllm")),
    (("--block-size", "32"), "as given"),
])
def test_prefix_says_whose_block_it_matched_in(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], source: str) -> None:
    got = reuse(capsys, *argv)["prefix_reuse"]
    assert got["block_source"] == source
    code, out, _ = run_cli(capsys, "prefix", "--tokens-a", IDS, "--tokens-b", IDS, *argv)
    assert code == 0
    assert f"with {got['block_setting']} {got['block_size']} ({source}):" in out
    code, out, _ = run_cli(capsys, "prefix", "--tokens-a", IDS, "--tokens-b", IDS, *argv,
                           "--explain")
    assert f"{got['block_setting']} = {got['block_size']} " in out
    assert f" ({source}) are cached and matched" in out


@pytest.mark.parametrize(("engine", "gpu"), [("sglang", "h100"), ("trtllm", "h100"),
                                             ("sglang", "mi300x")])
def test_sglang_and_trtllm_match_in_their_pools_block(
        capsys: pytest.CaptureFixture[str], engine: str, gpu: str) -> None:
    """SGLang's page of 1 token (token-level reuse, all but the last), TensorRT-LLM's 32."""
    got = reuse(capsys, "--engine", engine, "--gpu", gpu)["prefix_reuse"]
    assert got["block_size"] == pool_block(gpu, engine) == engine_block_size(engine)
    assert got["block_setting"] == BLOCK_SETTINGS[engine]
    assert got["block_source"] == f"{engine_name(engine)}'s default"


@pytest.mark.parametrize(("argv", "word"), [
    (("--gpu", "apple-m2-max-38c", "--engine", "vllm"), "does not run on apple-m2-max-38c"),
    (("--gpu", "mi300x", "--engine", "trtllm"), "does not run on mi300x"),
    (("--gpu", "h100,a100"), "one accelerator"),
    (("--gpu", "no-such-card"), "no-such-card"),
])
def test_prefix_refuses_a_card_the_engine_does_not_run_on_in_one_line(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], word: str) -> None:
    assert word in refused_line(capsys, "prefix", "--tokens-a", IDS, "--tokens-b", IDS, *argv)


@pytest.mark.parametrize(("typed", "meant"), [("gpus", "hardware"), ("GPUs", "hardware"),
                                              ("accelerators", "hardware"),
                                              ("hardwre", "hardware"), ("rooflne", "roofline")])
def test_a_command_no_one_has_is_pointed_at_the_one_meant(
        capsys: pytest.CaptureFixture[str], typed: str, meant: str) -> None:
    assert refused_line(capsys, typed).split(" (see ")[0].endswith(f"; did you mean {meant}?")


def test_a_word_like_no_command_gets_no_hint(capsys: pytest.CaptureFixture[str]) -> None:
    assert "did you mean" not in refused_line(capsys, "frobnicate")


def test_roofline_without_a_model_says_nothing_of_the_weights_fitting(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "roofline", "--gpu", "h100", "--json")
    assert code == 0 and json.loads(out)["weights_fit"] is None
    code, out, _ = run_cli(capsys, "roofline", "--gpu", "h100")
    assert code == 0 and "FIT" not in out
    code, out, _ = run_cli(capsys, "roofline", "--gpu", "h100", "--model", "llama-3.1-8b",
                           "--json")
    assert code == 0 and json.loads(out)["weights_fit"] is True
    code, out, _ = run_cli(capsys, "roofline", "--gpu", "h100", "--model", "llama-3.1-405b",
                           "--json")
    assert code == 0 and json.loads(out)["weights_fit"] is False


def test_the_refusal_of_a_model_without_a_card_names_blocks_the_cards_give(
        capsys: pytest.CaptureFixture[str]) -> None:
    """prefix --model without --gpu named FlashMLA's 64 on Hopper and CUTLASS MLA's 128 on a
    B200, though vLLM 0.34 runs DeepSeek-V3 on a B200 in blocks of 64 (FlashInfer MLA); the
    blocks it names now are the ones prefix uses on those cards."""
    line = refused_line(capsys, "prefix", "--tokens-a", IDS, "--tokens-b", IDS,
                        "--model", "deepseek-v3")
    assert "CUTLASS MLA's 128 on a B200 before vLLM 0.15" in line
    assert "64 tokens on NVIDIA GPUs, 16 on ROCm" in line
    assert reuse(capsys, "--model", "deepseek-v3", "--gpu", "b200",
                 "--engine-version", "0.14")["prefix_reuse"]["block_size"] == 128
    assert reuse(capsys, "--model", "deepseek-v3", "--gpu", "b200",
                 "--engine-version", "0.15")["prefix_reuse"]["block_size"] == 64
    assert reuse(capsys, "--model", "llama-3.1-8b", "--gpu", "h100")["prefix_reuse"]["block_size"] == 64
    assert reuse(capsys, "--model", "llama-3.1-8b", "--gpu", "mi300x")["prefix_reuse"]["block_size"] == 16


PREFIX = ["prefix", "--tokens-a", "1,2,3", "--tokens-b", "1,2,3"]


def test_prefix_says_a_vllm_release_past_the_newest_read_is_read_at_its_rules(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.99 was labelled as if its default were known; now the newest read (0.34) is
    named as the rules it is read at, as SGLang's next minor is, and a patch of it is not."""
    from ridgeline.vllm_memory import vllm_data

    newest = str(vllm_data()["newest_checked"])
    code, out, _ = run_cli(capsys, *PREFIX, "--engine-version", "0.99")
    assert code == 0
    assert f"vLLM {newest}'s default on NVIDIA GPUs, the newest release read, taken for 0.99" \
        in out.splitlines()[0]
    assert any(line.startswith(f"vLLM 0.99 is newer than the newest release ridgeline has "
                               f"read ({newest})") for line in out.splitlines())
    code, out, _ = run_cli(capsys, *PREFIX, "--engine-version", f"{newest}.1")
    assert code == 0 and "newer than" not in out and "taken for" not in out


@pytest.mark.parametrize(("version", "runs"), [("0.10", False), ("0.9.2", False),
                                               ("0.11", True), ("0.17", True)])
def test_vllm_takes_a_256_token_block_from_0_11(
        capsys: pytest.CaptureFixture[str], version: str, runs: bool) -> None:
    """vLLM 0.9-0.10's BlockSize Literal stops at 128 (their API docs), 0.11.1's lists 256."""
    code, _, err = run_cli(capsys, *PREFIX, "--engine-version", version, "--block-size", "256")
    assert (code == 0) == runs
    if not runs:
        assert "one of 1, 8, 16, 32, 64, 128;" in err and "256 from v0.11.0" in err


def test_prefix_says_the_models_cache_runs_in_the_block_given(
        capsys: pytest.CaptureFixture[str]) -> None:
    """'(as given, llama-3.1-8b's too)' read as if the model forced the block."""
    code, out, _ = run_cli(capsys, *PREFIX, "--model", "llama-3.1-8b", "--gpu", "h100",
                           "--block-size", "128")
    assert code == 0 and "(as given; llama-3.1-8b's cache on h100-sxm runs in it)" in out
