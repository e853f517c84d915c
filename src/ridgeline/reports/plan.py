"""`ridgeline plan`: the cheapest deployment meeting the SLO, as text, --json and --explain.
The commands printed beside it are plan_commands.py's; the deployments listed under it (the
runners-up, the cautioned and the unpriced ones, split pools) and the Pareto frontier,
plan_lists.py's."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from ridgeline.candidate import Candidate, weights_format
from ridgeline.context_length import served_positions
from ridgeline.cost import mean_decode_context
from ridgeline.datafiles import engine_defaults
from ridgeline.engine_names import engine_name
from ridgeline.engine_versions import sized_version
from ridgeline.explain import Step, q, shown_number, step
from ridgeline.measured_slowdown import slowed_tpot_floor_s
from ridgeline.model import ModelSpec
from ridgeline.plan import CardOutcome, PlanResult
from ridgeline.plan_cautions import needs_release, prompt_cap_note
from ridgeline.plan_checks import CONFIRM_DRAW, CheckRun
from ridgeline.replica_sizing import DEFAULT_CONTEXT
from ridgeline.reports.launch_commands import multi_node_note
from ridgeline.reports.plan_commands import PlanCommands, check_line
from ridgeline.reports.plan_lists import (
    PlanLists,
    break_even_usd,
    devices,
    gpu_hour_price,
    itl_part,
    pct,
    rented_words,
    tpot_ms,
    usd,
    vendor_of,
)
from ridgeline.reports.plan_second_draw import drawn, second_draw_dict, second_draw_lines
from ridgeline.reports.split_launch import host_note
from ridgeline.sim.workload import fixed_tokens
from ridgeline.units import (
    fmt_latency,
    fmt_latency_limit,
    fmt_req_rate,
    ordinal,
    plural,
    share_of_requests,
)

# --json's names for Candidate.rate_limits (req/s; null: no limit)
RATE_LIMIT_KEYS = ("tpot_at_batch", "token_budget", "prompt_queue", "kv_pool")
# a row's fields under fit's --json names where they mean the same (vLLM's flags' words);
# gpus (all replicas'), batch (the analytic one a replica runs within the SLO) and
# max_model_len (fit's context) keep plan's, which say something else or say it so
FIT_NAMES = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "kv": "kv_dtype",
             "data_parallel": "data_parallel_size"}

NOT_SIMULATED = ("every cheaper candidate the simulation budget reached missed the SLO in "
                 "simulation, and this one was not reached; its price is the analytic estimate, "
                 "and the SLO may be out of reach")


# what each of Candidate.rate_limits past the first (the batch's TPOT) is, where it binds
BINDING_NAMES = ("the step's token budget", "the prompts' queue within the TTFT SLO",
                 "the KV pool's room for arriving prompts within the TTFT SLO")


def _binding(c: Candidate) -> str:
    """What caps a replica's analytic rate where it is not its batch over the TPOT: the
    step's token budget, the prompts' queue or the KV pool (a batch of 3 at 34 ms a token
    serves 1.76 req/s of 50-token outputs; the queue of 32k-token prompts allows 1.08)."""
    if len(c.rate_limits) != len(RATE_LIMIT_KEYS) or c.replica_rate_req_s >= c.rate_limits[0] \
            or not math.isfinite(c.rate_limits[0]):
        return ""  # the TPOT's bound binds, or a load of 1-token outputs has none (inf)
    rest = c.rate_limits[1:]
    name = BINDING_NAMES[rest.index(min(rest))]
    return (f"; capped by {name}, under the {c.rate_limits[0]:,.2f} req/s its batch's TPOT "
            "allows")


def _agree(n: int, one: str, more: str) -> str:
    """``one`` for a count of 1, else ``more``: the words that agree with it (was, were;
    runner-up, runners-up, which ``plural`` would not make)."""
    return one if n == 1 else more


def _rate(req_s: float) -> str:
    """A request rate: 2 decimals, or 2 significant figures below 0.1 req/s."""
    return f"{req_s:,.2f}" if req_s >= 0.1 else f"{req_s:.2g}"


def price_of(gpu: str, usd_per_gpu_hour: float | None, given: bool = False) -> dict[str, Any]:
    """One card's price as --json gives it: $/GPU-hour as the plan priced it, where the
    catalog's figure comes from and the day it was read (null where its source gives none,
    as for a --price, ``given``, its own source), and its rental unit; the price under
    ``price_per_gpu_hour_usd``, the name every row and command gives it."""
    from ridgeline.hardware import price_source, resolve_accelerator

    acc = resolve_accelerator(gpu)
    catalog = usd_per_gpu_hour is not None and not given
    return {"price_per_gpu_hour_usd": usd_per_gpu_hour,
            "source": (price_source(acc) or "the catalog") if catalog
            else "--price" if usd_per_gpu_hour is not None else None,
            "date": (acc.price_date or None) if catalog else None,
            "rental_gpus": acc.rental_gpus}


def price_words(gpu: str, usd_per_gpu_hour: float | None, given: bool = False) -> str:
    """A card's price and where it is from, for --explain: "Vultr on-demand ...; undated"."""
    price = price_of(gpu, usd_per_gpu_hour, given)
    if price["source"] is None:
        return "no price"
    rented = f"; rented as {price['rental_gpus']}-GPU units" if price["rental_gpus"] > 1 else ""
    dated = f"; {price['date'] or 'undated'}" if price["price_per_gpu_hour_usd"] is not None and \
        price["source"] != "--price" else ""
    return f"{gpu}: {price['source']}{dated}{rented}"


