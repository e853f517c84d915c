"""Disaggregated prefill and decode pools (xPyD): x prefill replicas sized for the prompt
rate, y decode replicas for TPOT alone, each prompt's KV cache handed off over the
inter-node link; the cheapest checked by simulating both pools."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import partial

from ridgeline.candidate import (
    Candidate,
    kv_choices,
    replica_deployment,
    served_choice,
    weights_lightest_first,
)
from ridgeline.capacity import max_batch
from ridgeline.cost import Seq, decode_batch, mean_decode_context, step_time_s
from ridgeline.datafiles import engine_defaults
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile, profile_for
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, resolve_accelerator
from ridgeline.kvcache import kv_footprint
from ridgeline.memory import EngineSettings
from ridgeline.model import ModelSpec
from ridgeline.monotone import longest_holding
from ridgeline.parallel import INTER_NODE_BYTES_PER_S
from ridgeline.plan_cautions import calibration
from ridgeline.replica_sizing import launch_at, launch_length, starts_at, state_seats
from ridgeline.search_space import ENGINE_KNOBS, offered
from ridgeline.serving_load import Load, Slo
from ridgeline.sim.config import SimConfig, sim_config
from ridgeline.split_runs import (
    GRID,
    Knobs,
    PoolRuns,
    cheapest_held,
    decode_holds,
)
from ridgeline.trtllm_memory import tokens_per_block
from ridgeline.trtllm_transceiver import CacheTransceiver, split_transceiver

DISAGGREGATED_CHECKS = 2  # cheapest xPyD candidates checked by simulating both pools


def handoff_s(dep: Deployment, prompt_tokens: int) -> float:
    """Moving one prompt's KV cache from a prefill replica to a decode replica: its bytes over
    the inter-node link, one link per tensor-parallel rank."""
    kv = kv_footprint(dep.model, prompt_tokens, dep.kv.bytes_per_element).bytes_per_sequence
    return kv / (INTER_NODE_BYTES_PER_S * dep.tensor_parallel_size)


NO_GAIN = 0.95  # a prefill pool grown whose TTFT fell by less than this share: not the fix


def pool_transceiver(dep: Deployment, load: Load, max_len: int) -> CacheTransceiver | None:
    """The KV hand-off a pool of ``dep``'s engine is launched with, whose buffers its pool
    loses: TensorRT-LLM's cache_transceiver_config at the load's longest prompt, as plan prints
    it (split_launch.role_config); None for an engine whose connector ridgeline leaves out."""
    block = tokens_per_block(dep) if dep.engine == "trtllm" else None
    return split_transceiver(dep.engine, load.longest_prompt(max_len) or max_len, block)




def pool_connector(dep: Deployment) -> str:
    """The KV connector a vLLM split's pools launch with (engines.json cli.disaggregated:
    the NixlConnector, as split_launch prints it), with which their pools are sized: v0.9.1
    to v0.21 turn the hybrid KV-cache manager off beside it (vllm_hybrid.connector_off_reason),
    so Gemma 3 caches its window layers in full and a recurrent hybrid does not start. "" for
    another engine, and on a TPU, whose tpu-inference connector rules are not read."""
    return split_connector(dep.engine, dep.accelerator.vendor)


def split_connector(engine: str, vendor: str) -> str:
    """``pool_connector`` by engine and card vendor: "NixlConnector" for vLLM off a TPU."""
    if engine != "vllm" or vendor == "google":
        return ""
    flags = engine_defaults("vllm")["cli"]["disaggregated"]["connector"]
    return str(json.loads(flags[flags.index("--kv-transfer-config") + 1])["kv_connector"])


def pool_configs(dep: Deployment, load: Load, max_len: int, engine_version: str | None,
                 seats: int | None = None, switches: EngineSettings | None = None
                 ) -> list[tuple[Knobs, SimConfig]]:
    """Each engine-knob setting a pool is tried at (``ENGINE_KNOBS``, the single-pool
    search's, with its KV hand-off: ``pool_transceiver``), with the simulated engine it
    launches, its seats no more than ``seats`` where given (a TensorRT-LLM hybrid's cap,
    ``pool_seats``: the default 2,048 and 64 both read as the cap where it is lower);
    one that does not start at ``max_len``,
    launches the same engine as one before it, or cuts prompts a whole-context engine
    (TensorRT-LLM) would refuse, left out. Fewer seats also free memory for the KV pool
    (vLLM's CUDA graphs and sampler are sized by max_num_seqs): DeepSeek-V3 on 4 x B200 at
    max_model_len 4,096 holds 7,904 tokens at the default 1,024 seats, 32,512 at 64
    (``kv_pool``). ``switches``: the launch's other settings (the hybrid KV-cache manager's,
    ``Candidate.engine_settings``; None: the engine's defaults)."""
    out: list[tuple[Knobs, SimConfig]] = []
    for asked, budget in ENGINE_KNOBS:
        seqs = asked if seats is None else min(asked or seats, seats)
        settings = replace(switches or EngineSettings(), max_num_seqs=seqs,
                           max_num_batched_tokens=budget, engine_version=engine_version,
                           cache_transceiver=pool_transceiver(dep, load, max_len),
                           kv_connector=pool_connector(dep))
        try:  # an old vLLM refuses a token budget under --max-model-len without chunking
            if not starts_at(dep, settings, max_len):
                continue
            config = sim_config(dep, replace(settings, max_model_len=max_len))
        except InputError:
            continue
        if budget and not config.chunked_prefill \
                and load.longest_prompt(max_len) > config.max_num_batched_tokens:
            continue
        if all(config != seen for _, seen in out):
            out.append(((seqs, budget), config))
    return out


def pool_seats(dep: Deployment, load: Load, engine_version: str | None) -> int | None:
    """The max_batch_size both pools of a TensorRT-LLM split of a hybrid model launch with,
    as a single pool's replica would (``replica_sizing.state_seats``): releases to 1.2 hold
    every seat's recurrent state from start-up, so where the default 2,048 seats leave no
    room for the load's mean request, the most seats whose pool holds as many (0: not one);
    None where the defaults start, or under another engine. Nemotron-H-56B fp8 on one H100,
    1,000 + 250 tokens: 2,048 seats want 876.7 GiB of state, so 49 (46 with a bf16 cache)."""
    if dep.engine != "trtllm":
        return None
    return state_seats(dep, EngineSettings(engine_version=engine_version), load)


def verify_disaggregated(model: ModelSpec, c: Candidate, load: Load, slo: Slo,
                          max_gpus: int, engine_version: str | None = None,
                          engine: str = "vllm", profile: EngineProfile | None = None
                          ) -> Candidate | None:
    """Simulate both pools of an xPyD candidate, growing the one that misses, until the SLO
    holds: TTFT = prefill pool's TTFT + the prompt's KV hand-off + the decode pool's first
    step, the percentile of their sum (each drawn independently); TPOT, and an ITL SLO's ITL,
    from the decode pool; then the cheapest split from the candidate's sizes up that holds
    (``cheapest_held``).
    Each pool is tried at the engine's defaults and, where no pair holds, at each other knob
    setting (``pool_configs``), then launched at its own (``pool_knobs``): at the fewest
    replicas that hold, the pair of the lowest TTFT; the defaults where they hold."""
    acc = resolve_accelerator(c.accelerator)
    dep = replica_deployment(model, acc, c.tp, 1, c.weights, c.kv, engine=engine,
                             version=engine_version).with_state_settings(engine_version, None)
    seats = c.max_num_seqs  # a hybrid's seat cap under TensorRT-LLM (pool_seats), else None
    switches = replace(c.engine_settings(engine_version),  # its seats and launch switches
                       kv_connector=pool_connector(dep))
    max_len = c.max_model_len or launch_length(dep, switches)
    if not max_len:
        return None  # no --max-model-len starts it
    configs = pool_configs(dep, load, max_len, engine_version, seats, switches)
    if not configs:
        return None
    profile = profile or profile_for(engine)
    prompts = sorted(p for p, _ in load.samples())
    transfers = [handoff_s(dep, max(1, prompts[min(len(prompts) - 1,
                                                   int((k + 0.5) / GRID * len(prompts)))]))
                 for k in range(GRID)]
    runs = PoolRuns(dep, profile, configs, load, slo, c, transfers)
    x0, y0 = c.prefill_replicas, c.replicas - c.prefill_replicas
    x, y = x0, y0
    grown_from: float | None = None  # the prefill pool's TTFT before it last grew
    while (x + y) * c.tp <= max_gpus:  # each pool in its steady state (Load.steady)
        if runs.held(x, y):
            x, y, held = cheapest_held(runs, x0, y0, x, y)
            ttft, tpot, itl, p_knobs, d_knobs = min(held, key=lambda h: h[0])  # stable: defaults first
            # the decode pool's check (its TPOT's): its requests (a trace's counted ones,
            # its stretch's lead and trail apart) and arrival window
            work, window = load.steady(y, load.means()[1] * c.tpot_s,
                                       percentile=slo.percentile)
            return replace(c, replicas=x + y, prefill_replicas=x, disaggregated=f"{x}P{y}D",
                           verified=True, sim_ttft_s=ttft, sim_tpot_s=tpot, sim_itl_s=itl,
                           pool_knobs=(p_knobs, d_knobs), analytic_replicas=x0 + y0,
                           sim_requests=sum(window[0] <= r.arrival_s <= window[1]
                                            for r in work) if load.trace else len(work),
                           sim_window_s=window if math.isfinite(window[0]) else None)
        # no pair held: grow as the best setting of each pool says (the prefill pool's steady
        # one of the shortest TTFT, the decode pool's within TPOT of the shortest first step)
        prefills, decodes = runs.prefills[x], runs.decodes[y]
        steady = [r for _, r in prefills if r.rec.held_steady] or [r for _, r in prefills]
        prefill = min(steady, key=lambda r: r.latency_s_at("ttft", slo.percentile))
        within = [r for _, r in decodes if decode_holds(r, slo)] or [r for _, r in decodes]
        decode = min(within, key=lambda r: r.latency_s_at("ttft", slo.percentile))
        first = prefill.latency_s_at("ttft", slo.percentile)
        joined = decode.latency_s_at("ttft", slo.percentile)
        ttft_ok = prefill.rec.held_steady and runs.ttft_s(prefill, decode) <= slo.ttft_s
        decode_ok = decode_holds(decode, slo)
        grow_x = not ttft_ok and (not first < joined or not prefill.rec.held_steady)
        grow_y = not decode_ok or (not ttft_ok and not joined <= first)
        if not (grow_x or grow_y):
            return None
        if grow_x and prefill.rec.held_steady and grown_from is not None \
                and first > NO_GAIN * grown_from:
            # more prefill replicas did not shorten its TTFT: the long prompts' own prefill is
            # the miss, which no replica count fixes (it grew to 33P5D, $229/h, listed first)
            return None
        grown_from = first if grow_x else grown_from
        x += max(1, x // 4) if grow_x else 0
        y += max(1, y // 4) if grow_y else 0
    return None


def _decode_step_within(dep: Deployment, profile: EngineProfile, context: int,
                        limit_s: float, batch: int) -> bool:
    """Whether a decode pool's step of ``batch`` sequences at ``context`` tokens keeps
    ``limit_s`` (the TPOT SLO, or an ITL SLO where it is the lower: a decode pool's gap is its
    step)."""
    return step_time_s(dep, decode_batch(batch, context), profile) <= limit_s


def disaggregated_candidates(model: ModelSpec, load: Load, slo: Slo, gpus: Sequence[str], max_gpus: int,
                   prices: dict[str, float | None], engine_version: str | None = None,
                   engine: str = "vllm", profile: EngineProfile | None = None,
                   admits: Callable[[str, str, int], bool] | None = None,
                   max_model_len: int = 0, switches: EngineSettings | None = None
                   ) -> list[Candidate]:
    """xPyD: x prefill replicas sized for the prompt rate, y decode replicas for TPOT alone
    (and an ITL SLO: a decode pool's gap is its decode step, so its step keeps the lower)
    (none for a load of one output token per request: there is no decode to split off), each
    card with the lightest weights its engine runs there (fp8, weight-only on a card without
    fp8 units) and either cache format; ``admits``: whether a pool of (weights, KV dtype,
    --max-model-len) is allowed (plan_constraints.PlanConstraints.admits; None: every one);
    ``max_model_len``: the length every pool launches at (`plan --max-model-len`; 0: each
    pool's own, ``launch_at``); ``switches``: the settings every pool launches with beside
    its knobs (PlanConstraints.launch_settings: vLLM's hybrid KV-cache manager switches;
    None: the engine's defaults)."""
    switches = switches or EngineSettings()
    mean_in, mean_out = load.means()
    if mean_out < 2:
        return []
    isl, osl = max(1, round(mean_in)), max(1, round(mean_out))
    out: list[Candidate] = []
    profile = profile or profile_for(engine)
    for gpu in gpus:
        acc = resolve_accelerator(gpu)
        best: Candidate | None = None
        for weights, tp, kv, split in _splits(model, acc, engine, engine_version):
            dep = split.with_state_settings(engine_version, None)  # its state as its pool's
            seats = pool_seats(dep, load, engine_version)  # TensorRT-LLM hybrids: a cap
            if seats == 0:
                continue  # not one seat's state and request fit beside the weights
            settings = replace(switches, max_num_seqs=seats, engine_version=engine_version,
                               kv_connector=pool_connector(dep))
            try:  # each pool's, as a replica's
                max_len = launch_at(dep, settings, max_model_len)
            except InputError:  # vLLM will not start it beside the connector (a recurrent
                continue  # hybrid without its hybrid KV-cache manager, v0.9.1-v0.21)
            if admits is not None and not admits(weights, kv, max_len):
                continue
            cap = max_batch(dep, isl + osl, replace(
                settings, max_model_len=max_len,
                cache_transceiver=pool_transceiver(dep, load, max_len))) if max_len else 0
            if cap < 1:
                continue
            prefill_s = step_time_s(dep, [Seq(isl, 0)], profile)
            transfer_s = handoff_s(dep, isl)
            if prefill_s + transfer_s > slo.ttft_s:
                continue
            # prefill pool: keep utilisation ≤ 0.7 so queueing leaves TTFT within the SLO
            x = max(1, math.ceil(load.rate_req_s * prefill_s / 0.7))
            ctx = mean_decode_context(isl, osl)
            step_limit_s = slo.tpot_s if slo.itl_s is None else min(slo.tpot_s, slo.itl_s)
            if step_time_s(dep, decode_batch(1, ctx), profile) > step_limit_s:
                continue
            # the largest batch whose decode step keeps the limit
            lo = longest_holding(partial(_decode_step_within, dep, profile, ctx, step_limit_s),
                                 1, cap)
            tpot = step_time_s(dep, decode_batch(lo, ctx), profile)
            y = max(1, math.ceil(load.rate_req_s / (lo / (osl * tpot))))
            if (x + y) * tp > max_gpus:
                continue
            c = Candidate(acc.id, tp, 1, weights, kv, seats, lo, tpot,
                          prefill_s + transfer_s, lo / (osl * tpot), x + y,
                          prices.get(acc.id), *calibration(profile, acc, engine),
                          profile.band_on(acc), disaggregated=f"{x}P{y}D",
                          prefill_replicas=x, max_model_len=max_len,
                          pool_knobs=((seats, None),) * 2 if seats else (),
                          disable_hybrid_kv_cache_manager=switches.disable_hybrid_kv_cache_manager,
                          allow_chunked_local_attn_hybrid=switches.allow_chunked_local_attn_hybrid)
            if best is None or c.gpus < best.gpus:
                best = c
        if best is not None:
            out.append(best)
    return sorted(out, key=lambda c: (c.cost_per_hour is None, c.cost_per_hour or 0.0, c.gpus))


def _splits(model: ModelSpec, acc: Accelerator, engine: str, version: str | None = None
            ) -> Iterator[tuple[str, int, str, Deployment]]:
    """(weights, TP, KV dtype, the deployment) of each pool tried on ``acc``: the lightest weights the engine
    builds on the card (fp8, else bf16 where it runs no fp8 there, as TensorRT-LLM on an
    A100), at TP 1, 2, 4 and 8, in either cache format (one the engine refuses at ``version``
    is dropped: SGLang 0.5.3-0.5.5 runs DeepSeek-V3.2 as one-GPU DP-attention ranks only)."""
    for weights in (served_choice(w, acc) for w in weights_lightest_first(model)):
        built = False
        for tp, kv in ((tp, served_choice(kv, acc)) for tp in (1, 2, 4, 8)
                       for kv in kv_choices(model, engine)):
            if not offered(acc, weights, kv):  # as the search leaves it out (a TPU's fp8)
                continue
            try:
                dep = replica_deployment(model, acc, tp, 1, weights, kv, engine=engine,
                                         version=version)
            except InputError:
                continue
            built = True
            yield weights, tp, kv, dep
        if built:
            return
