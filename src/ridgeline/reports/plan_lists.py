"""The deployments `ridgeline plan` lists beside its answer: runners-up of other shapes, the
cheaper ones a measured caution leaves unverified, split prefill and decode pools, cards
without a price, and the Pareto frontier of tokens per GPU against tokens per user.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ridgeline.candidate import Candidate, weights_name
from ridgeline.cost import mean_decode_context
from ridgeline.engine_versions import split_launch_problem
from ridgeline.hardware import resolve_accelerator
from ridgeline.measured_slowdown import MEASURED_SLOWDOWN_LOW, slowed_tpot_floor_s
from ridgeline.model import ModelSpec
from ridgeline.plan import PlanResult
from ridgeline.plan_cautions import prompt_cap_note
from ridgeline.render import table
from ridgeline.serving_load import Slo
from ridgeline.units import fmt_latency, fmt_total_tok_s, plural

# the splits whose pools' launch lines the text prints in full: each further split --json
# lists gets its one line (its price and check) without them, so the text hides none
SPLITS_LAUNCHED = 3
# a split's launch command for each pool by name and the lines its commands need printed
# beside them (PlanCommands.pool_launch), where printed
PoolCommands = Callable[[Candidate], tuple[dict[str, str], list[str]]] | None


def device_noun(gpu: str) -> str:
    """What card ``gpu``'s devices are called where plan counts them (Accelerator.device_noun):
    "GPU", a TPU's "chip", a Gaudi's "HPU"."""
    return resolve_accelerator(gpu).device_noun


def vendor_of(gpu: str) -> str:
    """Card ``gpu``'s vendor, whose platform may launch a split its own way (split_launch)."""
    return resolve_accelerator(gpu).vendor


def devices(n: int, gpu: str) -> str:
    """``n`` devices of card ``gpu`` in words: "2 GPUs", "1 chip" (a TPU), "4 HPUs"."""
    return f"{n:,} {plural(n, device_noun(gpu))}"


def _shape(c: Candidate) -> tuple[str, int, int, str, bool, int]:
    """What sets a deployment apart in the lists: accelerator, parallelism, weight format (the
    same shape with another engine knob or cache format costs about the same)."""
    return c.accelerator, c.tp, c.pp, c.weights, c.expert_parallel, c.data_parallel


def _distinct(cands: Iterable[Candidate], seen: set[tuple[str, int, int, str, bool, int]]
              ) -> list[Candidate]:
    """The first of each shape in ``cands`` not already ``seen`` (which it adds to)."""
    out = []
    for c in cands:
        if _shape(c) not in seen:
            seen.add(_shape(c))
            out.append(c)
    return out


def rented_words(c: Candidate) -> str:
    """Where ``c``'s card rents in units of several GPUs, what it pays for beyond its own:
    ", rented as 72-GPU units (1 unit, 67 spare)" for 5 GB200s; "" where a card rents alone."""
    if c.rental_gpus <= 1:
        return ""
    units = c.rented_gpus // c.rental_gpus
    return (f", rented as {c.rental_gpus}-GPU units ({units:,} {plural(units, 'unit')}, "
            f"{c.rented_gpus - c.gpus:,} spare)")


def gpus_cell(c: Candidate) -> str:
    """A list's GPUs column: "15"; "5 (72 rented)" where whole rental units pay for more."""
    return f"{c.gpus:,}" + (f" ({c.rented_gpus:,} rented)" if c.rented_gpus != c.gpus else "")


def break_even_usd(win: Candidate, c: Candidate) -> float | None:
    """The price per GPU-hour below which unpriced ``c`` would cost less than ``win``: the
    winner's $/h over the GPUs ``c`` pays for (``rented_gpus``); $22.70 over 18 Gaudi 3s =
    $1.26. A ceiling: ``c``'s replicas are the analytic count, which simulation tends to
    raise (18 analytic Gaudi 3s needed 20). None where the winner has no price."""
    if win.cost_per_hour is None:
        return None
    return win.cost_per_hour / c.rented_gpus


