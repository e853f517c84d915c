"""vLLM's hybrid KV-cache manager by release: on by default from v0.9.1 (attention chunks
paged from v0.10.0), V1 only; its --enable-… spelling from v0.33; and --kv-transfer-config,
which turns it off on v0.9.1-v0.21 (v0.13-v0.21 unless asked for; NixlConnector keeps it
from v0.22), as fit reads a pasted pool command and plan sizes a split's pools
(vllm_hybrid.connector_off_reason, disaggregated.pool_connector)."""

from __future__ import annotations

import json

import pytest

import ridgeline.disaggregated as disaggregated
from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import held_conversations
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, KVPool, kv_pool
from ridgeline.serving_load import Load, Slo
from ridgeline.vllm_hybrid import connector_off_reason, manager_problem
from ridgeline.vllm_memory import vllm_accounting
from tests.conftest import run_cli

NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
GEMMA = ("fit", "gemma-3-27b", "--gpu", "h100", "--max-model-len", "32768")


def gemma() -> Deployment:
    return Deployment.build(resolve_model("gemma-3-27b"), resolve_accelerator("h100"))


def gemma_pool(version: str, **switches: object) -> KVPool:
    return kv_pool(gemma(), EngineSettings(max_model_len=32768, engine_version=version,
                                           **switches))  # type: ignore[arg-type]


def test_the_manager_pages_gemma_3_windows_from_v0_9_1_on_v1_only() -> None:
    """0.9.0 always unified the specs (windows cached as full attention); 0.9.1's
    get_kv_cache_config groups a window+full model as 0.10.0 does, so Gemma-3-27B holds more
    32K conversations there; the V0 engine has no such manager."""
    before, first, later = gemma_pool("0.9.0"), gemma_pool("0.9.1"), gemma_pool("0.10.0")
    assert before.windows_in_full and not first.windows_in_full
    assert first.groups == later.groups and first.blocks == later.blocks
    assert held_conversations(first, gemma(), 32768) > held_conversations(before, gemma(), 32768)
    v0 = gemma_pool("0.9.1 V0")
    assert v0.windows_in_full and v0.hybrid_manager_off == ""


def test_scout_chunks_are_cached_in_full_until_v0_10_0() -> None:
    """0.9.1 and 0.9.2 have no ChunkedLocalAttentionSpec: the manager runs, but Llama-4-Scout's
    chunked layers are full attention, one group, as with the manager off; 0.10.0 pages them."""
    scout = Deployment.build(resolve_model("llama-4-scout"), resolve_accelerator("h100"),
                             num_gpus=4)
    s = EngineSettings(max_model_len=131072, engine_version="0.9.2")
    early, paged = kv_pool(scout, s), kv_pool(scout, EngineSettings(
        max_model_len=131072, engine_version="0.10.0"))
    off = kv_pool(scout, EngineSettings(max_model_len=131072, engine_version="0.9.2",
                                        disable_hybrid_kv_cache_manager=True))
    assert early.windows_in_full and early.hybrid_manager_off == ""
    assert early.groups == off.groups and early.groups is not None and early.groups.count == 1
    assert paged.groups is not None and paged.groups.chunks and not paged.windows_in_full


@pytest.mark.parametrize(("version", "disable", "off"), [
    ("0.9.0", None, False),  # no manager to turn off (the windows in full anyway)
    ("0.9.1", None, True), ("0.12", False, True),  # any connector, whatever is asked
    ("0.13", None, True), ("0.21", None, True),  # off unless asked for
    ("0.18", False, False), ("0.21", False, False),  # asked for, beside a SupportsHMA one
    ("0.22", None, False), ("0.22.1", None, False),  # v0.22: kept where supports_hma
    ("0.23", None, False), ("0.34", None, False),  # NixlConnector supports it: kept
])
def test_a_connector_turns_the_manager_off_by_release(version: str, disable: bool | None,
                                                      off: bool) -> None:
    assert bool(connector_off_reason("NixlConnector", version, disable)) is off
    pool = gemma_pool(version, kv_connector="NixlConnector",
                      disable_hybrid_kv_cache_manager=disable)
    # from v0.34 the connector also keeps the extensible KV cache off (an NVIDIA host without
    # an IMEX channel: test_split_extensible), as the switch does
    own = {"extensible_kv_cache": False} if vllm_accounting(version).extensible_kv_cache else {}
    plain = gemma_pool(version, disable_hybrid_kv_cache_manager=disable, **own)
    if off:  # sized as with the manager switched off by hand
        assert pool.windows_in_full and pool.hybrid_manager_off.startswith("--kv-transfer")
        assert pool.blocks == gemma_pool(version, disable_hybrid_kv_cache_manager=True).blocks
    else:
        assert pool.blocks == plain.blocks and pool.groups == plain.groups


