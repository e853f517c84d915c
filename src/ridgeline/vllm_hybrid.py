"""How vLLM keeps a hybrid model's recurrent state: whether prefix caching runs, in which
``mamba_cache_mode``, how many state blocks a request holds, and in which dtype.

A hybrid here is a model with recurrent-state layers (Mamba, linear attention) beside its
attention. vLLM long kept prefix caching off for them by default (engines.json
``hybrid_prefix_caching``, with its sources):

- v0.10.2–v0.11.0 force it off; from v0.11.1 it may be asked for (``--enable-prefix-caching``)
  for the Mamba architectures that support it, whose state is then kept at every block
  (what v0.15 names mamba_cache_mode "all"); from v0.15 for every hybrid, the others in
  "align" mode: two state blocks a request, the running state and the last block-aligned one;
- from v0.28 it is on by default, and always "align" unless "all" is asked for; from v0.32 a
  Mamba-2 layer keeps a third block in "align" (a prefill checkpoint).

"all" mode is not modelled: its block size rounds to the Mamba chunk and each state group
counts a block per block of tokens at start-up, so ``fit`` says so where it applies.

It also says when vLLM runs a model without its hybrid KV-cache manager (on by default from
v0.9.1, chunks paged from v0.10.0): asked off, chunked attention beside the variable or a
drafter, a KV connector (--kv-transfer-config, v0.9.1-v0.21: engines.json
kv_transfer_hybrid) and KV-cache events (--kv-events-config, v0.9.1-v0.19: kv_events_hybrid),
and what vLLM then will not start.
"""

from __future__ import annotations

from typing import Any

from ridgeline.layouts import CHUNKED, LINEAR, MAMBA
from ridgeline.model import ModelSpec
from ridgeline.vllm_memory import parse_version, vllm_data


def _rules() -> dict[str, Any]:
    return dict(vllm_data()["hybrid_prefix_caching"])


def _at_least(version: str, key: str) -> bool:
    return parse_version(version) >= parse_version(str(_rules()[key]))


def has_state(model: ModelSpec) -> bool:
    """Whether the model has recurrent-state layers (Mamba, linear attention)."""
    return any(layer.mixer in (LINEAR, MAMBA) for layer in model.layers)


def all_mode_architecture(model: ModelSpec) -> bool:
    """A Mamba architecture vLLM can cache at every block (SupportsMambaPrefixCaching)."""
    return model.model_type in _rules()["all_mode_model_types"]


def prefix_caching(model: ModelSpec, asked: bool | None, version: str) -> bool:
    """Whether vLLM ``version`` runs ``model`` with prefix caching: as asked (None: its
    default, on but for a hybrid before v0.28), and never where the version forces it off."""
    if not has_state(model):
        return True if asked is None else asked
    if asked is None:
        return _at_least(version, "default_on_from")
    if not asked or not _at_least(version, "opt_in_from"):
        return False
    return all_mode_architecture(model) or _at_least(version, "any_hybrid_from")


def cache_mode(model: ModelSpec, asked: bool | None, version: str) -> str:
    """mamba_cache_mode as vLLM picks it: "none" without prefix caching, "all" for the Mamba
    architectures that support it until v0.28, otherwise "align"."""
    if not has_state(model) or not prefix_caching(model, asked, version):
        return "none"
    if all_mode_architecture(model) and not _at_least(version, "all_mode_until"):
        return "all"
    return "align"


def state_blocks(model: ModelSpec, asked: bool | None, version: str,
                 align_blocks: int) -> int:
    """State blocks a request holds per state group, however long it is, as vLLM's start-up
    check and "Maximum concurrency" count them: one ("none"; "all", not modelled), or in
    "align" ``align_blocks`` (two: MambaSpec.max_memory_usage_bytes, 2 +
    num_prefill_checkpoint_blocks), and from v0.32 one more where Mamba-2 layers run
    (MambaMixer2.get_kv_cache_spec sets num_prefill_checkpoint_blocks=1; not in v0.31)."""
    if cache_mode(model, asked, version) != "align":
        return 1
    mamba2 = model.mamba is not None and model.mamba.version == 2 \
        and any(layer.mixer == MAMBA for layer in model.layers)
    return align_blocks + (1 if mamba2 and _at_least(version, "mamba2_checkpoint_block_from")
                           else 0)


def ssm_state_dtype(model: ModelSpec, version: str) -> str:
    """The dtype vLLM keeps the SSM state in: Nemotron-H's in float32 from v0.20 unless its
    config names mamba_ssm_cache_dtype, the one key vLLM reads for it (engines.json
    ``nemotron_h_ssm_cache_dtype``); else the model's own."""
    rule = vllm_data()["nemotron_h_ssm_cache_dtype"]
    if model.model_type == "nemotron_h" and not model.ssm_cache_dtype_named \
            and parse_version(version) >= parse_version(str(rule["from"])):
        return str(rule["dtype"])
    return model.state_dtype


