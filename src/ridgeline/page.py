"""`ridgeline page`: one self-contained HTML roofline with batch and context sliders.

Every number on the page is computed here, by the Python model, for each position of every
slider and picker, and embedded as data; the page's script only looks numbers up and draws
them (uPlot, inlined). Nothing is fetched: the file opens offline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ridgeline.capacity import (
    SERVING_ENGINES,
    EngineSeats,
    conversation_bytes,
    decode_held,
    decode_pool,
    decode_seats,
    default_slots,
    held_apart_words,
    pool_at_context_note,
)
from ridgeline.catalog import resolve_model
from ridgeline.cost import decode_attention_intensity_at, decode_batch, step_time_s
from ridgeline.dense_ridge import dense_ridge_steps
from ridgeline.deployment import Deployment
from ridgeline.engine_runs import (
    DOES_NOT_FIT,
    OVER_ENGINE_POOL,
    decode_none_reason,
    no_sequence_clause,
    none_code,
    seated,
    seats_clause,
)
from ridgeline.engine_versions import engine_release, sized_version
from ridgeline.engines import EngineProfile, engine_id, llamacpp_build, profile_for
from ridgeline.errors import InputError
from ridgeline.explain import Step, q, step
from ridgeline.floors import DecodeFloor, decode_floor
from ridgeline.hardware import resolve_accelerator
from ridgeline.kvcache import kv_footprint
from ridgeline.llamacpp_fit_run import HostedRun, default_fit_run
from ridgeline.plots import html_page
from ridgeline.precision import is_stored_format, kv_dtype
from ridgeline.predict import shared_profile_caution
from ridgeline.quantization_gates import deployment_problem
from ridgeline.roofline import (
    first_whole_batch,
    ridge_point,
    weight_intensity,
)
from ridgeline.served_model import DEFAULT_WEIGHTS_ENTRY, LLAMACPP_STORED_GGUF, llamacpp_weights
from ridgeline.units import GIB, MIB, plural

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
CONTEXTS = (512, 2048, 8192, 32768, 131072)
START_BATCH, START_CONTEXT = 5, 1  # indices: batch 32 at 2,048 tokens
DEFAULT_GPUS = ("h100-sxm", "h200-sxm", "b200", "a100-sxm-80gb", "l40s", "mi300x")


def _deployment(model_id: str, gpu: str, count: int, weights: str, kv: str,
                engine: str, version: str | None = None) -> Deployment:
    """One picker combination, its weights as fit's --weights reads them, or none given for
    the default entry (InputError: a combination that cannot run: one the engine's release
    ``version`` refuses to start, the newest modelled where None, as fit refuses it,
    deployment_problem: vLLM 0.32 on a V100, its fp8 cache on a T4, a ModelOpt FP8 export
    under SGLang on an A100); its recurrent states at the dtype ``version`` keeps."""
    dep = Deployment.laid_out(resolve_model(model_id, fetchable=False), resolve_accelerator(gpu),
                              None if weights == DEFAULT_WEIGHTS_ENTRY else weights, kv,
                              count, engine=engine).with_state_settings(version, None)
    problem = deployment_problem(dep, version)
    if problem:
        raise InputError(problem)
    return dep


def weights_shown(model_id: str, weights: str, engine: str) -> str:
    """The weights picker's entry as the page computes it. The default entry is what fit reads
    with no --weights: under llama.cpp, for a checkpoint it runs as another GGUF
    (served_model.llamacpp_weights: gpt-oss's MXFP4 checkpoint as ggml-org's mxfp4_moe, MXFP4
    experts and Q8_0 for the rest), that GGUF; else the checkpoint as stored. A stored
    spelling ("as stored", "stored", "auto") under llama.cpp is what fit's --weights takes it
    for, convert_hf_to_gguf.py's own conversion (BF16 from a bf16 checkpoint). Each says which."""
    llamacpp = engine.startswith("llama.cpp")
    gguf = llamacpp_weights(resolve_model(model_id, fetchable=False)) if llamacpp else None
    if weights == DEFAULT_WEIGHTS_ENTRY:
        return f"{gguf} (ggml-org's GGUF of the checkpoint)" if gguf else "as stored"
    if gguf is None or not is_stored_format(weights):  # llama.cpp runs it as stored either way
        return weights
    return f"{weights} ({LLAMACPP_STORED_GGUF}, not ggml-org's {gguf})"