def pct(percentile: float) -> str:
    """p90, p99.9: the percentile as asked, not rounded to p100."""
    return f"p{percentile:.10g}"


def tpot_ms(tpot_s: float | None) -> str:
    if tpot_s is None or math.isnan(tpot_s):
        return "n/a (1-token outputs)"
    return fmt_latency(tpot_s)


def itl_part(slo: Slo, itl_s: float | None) -> str:
    """", ITL 12.3 ms": a check's ITL at the SLO's percentile, to follow its TPOT where the SLO
    has an ITL limit; "" where it has none."""
    return "" if slo.itl_s is None else f", ITL {tpot_ms(itl_s)}"


def usd(dollars: float | None) -> str:
    """$0.123 per million tokens, $45.67, $4,014,757: cents shown where they matter."""
    if dollars is None:
        return "no price"
    return f"${dollars:,.3f}" if dollars < 10 else f"${dollars:,.2f}" if dollars < 1e4 \
        else f"${dollars:,.0f}"


def gpu_hour_price(dollars: float) -> str:
    """A price per GPU-hour at the precision the products of it use: $2.99, but $1.861 (an
    L40S's), where cents alone read 6 × $1.86 = $11.16 beside the $11.17 it makes."""
    cents = f"{dollars:,.2f}"
    if float(cents.replace(",", "")) == dollars:
        return f"${cents}"
    return "$" + f"{dollars:,.4f}".rstrip("0")