def ssm_state_dtype_why(model: ModelSpec, version: str) -> str:
    """Why vLLM ``version`` keeps ``model``'s SSM state in ssm_state_dtype's dtype, in words:
    Qwen3.5's config names mamba_ssm_dtype float32, so "the config's mamba_ssm_dtype";
    Nemotron-H's names neither key, so from v0.20 "vLLM's own rule for nemotron_h, its config
    naming no mamba_ssm_cache_dtype"."""
    if ssm_state_dtype(model, version) != model.state_dtype:
        return f"vLLM's own rule for {model.model_type}, its config naming no " \
            "mamba_ssm_cache_dtype"
    if model.ssm_cache_dtype_named:
        return "the config's mamba_ssm_cache_dtype"
    if model.state_dtype != model.dtype:
        return "the config's mamba_ssm_dtype"
    return "the checkpoint's dtype: mamba_ssm_cache_dtype 'auto'"


def _chunked(model: ModelSpec) -> bool:
    """Whether the model has chunked local attention (Llama 4's attention_chunk_size)."""
    return any(layer.mixer == CHUNKED for layer in model.layers)


def chunked_env_default(version: str) -> bool:
    """VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE as vLLM ``version`` reads it when
    unset: "0" from v0.10.1 to v0.13, "1" from v0.14 (engines.json chunked_local_hybrid)."""
    rule = dict(vllm_data()["chunked_local_hybrid"])
    return parse_version(version) >= parse_version(str(rule["paged_again_from"]))


def chunks_paged(version: str) -> bool:
    """Whether vLLM ``version``'s hybrid KV-cache manager pages attention chunks apart
    (ChunkedLocalAttentionSpec, v0.10.0+; engines.json chunked_local_hybrid.paged_from):
    0.9.1 and 0.9.2 page sliding windows only, and cache Llama 4's chunked layers in full."""
    rule = dict(vllm_data()["chunked_local_hybrid"])
    return parse_version(version) >= parse_version(str(rule["paged_from"]))


def _connector_rule() -> dict[str, Any]:
    return dict(vllm_data()["kv_transfer_hybrid"])


def connector_supports_manager(connector: str, version: str) -> bool:
    """Whether vLLM ``version``'s KV connector ``connector`` runs beside the hybrid KV-cache
    manager (SupportsHMA: NixlConnector from v0.18, MooncakeConnector from v0.20; engines.json
    kv_transfer_hybrid)."""
    since = _connector_rule()["hma_connectors"].get(connector)
    return since is not None and parse_version(version) >= parse_version(str(since))


def connector_problem(connector: str, version: str) -> str:
    """Why vLLM ``version`` has no KV connector ``connector``, or "": MooncakeConnector, the
    V1 one, is registered from v0.13 (engines.json kv_transfer_hybrid.connectors_from)."""
    since = _connector_rule()["connectors_from"].get(connector)
    if since is None or parse_version(version) >= parse_version(str(since)):
        return ""
    return (f"vLLM {version} has no V1 {connector} (--kv-transfer-config): it came in "
            f"v{since}; name that --engine-version or a later one")


def manager_release(connector: str) -> str:
    """The first vLLM release that keeps the hybrid KV-cache manager on by default beside
    ``connector`` (its SupportsHMA release, v0.22 at the earliest), or "" where none does."""
    rule = _connector_rule()
    since = rule["hma_connectors"].get(connector)
    return max(str(since), str(rule["connector_checked_from"]), key=parse_version) \
        if since else ""


def connector_off_reason(connector: str, version: str, disable: bool | None = None) -> str:
    """Why --kv-transfer-config naming ``connector`` turns vLLM ``version``'s hybrid KV-cache
    manager off, or "": v0.9.1-v0.12 always; v0.13-v0.21 unless the manager is asked for
    (``disable`` False); from v0.22 only for a connector without HMA support. NixlConnector
    on v0.11: "--kv-transfer-config (NixlConnector; v0.9.1 to v0.12 turn the manager off
    with any connector)"; on v0.22: ""."""
    if not connector:
        return ""
    rule, v = _connector_rule(), parse_version(version)
    if v < parse_version(str(rule["off_from"])):
        return ""
    if v < parse_version(str(rule["explicit_on_from"])):
        return (f"--kv-transfer-config ({connector}; v{rule['off_from']} to v0.12 turn the "
                "manager off with any connector)")
    if disable is False:
        return ""
    if v < parse_version(str(rule["connector_checked_from"])):
        return (f"--kv-transfer-config ({connector}; v{rule['explicit_on_from']} to v0.21 turn "
                "the manager off with a connector unless --no-disable-hybrid-kv-cache-manager "
                "is given)")
    if connector_supports_manager(connector, version):
        return ""
    return f"--kv-transfer-config ({connector}, which does not support the manager)"