def _combo(model_id: str, gpu: str, count: int, weights: str, kv: str,
           engine: str, profiles: Mapping[str, EngineProfile] | None = None,
           version: str | None = None) -> dict[str, Any]:
    dep = _deployment(model_id, gpu, count, weights, kv, engine, version)
    model = dep.model
    profile = profile_for(engine, profiles)
    # the weights every token reads (an MoE model's experts apart), at their matmuls' peak
    # (blended where they run at several dtypes: Deployment.dense_peak_flops_per_s)
    peak = dep.dense_peak_flops_per_s * dep.tensor_parallel_size
    bw = dep.bandwidth_bytes_per_s
    bpw = dep.bytes_per_weight_split[0]
    ridge = ridge_point(peak, bw)
    out: dict[str, Any] = {
        "peak": peak, "bw": bw, "ridge": ridge, "bpw": bpw,
        "batch_to_ridge": dep.dense_ridge_batch,  # a fraction: roofline's and fit's name
        "w_int": [weight_intensity(b, bpw) for b in BATCHES],
        # decode attention after each context's tokens: one figure for most models, rising
        # with the context for a sparse one's indexer (cost.decode_attention_intensity_at)
        "att_int": [decode_attention_intensity_at(dep, c) for c in CONTEXTS],
        "prefill_int": [weight_intensity(c, bpw) for c in CONTEXTS],
        "engine": engine,
        "user_floor": [], "user_exp": [], "agg_floor": [], "agg_exp": [], "fits": [],
        "agg_low": [], "agg_high": [],
        "kv_gib": [], "conversations": [], "why": [], "no_speed": [],
        # decode's cautions on the expectation at each batch: a profile fitted on few rows of
        # this card's group, or at smaller batches (llama.cpp-metal's at batch 1 alone)
        "caution": ["; ".join(filter(None, (profile.calibration_caution(dep.accelerator),
                                            profile.batch_range_caution(dep.accelerator, b),
                                            shared_profile_caution(profile))))
                    or None for b in BATCHES],
        # the engine and the release its pool was sized as, as decode's "expected on" names
        # it ('vLLM 0.6'); the roofline's TFLOP/s are the tensor-parallel group's together
        "engine_shown": engine_release(engine, version, named=True),
        "tp": dep.tensor_parallel_size,
    }
    hosted_gib: list[float | None] = []  # llama.cpp: weights its default --fit keeps on the host
    for c in CONTEXTS:
        # llama.cpp where its default --fit moves weights to the host for this context: that
        # run's conversations, as `fit` counts them (llamacpp_fit_run), and no speed, its host
        # layers read at a bandwidth the page is not given
        hosted = _hosted(dep, c, version)
        hosted_gib.append(None if hosted is None else hosted.host_weight_bytes / GIB)
        # a batch runs where the engine starts, its pool holds it and its seats seat it; one
        # that does not gets no speed (null: a gap in the charts), as decode gives it none
        held = decode_held(dep, c, version) if hosted is None else hosted.held  # llama.cpp: a slot each
        # what the engine seats of this context, and where none or no more, why, as decode
        # says it (capacity.decode_seats; llama.cpp's --fit run with host weights: its words)
        # (llama.cpp: at most llama-server's default 4 slots run, as decode runs them)
        seat = default_slots(decode_seats(dep, c, version), dep.engine) \
            if hosted is None else None
        every: list[DecodeFloor | None] = [decode_floor(dep, b, c, explain=False)
                                           if seat is not None else None for b in BATCHES]
        floors = [f if f is not None and seated(f.fit.fits, seat, b) else None
                  for f, b in zip(every, BATCHES)]
        runs = [f is not None for f in floors]
        out["why"].append([None] * len(BATCHES) if seat is None else [
            None if ok or f is None else _why_not(f, seat, dep.engine)
            for f, ok in zip(every, runs)])
        out["no_speed"].append(_no_speed_note(every, runs, seat, dep.engine))
        expected = [step_time_s(dep, decode_batch(b, c), profile) if ok else None
                    for b, ok in zip(BATCHES, runs)]
        out["user_floor"].append([f.per_user_tok_s if f else None for f in floors])
        out["agg_floor"].append([f.aggregate_tok_s if f else None for f in floors])
        out["user_exp"].append([1 / t if t else None for t in expected])
        out["agg_exp"].append([b / t if t else None for b, t in zip(BATCHES, expected)])
        # the band as decode gives it: the time's band (profile.band_on the card), as tokens/s
        slowest, fastest = profile.band_on(dep.accelerator)
        bands = [(t / fastest, t / slowest) if t else None for t in expected]
        out["agg_low"].append([b / band[1] if band else None for b, band in zip(BATCHES, bands)])
        out["agg_high"].append([b / band[0] if band else None
                                for b, band in zip(BATCHES, bands)])
        out["fits"].append(runs)
        out["kv_gib"].append(kv_footprint(model, c, dep.kv.bytes_per_element)
                             .bytes_per_sequence / 2**30)
        out["conversations"].append(held)
    if any(g is not None for g in hosted_gib):  # runs the page counts but cannot price
        out["fit_host_gib"] = hosted_gib
    return out