def _release_span(engine: str) -> str:
    """Where no one release sized the pools (TensorRT-LLM, whose modelled defaults are
    unchanged across its releases: engines.json ``trtllm.releases``), the span they come
    from, for the header: " 1.0–1.2"; "" where none is recorded."""
    releases = engine_defaults(engine).get("releases") or {}
    first, newest = releases.get("from"), releases.get("newest")
    return f" {first}–{newest} (its defaults unchanged across them)" if first and newest else ""


def short_source(source: str) -> str:
    """A price's source cut to its first clause for the "prices:" line: before its first
    parenthesis or semicolon, a quoted title and a restated "$4.54/GPU-hour" dropped; the H200's
    "$4.54/GPU-hour on-demand, Spheron, 'NVIDIA H200 vs …' (spheron.network/blog, …)" reads
    "on-demand, Spheron"."""
    import re

    cut = re.split(r" \(|;", source, maxsplit=1)[0]
    cut = re.sub(r",? '[^']*'", "", cut)
    return re.sub(r"^\$[\d.,]+/GPU-hour ", "", cut).strip() or source


def _rents_alone(c: Candidate) -> str:
    """The GPUs-rented line's source where a GPU is paid for alone: "every GPU rents alone",
    or, where the price's offer holds fewer GPUs than the replica's tensor-parallel group
    (``host_pricing``), that each is counted at that offer's rate."""
    from ridgeline.hardware import resolve_accelerator

    offer = resolve_accelerator(c.accelerator).price_offer_gpus
    if offer is None or c.tp <= offer:
        return "every GPU rents alone"
    return (f"each counted at the {offer}-GPU offer's rate, though a TP{c.tp} replica's "
            "GPUs share one host (see the caution)")


def card_words(card: CardOutcome) -> str:
    """One searched card as the "cards:" line gives it: "mi300x $27.75/h (15 GPUs at $1.85,
    simulated)", "gaudi3 no price (18 GPUs)", "l40s: needs 80 GPUs, past --max-gpus"."""
    c = card.best
    if card.status == "priced" and c is not None:
        rented = f", {c.rented_gpus:,} rented" if c.rented_gpus != c.gpus else ""
        return (f"{card.gpu} ${c.cost_per_hour or 0.0:,.2f}/h "
                f"({devices(c.gpus, card.gpu)}{rented} at {gpu_hour_price(c.price_per_gpu_hour or 0.0)}, "
                f"{'simulated' if c.verified else 'analytic'})")
    if card.status == "unpriced":
        return f"{card.gpu} no price ({devices(card.gpus, card.gpu)}, analytic)"
    if card.status == "split" and c is not None:
        return (f"{card.gpu} split pools only ("
                + (f"${c.cost_per_hour:,.2f}/h" if c.cost_per_hour is not None else "no price")
                + f", {devices(c.gpus, card.gpu)}"
                + (", simulated)" if c.verified else ", analytic only: not simulated)"))
    if card.status == "over ceiling" and c is not None:
        return (f"{card.gpu}: ${c.cost_per_hour or 0.0:,.2f}/h at the least "
                f"({devices(c.gpus, card.gpu)}), past --max-cost-per-hour-usd")
    if card.status == "beyond":
        return f"{card.gpu}: needs {card.gpus:,} GPUs, past --max-gpus"
    if card.status == "left out":
        return f"{card.gpu}: left out (above)"
    if card.status == "missed":
        return f"{card.gpu}: layouts fit, none held in simulation within --max-gpus"
    return f"{card.gpu}: no layout fits and meets the SLO"


# what an engine does started at the model's context where its pool holds less (shrunk_note):
# vLLM refuses to start (capacity.refuses_to_start), so it needs no word
_STARTS_LONGER = {
    "sglang": "which sglang would start at too, refusing at admission a prompt past its pool",
    "trtllm": "which trtllm would start at too, reducing max_seq_len to its pool"}


