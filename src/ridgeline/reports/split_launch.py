"""A split's pools launched as one disaggregated deployment: each pool's replica with the
engine's KV hand-off settings (vLLM's NixlConnector, SGLang's --disaggregation-mode and
transfer backend, TensorRT-LLM's cache_transceiver_config) and the router in front that ties
the pools together (engines.json <engine>.cli.disaggregated, with its sources and versions).

Without them the two pools' commands start two independent servers. A 1P1D split on vLLM::

    VLLM_NIXL_SIDE_CHANNEL_HOST=PREFILL_HOST vllm serve M ... --port 8100
        --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    python tests/v1/kv_connector/nixl_integration/toy_proxy_server.py --host 0.0.0.0
        --port 8000 --prefiller-hosts PREFILL_HOST --prefiller-ports 8100 ...

The hosts are placeholders for each replica's node address, named here once.
"""

from __future__ import annotations

import shlex
from typing import Any

from ridgeline.datafiles import engine_defaults
from ridgeline.trtllm_transceiver import split_transceiver

HOSTS = {"prefill": "PREFILL_HOST", "decode": "DECODE_HOST"}  # a replica's node address
ROLES = ("prefill", "decode")


def split_settings(engine: str, vendor: str = "") -> dict[str, Any]:
    """The engine's disaggregated launch (engines.json cli.disaggregated), {} for an engine
    without one (llama.cpp); on a card of ``vendor`` whose backend takes another connector,
    that platform's settings over it (vLLM on a TPU: tpu-inference's TPUConnector, producer
    and consumer, as tpu-inference refuses the NixlConnector)."""
    found: dict[str, Any] = engine_defaults(engine).get("cli", {}).get("disaggregated", {})
    platform = found.get("platforms", {}).get(vendor, {})
    return {**found, **platform} if platform else found


def hosts(role: str, replicas: int) -> list[str]:
    """Each replica's address placeholder: PREFILL_HOST for one replica, PREFILL_HOST_1,
    PREFILL_HOST_2, … for several."""
    name = HOSTS[role]
    return [name] if replicas == 1 else [f"{name}_{i}" for i in range(1, replicas + 1)]


def replica_host(role: str, replicas: int) -> str:
    """The address placeholder a pool's one command names: PREFILL_HOST, or PREFILL_HOST_i
    (each replica its own) for several."""
    return HOSTS[role] if replicas == 1 else f"{HOSTS[role]}_i"


def port(engine: str, role: str) -> str:
    """The port a pool's servers listen on (the engine's documented example's)."""
    flags = split_settings(engine)["pool_flags"][role]
    return str(flags[flags.index("--port") + 1])


def pool_command(engine: str, role: str, command: str, replicas: int,
                 vendor: str = "") -> str:
    """``command`` (a pool's replica, as a single pool launches it) made that pool's part of
    the split: its port (and bind address where the engine binds localhost by default), the
    KV connector and role flags, and for vLLM the NIXL side channel's address on a node apart
    (VLLM_NIXL_SIDE_CHANNEL_HOST, which defaults to localhost; on a TPU tpu-inference's
    TPUConnector, kv_producer or kv_consumer by ``role``, with VLLM_HOST_IP)."""
    d = split_settings(engine, vendor)
    if not d or not command:
        return command
    connector = d["connector_by_role"][role] if "connector_by_role" in d \
        else d.get("connector", [])
    flags = [*d["pool_flags"][role], *connector]
    env = f"{d['host_env']}={replica_host(role, replicas)} " if "host_env" in d else ""
    return env + command + " " + " ".join(shlex.quote(f) for f in flags)


def router_command(engine: str, prefill_replicas: int, decode_replicas: int,
                   vendor: str = "") -> str:
    """The router in front of the pools, which takes each request and hands it from a prefill
    replica to a decode replica (on a card of ``vendor``, its platform's: split_settings);
    "" for an engine without a disaggregated launch."""
    d = split_settings(engine, vendor)
    if not d:
        return ""
    each = {"prefill": hosts("prefill", prefill_replicas),
            "decode": hosts("decode", decode_replicas)}
    url = d.get("router_url", {})
    fields = {}
    for role in ROLES:
        fields[f"{role}_hosts"] = " ".join(each[role])
        fields[f"{role}_ports"] = " ".join(port(engine, role) for _ in each[role])
        fields[f"{role}_urls"] = " ".join(url.get(role, "").format(host=h, port=port(engine, role))
                                          for h in each[role])
    return str(d["router"]).format(**fields)


def router_config(engine: str, prefill_replicas: int, decode_replicas: int
                  ) -> tuple[str, dict[str, Any]]:
    """The file the router's command names and its settings (TensorRT-LLM's
    disagg_config.yaml: its address, and each pool's servers as host:port), or ("", {})."""
    d = split_settings(engine)
    if "router_config" not in d:
        return "", {}
    config = dict(d["router_config"])
    name = str(config.pop("name"))
    for role, key in (("prefill", "context_servers"), ("decode", "generation_servers")):
        urls = [f"{h}:{port(engine, role)}" for h in
                hosts(role, prefill_replicas if role == "prefill" else decode_replicas)]
        config[key] = {"num_instances": len(urls), "urls": urls}
    return name, config


def role_config(engine: str, role: str, longest_prompt: int,
                tokens_per_block: int | None = None) -> tuple[str, dict[str, Any]]:
    """The YAML file a TensorRT-LLM pool's servers read and the settings the role adds to it
    (cache_transceiver_config, its buffer as long as the load's longest prompt, as the docs
    advise, in whole blocks, as the transceiver requires: trtllm_transceiver.split_transceiver,
    which the plan sized the pools with, in blocks of the pools' ``tokens_per_block``; the
    context servers without the overlap scheduler), or ("", {})."""
    d = split_settings(engine)
    transceiver = split_transceiver(engine, longest_prompt, tokens_per_block)
    if "role_config" not in d or transceiver is None:
        return "", {}
    config = {k: dict(v) if isinstance(v, dict) else v for k, v in d["role_config"][role].items()}
    config["cache_transceiver_config"][d["buffer_key"]] = transceiver.max_tokens_in_buffer
    return str(d["config_files"][role]), config


def host_note(engine: str, prefill_replicas: int, decode_replicas: int,
              vendor: str = "") -> str:
    """What the placeholders stand for and what the router is, in one line; "" for an
    engine without a disaggregated launch."""
    d = split_settings(engine, vendor)
    if not d:
        return ""
    named = [HOSTS[r] if n == 1 else f"{replica_host(r, n)} (i = 1 … {n})"
             for r, n in (("prefill", prefill_replicas), ("decode", decode_replicas))]
    return f"{' and '.join(named)}: each replica's node address; {d.get('router_note', '')}"