def _why_not(floor: DecodeFloor, seat: EngineSeats, engine: str) -> str:
    """Why ``engine`` runs no decode step of ``floor``'s batch at its context, in decode's
    words: where it runs no sequence of this context whatever the batch, why (vLLM refuses
    Qwen3-8B's 131,072 tokens, past its 40,960 positions; Llama-3.1-70B's 131 GiB of weights
    outgrow an H100's 79 GiB), as decode's pool line says it; else decode's
    expected_none_reason (engine_runs.decode_none_reason): the batch outgrows the memory, or
    runs past its seats (vLLM 0.6's max_num_seqs, 256) or its pool."""
    if seat.held == 0:
        return no_sequence_clause(seat, engine, defaults=False)
    return decode_none_reason(floor.fit, seat, floor.batch, floor.context, engine)


def _no_speed_note(floors: Sequence[DecodeFloor | None], runs: Sequence[bool],
                   seat: EngineSeats | None, engine: str) -> str:
    """The tokens/s chart's note on the batches drawn without a speed at one context, by
    cause (engine_runs.none_code): none of this context (why), past the memory, past the
    engine's seats or pool (seats_clause); "" where every batch runs, or llama.cpp's --fit
    runs it with weights on the host (the page's script says so)."""
    if seat is None:
        return ""
    if seat.held == 0:
        return "no batch runs (no speed): " + no_sequence_clause(seat, engine, defaults=False)
    causes: dict[str, list[int]] = {}
    for f, ok in zip(floors, runs):
        if f is not None and not ok:
            causes.setdefault(none_code(f.fit.fits, seat, f.batch), []).append(f.batch)
    words = {DOES_NOT_FIT: "weights and their cache outgrow the memory (the summary gives "
                           "each batch's figures)",
             OVER_ENGINE_POOL: seats_clause(seat, engine)}
    return "; ".join(f"no speed at batch {', '.join(f'{b:,}' for b in batches)}: "
                     f"{words.get(code, code)}" for code, batches in causes.items()) \
        or "every batch runs at this context"


def _hosted(dep: Deployment, context: int, version: str | None = None) -> HostedRun | None:
    """The run llama.cpp's default --fit starts at ``context`` with weights on the host, where
    it holds a conversation (llamacpp_fit_run), at build ``version``; None elsewhere, the
    count then -ngl all's (a context past the trained one: none in either run)."""
    hosted = default_fit_run(dep, context, version) if dep.engine.startswith("llama.cpp") \
        else None
    return hosted if hosted is not None and hosted.held else None


def host_only(combo: Mapping[str, Any]) -> bool:
    """Whether a combination runs conversations only with weights on the host: llama.cpp's
    default --fit runs some (its ``fit_host_gib``), none with every layer on the GPU, so the
    page counts them and prices none."""
    return "fit_host_gib" in combo and not any(any(row) for row in combo["fits"]) \
        and any(combo["conversations"])