def _events_rule() -> dict[str, Any]:
    return dict(vllm_data()["kv_events_hybrid"])


def events_off_reason(version: str, disable: bool | None = None) -> str:
    """Why --kv-events-config turns vLLM ``version``'s hybrid KV-cache manager off, or "":
    v0.9.1-v0.12 whatever the flags say, v0.13-v0.19 as vLLM's own reason (so an explicit
    ``disable`` False is refused: manager_problem), from v0.20 never (engines.json
    kv_events_hybrid). v0.11: "--kv-events-config (v0.9.1 to v0.19 turn the manager off
    beside KV-cache events)"."""
    rule, v = _events_rule(), parse_version(version)
    if not parse_version(str(rule["off_from"])) <= v < parse_version(str(rule["on_from"])):
        return ""
    return (f"--kv-events-config (v{rule['off_from']} to v0.19 turn the manager off beside "
            "KV-cache events)")


def manager_off_reason(model: ModelSpec, version: str, disable: bool | None = None,
                       allow_chunked: bool | None = None, drafter_method: str = "",
                       connector: str = "", kv_events: bool = False) -> str:
    """Why vLLM ``version`` runs ``model`` without its hybrid KV-cache manager, or "" where
    the manager runs: ``disable`` is --disable-hybrid-kv-cache-manager (True), its negation
    (False) or neither (None); ``allow_chunked`` is
    VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE as the server is started with it (None:
    the release's default); ``connector`` the KV connector --kv-transfer-config names
    (connector_off_reason); ``kv_events`` whether --kv-events-config is given
    (events_off_reason). vLLM's VllmConfig turns the manager off itself for chunked local
    attention beside an EAGLE or MTP drafter (v0.10.0+) and, from v0.10.1, where the variable
    is 0: Llama-4-Scout on v0.11 for "...=0 (its default, v0.10.1 to v0.13)", on v0.11 with
    the variable at 1 for ""."""
    if disable:
        return "--disable-hybrid-kv-cache-manager"
    by_connector = connector_off_reason(connector, version, disable)
    if by_connector:
        return by_connector
    if kv_events and events_off_reason(version):
        return events_off_reason(version)
    if not _chunked(model):
        return ""
    rule = dict(vllm_data()["chunked_local_hybrid"])
    v = parse_version(version)
    if drafter_method in rule["eagle_methods"] \
            and v >= parse_version(str(rule["eagle_off_from"])):
        return "an EAGLE or MTP drafter beside chunked local attention"
    if v < parse_version(str(rule["env_from"])):
        return ""
    if allow_chunked is None:
        return "" if chunked_env_default(version) else \
            f"{rule['env']}=0 (its default, v{rule['full_from']} to v0.13)"
    return "" if allow_chunked else f"{rule['env']}=0"


def unifies_without_manager(model: ModelSpec) -> bool:
    """Whether vLLM can cache ``model`` as one cache type without the hybrid manager
    (unify_hybrid_kv_cache_specs): sliding windows and attention chunks become full
    attention where full attention is present; any other mix, recurrent state beside
    attention (Qwen3-Next, Jamba), does not, and vLLM stops at start-up."""
    from ridgeline.kvgroups import cache_kinds

    kinds = cache_kinds(model)
    if any(kind == "full" for kind, _ in kinds):
        kinds = {k for k in kinds if k[0] not in ("window", "chunk")}
    return len(kinds) <= 1


