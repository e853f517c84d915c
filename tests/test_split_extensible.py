"""A split's KV connector and vLLM's start-up budget check (vllm_extensible.py): on v0.34 the
NixlConnector keeps the extensible KV cache off (on ROCm always, on NVIDIA on a host without
an IMEX channel, which ridgeline assumes), so the profile sizes a split's pools at the
release's default 0.92, which their launch lines write; where the profile sizes the pool,
vLLM refuses --gpu-memory-utilization 1.0 at start-up (the CUDA context holds memory before
its snapshot), which fit refuses the same way."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast

import pytest

from ridgeline.candidate import Candidate
from ridgeline.catalog import resolve_model
from ridgeline.plan import PlanResult
from ridgeline.reports.plan_commands import PlanCommands
from ridgeline.serving_load import Load
from tests.conftest import run_cli
from tests.test_split_launch import _flag, _pasted

NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
FIT = ("fit", "llama-3.1-8b", "--max-model-len", "16384", "--json")


def _fit(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, *FIT, *extra)
    assert code == 0, err
    found: dict[str, Any] = json.loads(out)
    return found


def _refused(capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    code, out, err = run_cli(capsys, *FIT, *extra)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("gpu", ["h100", "mi300x"])
def test_the_nixl_connector_sizes_the_pool_as_the_cache_switched_off(
        capsys: pytest.CaptureFixture[str], gpu: str) -> None:
    """Beside the NixlConnector, vLLM 0.34's pool is the one --no-enable-extensible-kv-cache
    sizes, at 0.92, and smaller than the extensible cache's at 1.0 without it."""
    where = ("--gpu", gpu)
    nixl = _fit(capsys, *where, "--kv-transfer-config", NIXL)
    off = _fit(capsys, *where, "--no-enable-extensible-kv-cache")
    on = _fit(capsys, *where)
    assert nixl["reserved_fraction"] == off["reserved_fraction"] == 0.92
    assert nixl["pool_bytes_per_gpu"] == off["pool_bytes_per_gpu"] < on["pool_bytes_per_gpu"]
    assert on["reserved_fraction"] == 1.0


def test_asking_the_cache_on_beside_nixl_holds_on_nvidia_and_stops_on_rocm(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--enable-extensible-kv-cache: on NVIDIA vLLM keeps it on beside the NixlConnector (the
    pool as without the connector); on ROCm it stops, UCX unable to register its memory."""
    asked = ("--kv-transfer-config", NIXL, "--enable-extensible-kv-cache")
    assert _fit(capsys, "--gpu", "h100", *asked)["pool_bytes_per_gpu"] \
        == _fit(capsys, "--gpu", "h100")["pool_bytes_per_gpu"]
    err = _refused(capsys, "--gpu", "mi300x", *asked)
    assert "NixlConnector" in err and "ROCm" in err and "Traceback" not in err


@pytest.mark.parametrize("gpu", ["h100", "mi300x"])
def test_a_split_pools_launch_line_writes_the_fraction_its_pool_is_sized_at(
        capsys: pytest.CaptureFixture[str], gpu: str) -> None:
    """Each pool's command, pasted into fit on its card, starts (no --gpu-memory-utilization
    1.0 that vLLM 0.34 would refuse beside the connector) and reads the fraction it writes."""
    split = Candidate(gpu, 1, 1, "bf16", "bf16", None, 64, 0.02, 0.3, 1.0, 3, 2.0, False, "",
                      (1.0, 1.0), disaggregated="1P2D", prefill_replicas=1,
                      max_model_len=16384, pool_knobs=((None, None), (64, None)))
    result = cast(PlanResult, SimpleNamespace(engine="vllm", engine_version=None,
                                              load=Load(2.0, "2000", "200")))
    commands = PlanCommands(resolve_model("llama-3.1-8b"), "llama-3.1-8b", result,
                            16384).pool_commands(split)
    for role in ("prefill", "decode"):
        written = _flag(commands[role], "--gpu-memory-utilization")
        code, out, err = run_cli(capsys, "fit", *_pasted("vllm", commands[role]), "--gpu", gpu,
                                 "--json")
        assert code == 0, err
        assert written == [str(json.loads(out)["reserved_fraction"])]
        assert written != ["1.0"]


def test_a_whole_card_budget_is_refused_where_the_profile_sizes_the_pool(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.33, or 0.34 with the cache off (by the flag or beside the NixlConnector), stops
    at start-up at --gpu-memory-utilization 1.0; 0.99 starts, and so does 1.0 under 0.34's
    extensible cache, whose budget is only a cap."""
    for extra in (("--engine-version", "0.33"), ("--no-enable-extensible-kv-cache",),
                  ("--kv-transfer-config", NIXL)):
        err = _refused(capsys, "--gpu", "h100", *extra, "--gpu-memory-utilization", "1.0")
        assert "--gpu-memory-utilization 1.0" in err and "0.92" in err
        assert "stops at start-up" in err
        assert ("IMEX" in err) == (extra[0] == "--kv-transfer-config")
        assert _fit(capsys, "--gpu", "h100", *extra, "--gpu-memory-utilization",
                    "0.99")["reserved_fraction"] == 0.99
    assert _fit(capsys, "--gpu", "h100", "--gpu-memory-utilization", "1.0")["conversations"] > 0


def test_the_caution_is_said_of_a_host_dependent_split_only() -> None:
    """An NVIDIA split under 0.34 says its pools are sized with the cache off (an IMEX channel
    would keep it on); an AMD split (always off), a single pool and a release without the
    extensible cache say nothing."""
    from ridgeline.plan_cautions import split_extensible_caution

    split = Candidate("h100-sxm", 1, 1, "bf16", "bf16", None, 64, 0.02, 0.3, 1.0, 3, 2.0, False,
                      "", (1.0, 1.0), disaggregated="1P2D", prefill_replicas=1,
                      max_model_len=16384)
    said = split_extensible_caution(split, "vllm", None)
    assert "IMEX" in said and "0.92" in said and "NixlConnector" in said
    assert not split_extensible_caution(replace(split, accelerator="mi300x"), "vllm", None)
    assert not split_extensible_caution(replace(split, disaggregated=""), "vllm", None)
    assert not split_extensible_caution(split, "vllm", "0.33")
    assert not split_extensible_caution(split, "sglang", None)