def fit_runs_note(data: Mapping[str, Any]) -> str:
    """Where llama-server's default --fit runs conversations with weights on the host, which
    the page counts as `fit` does but cannot price, the words that say so, for the first
    combination and shortest context it does; "" elsewhere."""
    for key, combo in data["combos"].items():
        for context, held, gib in zip(data["contexts"], combo["conversations"],
                                      combo.get("fit_host_gib") or ()):
            if gib is not None and held:
                model, gpu, count, weights, kv = key.split("|")
                return (f"llama-server's default --fit runs {held:,} "
                        f"{plural(held, 'conversation')} with {gib:,.2f} GiB of weights on the "
                        f"host ({model} on {count} x {gpu}, weights {weights}, KV {kv}, at "
                        f"{context:,} tokens), as `ridgeline fit` counts them: the page has no "
                        "host bandwidth to price those steps (decode prices them given "
                        "--host-bandwidth-gbs)")
    return ""


def page_data(models: Sequence[str], gpus: Sequence[str], counts: Sequence[int],
              weights: Sequence[str], kvs: Sequence[str], engine: str = "vllm",
              profiles: Mapping[str, EngineProfile] | None = None,
              version: str | None = None) -> dict[str, Any]:
    """Every picker combination's roofline and expectation (``profiles``: a user's calibrated
    ones, by engine; the bundled ones where they have none), each started as the engine's
    release or build ``version`` starts it (--engine-version; None: the newest modelled).
    Its ``engine_version`` is the release the pools were sized as, named where none was
    given too, as fit's (engine_versions.sized_version: vLLM 0.32; None for llama.cpp's
    builds and TensorRT-LLM)."""
    builds = {g: engine_id(llamacpp_build(engine, resolve_accelerator(g).vendor)) for g in gpus}
    for k in kvs:  # a cache format the engine lacks would silently empty every picker
        for build in sorted(set(builds.values())):
            if not kv_dtype(k).cached_by(build):
                raise InputError(f"{build} has no {k} KV cache; offer --kv-dtypes it caches in")
    combos: dict[str, Any] = {}
    why: dict[str, str] = {}  # what kept each left-out combination from running
    for m in models:
        for g in gpus:
            for n in counts:
                for w in weights:
                    for k in kvs:
                        key = f"{m}|{g}|{n}|{w}|{k}"
                        try:
                            combos[key] = _combo(m, g, n, w, k, builds[g], profiles,
                                                 version)
                        except InputError as exc:
                            why[key] = str(exc)
    if not combos:
        raise InputError(f"no combination of the pickers can be computed "
                         f"({next(iter(why.values()))})")
    # the page opens on the first combination whose pool runs the starting batch and context
    # (a picture of an empty chart explains nothing); the pickers' first entries otherwise
    start = next((key for key, c in combos.items() if c["fits"][START_CONTEXT][START_BATCH]),
                 next(iter(combos)))
    return {"models": list(models), "gpus": list(gpus), "counts": list(counts),
            "weights": list(weights), "kvs": list(kvs), "batches": list(BATCHES),
            # each model's picker entries where they compute something else than they say
            "weights_shown": {m: shown for m in models if (shown := {
                w: weights_shown(m, w, engine) for w in weights
                if weights_shown(m, w, engine) != w})},
            "contexts": list(CONTEXTS), "combos": combos, "left_out": why,
            # each combination's reasons, notes and cautions, as indices into one list of
            # their words (most recur across combinations: the page stays small)
            "texts": _interned(combos),
            # the release a run without --engine-version is priced as prices the same
            "engine_version": sized_version(engine_id(engine), version),
            "start": start.split("|"),
            "start_batch": START_BATCH, "start_context": START_CONTEXT}


def _interned(combos: Mapping[str, dict[str, Any]]) -> list[str]:
    """Replace each combination's words (``why`` per context and batch, ``no_speed`` per
    context, ``caution`` per batch) by their index in one list, returned; a null or "" is
    null. The default page's 9,794 reasons, notes and cautions are 2,088 texts: 0.3 MB of
    JSON, not 1.3 MB."""
    texts: dict[str, int] = {}

    def index(text: str | None) -> int | None:
        return None if not text else texts.setdefault(text, len(texts))

    for combo in combos.values():
        combo["why"] = [[index(t) for t in row] for row in combo["why"]]
        combo["no_speed"] = [index(t) for t in combo["no_speed"]]
        combo["caution"] = [index(t) for t in combo["caution"]]
    return list(texts)