def manager_problem(model: ModelSpec, version: str, disable: bool | None = None,
                    allow_chunked: bool | None = None, drafter_method: str = "",
                    connector: str = "", kv_events: bool = False) -> str:
    """Why vLLM ``version`` will not start ``model`` as asked of its hybrid KV-cache manager,
    or "": the flag before v0.9.1; from v0.13 --no-disable-hybrid-kv-cache-manager where vLLM's
    own rules turn the manager off (a ValueError), or beside a KV ``connector`` without HMA
    support (NixlConnector before v0.18: the connector factory's ValueError, whatever the
    model) or KV-cache events (``kv_events``, v0.13-v0.19: vLLM's own reason, whatever the
    model); a ``connector`` the release does not have (connector_problem); the manager off
    for a model whose cache types do not unify (recurrent state beside attention: a
    ValueError at start-up)."""
    rule = dict(vllm_data()["hybrid_kv_cache_manager_flag"])
    v = parse_version(version)
    missing = connector_problem(connector, version) if connector else ""
    if missing:
        return missing
    spelled = "--disable-hybrid-kv-cache-manager" if disable \
        else "--no-disable-hybrid-kv-cache-manager"
    if disable is not None and v < parse_version(str(rule["from"])):
        return f"vLLM {version} has no {spelled}: it came in v{rule['from']}"
    if disable is False and connector and v >= parse_version(str(rule["enable_checked_from"])) \
            and not connector_supports_manager(connector, version):
        since = _connector_rule()["hma_connectors"].get(connector)
        return (f"vLLM {version} stops with {spelled} beside --kv-transfer-config's "
                f"{connector}, which does not support the hybrid KV-cache manager"
                + (f" before v{since}" if since else "") + " ('does not support HMA but HMA "
                "is enabled'); drop the flag, so vLLM turns the manager off"
                + (f", or name --engine-version {since} or later" if since else ""))
    own = manager_off_reason(model, version, None, allow_chunked, drafter_method, "", kv_events)
    if disable is False and own and v >= parse_version(str(rule["enable_checked_from"])):
        env = dict(vllm_data()["chunked_local_hybrid"])["env"]
        fix = " or start it with --vllm-allow-chunked-local-attn-with-hybrid-kv-cache 1" \
            if own.startswith(env) else (f", or drop --kv-events-config, or name --engine-version "
                                         f"{_events_rule()['on_from']} or later"
                                         if own.startswith("--kv-events-config") else "")
        return (f"vLLM {version} refuses {spelled} for {model.name}: {own} turns the "
                f"hybrid KV-cache manager off, and vLLM stops ('explicitly enabled but is not "
                f"supported'); drop the flag{fix}")
    why = manager_off_reason(model, version, disable, allow_chunked, drafter_method, connector,
                             kv_events)
    if why and not unifies_without_manager(model):
        fix = "drop --disable-hybrid-kv-cache-manager" if disable else \
            _events_fix() if why.startswith("--kv-events-config") else _connector_fix(connector)
        return (f"vLLM {version} cannot start {model.name} without the hybrid KV-cache "
                f"manager ({why}): its recurrent state and its attention do not unify to "
                f"one cache type (unify_hybrid_kv_cache_specs raises ValueError); {fix}")
    return ""


def _connector_fix(connector: str) -> str:
    """How a hybrid with recurrent state runs beside ``connector`` after all: NixlConnector
    keeps the manager from v0.18 when asked, from v0.22 by default."""
    rule = _connector_rule()
    since = rule["hma_connectors"].get(connector)
    if not since:
        return "serve it without --kv-transfer-config"
    later = max(str(since), str(rule["explicit_on_from"]), key=parse_version)
    asked = f"{later} or later with --no-disable-hybrid-kv-cache-manager (" \
        if parse_version(later) < parse_version(manager_release(connector)) else ""
    return (f"serve it without --kv-transfer-config, or name --engine-version {asked}"
            f"{manager_release(connector)} or later keeps the manager for {connector} by "
            f"default{')' if asked else ''}")


def _events_fix() -> str:
    """How a hybrid with recurrent state runs beside KV-cache events after all."""
    return (f"serve it without --kv-events-config, or name --engine-version "
            f"{_events_rule()['on_from']} or later, which keeps the manager beside them")


def chunked_env_caution(model: ModelSpec, version: str, allow_chunked: bool | None) -> str:
    """What to say where VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE (``allow_chunked``,
    as --vllm-allow-chunked-local-attn-with-hybrid-kv-cache gives it) changes nothing, else
    "": a release before v0.10.1 does not read it, and it reads only a model with chunked
    local attention (Llama 4)."""
    if allow_chunked is None:
        return ""
    rule = dict(vllm_data()["chunked_local_hybrid"])
    said = f"{rule['env']}={int(allow_chunked)} ignored"
    if parse_version(version) < parse_version(str(rule["env_from"])):
        return f"{said}: vLLM {version} does not read it (v{rule['env_from']} does)"
    if not _chunked(model):
        return f"{said}: {model.name} has no chunked local attention, which it is read for"
    return ""


def chunked_in_full(model: ModelSpec, version: str) -> bool:
    """Whether vLLM ``version`` caches a chunked-local-attention model (Llama 4) in full,
    its hybrid KV-cache manager disabled by VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE's
    default of "0" (v0.10.1 to v0.13)."""
    return bool(manager_off_reason(model, version))
