"""llama-server's -c 0 under --fit with the launch's YaRN flags: --fit reads n_ctx_train after
its probe context has applied them (PR #28030), so -c 0 becomes the YaRN cap, not the GGUF's
length; whether the model fits whole was judged at the loaded length."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import served_context
from ridgeline.context_length import served_positions
from ridgeline.hardware import device_memory_bytes
from ridgeline.llamacpp_fit import (
    CONTEXT_ALIGN,
    default_fit_min_context,
    fit_context,
    fit_resolved_context,
)
from ridgeline.llamacpp_overrides import parse_overrides
from ridgeline.llamacpp_rope import RopeLaunch, yarn_since_build
from ridgeline.memory import EngineSettings
from ridgeline.offload import HostOffload, every_layer_ngl
from ridgeline.units import MIB
from tests.conftest import run_cli

GPT_OSS = ("gpt-oss-20b", "--gpu", "h100-sxm", "--engine", "llama.cpp")
YARN_2 = ("--rope-scaling", "yarn", "--rope-scale", "2")


def _gpt_oss(rope: RopeLaunch | None) -> Deployment:
    # the checkpoint's own formats (bf16 attention), the weights this file's budgets were sized
    # for; llama.cpp's default for gpt-oss is ggml-org's lighter GGUF (mxfp4_moe)
    dep = Deployment.build(resolve_model("gpt-oss-20b"), resolve_accelerator("h100-sxm"),
                           "stored", engine="llama.cpp-cuda")
    return replace(dep, rope=rope)


def test_gpt_oss_c_0_under_yarn_is_the_slot_cap_and_fits(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The GGUF's 131,072 is what -c 0 allocates with --fit off; --fit sets -c to the cap
    YaRN ×2 leaves (original context × 2), so fit measures conversations of that length."""
    loaded, cap = fit_resolved_context(_gpt_oss(RopeLaunch("yarn", 0.5)))
    assert loaded == served_positions(resolve_model("gpt-oss-20b"), "llama.cpp-cuda")
    assert cap == served_context(_gpt_oss(RopeLaunch("yarn", 0.5)))[0]
    assert cap is not None and loaded is not None and cap < loaded
    code, out, _ = run_cli(capsys, "fit", *GPT_OSS, *YARN_2)
    story, verdict = out.splitlines()[:2]
    assert code == 0 and f"-c {cap:,}, the trained context" in story
    assert f"not the {loaded:,} loaded" in story
    assert verdict.startswith("fits") and f"conversations of {cap:,} tokens" in verdict
    # a conversation past the cap, asked for, keeps the refusal
    code, out, _ = run_cli(capsys, "fit", *GPT_OSS, *YARN_2, "--max-model-len", str(loaded))
    assert code == 0 and out.startswith("DOES NOT FIT: llama-server caps each slot")
    # a build before the PR reads the GGUF's length, which also caps its slots
    code, out, _ = run_cli(capsys, "fit", *GPT_OSS, *YARN_2,
                           "--engine-version", f"b{yarn_since_build() - 1}")
    assert code == 0 and f"-c {loaded:,}, the trained context" in out.splitlines()[0]


def test_override_then_yarn_sets_c_0_to_the_lifted_override(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Mistral-7B (n_ctx_train T, no YaRN block): --override-kv to 2T loads 2T, YaRN ×2 lifts
    it from there; --fit's -c 0 is 4T, and 4T-token conversations fit on an H100."""
    model = resolve_model("mistral-7b")
    trained = served_positions(model, "llama.cpp-cuda")
    assert trained is not None
    flag = f"llama.context_length=int:{2 * trained}"
    dep = replace(Deployment.build(model, resolve_accelerator("h100"), engine="llama.cpp-cuda"),
                  rope=RopeLaunch("yarn", 0.5, kv_overrides=parse_overrides(flag)))
    assert fit_resolved_context(dep) == (2 * trained, 4 * trained)
    code, out, _ = run_cli(capsys, "fit", "mistral-7b", "--gpu", "h100", "--engine",
                           "llama.cpp", *YARN_2, "--override-kv", flag)
    story, verdict = out.splitlines()[:2]
    assert code == 0 and f"-c {4 * trained:,}, the trained context" in story
    assert f"not the {2 * trained:,} loaded" in story
    assert verdict.startswith("fits") and f"of {4 * trained:,} tokens" in verdict


def test_a_cap_above_the_loaded_length_is_judged_at_the_loaded_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--fit measures the probe at -c 0's loaded length and sets the cap without measuring
    again: Mistral-7B ×4 on an RTX 4090 fits whole at 32,768 but not at the 131,072 it is
    given, so llama-server cannot allocate its cache."""
    code, out, _ = run_cli(capsys, "fit", "mistral-7b", "--gpu", "rtx-4090", "--engine",
                           "llama.cpp", "--rope-scaling", "yarn", "--rope-scale", "4")
    trained = served_positions(resolve_model("mistral-7b"), "llama.cpp-cuda")
    assert trained is not None
    story, verdict = out.splitlines()[:2]
    assert code == 0 and f"-c {4 * trained:,}" in story and "judged the memory" in story
    assert verdict.startswith("DOES NOT FIT")
    code, out, _ = run_cli(capsys, "fit", "mistral-7b", "--gpu", "rtx-4090", "--engine",
                           "llama.cpp")
    assert code == 0 and out.splitlines()[1].startswith("fits")  # the loaded length fits


def test_a_shrunk_context_keeps_the_share_of_the_loaded_span() -> None:
    """Where the loaded length does not fit whole, --fit interpolates between --fit-ctx and
    the cap by the memory that fits, measured on the loaded span: the same share of each."""
    settings, floor = EngineSettings(), default_fit_min_context()
    unlifted = _gpt_oss(RopeLaunch("yarn", 0.5, build=yarn_since_build() - 1))
    lifted = _gpt_oss(RopeLaunch("yarn", 0.125))
    template = HostOffload(every_layer_ngl(unlifted.model))
    margin = device_memory_bytes(unlifted.accelerator) - 15_000 * MIB  # a 15,000 MiB budget
    loaded, cap = fit_resolved_context(lifted)
    assert loaded is not None and cap is not None
    whole_fit, placed = fit_context(unlifted, settings, template, margin)
    assert placed.offload is None and floor < whole_fit < loaded  # shrunk, still whole
    context, placed = fit_context(lifted, settings, template, margin)
    assert placed.offload is None and context % CONTEXT_ALIGN == 0 and floor <= context < cap
    share, lifted_share = (whole_fit - floor) / (loaded - floor), (context - floor) / (cap - floor)
    assert lifted_share <= share < lifted_share + CONTEXT_ALIGN / (cap - floor)


def test_simulate_allocates_the_cap_under_fit(capsys: pytest.CaptureFixture[str]) -> None:
    """simulate's llama-server runs the -c --fit chose: the YaRN cap's cells, not 131,072."""
    cap = served_context(_gpt_oss(RopeLaunch("yarn", 0.5)))[0]
    code, out, _ = run_cli(capsys, "simulate", *GPT_OSS, *YARN_2, "--rate", "1",
                           "--num-requests", "2", "--input-len", "1000", "--output-len", "8")
    assert code == 0 and f"engine: {cap:,} KV cells" in out