def point_words(data: Mapping[str, Any], key: str, context_index: int,
                batch_index: int) -> tuple[str, str]:
    """What the page says of one point besides its numbers: why the engine gives it no
    speed ("" where it runs), and decode's caution on its expectation ("" where none)."""
    combo, texts = data["combos"][key], data["texts"]
    why = combo["why"][context_index][batch_index]
    caution = combo["caution"][batch_index]
    return ("" if why is None else texts[why], "" if caution is None else texts[caution])


def _opening(data: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    key = "|".join(str(part) for part in data["start"])
    return key, data["combos"][key]


def opening_steps(data: Mapping[str, Any]) -> tuple[Step, ...]:
    """--explain for the view the page opens on: its ridge, the batch to reach it, and the
    conversations its engine's pool holds at the opening context."""
    key, opening = _opening(data)
    at = data["start_context"]
    model, gpu, count, weights, kv = data["start"]
    version = data.get("engine_version")
    dep = _deployment(model, gpu, int(count), weights, kv, opening["engine"], version)
    shown = weights_shown(model, weights, opening["engine"])
    blend = dense_ridge_steps(dep)[:1] if dep.dense_blended else ()
    return (
        *blend,
        step("ridge point, the page's opening view", "peak FLOP/s ÷ bandwidth",
             q("ridge", opening["ridge"], "FLOP/byte"),
             q("deployment", key.replace("|", " "), "",
               "" if shown == weights else f"weights {shown}"),
             q("peak", opening["peak"] / 1e12, "TFLOP/s",
               "the dense matmuls' blended peak above, × TP" if blend else
               "; ".join(filter(None, ("the catalog, × TP",
                                       dep.peak_note_at(dep.dense_compute_dtype))))),
             q("bandwidth", opening["bw"] / 1e12, "TB/s", "the catalog, × TP")),
        step("batch to reach it", "⌈ridge × bytes per weight ÷ 2 FLOP per weight per token⌉: "
             "the first whole batch at or past it",
             q("batch", first_whole_batch(opening["batch_to_ridge"]), "tokens"),
             q("ridge", opening["ridge"], "FLOP/byte"), q("bytes per weight", opening["bpw"], "B"),
             q("ridge × bytes per weight ÷ 2", opening["batch_to_ridge"])),
        _conversations_step(dep, data["contexts"][at], opening["conversations"][at], version),
    )


def _conversations_step(dep: Deployment, context: int, held: int,
                        version: str | None = None) -> Step:
    """The conversations the opening view's pool holds, as a division its inputs reproduce:
    the pool per GPU ÷ one conversation's cache on a GPU, rounded down (Llama-3.1-8B on an
    H100 at 2,048 tokens: 54.64 GiB ÷ 0.25 GiB = 218). Where llama.cpp's default --fit moves
    weights to the host for this context, the pool is that run's (llamacpp_fit_run)."""
    hosted = _hosted(dep, context, version)
    run = dep if hosted is None else hosted.deployment
    pool = decode_pool(run, context, version)
    per_conversation = conversation_bytes(pool, run, context)
    division = int(pool.kv_cache_bytes // per_conversation) if per_conversation else 0
    blocks = pool.groups.peak_decode_blocks(context) if pool.groups is not None else 0
    return step(
        f"conversations of {context:,} tokens the pool holds",
        f"⌊the {dep.engine} KV pool per GPU, "
        + ("given one slot (-np) of this context per conversation, as decode gives it"
           + (f", less the {pool.fit_free_bytes / MIB:,.0f} MiB its default --fit keeps free "
              "(--fit-target)" if pool.fit_free_bytes else "")
           if dep.engine.startswith("llama.cpp") else "started at max_model_len = this context")
        + ", ÷ one conversation's cache on a GPU⌋ (`ridgeline fit` for the pool's breakdown)",
        q("conversations", held),
        *([] if hosted is None else [q(
            "weights on the host", hosted.host_weight_bytes / GIB, "GiB",
            f"llama-server's default --fit ({hosted.split}), as `ridgeline fit` places them; "
            "no speed is priced without the host's bandwidth")]),
        q("pool", pool.kv_cache_bytes / GIB, "GiB per GPU",
          f"{pool.blocks:,} blocks of {pool.block_size:,} {plural(pool.block_size, 'token')}"
          if pool.page_bytes else ""),
        q("one conversation", per_conversation / GIB, "GiB per GPU",
          f"{blocks:,} blocks" if blocks else f"{context:,} tokens of KV cache"),
        *([q("max_model_len", context, "tokens", pool_at_context_note(dep.engine))]
          if dep.engine in SERVING_ENGINES else []),
        *([] if division == held else [q(
            "pool ÷ one conversation", division, "", f"{dep.engine} holds {held:,}: "
            + (held_apart_words(dep.engine) if run.offload is None or not run.offload.fit_cells
               else f"llama-server allocates the -c {run.offload.fit_cells:,} --fit placed the "
               "weights for, no more")
            + " (`ridgeline fit`)")]),
        q("max_num_seqs", pool.max_num_seqs, "", "the engine's seats: the page runs a batch "
          "up to the smaller of the two") if not dep.engine.startswith("llama.cpp") else
        q("slots (-np)", held, "", "one per sequence, as decode gives them: the pool caps "
          "the batch"))


def opening_facts(data: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """--json's view the page opens on, and its ridge."""
    _, opening = _opening(data)
    model, gpu, count, weights, kv = data["start"]
    return (("opening", {"model": model, "gpu": gpu, "count": int(count), "weights": weights,
                         # what the picker shows for it: under llama.cpp, which GGUF
                         "weights_shown": weights_shown(model, weights, opening["engine"]),
                         "kv": kv}),
            ("ridge_flop_per_byte", opening["ridge"]),
            ("batch_to_ridge", opening["batch_to_ridge"]),
            # --explain's "batch to reach it" (fit's key): the first whole batch at or past it
            ("first_whole_batch_to_ridge", first_whole_batch(opening["batch_to_ridge"])))


_CONTROLS = """
<div id="controls">
<label>model <select id="model"></select></label>
<label>accelerator <select id="gpu"></select></label>
<label>number of accelerators <select id="count"></select></label>
<label>weights <select id="weights"></select></label>
<label>KV <select id="kv"></select></label><br><br>
<label>batch <input id="batch" type="range" min="0" step="1"> <b id="batchv"></b></label>
<label>context <input id="context" type="range" min="0" step="1"> <b id="contextv"></b>
tokens</label>
</div><p id="summary" class="note" aria-live="polite"></p><p id="caution" class="note"></p>
<p id="engine" class="note"></p>
"""

# units.fmt_share in the page's script: a share to ``places`` decimals, or as many more as keep
# it on its own side of 0 % and 100 % (0.9996 at one place reads '99.96%', not toFixed's
# '100.0%'; 1 − 1e-12 'just under 100%'), so the summary's share of the arithmetic reads as
# --json's and the other commands' do
FMT_SHARE_JS = """function fmtShare(share, places) {
  const pct = share * 100 + 0, bounds = [0, 100];
  for (let extra = 0; extra < 7; extra++) {
    const text = pct.toFixed(places + extra), shown = +text;
    if (bounds.every(b => (shown > b) === (pct > b) && (shown < b) === (pct < b)))
      return (shown === 0 ? text.replace("-", "") : text) + "%";
  }
  const bound = Math.abs(pct) <= Math.abs(pct - 100) ? 0 : 100;
  return "just " + (pct > bound ? "over " : "under ") + bound + "%";
}
"""

# The KV chart's data, series and notes for one combination ``c`` (its ``conversations``,
# ``kv_gib`` and ``batch_to_ridge`` at each of ``contexts``): conversations and the ridge batch
# on the left axis, GiB on a right one of its own (``y2``). Its y axes are log scales, which have
# no 0: a context whose pool holds no conversation gets no point on the count's line, and,
# where there is one, a marker of its own at the left axis's floor (half its least count), which
# the legend reads "none" and a note names, rather than a count drawn at some small number.
KV_CHART_JS = """function kvChart(c, contexts) {
  const none = contexts.filter((x, i) => !(c.conversations[i] > 0));
  const data = [contexts, c.conversations.map(v => v > 0 ? v : null), c.kv_gib,
                contexts.map(() => c.batch_to_ridge)];
  const series = [{name: "conversations that fit (engine pool)", style: "line"},
                  {name: "GiB per conversation", style: "line", y2: true},
                  {name: "ridge batch", style: "dashed"}];
  const notes = ["each context's pool is the engine's started at that max_model_len"];
  if (none.length) {
    const floor = Math.min(...[data[1], data[3]].flat().filter(v => v > 0)) / 2;
    data.push(c.conversations.map(v => v > 0 ? null : floor));
    series.push({name: "no conversation fits", style: "points", text: "none"});
    notes.push("no conversation fits at " + none.map(x => x.toLocaleString()).join(", ") +
               " tokens: marked at the chart's floor, not a count (a log scale has no 0)");
  }
  return {data, series, notes};
}
"""

_SCRIPT = """
const D = PAGE;
const ids = ["model", "gpu", "count", "weights", "kv"];
const lists = {model: D.models, gpu: D.gpus, count: D.counts, weights: D.weights, kv: D.kvs};
for (const id of ids) { const sel = document.getElementById(id);
  for (const v of lists[id]) { const o = document.createElement("option"); o.value = v;
    o.textContent = v; sel.appendChild(o); } sel.onchange = update; }
ids.forEach((id, i) => { document.getElementById(id).value = D.start[i]; });
const bs = document.getElementById("batch"), cs = document.getElementById("context");
bs.max = D.batches.length - 1; bs.value = D.start_batch; cs.max = D.contexts.length - 1;
cs.value = D.start_context;
bs.oninput = update; cs.oninput = update;
function fmt(x) { return x >= 100 ? Math.round(x).toLocaleString() : x.toPrecision(3); }
""" + FMT_SHARE_JS + KV_CHART_JS + """function update() {
  const shown = (D.weights_shown || {})[document.getElementById("model").value] || {};
  for (const o of document.getElementById("weights").options) o.textContent = shown[o.value] || o.value;
  const key = ids.map(id => document.getElementById(id).value).join("|");
  const c = D.combos[key]; const bi = +bs.value, ci = +cs.value;
  const b = D.batches[bi], ctx = D.contexts[ci];
  document.getElementById("batchv").textContent = b;
  document.getElementById("contextv").textContent = ctx.toLocaleString();
  // a screen reader reads the batch and the context, not the sliders' positions
  bs.setAttribute("aria-valuetext", "batch " + b);
  cs.setAttribute("aria-valuetext", ctx.toLocaleString() + " tokens of context");
  document.getElementById("caution").textContent = "";
  document.getElementById("engine").textContent = "";
  if (!c) { document.getElementById("summary").textContent = "not computable: "
             + (D.left_out[key] || "this combination"); return; }
  const xs = []; for (let e = -1; e <= 5; e += 0.05) xs.push(Math.pow(10, e));
  const pts = {"weight matrices (decode)": c.w_int[bi], "decode attention": c.att_int[ci],
               "prefill (prompt = context)": c.prefill_int[ci]};
  const allx = xs.concat(Object.values(pts)).sort((a, b) => a - b);
  const roof = allx.map(x => Math.min(c.peak, x * c.bw) / 1e12);
  const series = [{name: "roofline (TFLOP/s)", style: "line"}];
  const data = [allx, roof];
  for (const [name, x] of Object.entries(pts)) { series.push({name, style: "points"});
    data.push(allx.map(v => v === x ? Math.min(c.peak, x * c.bw) / 1e12 : null)); }
  const bx = D.batches;
  const fits = c.fits[ci];
  const text = i => i == null ? "" : D.texts[i];
  const charts = [
    {title: "roofline: ridge " + fmt(c.ridge) + " FLOP/byte", x: "FLOP per byte",
     y: c.tp > 1 ? "TFLOP/s, the " + c.tp + " GPUs' total (TP " + c.tp + ")" : "TFLOP/s",
     logx: true, logy: true, data, series, notes: []},
    {title: "tokens/s against batch at " + ctx.toLocaleString() + " tokens of context",
     x: "batch", y: "tokens/s", logx: true, logy: true, xrange: [bx[0], bx[bx.length - 1]],
     data: [bx, c.agg_floor[ci], c.agg_exp[ci],
            c.agg_low[ci], c.agg_high[ci], c.user_floor[ci],
            c.user_exp[ci]],
     series: [{name: "aggregate floor", style: "dashed"},
              {name: "aggregate expected (" + c.engine_shown + ")", style: "line"},
              {name: "band low", style: "dashed"}, {name: "band high", style: "dashed"},
              {name: "per user floor", style: "dashed"}, {name: "per user expected", style: "line"}],
     notes: [text(c.no_speed[ci]),
             c.engine_shown + " started at max_model_len " + ctx.toLocaleString() +
             ", this context"].filter(n => n)},
    Object.assign({title: "KV cache: conversations that fit, and GiB each", x: "context tokens",
                   y: "conversations", y2: "GiB per conversation", logx: true, logy: true},
                  kvChart(c, D.contexts))];
  drawAll(charts);
  const i = bi;
  document.getElementById("engine").textContent = "engine: " + c.engine_shown +
    ", started at max_model_len = the context";
  if (fits[i] && c.caution[i] != null)
    document.getElementById("caution").textContent = "caution: " + text(c.caution[i]);
  document.getElementById("summary").textContent = fits[i] ?
    "batch " + b + " at " + ctx.toLocaleString() + " tokens: " + fmt(c.user_exp[ci][i]) +
    " tok/s per user, " + fmt(c.agg_exp[ci][i]) + " in total (floor " + fmt(c.agg_floor[ci][i]) +
    "); weight intensity " + fmt(c.w_int[i]) + " FLOP/byte of a ridge of " + fmt(c.ridge) +
    " FLOP/byte = " +
    fmtShare(Math.min(1, c.w_int[i] / c.ridge), 1) + " of the arithmetic" :
    "batch " + b + " at " + ctx.toLocaleString() + " tokens: no speed: " + text(c.why[ci][i]);
}
update();
"""


def _hosted_script() -> str:
    """The page's script where some context's run is llama.cpp's default --fit's, weights on
    the host (a combination's ``fit_host_gib``): that context's chart and summary say it is
    counted and not priced. Every other page keeps the plain script, byte for byte."""
    script = _SCRIPT
    for before, after in (
            ("  const fits = c.fits[ci];\n",
             "  const fits = c.fits[ci];\n" + _HOSTED_WORDS),
            ('", this context"].filter(n => n)},',
             '", this context"]\n            .concat(hosted ? [hosted] : []).filter(n => n)},'),
            ('fmtShare(Math.min(1, c.w_int[i] / c.ridge), 1) + " of the arithmetic" :\n',
             'fmtShare(Math.min(1, c.w_int[i] / c.ridge), 1) + " of the arithmetic" :\n'
             '    hosted ? "batch " + b + " at " + ctx.toLocaleString() + " tokens: " +\n'
             '    (b > c.conversations[ci] ? "DOES NOT FIT: " : "") + hosted :\n')):
        assert script.count(before) == 1, before
        script = script.replace(before, after)
    return script


_HOSTED_WORDS = """  const host = (c.fit_host_gib || [])[ci];  // llama.cpp: --fit's weights on the host, GiB
  const hosted = host == null ? "" : "llama-server's default --fit runs " +
    c.conversations[ci].toLocaleString() + " conversation" +
    (c.conversations[ci] === 1 ? "" : "s") + " of this length with " + fmt(host) +
    " GiB of weights on the host, as `ridgeline fit` counts them: no speed, the page has no " +
    "host bandwidth to price them (decode does, given --host-bandwidth-gbs)";
"""


def page_html(data: dict[str, Any], title: str) -> str:
    hosted = any("fit_host_gib" in c for c in data["combos"].values())
    script = "const PAGE = " + json.dumps(data, separators=(",", ":")) + ";\n" + (
        _hosted_script() if hosted else _SCRIPT)
    return html_page(title, [], extra_script=script, extra_html=_CONTROLS)
