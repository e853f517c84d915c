"""Session 53's second follow-ups on --kv-cache-dtype, each expectation derived from
data/engine_choices.json and data/formats.json rather than typed in:

- a value ridgeline does not size that came after the release --engine-version names
  (vLLM's turboquant_k8v4, read only on main then and since read in the 0.20.0 wheel;
  SGLang's fp4_e2m1 from 0.5.4.post3) is refused as that release refuses it, the refusal the user
  meets first; before, it read "not modelled", as if the release took it.
- kv with no --engine reads --kv-cache-dtype as vLLM's flag, as fit reads it: vLLM's nvfp4 is
  not modelled. Before, kv sized TensorRT-LLM's fp4 cache under it, even on an H100.
- kv with no --engine and a card sizes only a cache some engine keeps on that card: ridgeline's
  nvfp4 (TensorRT-LLM's, Blackwell only) is refused on an H100 as fit --engine trtllm refuses
  it, and still sized on a B200 or against --memory-gib alone.
"""

from __future__ import annotations

import pytest

from ridgeline.engine_choices import kv_cache_dtype_choices
from ridgeline.engine_versions import sized_version
from ridgeline.hardware import resolve_accelerator
from ridgeline.precision import kv_dtype
from tests.conftest import refused_line, run_cli

FIT = ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k")
KV = ("kv", "mistral-7b", "--context", "4096")


refused = refused_line


@pytest.mark.parametrize(("engine", "release", "value"), [
    ("vllm", "0.11.0", "turboquant_k8v4"), ("vllm", "0.17.0", "nvfp4"),
    ("vllm", "0.19.1", "turboquant_k8v4"), ("vllm", "0.31.0", "ultraquant_4bit"),
    ("vllm", "0.32.0", "octave_k3v4"), ("sglang", "0.5.0", "fp4_e2m1"), ("sglang", "0.5.3", "fp4_e2m1"),
    ("sglang", "0.5.4.post2", "fp4_e2m1"), ("sglang", "0.5.15.post1", "mxfp8")])
def test_an_unmodelled_value_a_release_predates_is_refused_as_that_release_refuses_it(
        capsys: pytest.CaptureFixture[str], engine: str, release: str, value: str) -> None:
    listed = kv_cache_dtype_choices(engine)
    assert listed is not None
    choice = next(c for c in listed.choices if c.value == value)
    assert not choice.modelled and listed.refused_by(release, choice)
    line = refused(capsys, *FIT, "--engine", engine, "--engine-version", release,
                   "--kv-cache-dtype", value)
    name = {"vllm": "vLLM", "sglang": "SGLang"}[engine]
    came = f"after v{listed.read_through}" if choice.since == "main" else f"in v{choice.since}"
    assert line == (f"ridgeline: error: {name} {release} refuses --kv-cache-dtype {value}: "
                    f"it takes one of {', '.join(c.value for c in listed.taken_by(release))}; "
                    f"{value} came {came}, and ridgeline does not size it under any release: "
                    f"{name}'s {value} is {choice.why}")


@pytest.mark.parametrize(("engine", "release", "value"), [
    ("vllm", None, "turboquant_k8v4"), ("vllm", "0.20.0", "turboquant_k8v4"),
    ("vllm", "0.33.0", "octave_k3v4"), ("vllm", "0.34.0", "octave_k3v3_compact"),
    ("vllm", "0.11.0", "fp8_inc"), ("sglang", "0.5.4.post3", "fp4_e2m1"),
    ("sglang", "0.5.20", "fp4_e2m1"), ("sglang", None, "mxfp8")])
def test_an_unmodelled_value_the_release_may_take_is_still_refused_as_not_modelled(
        capsys: pytest.CaptureFixture[str], engine: str, release: str | None,
        value: str) -> None:
    """A release that takes the value (fp8_inc; turboquant_k8v4 from 0.20.0, octave_k3v4 from
    0.33.0; fp4_e2m1 in 0.5.4.post3-0.5.20; mxfp8 in the default 0.5.23) is not known to
    refuse it."""
    listed = kv_cache_dtype_choices(engine)
    assert listed is not None
    choice = next(c for c in listed.choices if c.value == value)
    assert not listed.refused_by(str(sized_version(engine, release)), choice)
    version = ("--engine-version", release) if release else ()
    line = refused(capsys, *FIT, "--engine", engine, *version, "--kv-cache-dtype", value)
    assert line.startswith(f"ridgeline: error: --kv-cache-dtype {value} is not modelled: ")


def test_another_engines_value_names_whose_it_is_rather_than_the_release_refusal(
        capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(capsys, *FIT, "--engine", "vllm", "--engine-version", "0.11.0",
                   "--kv-cache-dtype", "fp4_e2m1")
    assert "is not modelled: SGLang's fp4_e2m1 is" in line


@pytest.mark.parametrize("budget", [("--gpu", "h100"), ("--memory-gib", "10")])
def test_kv_without_an_engine_reads_kv_cache_dtype_as_vllms_flag(
        capsys: pytest.CaptureFixture[str], budget: tuple[str, str]) -> None:
    """fit with no --engine reads --kv-cache-dtype nvfp4 as vLLM's (not modelled); kv sized
    TensorRT-LLM's fp4 cache under it, whatever the card."""
    fit = refused(capsys, *FIT, "--kv-cache-dtype", "nvfp4")
    kv = refused(capsys, *KV, *budget, "--kv-cache-dtype", "nvfp4")
    assert kv == fit == ("ridgeline: error: --kv-cache-dtype nvfp4 is not modelled: vLLM's "
                         f"nvfp4 is {_why('vllm', 'nvfp4')}")
    # vLLM's own spelling is taken, ridgeline's name under vLLM's flag refused as vLLM does
    code, _, err = run_cli(capsys, *KV, *budget, "--kv-cache-dtype", "bfloat16")
    assert code == 0, err
    assert "refuses --kv-cache-dtype bf16" in refused(capsys, *KV, *budget,
                                                      "--kv-cache-dtype", "bf16")


def test_kv_without_an_engine_refuses_a_cache_no_engine_keeps_on_the_card(
        capsys: pytest.CaptureFixture[str]) -> None:
    cache = kv_dtype("nvfp4")
    assert cache.engines == ("trtllm",) or list(cache.engines) == ["trtllm"]
    h100, b200 = resolve_accelerator("h100"), resolve_accelerator("b200")
    assert h100.family != "blackwell" and b200.family == "blackwell"
    line = refused(capsys, *KV, "--gpu", "h100", "--kv-dtype", "nvfp4")
    trt = refused(capsys, *FIT, "--engine", "trtllm", "--kv-dtype", "nvfp4")
    assert line == trt and "Blackwell only" in line
    for budget in (("--gpu", "b200"), ("--memory-gib", "10")):
        code, out, err = run_cli(capsys, *KV, *budget, "--kv-dtype", "nvfp4")
        assert code == 0 and "fp4 cache" in out, err
    code, out, err = run_cli(capsys, *KV, "--gpu", "h100", "--kv-dtype", "q8_0")
    assert code == 0, err  # llama.cpp's cache, which it keeps on an H100


def _why(engine: str, value: str) -> str:
    listed = kv_cache_dtype_choices(engine)
    assert listed is not None
    return next(c.why for c in listed.choices if c.value == value)