@dataclass(frozen=True)
class PlanReport:
    model: ModelSpec
    model_id: str
    result: PlanResult
    max_len: int
    refused_share: float = 0.0  # requests longer than the model's context
    model_arg: str = ""  # MODEL as the user gave it (the check command repeats it) …
    fetched: bool = False  # … and whether it came from the Hub (--fetch)
    profile_file: str = ""  # --profile: the user's calibrated profile that timed the steps

    def _tok_s(self) -> float:
        return self.result.load.rate_req_s * self.result.mean_output_tokens

    @property
    def notes(self) -> list[str]:
        """The plan's notes, and where MODEL was a config file not named config.json, that the
        launch commands' folder (an engine loads a folder's config.json and weights) would not
        read it: `plan ./cfg_ok.json` prints `vllm serve .`, which looks for ./config.json."""
        from pathlib import Path

        notes = list(self.result.notes)
        name = Path(self.model_arg).name
        if name.lower().endswith(".json") and name != "config.json" and not self.fetched:
            notes.append(f"the launch commands serve {self.model_id}, {name}'s folder: an engine "
                         "reads a model folder's config.json beside its weights, so save the "
                         "file there as config.json (or give the folder, or the Hub id)")
        return notes

    def _priced(self) -> tuple[str, float]:
        """The tokens a million of which the text prices, and their rate: the output's, or
        the prompts' for a load of one output token per request (its work is the prefill)."""
        r = self.result
        if r.mean_output_tokens < 2:
            return "prompt", r.load.rate_req_s * r.load.means()[0]
        return "output", self._tok_s()

    def _unsimulated_lines(self, win: Candidate) -> list[str]:
        """What to say of the deployments cheaper than the winner that no check simulated
        (the budget of simulated candidates ran out before them), or []: how many, and how
        many of them the runners-up list, marked analytic. The cheaper ones a measured caution
        leaves unverified are said apart (``cheaper_unverified``)."""
        r = self.result
        price = win.cost_per_hour or 0.0
        left = [c for c in r.candidates if c is not win and not c.verified
                and not r.unverified_by(c) and (c.cost_per_hour or 0.0) < price]
        if not left:
            return []
        n = len(left)
        ids = {id(c) for c in left}
        listed = sum(1 for c in self.lists.runners_up() if id(c) in ids)
        runners = _agree(listed, "an analytic runner-up", "analytic runners-up")
        where = "" if not listed else (
            f"; {_agree(n, 'it is', 'all are')} listed below as {runners}" if listed == n
            else f"; {listed} of them {_agree(listed, 'is', 'are')} listed below as {runners}")
        return [f"  {n} cheaper {plural(n, 'deployment')} {_agree(n, 'was', 'were')} not "
                f"simulated (the budget of simulated candidates ran out before "
                f"{_agree(n, 'it', 'them')}{where}): {_agree(n, 'its', 'their')} price is the "
                "analytic estimate, not a result"]

    @property
    def steps(self) -> tuple[Step, ...]:
        """How the winner's replicas and price follow from its TPOT, for --explain."""
        result, win = self.result, self.result.winner
        if win is None:
            return ()
        mean_out, tok_s = result.mean_output_tokens, self._tok_s()
        limits = win.rate_limits or (win.replica_rate_req_s, math.inf, math.inf, math.inf)
        capped = [q(name, value, "req/s", why) for name, value, why in (
            ("the step's token budget", limits[1], "prompt and output tokens a step takes"),
            ("the prompts' queue", limits[2], "each prompt's wait and its prefill, chunked "
             "beside the decodes, within the TTFT SLO at its percentile"),
            ("the KV pool", limits[3] if len(limits) > 3 else math.inf,
             "arrivals whose prompt finds no room beside the requests in flight, at most "
             "half the SLO's tail"))
            if math.isfinite(value)]
        return (
            step("one replica's rate", "min(batch ÷ (output tokens × TPOT at that batch), the "
                 "step's token budget, the prompts' queue, the KV pool)" if capped else
                 "batch ÷ (output tokens × TPOT at that batch)",
                 q("rate", win.replica_rate_req_s, "req/s"), q("batch", win.batch),
                 q("output tokens (mean)", mean_out),
                 q("TPOT", win.tpot_s * 1e3, "ms", "step_cost, mixed decode + prefill step"),
                 *([q("batch ÷ (output × TPOT)", limits[0], "req/s")] if capped else []),
                 *capped),
            step("replicas, analytic", "ceil(rate ÷ one replica's rate)",
                 q("replicas", win.analytic_replicas if win.verified else win.replicas),
                 q("rate", result.load.rate_req_s, "req/s"),
                 q("one replica's rate", win.replica_rate_req_s, "req/s")),
            *((step("replicas, simulated", "the fewest replicas whose simulated percentiles "
                    "meet the SLO (each replica at its share of the load)",
                    q("replicas", win.replicas),
                    q(f"p{result.slo.percentile:g} TTFT", (win.sim_ttft_s or 0.0) * 1e3, "ms",
                      f"SLO {result.slo.ttft_s * 1e3:g} ms"),
                    q(f"p{result.slo.percentile:g} TPOT", (win.sim_tpot_s or 0.0) * 1e3, "ms",
                      f"SLO {result.slo.tpot_s * 1e3:g} ms"),
                    *([] if result.slo.itl_s is None else [
                        q(f"p{result.slo.percentile:g} ITL", (win.sim_itl_s or 0.0) * 1e3, "ms",
                          f"SLO {result.slo.itl_s * 1e3:g} ms; the gaps between the "
                          "streamed chunks of the requests the TTFT and TPOT are read on, "
                          "as simulate's ITL row")])),) if win.verified else ()),
            step("cost per million output tokens", "$/h ÷ (output tok/s × 3600) × 1e6",
                 q("cost", win.cost_per_million_tokens(tok_s) or 0.0, "$/M tok"),
                 q("$/h", win.cost_per_hour or 0.0, "", "GPUs rented × price per GPU-hour"),
                 q("GPUs rented", win.rented_gpus, "",
                   f"{win.gpus} GPUs in whole {win.rental_gpus}-GPU rental units"
                   if win.rental_gpus > 1 else _rents_alone(win)),
                 q("price per GPU-hour", win.price_per_gpu_hour or 0.0, "$",
                   price_words(win.accelerator, win.price_per_gpu_hour,
                               win.accelerator in result.prices_given)),
                 q("output tok/s", tok_s, "", self._tok_s_source())),
        )

    def _tok_s_source(self) -> str:
        """Where --explain's output tok/s comes from, to reproduce it: the mean output of the
        requests the sizing reads (``Load.samples``: a trace's own, or 2,000 drawn with the
        load's seed) × the rate; "250 output tokens × 10 req/s" for one length."""
        load, mean_out = self.result.load, self.result.mean_output_tokens
        rate = f"{shown_number(load.rate_req_s)} req/s"
        if load.trace:
            return (f"mean output {shown_number(mean_out)} tokens of the trace's "
                    f"{len(load.trace):,} requests × {rate}, its requests per second")
        if fixed_tokens(load.output_len) is not None:
            return f"{shown_number(mean_out)} output tokens × {rate}"
        return (f"mean output {shown_number(mean_out)} tokens of the {len(load.samples()):,} "
                f"requests the sizing draws (seed {load.seed}) × {rate}")

    def _row(self, c: Candidate) -> dict[str, Any]:
        from ridgeline.hardware import engine_devices, resolve_accelerator

        # fit's --json names (and the engines' flags'): tensor_parallel_size, not tp
        data = {FIT_NAMES.get(k, k): v for k, v in asdict(c).items()}
        limits = dict(zip(RATE_LIMIT_KEYS, (x if math.isfinite(x) else None
                                            for x in c.rate_limits)))
        # prices in US dollars, named as hardware's price_per_hour_usd and decode's
        # usd_per_million_output_tokens name them
        data["price_per_gpu_hour_usd"] = data.pop("price_per_gpu_hour")
        # fit at the launch's --max-model-len, under fit's keys (its engine_max_batch:
        # min(conversations, seats)); null where not sized so (a split's pools)
        tokens, held, seats = c.pool_at_launch or (None, None, None)
        del data["pool_at_launch"]
        for switch in ("disable_hybrid_kv_cache_manager", "allow_chunked_local_attn_hybrid"):
            del data[switch]  # every row's the same: constraints echoes them once
        data["pool"] = None if tokens is None else {
            "max_model_len": c.max_model_len, "tokens": tokens, "conversations": held,
            "max_num_seqs": seats, "engine_max_batch": min(held or 0, seats or 0)}
        # the GPUs in all (every replica's), under every command's num_gpus
        data.update(label=self.lists.label(c), num_gpus=c.gpus, cost_per_hour_usd=c.cost_per_hour,
                    usd_per_million_output_tokens=c.cost_per_million_tokens(self._tok_s()),
                    usd_per_million_prompt_tokens=c.cost_per_million_tokens(
                        self._priced()[1]) if self._priced()[0] == "prompt" else None,
                    weights_format=weights_format(self.model, c.weights),
                    rate_limits=limits or None,
                    unverified=bool(self.result.unverified_by(c)),
                    slowed_tpot_floor_s=slowed_tpot_floor_s(c)
                    if self.result.unverified_by(c) else None,
                    replica_nodes=c.replica_nodes, cautions=list(self.result.cautions_for(c)),
                    # the GPUs whole rental units pay for (5 GB200s: a 72-GPU rack), and where
                    # the price per GPU-hour is from
                    rented_gpus=c.rented_gpus,
                    price=price_of(c.accelerator, c.price_per_gpu_hour,
                                   c.accelerator in self.result.prices_given),
                    # one card a row, as fit's report has: the devices the engine runs it as
                    runtime_devices_per_gpu=engine_devices(
                        self.result.engine, resolve_accelerator(c.accelerator)))
        data["disaggregated"] = c.disaggregated or None  # "2P1D"; null for one pool
        # the analytic count where a check moved it from there; null on a row not simulated,
        # whose ``replicas`` is the analytic count
        data["analytic_replicas"] = c.analytic_replicas or None
        if not c.verified:  # no check: no requests or window of one
            data["sim_requests"] = data["sim_window_s"] = None
        if self.result.engine != "trtllm":  # TensorRT-LLM's launch setting (its YAML's):
            # vLLM V1 chunks every long prompt and SGLang by chunked_prefill_size, no flag
            # the launch line sets, so null there
            data["enable_chunked_prefill"] = None
        if self.result.mean_output_tokens < 2:  # one output token: no TPOT to state
            data["tpot_s"] = data["slowed_tpot_floor_s"] = None
        if self.result.slo.itl_s is None:  # no ITL SLO: no ITL judged, none stated
            del data["sim_itl_s"]
        elif data["sim_itl_s"] is not None and math.isnan(data["sim_itl_s"]):
            data["sim_itl_s"] = None  # 1-token outputs: no gap after a first
        return data

    def _split_row(self, c: Candidate) -> dict[str, Any]:
        """A split's row, with each pool's launch command at its knobs (``pool_commands``),
        the router in front of them and the files they name (TensorRT-LLM's YAML)."""
        launch = self.launch
        router = launch.router_command(c)
        row = {**self._row(c), "pool_commands": launch.pool_commands(c) or None,
               "router_command": router or None,
               # what the commands' host placeholders and the router are, as the text says
               "router_note": host_note(self.result.engine, c.prefill_replicas,
                                        c.replicas - c.prefill_replicas,
                                        vendor_of(c.accelerator))
               if router else None,
               # why the named --engine-version gets no commands, the text's "no launch" line
               "launch_problem": launch.split_problem() or None}
        if self.result.engine == "trtllm":
            row |= {"pool_config_files": launch.pool_files(c) or None,
                    "pool_command_note": launch.pool_note(c) or None}
        return row

    @property
    def lists(self) -> PlanLists:
        """The deployments listed beside the answer, and the Pareto frontier (plan_lists.py)."""
        return PlanLists(self.model, self.result)

    @property
    def launch(self) -> PlanCommands:
        """The winner's launch commands and a candidate's check command (plan_commands.py)."""
        return PlanCommands(self.model, self.model_id, self.result, self.max_len,
                            self.model_arg, self.fetched, self.profile_file)

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        win = r.winner
        return {
            # the release whose rules sized the pools: the newest modelled where none was
            # named, as simulate's and fit's --json name it
            "model": self.model.name, "engine": r.engine,
            "engine_version": sized_version(r.engine, r.engine_version),
            # each length a number where it is one (1000, 2k), null for a distribution or a
            # trace; its spec as given beside it (simulate's settings.workload alike); the
            # prompt (--input-len) under prefill's name for it, prompt_len
            "rate_req_s": r.load.rate_req_s,
            "prompt_len": None if r.load.trace else fixed_tokens(r.load.input_len),
            "prompt_len_spec": r.load.input_len,
            "output_len": None if r.load.trace else fixed_tokens(r.load.output_len),
            "output_len_spec": r.load.output_len,
            "slo": self._slo_dict(), "searched": r.searched,
            # --weights, --kv-dtype and --min-context as the search kept them (null: any)
            "constraints": r.constraints.to_dict(),
            "profile_file": self.profile_file or None,
            "verdict": self.verdict,
            "winner": self._row(win) if win else None,
            "winner_unverified": r.winner_unverified if win else None,
            "commands": self.launch.commands() if win else None,
            "node_commands": self.launch.node_commands() or None if win else None,
            "check_command": (self.launch.check_command(win) or None) if win else None,
            # where a trace's check has no command: what it replayed, as the text says
            "check_note": (self.check_note(win) or None) if win else None,
            **self.launch.trtllm_dict(),
            "cheaper_unverified": [self._row(c) for c in self.lists.cheaper_unverified()],
            "runners_up": [self._row(c) for c in self.lists.runners_up()],
            # what the text says under them where some are analytic (not simulated)
            "runners_up_note": self.lists.analytic_note()
            if any(not c.verified for c in self.lists.runners_up()) else None,
            # every card searched, with its best deployment or why it has none
            # (the card as every command's accelerator, its GPUs as their num_gpus)
            "cards": [{"accelerator": k.gpu, "status": k.status, "num_gpus": k.gpus or None,
                       "cost_per_hour_usd": k.best.cost_per_hour if k.best else None,
                       "simulated": k.best.verified if k.best else None,
                       "price": price_of(k.gpu, dict(r.price_table).get(k.gpu),
                                         k.gpu in r.prices_given)}
                      for k in r.cards],
            "unpriced": [self._unpriced_row(c) for c in r.unpriced],
            "disaggregated": [self._split_row(c) for c in r.disaggregated],
            "held_splits": [self._split_row(c) for c in self.lists.held_splits()],
            # each point's label as the text prints it, and what it names as keys
            "pareto": [{"point": p.label, **{k: v for k, v in p._asdict().items()
                                             if k != "label"}} for p in r.pareto],
            # a GPU is a card in every count and per-GPU figure, as --num-gpus counts it;
            # the cards the engine runs as several devices (vLLM: an MI250's 2 dies), by name,
            # as the search spans cards; each row's own count is its runtime_devices_per_gpu
            "runtime_devices_per_gpu": self.lists.dies_per_card(),
            "pareto_context_len": mean_decode_context(*r.load.means()),
            "closest_miss": r.closest_miss or None,
            # the group it names and its latencies as keys (closest_miss.Miss), or null
            "closest_miss_figures": r.closest_miss_figures.to_dict()
            if r.closest_miss_figures else None,
            # a deployment cheaper than the winner (any, with none) that held on the load's
            # requests but missed on the checks' second draw of them, or null
            "second_draw_miss": self.second_draw_dict(),
            "max_model_len": self.max_len, "refused_share": self.refused_share,
            "cautions": [*r.cautions, *([NOT_SIMULATED] if win and not win.verified else [])],
            # where the winner's batch is past its profile's fitted range: the first
            # deployment within it, as the text's "within the profile's fitted batch range"
            "in_range": self._row(r.in_range) if r.in_range else None,
            # --max-cost-per-hour-usd left none: the cheapest that meets the SLO above it
            "over_ceiling": self._row(r.over_ceiling) if r.over_ceiling else None,
            "notes": self.notes,
            # the cards asked for, or their formats, the release refuses: left out unsearched
            "left_out": [{"accelerator": x.gpu, "what": x.what, "why": x.why}
                         for x in r.left_out],
        }

    def prices_line(self) -> str:
        """Each searched card's price per GPU-hour, where it is from (its source's first
        clause, ``short_source``) and the day it was read, as --explain gives the winner's in
        full (``price_of``): "prices: mi300x $1.85 (Vultr on-demand $/GPU-hour; undated);
        h100-sxm $2.99 (…)"; a card left out whole (no format the release runs) not."""
        r = self.result
        given = set(r.prices_given)
        dropped = {k.gpu for k in r.cards if k.status == "left out"}  # searched no format

        def one(gpu: str, usd_h: float | None) -> str:
            price = price_of(gpu, usd_h, gpu in given)
            if price["source"] is None:
                return f"{gpu} no price"
            dated = "" if price["source"] == "--price" else f"; {price['date'] or 'undated'}"
            return f"{gpu} {gpu_hour_price(usd_h or 0.0)} ({short_source(price['source'])}{dated})"

        return ("prices per GPU-hour: " + "; ".join(one(g, p) for g, p in r.price_table
                                                    if g not in dropped)
                + " (--explain or --json: each source in full)")

    def constraint_words(self) -> str:
        """What --weights, --kv-dtype, --min-context, --max-model-len,
        --max-cost-per-hour-usd and vLLM's hybrid KV-cache manager switches held the search
        to, for the header: "; only weights bf16, KV bf16, launches of 131,072 tokens or
        more"; "; only launches with --disable-hybrid-kv-cache-manager"; "" for none."""
        from ridgeline.reports.launch_commands import hybrid_manager_words

        k = self.result.constraints
        switched = [w for words in hybrid_manager_words(k.disable_hybrid_kv_cache_manager,
                                                        k.allow_chunked_local_attn_hybrid)
                    for w in words]
        parts = [*([f"weights {', '.join(k.weights)}"] if k.weights else []),
                 *([f"KV {', '.join(k.kv_dtypes)}"] if k.kv_dtypes else []),
                 *([f"launches of {k.min_context:,} tokens or more"] if k.min_context else []),
                 *([f"launches at --max-model-len {k.max_model_len:,}"]
                   if k.max_model_len else []),
                 *([f"deployments within ${k.max_cost_per_hour_usd:,.2f}/h"]
                   if k.max_cost_per_hour_usd is not None else []),
                 *([f"launches with {' '.join(switched)}"] if switched else [])]
        return f"; only {', '.join(parts)}" if parts else ""

    def in_range_line(self) -> str:
        """Where the winner's decode batch is priced past its profile's fitted range, the
        first deployment priced within its own card's range (``PlanResult.in_range``), as the
        CDNA3 MoE caution names the cheapest without it; "" where none is needed or found."""
        r, c = self.result, self.result.in_range
        if c is None or r.winner is None:
            return ""
        return (f"  within the profile's fitted batch range: {self.lists.label(c)} = "
                f"{devices(c.gpus, c.accelerator)}, "
                + (f"${c.cost_per_hour:,.2f}/h" if c.cost_per_hour is not None else "no price")
                + f" ({'simulated' if c.verified else 'analytic'}, batch {c.batch:,}), the "
                "cheapest whose price rests on batches the profile was fitted on")

    def cards_line(self) -> str:
        """The cards the plan compared, each with its best deployment or why it has none."""
        return ("cards compared: " + "; ".join(card_words(k) for k in self.result.cards)
                + "; other cards not searched (--gpus names them, `ridgeline hardware` "
                "lists them)")

    def _slo_dict(self) -> dict[str, Any]:
        """The SLO as --json gives it, seconds: ``itl_s`` only where an ITL SLO was given."""
        data = asdict(self.result.slo)
        if data["itl_s"] is None:
            del data["itl_s"]
        return data

    @property
    def verdict(self) -> str:
        """The answer, as the text's first line after the header gives it: "winner" (the
        cheapest that holds in simulation, or where none was reached the cheapest analytic
        one, cautioned NOT SIMULATED), "cheapest unverified" (a measured caution covers it and
        no single pool without one held), "unpriced" (NO PRICED DEPLOYMENT: cards meet it
        without a price), "split pools" (NO SINGLE-POOL DEPLOYMENT: split prefill and decode
        pools held, ``held_splits``), or "none" (NO DEPLOYMENT)."""
        r = self.result
        if r.winner is not None:
            return "cheapest unverified" if r.winner_unverified else "winner"
        return "unpriced" if r.unpriced else "split pools" if self.lists.held_splits() else "none"

    @property
    def exit_status(self) -> int:
        """1 where no deployment within the limits meets the SLO (the answer is no), else 0:
        a winner, the cheapest unverified, or cards that meet it without a price."""
        r = self.result
        return 1 if r.winner is None and not r.unpriced and not self.lists.held_splits() else 0

    def shrunk_note(self, c: Candidate) -> str:
        """Where ``c``'s pool cannot hold one request of the model's context, what its
        shorter --max-model-len (the engine's flag for it: SGLang's --context-length,
        trtllm-serve's --max_seq_len) costs: the share of the load's requests it refuses, or
        "". vLLM would not start longer; SGLang and TensorRT-LLM would, but serve no request
        past their pool (capacity.holds_one_at), so the line launches them at what it holds."""
        context = served_positions(self.model, self.result.engine) or DEFAULT_CONTEXT
        if c.max_model_len and c.max_model_len == self.result.constraints.max_model_len:
            if not c.refused_share:  # the length asked: no word of the pool's longest
                return ""
            refused = share_of_requests(c.refused_share, "this load's")
            return (f"--max-model-len {c.max_model_len:,} (as given) refuses {refused} (those "
                    "longer), each a miss")
        if not c.max_model_len or c.max_model_len >= context:
            return ""
        engine = self.result.engine
        flag = engine_defaults(engine).get("cli", {}).get("max_len", "--max-model-len")
        held = "starts with" if engine == "vllm" else "holds one request of"
        longer = f", {_STARTS_LONGER[engine]}" if engine in _STARTS_LONGER else ""
        head = (f"{flag} {c.max_model_len:,}: the longest its KV pool {held}, "
                f"under {self.model.name}'s {context:,}-token context{longer}; ")
        if not c.refused_share:  # no request of the load is longer: nothing is refused
            return head + "no request of this load is longer, so it refuses none"
        refused = share_of_requests(c.refused_share, "this load's")
        return (head + f"it refuses {refused} (those "
                "longer), each a miss")

    def prompt_cap_note(self, c: Candidate) -> str:
        """``c``'s prompt limit under TensorRT-LLM (plan_cautions.prompt_cap_note), or ""."""
        return prompt_cap_note(self.result.engine, self.result.load, c, c.max_num_batched_tokens)

    def check_note(self, c: Candidate) -> str:
        """Why a trace's checked ``c`` gets no simulate command, and what its check replayed
        (every 2nd request of the trace for two replicas, or its heaviest stretch: simulate
        --trace replays a whole file); "" where it gets one or was not checked on a trace."""
        r = self.result
        if self.launch.check_command(c) or not (c.verified and r.load.trace):
            return ""
        share = -(-len(r.load.trace) // c.replicas)
        dealt = "the trace's requests" if c.replicas == 1 else \
            f"every {ordinal(c.replicas)} request of the trace (one replica's share)"
        held = f"all {share:,}" if c.sim_requests >= share else (
            f"its heaviest {c.sim_requests:,} in a row, from the "
            f"{ordinal(c.sim_first + 1)} of {share:,} on")
        return f"its check replayed {dealt}, {held}: simulate --trace replays a whole file"

    def _draw_command(self, run: CheckRun, seed: int) -> str:
        """The simulate command that reruns the second-draw miss's check on the draw of
        ``seed`` (``run`` its run there), or ""."""
        r, edge = self.result, self.result.second_draw
        assert edge is not None
        c = drawn(edge, run)
        return check_line(self.model_arg or self.model_id, replace(r.load, seed=seed), r.slo,
                          r.engine, r.engine_version, c, c.max_model_len or self.max_len,
                          self.fetched, self.profile_file)

    def second_draw_lines(self) -> list[str]:
        """The cheaper deployment the checks turned down on the second draw alone
        (``PlanResult.second_draw``), and the command for that draw, or []."""
        r, edge = self.result, self.result.second_draw
        if edge is None:
            return []
        win = r.winner
        seed = r.load.seed
        return second_draw_lines(edge, self.lists.label(edge.candidate), seed, r.slo,
                                 self._draw_command(edge.second, seed + CONFIRM_DRAW),
                                 win.cost_per_hour if win else None)

    def second_draw_dict(self) -> dict[str, Any] | None:
        """--json's ``second_draw_miss`` (plan_second_draw.second_draw_dict), or None."""
        r, edge = self.result, self.result.second_draw
        if edge is None:
            return None
        seed = r.load.seed
        return second_draw_dict(edge, self.lists.label(edge.candidate), seed, r.slo,
                                self._draw_command(edge.first, seed),
                                self._draw_command(edge.second, seed + CONFIRM_DRAW))

    def _unpriced_lines(self, c: Candidate) -> list[str]:
        """An unpriced single pool's figures as the search sized it (analytic: plan
        simulates the priced pools only, the cheapest first) and its launch command."""
        r = self.result
        out = [f"  {self.lists.label(c)}: analytic capacity of a replica "
               f"{c.replica_rate_req_s:,.2f} req/s at batch {c.batch}, mean TPOT "
               f"{tpot_ms(c.tpot_s if r.mean_output_tokens >= 2 else None)} (expected; band "
               f"×{c.band[0]:.2f}–×{c.band[1]:.2f})" + _binding(c)
               + "; not simulated: plan simulates priced pools only (--price "
               f"{c.accelerator}=USD has it checked)"]
        nodes = self.launch.node_commands(c).get(r.engine, [])
        commands = self.launch.commands(c)
        if not commands:
            return [*out, f"    ({self.launch.no_command(c)})"]
        launch = [f"node {i}: {line}" for i, line in enumerate(nodes)] if nodes \
            else list(commands.values())
        return [*out, *(f"    run it with: {line}" for line in launch),
                *(f"  {line}" for line in self.launch.config_lines(c))]

    def _unpriced_row(self, c: Candidate) -> dict[str, Any]:
        """An unpriced single pool's row with its launch command (and YAML), as the text
        gives them under it."""
        win = self.result.winner
        row = {**self._row(c), "commands": self.launch.commands(c) or None,
               "node_commands": self.launch.node_commands(c) or None,
               # the price per GPU-hour below which it could undercut the winner, a ceiling
               # (its replicas the analytic count), as the text's "it can win only below"
               "break_even_price_per_gpu_hour_usd": break_even_usd(win, c) if win else None,
               "break_even_note": self.lists.break_even_note(c) if win else None}
        if self.result.engine == "trtllm":
            launch = self.launch.trtllm_launch(c)
            row |= {"config_files": {launch.config_name: launch.config_text}
                    if launch.config else None, "command_note": launch.note or None}
        return row

    def text_lines(self) -> list[str]:
        r = self.result
        slo = r.slo
        sized = sized_version(r.engine, r.engine_version)  # the newest modelled, unnamed
        head = (f"{self.model.name} at {fmt_req_rate(r.load.rate_req_s)} req/s (input "
                f"{r.load.input_len}, output {r.load.output_len}); SLO {pct(slo.percentile)} "
                f"TTFT ≤ {fmt_latency_limit(slo.ttft_s)}, "
                f"TPOT ≤ {fmt_latency_limit(slo.tpot_s)}"
                + ("" if slo.itl_s is None else f", ITL ≤ {fmt_latency_limit(slo.itl_s)}")
                + self.constraint_words()
                + f"; {r.searched} configurations searched, "
                f"pools sized as {engine_name(r.engine)}"
                + (f" {sized}" if sized else _release_span(r.engine)) + " sizes them" + (
                    f", steps timed by the profile in {self.profile_file}"
                    if self.profile_file else ""))
        # the cards asked for (or their formats) the release refuses, each its own line
        left = [f"left out: {x.gpu} ({x.what}): {x.why}" for x in r.left_out] \
            + ([self.cards_line()] if r.cards else []) \
            + ([self.prices_line()] if r.price_table else [])
        win = r.winner
        if win is None:
            splits = self.lists.held_splits()
            lines = [head, *left, "", "NO PRICED DEPLOYMENT within the limits meets this SLO."
                     if r.unpriced else "NO SINGLE-POOL DEPLOYMENT within the limits meets "
                     "this SLO; split prefill and decode pools do:" if splits
                     else f"NO DEPLOYMENT within ${r.constraints.max_cost_per_hour_usd:,.2f}/h "
                     "meets this SLO (--max-cost-per-hour-usd)." if r.over_ceiling
                     else "NO DEPLOYMENT within the limits meets this SLO."]
            if r.unpriced:  # the single pools first, and the splits said to be splits
                release = self.launch.release_note()
                lines.append("feasible but unpriced (pass --price GPU=USD): "
                             + ", ".join(self.lists.label(c) for c in r.unpriced)
                             + (f" (each launch line {release})" if release else ""))
                for c in r.unpriced:
                    lines += self._unpriced_lines(c)
                lines += self.lists.caution_lines(r.unpriced)
                if splits:
                    lines.append("split prefill and decode pools also held:")
            for c in splits:
                lines.append(f"  {self.lists.label(c)}: {devices(c.gpus, c.accelerator)}, "
                             + (f"${c.cost_per_hour:,.2f}/h" if c.cost_per_hour is not None
                                else "no price")
                             + f" (simulated: {pct(r.slo.percentile)} TTFT "
                             f"{fmt_latency(c.sim_ttft_s or 0, ',.0f')}, "
                             f"TPOT {tpot_ms(c.sim_tpot_s)}"
                             f"{itl_part(r.slo, c.sim_itl_s)}; "
                             "KV hand-off over a 400 Gb/s link, where the engines can pass each "
                             f"prompt's KV cache from node to node: {self.lists.handoff_where()})"
                             + "".join(f"; caution: {text}" for text in r.cautions_for(c)))
                lines += ["  " + line for line in self.lists.pool_lines(
                    c, self.launch.pool_launch)]
            if r.closest_miss:
                lines.append(f"closest: {r.closest_miss}")
            return lines + self.second_draw_lines()
        priced, priced_tok_s = self._priced()
        per_m = win.cost_per_million_tokens(priced_tok_s)
        lines = [head, *left, "",
                 f"{'cheapest, unverified' if r.winner_unverified else 'winner'}: "
                 f"{self.lists.label(win)} = {devices(win.gpus, win.accelerator)}"
                 f"{rented_words(win)}, ${win.cost_per_hour:,.2f}/h, "
                 f"{usd(per_m)} per million {priced} tokens at this load (the GPUs' hour over "
                 f"the {priced} tokens it serves, idle time included)"]
        if win.verified:  # what the load sees first, then the capacity the search sized with
            lines.append(f"  simulated at {_rate(r.load.rate_req_s / win.replicas)} req/s per replica: "
                         f"{pct(slo.percentile)} TTFT {fmt_latency(win.sim_ttft_s or 0, ',.0f')}, "
                         f"TPOT {tpot_ms(win.sim_tpot_s)}{itl_part(slo, win.sim_itl_s)}"
                         + (f" ({win.sim_requests:,} requests, the latencies of those arriving "
                            f"{win.sim_window_s[0]:,.1f}–{win.sim_window_s[1]:,.1f} s)"
                            if win.sim_window_s else f" ({win.sim_requests:,} requests, "
                            "every one's latency counted: a recorded trace has no warm-up to "
                            "drop)"))
        lines.append(f"  analytic capacity of a replica: {win.replica_rate_req_s:,.2f} req/s at "
                     f"batch {win.batch}, mean TPOT "
                     f"{tpot_ms(win.tpot_s if r.mean_output_tokens >= 2 else None)} (expected; "
                     f"band ×{win.band[0]:.2f}–×{win.band[1]:.2f})" + _binding(win)
                     + ("; the search sized with it, the simulation decides" if win.verified
                        else ""))
        lines += [f"  caution: {c}" for c in r.cautions]
        lines += [line for line in (self.in_range_line(),) if line]
        lines += [f"  note: {n}" for n in self.notes]
        if not win.calibrated:
            lines.append(f"  outside the calibrated range: {win.calibration_note}")
        if self.refused_share and not self.shrunk_note(win):
            lines.append(f"  {share_of_requests(self.refused_share)} are longer than "
                         f"{self.model.name}'s {self.max_len:,}-token context: the engine "
                         "refuses them")
        if not win.verified:
            lines.append(f"  NOT SIMULATED: {NOT_SIMULATED}")
        lines += self._unsimulated_lines(win)
        lines += self.second_draw_lines()
        splits = self.lists.held_splits()
        if r.winner_unverified and splits:  # no single pool without the caution held; a split did
            c = splits[0]
            lines.append(f"  split prefill and decode pools without the caution held in "
                         f"simulation: {self.lists.label(c)} = {devices(c.gpus, c.accelerator)}, "
                         + (f"${c.cost_per_hour:,.2f}/h" if c.cost_per_hour is not None
                            else "no price")
                         + " (listed below), where the engines can hand each prompt's KV cache "
                         "from node to node")
        held_back = self.lists.cheaper_unverified()
        if held_back:
            n = len(held_back)
            lines.append(f"  {n} cheaper {plural(n, 'deployment')} {_agree(n, 'carries', 'carry')} "
                         "a measured caution "
                         "(listed below as unverified, each with its TPOT at the measured "
                         "slowdown): not ranked before this one")
        commands = self.launch.commands()
        nodes = self.launch.node_commands().get(r.engine, [])
        shrunk = self.shrunk_note(win)
        spans = "; ".join(filter(None, [self.launch.release_note(), needs_release(r.cautions),
                                        multi_node_note(r.engine, win, r.engine_version),
                                        self.launch.command_note()]))
        launch = [f"  node {i}: {c}" for i, c in enumerate(nodes)] if nodes \
            else [f"  {c}" for c in commands.values()]
        lines += ["", "run it with" + (f" ({spans})" if spans else "") + ":", *launch,
                  *self.launch.config_lines(), *([f"  ({shrunk})"] if shrunk else []),
                  *([f"  ({capped})"] if (capped := self.prompt_cap_note(win)) else []), ""] \
            if commands else ["", f"({self.launch.no_command()}: size its "
                              "engine with the batch above" + (f"; {spans}" if spans else "")
                              + (f"; {shrunk}" if shrunk else "") + ")", ""]
        check = self.launch.check_command(win)
        if check:
            lines[-1:-1] = ["check it with (one replica's share of the load):", f"  {check}"]
        elif self.check_note(win):
            lines[-1:-1] = [f"({self.check_note(win)})"]
        if held_back:
            lines += self.lists.cheaper_unverified_lines(held_back, priced, priced_tok_s)
        lines += self.lists.alternative_lines(win, priced, priced_tok_s,
                                              self.launch.pool_launch)
        lines += self.lists.pareto_lines()
        return lines
