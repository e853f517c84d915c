"""`ridgeline fit`'s levers where vLLM's hybrid KV-cache manager is off because of a launch
flag beside it rather than the model: a KV connector (--kv-transfer-config, v0.9.1-v0.21)
or KV-cache events (--kv-events-config, v0.9.1-v0.19). Off, a model mixing full attention
with sliding windows or chunks caches every layer in full; each lever re-runs the pool with
the manager on: the flag dropped, --no-disable-hybrid-kv-cache-manager where the release
keeps it on when asked (NixlConnector v0.18-v0.21), or the first release that keeps it on
by default (vllm_hybrid.manager_release; v0.20 for events). Gemma-3-27B on an H100 at 32K
with NixlConnector on v0.11: none, 3 without the connector, 4 on v0.22. Also where the
manager is off for Llama 4's chunked local attention by the default of
VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE ("0", v0.10.1-v0.13): the variable at 1,
or v0.14, whose default is 1 (chunked_levers). Llama-4-Scout on 4 H100s at 131,072 tokens
on v0.11: 2 conversations, 7 with the variable at 1."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ridgeline.deployment import Deployment
from ridgeline.memory import EngineSettings
from ridgeline.vllm_hybrid import (
    connector_off_reason,
    connector_supports_manager,
    events_off_reason,
    manager_release,
)
from ridgeline.vllm_memory import parse_version, vllm_accounting, vllm_data

if TYPE_CHECKING:
    from ridgeline.reports.fit import FitReport


def chunked_levers(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """The ways back to the hybrid KV-cache manager where vLLM v0.10.1-v0.13 turns it off for
    a model with chunked local attention (Llama 4) by VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_
    KV_CACHE's default "0": the variable at 1 (fit's --vllm-allow-chunked-local-attn-with-
    hybrid-kv-cache 1), or the release whose default is "1" (engines.json chunked_local_hybrid
    .paged_again_from, v0.14). None where the user set the variable or disabled the manager
    (their choice), or where it is off for another reason (an EAGLE drafter, a connector)."""
    d, s = r.deployment, r.settings
    rule = dict(vllm_data()["chunked_local_hybrid"])
    if d.engine != "vllm" or s.disable_hybrid_kv_cache_manager \
            or s.allow_chunked_local_attn_hybrid is not None \
            or not r.pool.hybrid_manager_off.startswith(f"{rule['env']}="):
        return []
    return [(f"{rule['env']}=1 (the hybrid manager on)", d, r.context,
             replace(s, allow_chunked_local_attn_hybrid=True)),
            (f"--engine-version {rule['paged_again_from']} (the variable's default is 1)",
             d, r.context, replace(s, engine_version=str(rule["paged_again_from"])))]


def manager_levers(r: FitReport) -> list[tuple[str, Deployment, int, EngineSettings]]:
    """The ways back to the hybrid KV-cache manager where fit's pool runs without it because
    of --kv-transfer-config or --kv-events-config (KVPool.hybrid_manager_off names which);
    none where the manager is off for the model's own reasons or by the user's flag."""
    d, s = r.deployment, r.settings
    if d.engine != "vllm" or not r.pool.hybrid_manager_off or s.disable_hybrid_kv_cache_manager:
        return []
    version = vllm_accounting(s.engine_version).version
    by_connector = bool(s.kv_connector) and bool(
        connector_off_reason(s.kv_connector, version, s.disable_hybrid_kv_cache_manager))
    by_events = s.kv_events and bool(events_off_reason(version))
    out: list[tuple[str, Deployment, int, EngineSettings]] = []
    if by_connector:
        out.append(("without --kv-transfer-config (the hybrid KV-cache manager on)", d,
                    r.context, replace(s, kv_connector="")))
    if by_events:
        out.append(("without --kv-events-config (the hybrid KV-cache manager on)", d,
                    r.context, replace(s, kv_events=False)))
    v = parse_version(version)
    if by_connector and not by_events and connector_supports_manager(s.kv_connector, version) \
            and v >= parse_version(str(vllm_data()["hybrid_kv_cache_manager_flag"]
                                       ["enable_checked_from"])):
        out.append((f"--no-disable-hybrid-kv-cache-manager ({s.kv_connector} supports it)", d,
                    r.context, replace(s, disable_hybrid_kv_cache_manager=False)))
        return out
    releases = ([manager_release(s.kv_connector)] if by_connector else []) \
        + ([str(vllm_data()["kv_events_hybrid"]["on_from"])] if by_events else [])
    if releases and all(releases):  # a connector supporting it in no release: none keeps it
        later = max(releases, key=parse_version)
        beside = " and ".join(([s.kv_connector] if by_connector else [])
                              + (["KV-cache events"] if by_events else []))
        out.append((f"--engine-version {later} (keeps the manager beside {beside})", d,
                    r.context, replace(s, engine_version=later)))
    return out
