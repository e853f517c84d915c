"""vLLM's hybrid KV-cache manager beside launch flags that turn it off: --kv-events-config
(v0.9.1-v0.19, whatever its values), the V1 MooncakeConnector (v0.13 on; SupportsHMA from
v0.20, kept by default from v0.22 like NixlConnector), the connectors still refused, and
fit's levers back to the manager (without the flag, --no-disable-hybrid-kv-cache-manager,
or the first release that keeps it), each count the pool's own (vllm_hybrid,
reports/fit_manager_levers)."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import held_conversations
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, KVPool, kv_pool
from ridgeline.vllm_hybrid import (
    connector_supports_manager,
    events_off_reason,
    manager_problem,
    manager_release,
)
from tests.conftest import run_cli

NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
MOONCAKE = json.dumps({"kv_connector": "MooncakeConnector", "kv_role": "kv_both"})
EVENTS = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq"})
GEMMA = ("fit", "gemma-3-27b", "--gpu", "h100", "--max-model-len", "32768")


def gemma() -> Deployment:
    return Deployment.build(resolve_model("gemma-3-27b"), resolve_accelerator("h100"))


def gemma_pool(version: str, **switches: object) -> KVPool:
    return kv_pool(gemma(), EngineSettings(max_model_len=32768, engine_version=version,
                                           **switches))  # type: ignore[arg-type]


def held(pool: KVPool) -> int:
    return held_conversations(pool, gemma(), 32768)


def fit_json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    code, out, err = run_cli(capsys, *GEMMA, "--json", *extra)
    assert code == 0, err
    return dict(json.loads(out))


@pytest.mark.parametrize(("version", "off"), [
    ("0.9.0", False),  # no manager yet
    ("0.9.1", True), ("0.12", True), ("0.15", True), ("0.19", True),
    ("0.20", False), ("0.33", False),  # the rule is gone from config/vllm.py
])
def test_kv_events_turn_the_manager_off_on_v0_9_1_to_v0_19(version: str, off: bool) -> None:
    assert bool(events_off_reason(version)) is off
    pool = gemma_pool(version, kv_events=True)
    if off:  # sized as with the manager switched off by hand
        assert pool.windows_in_full and pool.hybrid_manager_off.startswith("--kv-events-config")
        assert pool.blocks == gemma_pool(version, disable_hybrid_kv_cache_manager=True).blocks
    else:
        plain = gemma_pool(version)
        assert pool.blocks == plain.blocks and pool.groups == plain.groups


def test_fit_reads_kv_events_from_a_pasted_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-3-27B on an H100 at 32K on v0.11: any --kv-events-config (even one that
    publishes nothing) leaves none, every layer cached in full; v0.20 holds as without it."""
    on_11 = fit_json(capsys, "--engine-version", "0.11", "--kv-events-config", EVENTS)
    quiet = fit_json(capsys, "--engine-version", "0.11", "--kv-events-config",
                     '{"enable_kv_cache_events": false}')
    assert on_11["conversations"] == quiet["conversations"] \
        == held(gemma_pool("0.11", kv_events=True)) == 0
    assert str(on_11["hybrid_kv_cache_manager_off"]).startswith("--kv-events-config")
    on_20 = fit_json(capsys, "--engine-version", "0.20", "--kv-events-config", EVENTS)
    assert on_20["conversations"] == fit_json(capsys, "--engine-version", "0.20")[
        "conversations"] == held(gemma_pool("0.20")) > 0
    assert on_20["hybrid_kv_cache_manager_off"] is None


def test_the_manager_asked_for_beside_kv_events_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    """v0.13-v0.19 count KV events among vLLM's own reasons, so an explicit
    --no-disable-hybrid-kv-cache-manager stops vLLM for any model; before v0.13 the flag only
    restates the default and the events turn the manager off anyway; a recurrent hybrid does
    not start beside them."""
    llama = resolve_model("llama-3.1-8b")
    assert "explicitly enabled" in manager_problem(llama, "0.15", disable=False, kv_events=True)
    assert manager_problem(llama, "0.20", disable=False, kv_events=True) == ""
    assert manager_problem(llama, "0.12", disable=False, kv_events=True) == ""
    assert gemma_pool("0.12", kv_events=True, disable_hybrid_kv_cache_manager=False) \
        .windows_in_full
    nxt = resolve_model("qwen3-next-80b-a3b")
    assert "serve it without --kv-events-config" in manager_problem(nxt, "0.15", kv_events=True)
    assert manager_problem(nxt, "0.20", kv_events=True) == ""
    code, out, err = run_cli(capsys, *GEMMA, "--engine-version", "0.15",
                             "--no-disable-hybrid-kv-cache-manager", "--kv-events-config",
                             EVENTS)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "--kv-events-config" in err and "0.20" in err