def test_fit_reads_a_pasted_nixl_pool_command_for_gemma_3_on_v0_11(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-3-27B on one H100 at 32K on v0.11: with the manager three conversations; with
    --kv-transfer-config every layer is cached in full and not one fits (DOES NOT FIT); the
    same line on v0.23 holds what it holds without the connector."""
    runs = {}
    for version in ("0.11", "0.23"):
        for extra in ((), ("--kv-transfer-config", NIXL)):
            code, out, err = run_cli(capsys, *GEMMA, "--engine-version", version, "--json",
                                     *extra)
            assert code == 0, err
            runs[version, bool(extra)] = json.loads(out)
    on, off = gemma_pool("0.11"), gemma_pool("0.11", kv_connector="NixlConnector")
    assert runs["0.11", False]["conversations"] == held_conversations(on, gemma(), 32768) > 0
    assert runs["0.11", True]["conversations"] == held_conversations(off, gemma(), 32768) == 0
    assert runs["0.11", True]["hybrid_kv_cache_manager_off"].startswith(
        "--kv-transfer-config (NixlConnector")
    assert runs["0.11", False]["hybrid_kv_cache_manager_off"] is None
    assert runs["0.23", True]["conversations"] == runs["0.23", False]["conversations"]
    code, out, _ = run_cli(capsys, *GEMMA, "--engine-version", "0.11", "--kv-transfer-config",
                           NIXL)
    assert code == 0 and out.startswith("DOES NOT FIT")


def test_what_vllm_will_not_start_beside_a_connector_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The manager asked for beside NixlConnector before it supports HMA (v0.13-v0.17: the
    connector factory raises, whatever the model); a recurrent hybrid whose manager the
    connector turns off (its specs do not unify)."""
    llama = resolve_model("llama-3.1-8b")
    assert "does not support the hybrid KV-cache manager before v0.18" in manager_problem(
        llama, "0.15", disable=False, connector="NixlConnector")
    assert manager_problem(llama, "0.18", disable=False, connector="NixlConnector") == ""
    assert manager_problem(llama, "0.12", disable=False, connector="NixlConnector") == ""
    nxt = resolve_model("qwen3-next-80b-a3b")
    assert "cannot start qwen3-next-80b-a3b" in manager_problem(
        nxt, "0.20", connector="NixlConnector")
    assert manager_problem(nxt, "0.20", disable=False, connector="NixlConnector") == ""
    assert manager_problem(nxt, "0.23", connector="NixlConnector") == ""
    code, out, err = run_cli(capsys, "fit", "qwen3-next-80b-a3b", "--gpu", "h100",
                             "--num-gpus", "4", "--engine-version", "0.20",
                             "--kv-transfer-config", NIXL)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "without --kv-transfer-config" in err
    with pytest.raises(InputError, match="does not support HMA"):
        gemma_pool("0.15", kv_connector="NixlConnector", disable_hybrid_kv_cache_manager=False)


def test_the_enable_spelling_is_refused_before_v0_33(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """--enable-hybrid-kv-cache-manager came with EnableDisableAction in v0.33.0: fit and
    decode refuse it on 0.32 as that vllm serve would; on 0.33 it reads as
    --no-disable-hybrid-kv-cache-manager."""
    code, out, err = run_cli(capsys, *GEMMA, "--engine-version", "0.32",
                             "--enable-hybrid-kv-cache-manager")
    assert code == 2 and not out
    assert "has no --enable-hybrid-kv-cache-manager: it came in v0.33" in err
    code, _, err = run_cli(capsys, "decode", "gemma-3-27b", "--gpu", "h100", "--context",
                           "8192", "--engine-version", "0.11", "--enable-hybrid-kv-cache-manager")
    assert code == 2 and "it came in v0.33" in err
    answers = [json.loads(run_cli(capsys, *GEMMA, "--engine-version", "0.33", "--json", flag)[1])
               for flag in ("--enable-hybrid-kv-cache-manager",
                            "--no-disable-hybrid-kv-cache-manager")]
    assert answers[0]["conversations"] == answers[1]["conversations"]
    code, _, err = run_cli(capsys, *GEMMA, "--engine-version", "0.32",
                           "--no-disable-hybrid-kv-cache-manager")
    assert code == 0, err


def test_a_gemma_3_split_on_v0_11_is_sized_without_the_manager(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """plan's vLLM split launches both pools with the NixlConnector: on v0.11 Gemma-3-27B's
    pools cache every layer in full, so its split at 4 req/s of 8,000 + 250 tokens takes more
    GPUs than the same split sized with the manager on; on v0.23 the connector keeps it."""
    model, load, slo = resolve_model("gemma-3-27b"), Load(4, "8000", "250"), Slo(2.0, 0.04)
    assert disaggregated.pool_connector(gemma()) == "NixlConnector"

    def split(version: str) -> tuple[int, str]:
        (c,) = disaggregated.disaggregated_candidates(model, load, slo, ["h100"], 16,
                                                      {"h100-sxm": 2.0}, version)
        return c.gpus, c.disaggregated

    sized = {v: split(v) for v in ("0.11", "0.23")}
    monkeypatch.setattr(disaggregated, "pool_connector", lambda dep: "")
    paged = {v: split(v) for v in ("0.11", "0.23")}
    assert sized["0.11"][0] > paged["0.11"][0]
    assert sized["0.23"] == paged["0.23"]
