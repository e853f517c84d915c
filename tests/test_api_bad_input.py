"""The library refuses bad input with InputError, as docs/api.md says, where it once raised a
bare TypeError, OverflowError or AttributeError, or answered a question the CLI refuses: an
engine_version of the wrong kind, a `dep` that is no Deployment, a batch past --batch's cap,
logged_tokens of no length, a context past max_model_len, a fit_host of the wrong kind, and a
max_model_len the engine refuses outright."""

from __future__ import annotations

import math
from typing import Any

import pytest

import ridgeline as rl
from ridgeline.capacity import context_refusal
from ridgeline.errors import DoesNotFit
from ridgeline.memory import kv_pool as sized_pool
from ridgeline.units import MAX_BATCH
from tests.conftest import run_cli

H100 = rl.resolve_accelerator("h100")
LLAMA_8B = rl.resolve_model("llama-3.1-8b")
DEP = rl.Deployment.build(LLAMA_8B, H100, engine="vllm")


def test_an_engine_version_of_the_wrong_kind_is_refused_by_kind() -> None:
    with pytest.raises(rl.InputError, match=r"engine_version must be a release.*got float 0\.34"):
        rl.Deployment.build(LLAMA_8B, H100, engine="vllm", engine_version=0.34)  # type: ignore[arg-type]


@pytest.mark.parametrize("call", [
    lambda dep: rl.decode_floor(dep, 1, 1),
    lambda dep: rl.prefill_floor(dep, 1),
    lambda dep: rl.fit_report(dep, 8192),
    lambda dep: rl.kv_pool(dep, rl.EngineSettings()),
])
@pytest.mark.parametrize("dep", ["dep", None, LLAMA_8B])
def test_a_dep_that_is_no_deployment_is_refused_by_kind(call: Any, dep: object) -> None:
    with pytest.raises(rl.InputError, match=f"^dep must be a ridgeline.Deployment.*got "
                                            f"{type(dep).__name__}"):
        call(dep)


@pytest.mark.parametrize("call", [
    lambda batch: rl.decode_floor(DEP, batch, 1),
    lambda batch: rl.prefill_floor(DEP, 1, batch=batch),
])
@pytest.mark.parametrize("batch", [MAX_BATCH + 1, 10**30, 1e300])
def test_a_batch_past_the_clis_cap_is_refused_before_it_is_built(call: Any,
                                                                   batch: float) -> None:
    with pytest.raises(rl.InputError, match=f"batch must be at most {MAX_BATCH}"):
        call(batch)


def test_the_cap_is_the_one_decode_batch_refuses_past(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    assert rl.decode_floor(DEP, MAX_BATCH, 1).batch == MAX_BATCH
    code, _, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch",
                           str(MAX_BATCH + 1))
    with pytest.raises(rl.InputError) as refused:
        rl.decode_floor(DEP, MAX_BATCH + 1, 1)
    assert code == 2 and str(refused.value) in err


@pytest.mark.parametrize("length", [0, -5, math.nan, "8192", 8192.5])
def test_logged_tokens_of_no_length_is_refused(length: object) -> None:
    pool = rl.kv_pool(DEP, rl.EngineSettings(max_model_len=8192))
    with pytest.raises(rl.InputError, match="max_model_len must be"):
        pool.logged_tokens(length)  # type: ignore[arg-type]
    assert pool.logged_tokens(8192.0) == pool.logged_tokens(8192) > 0  # type: ignore[arg-type]


def test_a_context_past_max_model_len_is_refused_as_decode_refuses_its_context(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(rl.InputError) as refused:
        rl.fit_report(DEP, 8192, settings=rl.EngineSettings(max_model_len=4096))
    code, _, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--context",
                           "8192", "--max-model-len", "4096")
    assert code == 2
    # the CLI's names its flags, the library its arguments: the same sentence otherwise
    assert str(refused.value).replace("max_model_len", "--max-model-len").replace(
        "context", "--context") in err
    assert rl.fit_report(DEP, 4096, settings=rl.EngineSettings(max_model_len=8192)).conversations


@pytest.mark.parametrize("fit_host", [5, "yes", True])
def test_a_fit_host_of_another_kind_is_refused(fit_host: object) -> None:
    with pytest.raises(rl.InputError, match=r"^fit_host must be a HostOffload"):
        rl.fit_report(DEP, 8192, fit_host=fit_host)  # type: ignore[arg-type]
    assert rl.fit_report(DEP, 8192, fit_host=None).conversations > 0


def test_a_max_model_len_past_the_models_positions_does_not_fit_as_fit_says(
        capsys: pytest.CaptureFixture[str]) -> None:
    length = 10**6
    with pytest.raises(DoesNotFit) as refused:
        rl.kv_pool(DEP, rl.EngineSettings(max_model_len=length))
    assert str(refused.value) == context_refusal(DEP, length)
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           str(length))
    assert code == 0 and f"DOES NOT FIT: {refused.value}" in out
    # the pool behind fit's verdict is still sized inside, and a length within the model is
    assert sized_pool(DEP, rl.EngineSettings(max_model_len=length)).blocks > 0
    assert rl.kv_pool(DEP, rl.EngineSettings(max_model_len=8192)).blocks > 0