def test_mooncake_connector_follows_the_connector_rule(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The V1 MooncakeConnector registers the cache in place, as NixlConnector does: off
    beside it until asked for (v0.13-v0.21; SupportsHMA from v0.20), kept from v0.22; the
    releases without it refuse it."""
    assert not connector_supports_manager("MooncakeConnector", "0.19")
    assert connector_supports_manager("MooncakeConnector", "0.20")
    assert manager_release("MooncakeConnector") == manager_release("NixlConnector") == "0.22"
    assert gemma_pool("0.19", kv_connector="MooncakeConnector").windows_in_full
    asked = gemma_pool("0.20", kv_connector="MooncakeConnector",
                       disable_hybrid_kv_cache_manager=False)
    assert asked.blocks == gemma_pool("0.20", disable_hybrid_kv_cache_manager=False).blocks
    assert gemma_pool("0.22", kv_connector="MooncakeConnector").blocks \
        == gemma_pool("0.22").blocks
    with pytest.raises(InputError, match="does not support HMA"):
        gemma_pool("0.19", kv_connector="MooncakeConnector",
                   disable_hybrid_kv_cache_manager=False)
    code, out, err = run_cli(capsys, *GEMMA, "--engine-version", "0.12",
                             "--kv-transfer-config", MOONCAKE)
    assert code == 2 and not out and "it came in v0.13" in err
    run = fit_json(capsys, "--engine-version", "0.19", "--kv-transfer-config", MOONCAKE)
    assert run["conversations"] == held(gemma_pool("0.19", kv_connector="MooncakeConnector"))


@pytest.mark.parametrize("connector", ["OffloadingConnector", "P2pNcclConnector",
                                       "LMCacheConnectorV1", "MultiConnector"])
def test_connectors_that_change_the_pool_are_still_refused(
        capsys: pytest.CaptureFixture[str], connector: str) -> None:
    code, out, err = run_cli(capsys, *GEMMA, "--engine-version", "0.22",
                             "--kv-transfer-config", json.dumps({"kv_connector": connector}))
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "is not modelled" in err and connector in err


def levers_of(run: dict[str, object]) -> dict[str, int]:
    return {str(lever["name"]).split(" (")[0]: int(lever["conversations"])
            for lever in run["levers"]}  # type: ignore[attr-defined]


def test_fit_levers_lead_back_to_the_manager(capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-3-27B at 32K on one H100 beside NixlConnector on v0.11 holds none; the levers
    drop the connector (the v0.11 pool with the manager) or name v0.22 (its pool beside
    the connector); on v0.18 --no-disable-hybrid-kv-cache-manager; beside KV events on
    v0.11, the flag dropped or v0.20."""
    nixl = levers_of(fit_json(capsys, "--engine-version", "0.11", "--kv-transfer-config",
                              NIXL))
    assert nixl["without --kv-transfer-config"] == held(gemma_pool("0.11")) > 0
    assert nixl["--engine-version 0.22"] == held(gemma_pool("0.22", kv_connector="NixlConnector"))
    assert "--no-disable-hybrid-kv-cache-manager" not in nixl  # vLLM 0.11 turns it off anyway
    asked = levers_of(fit_json(capsys, "--engine-version", "0.18", "--kv-transfer-config",
                               NIXL))
    assert asked["--no-disable-hybrid-kv-cache-manager"] == held(gemma_pool(
        "0.18", kv_connector="NixlConnector", disable_hybrid_kv_cache_manager=False)) > held(
        gemma_pool("0.18", kv_connector="NixlConnector"))
    events = levers_of(fit_json(capsys, "--engine-version", "0.11", "--kv-events-config",
                                EVENTS))
    assert events["without --kv-events-config"] == held(gemma_pool("0.11"))
    assert events["--engine-version 0.20"] == held(gemma_pool("0.20", kv_events=True))
    plain = levers_of(fit_json(capsys, "--engine-version", "0.11"))
    assert not any(name.startswith(("without --kv", "--engine-version")) for name in plain)


def scout_fit(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    code, out, err = run_cli(capsys, "fit", "llama-4-scout", "--gpu", "h100", "--num-gpus",
                             "4", "--max-model-len", "131072", "--json", *extra)
    assert code == 0, err
    return dict(json.loads(out))


def test_scout_on_0_11_gets_the_chunked_variable_as_a_lever(capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    """Llama-4-Scout on v0.11 runs without the manager for its chunked attention (the
    environment variable's default "0"), not for a flag beside it: no lever drops a flag,
    but the variable at 1 and v0.14 (whose default is 1) are levers, each holding what fit
    holds when asked so (2 conversations at 131,072 on 4 H100s; 7 with the manager)."""
    run = scout_fit(capsys, "--engine-version", "0.11")
    assert str(run["hybrid_kv_cache_manager_off"]).startswith("VLLM_ALLOW_CHUNKED")
    levers = levers_of(run)
    assert not any(name.startswith("without --kv") for name in levers)
    allowed = scout_fit(capsys, "--engine-version", "0.11",
                        "--vllm-allow-chunked-local-attn-with-hybrid-kv-cache", "1")
    assert allowed["hybrid_kv_cache_manager_off"] is None
    assert levers["VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1"] \
        == allowed["conversations"] > run["conversations"]
    assert levers["--engine-version 0.14"] \
        == scout_fit(capsys, "--engine-version", "0.14")["conversations"]


def test_no_chunked_lever_where_the_user_set_the_variable(capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    """The variable set to 0 by the user, or the manager on (v0.14's default), leaves no
    lever for it: the first is their choice, the second gains nothing."""
    for extra in (("--engine-version", "0.11",
                   "--vllm-allow-chunked-local-attn-with-hybrid-kv-cache", "0"),
                  ("--engine-version", "0.14")):
        assert not any(name.startswith(("VLLM_ALLOW", "--engine-version"))
                       for name in levers_of(scout_fit(capsys, *extra)))


def test_decode_sizes_the_pool_beside_kv_events(capsys: pytest.CaptureFixture[str]) -> None:
    """decode reads --kv-events-config from a pasted line as fit does: on v0.11 its pool is
    the one --disable-hybrid-kv-cache-manager sizes, smaller than vLLM's own."""
    def batches(*extra: str) -> object:
        code, out, err = run_cli(capsys, "decode", "gemma-3-27b", "--gpu", "h100",
                                 "--context", "32768", "--engine-version", "0.11", "--json",
                                 *extra)
        assert code == 0, err
        return [{k: v for k, v in row.items() if k != "settings"}
                for row in json.loads(out)["engine_max_batch"]]
    events = batches("--kv-events-config", EVENTS)
    assert events == batches("--disable-hybrid-kv-cache-manager") != batches()