@dataclass(frozen=True)
class PlanLists:
    """The lists under a plan's ``result`` for ``model``, each deployment named by ``label``."""
    model: ModelSpec
    result: PlanResult

    def label(self, c: Candidate) -> str:
        """``c`` as the lists name it: replicas, cards, parallelism, weight and KV formats."""
        return c.label_for(self.result.engine, weights_name(self.model, c.weights))

    def dies_per_card(self) -> dict[str, int]:
        """{accelerator: devices} of the searched cards the engine runs as several devices
        (vLLM on an MI250X: 2); {} where every card is one."""
        from ridgeline.hardware import engine_devices, resolve_accelerator

        r = self.result
        named = {c.accelerator for c in (*r.candidates, *r.unpriced, *r.disaggregated)}
        devices = {a: engine_devices(r.engine, resolve_accelerator(a)) for a in sorted(named)}
        return {a: n for a, n in devices.items() if n > 1}

    def held_splits(self) -> list[Candidate]:
        """The disaggregated splits that held in simulation with no measured caution (a
        hybrid's pools under vLLM's NixlConnector sized as the release runs them beside it:
        disaggregated.pool_connector): an answer where no single pool meets the SLO."""
        r = self.result
        return [c for c in r.disaggregated if c.verified and not r.unverified_by(c)]

    def runners_up(self, count: int = 5) -> list[Candidate]:
        """The next cheapest deployments that differ from the winner, from each other and from
        the cheaper unverified ones (``cheaper_unverified``) in accelerator, parallelism or
        weight format: the same shape with another engine knob costs the same and says
        nothing new."""
        cheaper = self.result.cheaper_unverified
        listed, seen = {id(c) for c in cheaper}, {_shape(c) for c in cheaper}
        out = _distinct((c for c in self.result.candidates if id(c) not in listed),
                        seen)  # the winner first
        # cheapest first; an unsimulated price is the analytic sizing's estimate
        return sorted(out[1:count + 1], key=lambda c: (c.cost_per_hour or 0.0, c.gpus))

    def cheaper_unverified(self, count: int = 5) -> list[Candidate]:
        """The deployments cheaper than the winner that a measured caution leaves unverified,
        one of each shape (as ``runners_up``), cheapest first: the winner is the cheapest
        that holds without the caution, these the alternatives its price assumes away."""
        out = _distinct(self.result.cheaper_unverified, set())
        return sorted(out[:count], key=lambda c: (c.cost_per_hour or 0.0, c.gpus))

    def moved_span(self) -> tuple[str, int]:
        """How far simulation moved the replicas of the candidates it checked ("+0% to +33%")
        and how many it checked; ("", 0) where it checked none."""
        ratios = [c.replicas / c.analytic_replicas for c in self.result.candidates
                  if c.verified and c.analytic_replicas]
        if not ratios:
            return "", 0
        low, high = min(ratios) - 1, max(ratios) - 1
        return (f"{low:+.0%}" if abs(high - low) < 0.005 else f"{low:+.0%} to {high:+.0%}",
                len(ratios))

    def break_even_note(self, c: Candidate) -> str:
        """Why unpriced ``c``'s break-even price is a ceiling, not a price it wins at."""
        span, n = self.moved_span()
        moved = f"; simulation moved the {plural(n, 'priced candidate')} it checked by {span}" \
            if n else ""
        return ("a ceiling: its replica count is the analytic one, never simulated, as plan "
                f"simulates priced pools only{moved}; --price {c.accelerator}=USD has it checked")

    def analytic_note(self) -> str:
        """What an analytic runner-up's price is: a count no check simulated."""
        return f"analytic: not simulated; {self._moved()}"

    def _moved(self) -> str:
        """How far simulation moved the replicas of the candidates it checked."""
        span, n = self.moved_span()
        if not n:
            return "the steady-state simulation may add or remove replicas"
        checked = "the one it checked" if n == 1 else f"the {n} it checked"
        return (f"the steady-state simulation moved the replicas of {checked} by {span}; an "
                "analytic count sits at the capacity edge, where one more replica is often "
                "what the percentile needs")

    def cheaper_unverified_lines(self, cands: list[Candidate], priced: str,
                                 priced_tok_s: float) -> list[str]:
        """The cheaper deployments a measured caution leaves unverified, each with its TPOT
        at the measured slowdown's low end (``slowed_tpot_floor_s``) against the SLO."""
        r = self.result
        no_tpot = r.mean_output_tokens < 2

        def floor(c: Candidate) -> str:
            floor_s = slowed_tpot_floor_s(c)
            return tpot_ms(None if no_tpot else floor_s) + (
                ", past the SLO" if not no_tpot and floor_s > r.slo.tpot_s else "")

        rows = [[self.label(c), gpus_cell(c), f"${c.cost_per_hour:,.2f}",
                 usd(c.cost_per_million_tokens(priced_tok_s)), floor(c),
                 "simulated" if c.verified else "analytic"] for c in cands]
        why = r.unverified_by(cands[0])
        return [*table(rows, ["cheaper, unverified", "GPUs", "$/h",
                              "$/M tok" if priced == "output" else "$/M prompt tok",
                              f"TPOT × {MEASURED_SLOWDOWN_LOW:g}", "checked"]),
                "  (unverified: " + ("the measured caution above covers these deployments"
                                     if any(why in c for c in r.cautions) else why)
                + f"; TPOT × {MEASURED_SLOWDOWN_LOW:g}: the simulated {pct(r.slo.percentile)} "
                "TPOT, or the analytic mean where not simulated, at the measured slowdown's "
                "low end, a floor before the slower steps' queueing)",
                *self.caution_lines(cands), ""]

    def caution_lines(self, cands: Iterable[Candidate]) -> list[str]:
        """One line for each caution of ``cands``' own deployments (``cautions_for``: TP
        across nodes, a prompt speed priced with another card group's share), for under a
        list of them: named by the label of each deployment it is said of, or "each of these"
        where it is said of every one (a card's track record, said once, not once a row)."""
        listed = list(cands)
        said: dict[str, list[Candidate]] = {}
        for c in listed:
            for text in self.result.cautions_for(c):
                said.setdefault(text, []).append(c)

        def named(of: list[Candidate]) -> str:
            if len(listed) > 1 and len(of) == len(listed):
                return "each of these"
            return "; ".join(map(self.label, of))

        return [f"  caution, {named(of)}: {text}" for text, of in said.items()]

    def alternative_lines(self, win: Candidate, priced: str, priced_tok_s: float,
                          pool_commands: PoolCommands = None) -> list[str]:
        """The runners-up, the cards without a price and the disaggregated splits, listed under
        the winner ``win``, their $/M of ``priced`` tokens ("output" or "prompt") at
        ``priced_tok_s``, each split's pools with their launch commands (``pool_lines``)."""
        r = self.result
        lines: list[str] = []
        runners = self.runners_up()
        rows = [[self.label(c), gpus_cell(c), f"${c.cost_per_hour:,.2f}",
                 usd(c.cost_per_million_tokens(priced_tok_s)),
                 ("simulated" if c.verified else "analytic")
                 + (", unverified" if r.unverified_by(c) else "")] for c in runners]
        if rows:
            lines += table(rows, ["runners-up", "GPUs", "$/h",
                                  "$/M tok" if priced == "output" else "$/M prompt tok",
                                  "checked"])
            if not all(c.verified for c in runners):
                lines.append(f"  ({self.analytic_note()})")
            why = next((r.unverified_by(c) for c in runners if r.unverified_by(c)), "")
            if why:
                lines.append("  (unverified: " + ("the measured caution above covers these "
                                                  "deployments too"
                                                  if any(why in c for c in r.cautions) else why)
                             + ")")
            lines += self.caution_lines(runners)
            lines.append("")
        for c in r.unpriced:
            lines.append(f"{self.label(c)} = {devices(c.gpus, c.accelerator)}{rented_words(c)}, "
                         "no price: it can win only below "
                         f"${break_even_usd(win, c) or 0.0:,.2f} per GPU-hour "
                         f"({self.break_even_note(c)})")
            lines += [f"  caution: {text}" for text in r.cautions_for(c)]
        if r.disaggregated and not any(c.verified for c in r.disaggregated):
            lines.append("disaggregated pools: the cheapest splits were simulated and none held "
                         "within --max-gpus; those below were not simulated (analytic only)"
                         if r.splits_simulated else
                         "disaggregated pools: none simulated (analytic only)")
        for i, c in enumerate(r.disaggregated):  # each split --json lists, the first launched
            cost = f"${c.cost_per_hour:,.2f}/h" if c.cost_per_hour is not None else "no price"
            how = (f"simulated: {pct(r.slo.percentile)} TTFT "
                   f"{fmt_latency(c.sim_ttft_s or 0, ',.0f')}, "
                   f"TPOT {tpot_ms(c.sim_tpot_s)}{itl_part(r.slo, c.sim_itl_s)}" if c.verified
                   else "analytic")
            lines.append(f"disaggregated, {self.label(c)}: {devices(c.gpus, c.accelerator)}"
                         f"{rented_words(c)}, {cost} "
                         f"({how}; KV hand-off over a 400 Gb/s link)"
                         + (", unverified: CDNA3's FP8 and MXFP4 MoE paths have measured 1.3–2.1× "
                            "slower than priced (validation/serving.csv)"
                            if r.unverified_by(c) else "")
                         + "".join(f"; caution: {text}" for text in r.cautions_for(c)))
            if not c.verified and c.cost_per_hour is not None and win.cost_per_hour is not None \
                    and c.cost_per_hour < win.cost_per_hour:
                lines.append(f"  not checked in simulation: it costs less than the winner "
                             f"(${c.cost_per_hour:,.2f}/h against ${win.cost_per_hour:,.2f}/h) "
                             "at its analytic count, past the splits the checks reached; "
                             "`ridgeline simulate` each pool before counting on it")
            if i < SPLITS_LAUNCHED:
                lines += self.pool_lines(c, pool_commands)
        if any(self.pool_lines(c, pool_commands) for c in r.disaggregated[SPLITS_LAUNCHED:]):
            lines.append(f"  (launch lines under the first {SPLITS_LAUNCHED} splits only; "
                         "--json gives every split's pool_commands)")
        # a split carrying the measured caution is no cheaper alternative than a cautioned
        # single pool: its price assumes the same unmeasured speed
        cheaper = [c for c in r.disaggregated if c.verified and not r.unverified_by(c)
                   and c.cost_per_hour is not None
                   and win.cost_per_hour is not None and c.cost_per_hour < win.cost_per_hour]
        if cheaper:
            c = cheaper[0]
            top = "the unverified cheapest" if r.winner_unverified else "the winner"
            lines.append(f"  the {c.disaggregated} split of {c.accelerator} costs less than {top} "
                         f"(${c.cost_per_hour:,.2f}/h against ${win.cost_per_hour:,.2f}/h) where "
                         "the engines can hand each prompt's KV cache from node to node "
                         f"({self.handoff_where()}); {top} needs none")
        return lines

    def handoff_where(self) -> str:
        """Where a split's KV hand-off is said: the connector and router printed under it, or,
        for a release that has neither (``split_launch_problem``), the line saying so."""
        if split_launch_problem(self.result.engine, self.result.engine_version):
            return "not at this --engine-version, as said under it"
        return "the KV connector and router printed under it"

    def pool_lines(self, c: Candidate, pool_commands: PoolCommands) -> list[str]:
        """Under a split ``c``, each pool's replicas and its launch command, at the knobs its
        check held with (``PlanCommands.pool_launch``), the router in front of them, and what
        the commands need beside them (trtllm-serve's YAML files, the hosts they name); none
        without commands."""
        commands, extra = pool_commands(c) if pool_commands else ({}, [])
        count = {"prefill": c.prefill_replicas, "decode": c.replicas - c.prefill_replicas}
        # the context servers take the prompts: their --max_num_tokens refuses longer ones
        budget = c.pool_knobs[0][1] if c.pool_knobs else c.max_num_batched_tokens
        capped = prompt_cap_note(self.result.engine, self.result.load, c, budget) \
            if "prefill" in commands else ""
        return [f"  router: {command}" if name == "router" else
                f"  {name} pool, {count[name]} {plural(count[name], 'replica')}: {command}"
                for name, command in commands.items()] \
            + [("    " if commands else "  ") + line for line in extra] \
            + ([f"  (prefill pool: {capped})"] if capped else [])

    def pareto_lines(self) -> list[str]:
        """The Pareto frontier of tokens per GPU against tokens per user, decode at the load's
        mean context, each configuration at batches 1, 2, 4, … and the batch meeting the SLO."""
        r = self.result
        if not r.pareto:
            return []
        ctx = mean_decode_context(*r.load.means())
        dies = "".join(f"; a GPU is one {a} card, its {n} dies added (as --num-gpus "
                       "counts)" for a, n in self.dies_per_card().items())
        # past 12 points, the fastest per user and the 11 of the most tokens per GPU (the
        # batches meeting the SLO among them)
        shown = r.pareto if len(r.pareto) <= 12 else (r.pareto[0], *r.pareto[-11:])
        return ["", f"Pareto frontier, decode at a {ctx:,}-token context (the prompt and "
                "half the output, a response's mean), each configuration at batches 1, 2, "
                f"4, … and the batch that meets the SLO{dies}:",
                f"  {'tok/s/GPU':>9}  {'tok/s/user':>10}  configuration, batch",
                *(f"  {fmt_total_tok_s(p.output_tok_s_per_gpu):>9}  {p.per_user_tok_s:>10,.1f}  {p.label}"
                  for p in shown),
                # a point is a pure decode step; the SLO's batch was sized with the load's
                # prompts in its steps (or at the pool's or seats' limit), so its per-user
                # rate reads faster than the TPOT SLO the prompts' share leaves
                "  each point a decode step alone; a configuration's last batch is the one "
                "its sizing found with the load's prompts sharing the steps (or its pool's or "
                "seats' limit), so its tok/s/user here reads faster than that SLO's TPOT"]
