"""SGLang from 0.5.3.post2 runs DeepSeek-V3 on a B200 on trtllm_mla, whose pages are 32 or 64
tokens (64 where another is asked or none): prefix matched it in pages of 1 (290 of 291
tokens reused instead of 256) and fit sized its pool in pages of 1. Earlier releases, an
H200, and a --page-size of 32 keep the page as before."""

from __future__ import annotations

import json

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.deployment import Deployment
from ridgeline.hardware import resolve_accelerator
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sglang_memory import sglang_data
from ridgeline.sglang_page import runs_trtllm_mla, sglang_page_size, trtllm_mla_data
from tests.conftest import run_cli

IDS = ",".join(map(str, range(1, 292)))  # two identical 291-token prompts


def _dep(gpu: str) -> Deployment:
    return Deployment.laid_out(resolve_model("deepseek-v3"), resolve_accelerator(gpu),
                               engine="sglang")


def _prefix(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:  # type: ignore[type-arg]
    code, out, _ = run_cli(capsys, "prefix", "--tokens-a", IDS, "--tokens-b", IDS,
                           "--model", "deepseek-v3", "--engine", "sglang", *argv, "--json")
    assert code == 0
    return dict(json.loads(out)["prefix_reuse"])


def test_release_gate_reads_the_data() -> None:
    first = str(trtllm_mla_data()["from"])
    dep = _dep("b200")
    assert runs_trtllm_mla(dep, first) and runs_trtllm_mla(dep, None)
    assert not runs_trtllm_mla(dep, "0.5.3.post1") and not runs_trtllm_mla(dep, "0.5.3")
    assert not runs_trtllm_mla(_dep("h200"), None)
    assert runs_trtllm_mla(_dep("b300"), None)  # compute capability 10.3: is_sm100_supported


@pytest.mark.parametrize(("gpu", "version", "asked", "page"), [
    ("b200", None, None, 64), ("b200", "0.5.3.post2", 16, 64), ("b200", None, 32, 32),
    ("b200", "0.5.3", None, 1), ("h200", None, None, 1), ("h200", None, 16, 16)])
def test_pool_pages(gpu: str, version: str | None, asked: int | None, page: int) -> None:
    pool = kv_pool(_dep(gpu), EngineSettings(block_size=asked, engine_version=version))
    assert pool.block_size == page == sglang_page_size(_dep(gpu), version, asked)[0]


def test_prefix_matches_in_trtllm_mla_pages(capsys: pytest.CaptureFixture[str]) -> None:
    page = int(trtllm_mla_data()["page_size"])
    got = _prefix(capsys, "--gpu", "b200")
    assert got["block_size"] == page
    assert got["tokens_reused"] == 290 // page * page  # 256, not 290
    assert "trtllm_mla" in got["block_reason"]
    before = _prefix(capsys, "--gpu", "b200", "--engine-version", "0.5.3")
    assert before["block_size"] == int(sglang_data()["page_size"])
    assert before["tokens_reused"] == 290 and before["block_reason"] == ""


def test_explain_and_fit_say_why(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "prefix", "--tokens-a", IDS, "--tokens-b", IDS, "--model",
                           "deepseek-v3", "--gpu", "b200", "--engine", "sglang", "--explain")
    assert code == 0 and "trtllm_mla, its default attention backend" in out
    code, out, _ = run_cli(capsys, "fit", "deepseek-v3", "--gpu", "b200", "--engine", "sglang",
                           "--tp", "8", "--page-size", "16")
    assert code == 0
    assert "caution: SGLang" in out and "sets 16 to 64, not the one asked" in out
    assert "page size 64:" in out
    code, out, _ = run_cli(capsys, "fit", "deepseek-v3", "--gpu", "b200", "--engine", "sglang",
                           "--tp", "8", "--explain")
    assert code == 0 and "pages of 64: SGLang" in out
