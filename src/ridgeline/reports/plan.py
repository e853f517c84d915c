"""`ridgeline plan`: the cheapest deployment meeting the SLO, runners-up, Pareto, commands."""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from ridgeline.candidate import Candidate, stored_name, weights_name
from ridgeline.context_length import served_positions
from ridgeline.cost import mean_decode_context
from ridgeline.datafiles import engine_defaults
from ridgeline.explain import Step, q, step
from ridgeline.measured_slowdown import MEASURED_SLOWDOWN_LOW, slowed_tpot_floor_s
from ridgeline.model import ModelSpec
from ridgeline.plan import PlanResult
from ridgeline.render import table
from ridgeline.replica_sizing import DEFAULT_CONTEXT
from ridgeline.reports.launch_commands import command_line, multi_node_note, node_commands
from ridgeline.reports.trtllm_command import TrtllmLaunch, trtllm_launch
from ridgeline.serving_load import Load, Slo
from ridgeline.units import ordinal, plural


def _exact(x: float) -> str:
    """A number as short as prints it back exactly (so a command line reruns the same run)."""
    short = f"{x:.12g}"
    return short if float(short) == x else repr(x)


def check_line(model_arg: str, load: Load, slo: Slo, engine: str, engine_version: str | None,
               c: Candidate, max_len: int, fetched: bool = False, profile_file: str = "") -> str:
    """The `ridgeline simulate` command that reruns a candidate's check (one replica's share
    of the load, the same requests and seed, its steady window, its pipeline lanes), or ""
    where simulate cannot (a trace dealt to several replicas or cut short, split pools, an
    unchecked candidate)."""
    if not c.verified or c.sim_window_s is None or c.disaggregated:
        return ""
    if load.trace and (c.replicas > 1 or c.sim_requests != len(load.trace)):
        return ""
    low, high = c.sim_window_s
    parts = [model_arg, *(["--fetch"] if fetched else []), "--gpu", c.accelerator,
             "--num-gpus", str(c.tp * (c.data_parallel if engine == "sglang" else 1)),
             *(["--pipeline-parallel-size", str(c.pp)] if c.pp > 1 else [])]
    if c.data_parallel > 1:  # in the engine's words: SGLang's --tp-size is every GPU
        parts += ["--dp-size", str(c.data_parallel), "--enable-dp-attention"] \
            if engine == "sglang" else ["--data-parallel-size", str(c.data_parallel)]
    if c.weights != "as stored":
        parts += ["--weights", c.weights]
    parts += ["--kv-dtype", c.kv, "--engine", engine]
    if profile_file:
        parts += ["--profile", profile_file]
    if engine_version:
        parts += ["--engine-version", engine_version]
    if c.expert_parallel:
        parts.append("--enable-expert-parallel")
    if c.max_num_seqs:
        parts += ["--max-num-seqs", str(c.max_num_seqs)]
    if c.max_num_batched_tokens:
        parts += ["--max-num-batched-tokens", str(c.max_num_batched_tokens)]
    parts += ["--max-model-len", str(max_len)]
    parts += ["--trace", load.trace_path] if load.trace else [
        "--rate", _exact(load.rate_req_s / c.replicas), "--num-requests", str(c.sim_requests),
        "--input-len", load.input_len, "--output-len", load.output_len, "--seed", str(load.seed)]
    parts += ["--window", f"{_exact(max(low, 0.0))},{_exact(high)}",
              "--slo-ttft-ms", _exact(slo.ttft_s * 1e3), "--slo-tpot-ms", _exact(slo.tpot_s * 1e3),
              "--percentile", _exact(slo.percentile)]
    return "ridgeline simulate " + " ".join(shlex.quote(p) for p in parts)


# --json's names for Candidate.rate_limits (req/s; null: no limit)
RATE_LIMIT_KEYS = ("tpot_at_batch", "token_budget", "prompt_queue")

NOT_SIMULATED = ("every cheaper candidate the simulation budget reached missed the SLO in "
                 "simulation, and this one was not reached; its price is the analytic estimate, "
                 "and the SLO may be out of reach")


def _binding(c: Candidate) -> str:
    """What caps a replica's analytic rate where it is not its batch over the TPOT: the
    step's token budget or the prompts' queue (a batch of 3 at 34 ms a token serves 1.76
    req/s of 50-token outputs; the queue of 32k-token prompts allows 1.07)."""
    if len(c.rate_limits) != 3 or c.replica_rate_req_s >= c.rate_limits[0] \
            or not math.isfinite(c.rate_limits[0]):
        return ""  # the TPOT's bound binds, or a load of 1-token outputs has none (inf)
    name = "the step's token budget" if c.rate_limits[1] <= c.rate_limits[2] \
        else "the prompts' queue within the TTFT SLO"
    return (f"; capped by {name}, under the {c.rate_limits[0]:,.2f} req/s its batch's TPOT "
            "allows")


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


def _pct(percentile: float) -> str:
    """p90, p99.9: the percentile as asked, not rounded to p100."""
    return f"p{percentile:.10g}"


def _tpot_ms(tpot_s: float | None) -> str:
    if tpot_s is None or math.isnan(tpot_s):
        return "n/a (1-token outputs)"
    return f"{tpot_s * 1e3:,.1f} ms"


def _usd(dollars: float | None) -> str:
    """$0.123 per million tokens, $45.67, $4,014,757: cents shown where they matter."""
    if dollars is None:
        return "no price"
    return f"${dollars:,.3f}" if dollars < 10 else f"${dollars:,.2f}" if dollars < 1e4 \
        else f"${dollars:,.0f}"


def _rate(req_s: float) -> str:
    """A request rate: 2 decimals, or 2 significant figures below 0.1 req/s."""
    return f"{req_s:,.2f}" if req_s >= 0.1 else f"{req_s:.2g}"


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

    def _priced(self) -> tuple[str, float]:
        """The tokens a million of which the text prices, and their rate: the output's, or
        the prompts' for a load of one output token per request (its work is the prefill)."""
        r = self.result
        if r.mean_output_tokens < 2:
            return "prompt", r.load.rate_req_s * r.load.means()[0]
        return "output", self._tok_s()

    @property
    def steps(self) -> tuple[Step, ...]:
        """How the winner's replicas and price follow from its TPOT, for --explain."""
        result, win = self.result, self.result.winner
        if win is None:
            return ()
        mean_out, tok_s = result.mean_output_tokens, self._tok_s()
        limits = win.rate_limits or (win.replica_rate_req_s, math.inf, math.inf)
        capped = [q(name, value, "req/s", why) for name, value, why in (
            ("the step's token budget", limits[1], "prompt and output tokens a step takes"),
            ("the prompts' queue", limits[2], "each prompt's wait and its prefill, chunked "
             "beside the decodes, within the TTFT SLO at its percentile"))
            if math.isfinite(value)]
        return (
            step("one replica's rate", "min(batch ÷ (output tokens × TPOT at that batch), the "
                 "step's token budget, the prompts' queue)" if capped else
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
                      f"SLO {result.slo.tpot_s * 1e3:g} ms")),) if win.verified else ()),
            step("cost per million output tokens", "$/h ÷ (output tok/s × 3600) × 1e6",
                 q("cost", win.cost_per_million_tokens(tok_s) or 0.0, "$/M tok"),
                 q("$/h", win.cost_per_hour or 0.0, "", "GPUs × price per GPU-hour"),
                 q("output tok/s", tok_s)),
        )

    def _label(self, c: Candidate) -> str:
        return c.label_for(self.result.engine, weights_name(self.model, c.weights))

    def _row(self, c: Candidate) -> dict[str, Any]:
        from ridgeline.hardware import engine_devices, resolve_accelerator

        data = asdict(c)
        limits = dict(zip(RATE_LIMIT_KEYS, (x if math.isfinite(x) else None
                                            for x in c.rate_limits)))
        data.update(label=self._label(c), gpus=c.gpus, cost_per_hour=c.cost_per_hour,
                    cost_per_million_output_tokens=c.cost_per_million_tokens(self._tok_s()),
                    cost_per_million_prompt_tokens=c.cost_per_million_tokens(
                        self._priced()[1]) if self._priced()[0] == "prompt" else None,
                    weights_format=stored_name(self.model) if c.weights == "as stored"
                    else c.weights, rate_limits=limits or None,
                    unverified=bool(self.result.unverified_by(c)),
                    slowed_tpot_floor_s=slowed_tpot_floor_s(c)
                    if self.result.unverified_by(c) else None,
                    replica_nodes=c.replica_nodes, cautions=list(self.result.cautions_for(c)),
                    # one card a row, as fit's report has: the devices the engine runs it as
                    runtime_devices_per_gpu=engine_devices(
                        self.result.engine, resolve_accelerator(c.accelerator)))
        if self.result.mean_output_tokens < 2:  # one output token: no TPOT to state
            data["tpot_s"] = data["slowed_tpot_floor_s"] = None
        return data

    def dies_per_card(self) -> dict[str, int]:
        """{accelerator: devices} of the searched cards the engine runs as several devices
        (vLLM on an MI250X: 2); {} where every card is one."""
        from ridgeline.hardware import engine_devices, resolve_accelerator

        r = self.result
        named = {c.accelerator for c in (*r.candidates, *r.unpriced, *r.disaggregated)}
        devices = {a: engine_devices(r.engine, resolve_accelerator(a)) for a in sorted(named)}
        return {a: n for a, n in devices.items() if n > 1}

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        win = r.winner
        return {
            "model": self.model.name, "engine": r.engine, "engine_version": r.engine_version,
            "rate_req_s": r.load.rate_req_s, "input_len": r.load.input_len,
            "output_len": r.load.output_len, "slo": asdict(r.slo), "searched": r.searched,
            "profile_file": self.profile_file or None,
            "verdict": self.verdict,
            "winner": self._row(win) if win else None,
            "winner_unverified": r.winner_unverified if win else None,
            "commands": self.commands() if win else None,
            "node_commands": self.node_commands() or None if win else None,
            "check_command": (self.check_command(win) or None) if win else None,
            **self._trtllm_dict(),
            "cheaper_unverified": [self._row(c) for c in self.cheaper_unverified()],
            "runners_up": [self._row(c) for c in self.runners_up()],
            "unpriced": [self._row(c) for c in r.unpriced],
            "disaggregated": [self._row(c) for c in r.disaggregated],
            "held_splits": [self._row(c) for c in self.held_splits()],
            "pareto": [{"tok_s_per_gpu": a, "tok_s_per_user": b, "point": p}
                       for a, b, p in r.pareto],
            # a GPU is a card in every count and per-GPU figure, as --num-gpus counts it;
            # the cards the engine runs as several devices (vLLM: an MI250's 2 dies), by name,
            # as the search spans cards; each row's own count is its runtime_devices_per_gpu
            "runtime_devices_per_gpu": self.dies_per_card(),
            "pareto_context_tokens": mean_decode_context(*r.load.means()),
            "closest_miss": r.closest_miss or None,
            "max_model_len": self.max_len, "refused_share": self.refused_share,
            "cautions": [*r.cautions, *([NOT_SIMULATED] if win and not win.verified else [])],
        }

    def _trtllm_dict(self) -> dict[str, Any]:
        """TensorRT-LLM's command's YAML ({name: text}) and why there is no command, where
        the winner runs on it; nothing for another engine."""
        if self.result.engine != "trtllm" or self.result.winner is None:
            return {}
        launch = self.trtllm_launch()
        return {"config_files": {launch.config_name: launch.config_text}
                if launch.config else None, "command_note": launch.note or None}

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
        return "unpriced" if r.unpriced else "split pools" if self.held_splits() else "none"

    @property
    def exit_status(self) -> int:
        """1 where no deployment within the limits meets the SLO (the answer is no), else 0:
        a winner, the cheapest unverified, or cards that meet it without a price."""
        r = self.result
        return 1 if r.winner is None and not r.unpriced and not self.held_splits() else 0

    def held_splits(self) -> list[Candidate]:
        """The disaggregated splits that held in simulation with no measured caution: an
        answer where no single pool meets the SLO."""
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

    def _moved(self) -> str:
        """How far simulation moved the replicas of the candidates it checked."""
        ratios = [c.replicas / c.analytic_replicas for c in self.result.candidates
                  if c.verified and c.analytic_replicas]
        if not ratios:
            return "the steady-state simulation may add or remove replicas"
        low, high = min(ratios) - 1, max(ratios) - 1
        span = f"{low:+.0%}" if abs(high - low) < 0.005 else f"{low:+.0%} to {high:+.0%}"
        n = len(ratios)
        checked = "the one it checked" if n == 1 else f"the {n} it checked"
        return (f"the steady-state simulation moved the replicas of {checked} by {span}; an "
                "analytic count sits at the capacity edge, where one more replica is often "
                "what the percentile needs")

    def commands(self) -> dict[str, str]:
        """The winner's launch command by engine (over several nodes, the head's: node 0's
        of ``node_commands``); {} where none reproduces it (``trtllm_launch``)."""
        win = self.result.winner
        assert win is not None
        engine = self.result.engine
        if engine == "trtllm":
            command = self.trtllm_launch().command
            return {engine: command} if command else {}
        nodes = self.node_commands()
        return {engine: nodes[engine][0] if nodes else command_line(
            engine, self.model_id, win, win.max_model_len or self.max_len,
            self.result.engine_version, model=self.model)}

    def trtllm_launch(self) -> TrtllmLaunch:
        """The winner's trtllm-serve command and its YAML, or why there is none."""
        win = self.result.winner
        assert win is not None
        return trtllm_launch(self.model_id, win, win.max_model_len or self.max_len, self.model)

    def node_commands(self) -> dict[str, list[str]]:
        """For a winner whose replica spans several nodes, its launch command on each node by
        engine, node 0 first; {} otherwise."""
        win = self.result.winner
        assert win is not None
        engine = self.result.engine
        nodes = node_commands(engine, self.model_id, win, win.max_model_len or self.max_len,
                              self.result.engine_version, self.model)
        return {engine: nodes} if nodes else {}

    def _config_lines(self) -> list[str]:
        """The YAML the winner's trtllm-serve command names, to write beside it."""
        if self.result.engine != "trtllm":
            return []
        launch = self.trtllm_launch()
        return [f"  in {launch.config_name}:", *(f"    {line}" for line in
                                                  launch.config_text.splitlines())] \
            if launch.config else []

    def _no_command(self) -> str:
        """Why the winner gets no launch command: "no trtllm-serve command: ..."."""
        launch = engine_defaults(self.result.engine).get("cli", {}).get("launch", "launch")
        return f"no {launch} command: {self.trtllm_launch().note}"

    def _command_note(self) -> str:
        """What the winner's command needs beside it (trtllm-serve's FP8 checkpoint), or ""."""
        if self.result.engine != "trtllm":
            return ""
        launch = self.trtllm_launch()
        return launch.note if launch.command else ""

    def shrunk_note(self, c: Candidate) -> str:
        """Where ``c``'s pool cannot start at the model's context, what its shorter
        --max-model-len (the engine's flag for it: trtllm-serve's --max_seq_len) costs: the
        share of the load's requests it refuses, or ""."""
        context = served_positions(self.model, self.result.engine) or DEFAULT_CONTEXT
        if not c.max_model_len or c.max_model_len >= context:
            return ""
        share = "none" if not c.refused_share else f"{c.refused_share:.2%}" \
            if c.refused_share >= 1e-4 else f"{c.refused_share:.1e}"
        flag = engine_defaults(self.result.engine).get("cli", {}).get("max_len", "--max-model-len")
        return (f"{flag} {c.max_model_len:,}: the longest its KV pool starts with, "
                f"under {self.model.name}'s {context:,}-token context; it refuses {share} of "
                "this load's requests (those longer), each a miss")

    def check_command(self, c: Candidate) -> str:
        """The simulate command that reruns ``c``'s check, or ""."""
        r = self.result
        return check_line(self.model_arg or self.model_id, r.load, r.slo, r.engine,
                          r.engine_version, c, c.max_model_len or self.max_len, self.fetched,
                          self.profile_file)

    def _cheaper_unverified_lines(self, cands: list[Candidate], priced: str,
                                  priced_tok_s: float) -> list[str]:
        """The cheaper deployments a measured caution leaves unverified, each with its TPOT
        at the measured slowdown's low end (``slowed_tpot_floor_s``) against the SLO."""
        r = self.result
        no_tpot = r.mean_output_tokens < 2

        def floor(c: Candidate) -> str:
            floor_s = slowed_tpot_floor_s(c)
            return _tpot_ms(None if no_tpot else floor_s) + (
                ", past the SLO" if not no_tpot and floor_s > r.slo.tpot_s else "")

        rows = [[self._label(c), str(c.gpus), f"${c.cost_per_hour:,.2f}",
                 _usd(c.cost_per_million_tokens(priced_tok_s)), floor(c),
                 "simulated" if c.verified else "analytic"] for c in cands]
        why = r.unverified_by(cands[0])
        return [*table(rows, ["cheaper, unverified", "GPUs", "$/h",
                              "$/M tok" if priced == "output" else "$/M prompt tok",
                              f"TPOT × {MEASURED_SLOWDOWN_LOW:g}", "checked"]),
                "  (unverified: " + ("the measured caution above covers these deployments"
                                     if any(why in c for c in r.cautions) else why)
                + f"; TPOT × {MEASURED_SLOWDOWN_LOW:g}: the simulated {_pct(r.slo.percentile)} "
                "TPOT, or the analytic mean where not simulated, at the measured slowdown's "
                "low end, a floor before the slower steps' queueing)",
                *self._caution_lines(cands), ""]

    def _caution_lines(self, cands: Iterable[Candidate]) -> list[str]:
        """One line for each caution of each of ``cands``' own deployments (``cautions_for``:
        TP across nodes, a prompt speed priced with another card group's share), named by
        its label, for under a list of them."""
        return [f"  caution, {self._label(c)}: {text}" for c in cands
                for text in self.result.cautions_for(c)]

    def text_lines(self) -> list[str]:
        r = self.result
        slo = r.slo
        head = (f"{self.model.name} at {r.load.rate_req_s:.4g} req/s (input {r.load.input_len}, output "
                f"{r.load.output_len}); SLO {_pct(slo.percentile)} TTFT ≤ {slo.ttft_s * 1e3:g} ms, "
                f"TPOT ≤ {slo.tpot_s * 1e3:g} ms; {r.searched} configurations searched, "
                f"pools sized as {r.engine}"
                + (f" {r.engine_version}" if r.engine_version else "") + " sizes them" + (
                    f", steps timed by the profile in {self.profile_file}"
                    if self.profile_file else ""))
        win = r.winner
        if win is None:
            splits = self.held_splits()
            lines = [head, "", "NO PRICED DEPLOYMENT within the limits meets this SLO."
                     if r.unpriced else "NO SINGLE-POOL DEPLOYMENT within the limits meets "
                     "this SLO; split prefill and decode pools do:" if splits
                     else "NO DEPLOYMENT within the limits meets this SLO."]
            lines += [f"  {self._label(c)}: {c.gpus} {plural(c.gpus, 'GPU')}, "
                      + (f"${c.cost_per_hour:,.2f}/h" if c.cost_per_hour is not None
                         else "no price")
                      + f" (simulated: {_pct(r.slo.percentile)} TTFT "
                      f"{(c.sim_ttft_s or 0) * 1e3:,.0f} ms, TPOT {_tpot_ms(c.sim_tpot_s)}; KV "
                      "hand-off over a 400 Gb/s link, where the engines can pass each prompt's "
                      "KV cache from node to node: vLLM's disaggregated-prefill KV connectors)"
                      + "".join(f"; caution: {text}" for text in r.cautions_for(c))
                      for c in splits]
            if r.closest_miss:
                lines.append(f"closest: {r.closest_miss}")
            if r.unpriced:
                lines.append("feasible but unpriced (pass --price GPU=USD): "
                             + ", ".join(self._label(c) for c in r.unpriced))
                lines += self._caution_lines(r.unpriced)
            return lines
        priced, priced_tok_s = self._priced()
        per_m = win.cost_per_million_tokens(priced_tok_s)
        lines = [head, "",
                 f"{'cheapest, unverified' if r.winner_unverified else 'winner'}: "
                 f"{self._label(win)} = {win.gpus} {plural(win.gpus, 'GPU')}, "
                 f"${win.cost_per_hour:,.2f}/h, "
                 f"{_usd(per_m)} per million {priced} tokens at this load (the GPUs' hour over "
                 f"the {priced} tokens it serves, idle time included)"]
        if win.verified:  # what the load sees first, then the capacity the search sized with
            lines.append(f"  simulated at {_rate(r.load.rate_req_s / win.replicas)} req/s per replica: "
                         f"{_pct(slo.percentile)} TTFT {(win.sim_ttft_s or 0) * 1e3:,.0f} ms, "
                         f"TPOT {_tpot_ms(win.sim_tpot_s)}"
                         + (f" ({win.sim_requests:,} requests, the latencies of those arriving "
                            f"{win.sim_window_s[0]:,.1f}–{win.sim_window_s[1]:,.1f} s)"
                            if win.sim_window_s else f" ({win.sim_requests:,} requests)"))
        lines.append(f"  analytic capacity of a replica: {win.replica_rate_req_s:,.2f} req/s at "
                     f"batch {win.batch}, mean TPOT "
                     f"{_tpot_ms(win.tpot_s if r.mean_output_tokens >= 2 else None)} (expected; "
                     f"band ×{win.band[0]:.2f}–×{win.band[1]:.2f})" + _binding(win)
                     + ("; the search sized with it, the simulation decides" if win.verified
                        else ""))
        lines += [f"  caution: {c}" for c in r.cautions]
        if not win.calibrated:
            lines.append(f"  outside the calibrated range: {win.calibration_note}")
        if self.refused_share and not self.shrunk_note(win):
            lines.append(f"  {self.refused_share:.1%} of the requests are longer than "
                         f"{self.model.name}'s {self.max_len:,}-token context: the engine "
                         "refuses them")
        if not win.verified:
            lines.append(f"  NOT SIMULATED: {NOT_SIMULATED}")
        cheaper = [c for c in self.runners_up()
                   if (c.cost_per_hour or 0.0) < (win.cost_per_hour or 0.0)]
        # (the cautioned cheaper ones are not runners-up: ``cheaper_unverified``)
        unsimulated = [c for c in cheaper if not c.verified]
        if unsimulated:
            lines.append(f"  {len(unsimulated)} cheaper runner-up(s) were not simulated (the "
                         "budget of simulated candidates ran out): their price is the analytic "
                         "estimate, not a result")
        splits = self.held_splits()
        if r.winner_unverified and splits:  # no single pool without the caution held; a split did
            c = splits[0]
            lines.append(f"  split prefill and decode pools without the caution held in "
                         f"simulation: {self._label(c)} = {c.gpus} {plural(c.gpus, 'GPU')}, "
                         + (f"${c.cost_per_hour:,.2f}/h" if c.cost_per_hour is not None
                            else "no price")
                         + " (listed below), where the engines can hand each prompt's KV cache "
                         "from node to node")
        held_back = self.cheaper_unverified()
        if held_back:
            lines.append(f"  {len(held_back)} cheaper deployment(s) carry a measured caution "
                         "(listed below as unverified, each with its TPOT at the measured "
                         "slowdown): not ranked before this one")
        commands = self.commands()
        nodes = self.node_commands().get(r.engine, [])
        shrunk = self.shrunk_note(win)
        spans = "; ".join(filter(None, [multi_node_note(r.engine, win, r.engine_version),
                                        self._command_note()]))
        launch = [f"  node {i}: {c}" for i, c in enumerate(nodes)] if nodes \
            else [f"  {c}" for c in commands.values()]
        lines += ["", "run it with" + (f" ({spans})" if spans else "") + ":", *launch,
                  *self._config_lines(), *([f"  ({shrunk})"] if shrunk else []), ""] \
            if commands else ["", f"({self._no_command()}: size its "
                              "engine with the batch above" + (f"; {spans}" if spans else "")
                              + (f"; {shrunk}" if shrunk else "") + ")", ""]
        check = self.check_command(win)
        if check:
            lines[-1:-1] = ["check it with (one replica's share of the load):", f"  {check}"]
        elif win.verified and r.load.trace and win.sim_window_s is not None:
            share = -(-len(r.load.trace) // win.replicas)
            dealt = "the trace's requests" if win.replicas == 1 else \
                f"every {ordinal(win.replicas)} request of the trace (one replica's share)"
            held = f"all {share:,}" if win.sim_requests >= share else (
                f"its heaviest {win.sim_requests:,} in a row, from the "
                f"{ordinal(win.sim_first + 1)} of {share:,} on")
            lines[-1:-1] = [f"(its check replayed {dealt}, {held}: simulate --trace replays "
                            "a whole file)"]
        if held_back:
            lines += self._cheaper_unverified_lines(held_back, priced, priced_tok_s)
        runners = self.runners_up()
        rows = [[self._label(c), str(c.gpus), f"${c.cost_per_hour:,.2f}",
                 _usd(c.cost_per_million_tokens(priced_tok_s)),
                 ("simulated" if c.verified else "analytic")
                 + (", unverified" if r.unverified_by(c) else "")] for c in runners]
        if rows:
            lines += table(rows, ["runners-up", "GPUs", "$/h",
                                  "$/M tok" if priced == "output" else "$/M prompt tok",
                                  "checked"])
            if not all(c.verified for c in runners):
                lines.append(f"  (analytic: not simulated; {self._moved()})")
            why = next((r.unverified_by(c) for c in runners if r.unverified_by(c)), "")
            if why:
                lines.append("  (unverified: " + ("the measured caution above covers these "
                                                  "deployments too"
                                                  if any(why in c for c in r.cautions) else why)
                             + ")")
            lines += self._caution_lines(runners)
            lines.append("")
        for c in r.unpriced:
            lines.append(f"{self._label(c)} = {c.gpus} {plural(c.gpus, 'GPU')}, "
                         "no price: it wins below "
                         f"${(win.cost_per_hour or 0) / c.gpus:,.2f} per GPU-hour "
                         f"(--price {c.accelerator}=USD)")
            lines += [f"  caution: {text}" for text in r.cautions_for(c)]
        if r.disaggregated and not any(c.verified for c in r.disaggregated):
            lines.append("disaggregated pools: the cheapest splits were simulated and none held "
                         "within --max-gpus; those below are analytic only")
        for c in r.disaggregated[:3]:
            cost = f"${c.cost_per_hour:,.2f}/h" if c.cost_per_hour is not None else "no price"
            how = (f"simulated: {_pct(r.slo.percentile)} TTFT {(c.sim_ttft_s or 0) * 1e3:,.0f} ms, "
                   f"TPOT {_tpot_ms(c.sim_tpot_s)}" if c.verified else "analytic")
            lines.append(f"disaggregated, {self._label(c)}: {c.gpus} {plural(c.gpus, 'GPU')}, {cost} "
                         f"({how}; KV hand-off over a 400 Gb/s link)"
                         + (", unverified: CDNA3's FP8 and MXFP4 MoE paths have measured 1.4–2.1× "
                            "slower than priced (validation/serving.csv)"
                            if r.unverified_by(c) else "")
                         + "".join(f"; caution: {text}" for text in r.cautions_for(c)))
        # a split carrying the measured caution is no cheaper alternative than a cautioned
        # single pool: its price assumes the same unmeasured speed
        cheaper = [c for c in r.disaggregated if c.verified and not r.unverified_by(c)
                   and c.cost_per_hour is not None
                   and win.cost_per_hour is not None and c.cost_per_hour < win.cost_per_hour]
        if cheaper:
            c = cheaper[0]
            top = "the unverified cheapest" if r.winner_unverified else "the winner"
            lines.append(f"  the {c.disaggregated} split costs less than {top} "
                         f"(${c.cost_per_hour:,.2f}/h against ${win.cost_per_hour:,.2f}/h) where "
                         "the engines can hand each prompt's KV cache from node to node (vLLM's "
                         f"disaggregated-prefill KV connectors); {top} needs none")
        if r.pareto:
            ctx = mean_decode_context(*r.load.means())
            dies = "".join(f"; a GPU is one {a} card, its {n} dies added (as --num-gpus "
                           "counts)" for a, n in self.dies_per_card().items())
            lines += ["", f"Pareto frontier, decode at a {ctx:,}-token context (the prompt and "
                      "half the output, a response's mean), each configuration at batches 1, 2, "
                      f"4, … and the batch that meets the SLO{dies}:",
                      f"  {'tok/s/GPU':>9}  {'tok/s/user':>10}  configuration, batch"]
            # past 12 points, the fastest per user and the 11 of the most tokens per GPU (the
            # batches meeting the SLO among them)
            shown = r.pareto if len(r.pareto) <= 12 else (r.pareto[0], *r.pareto[-11:])
            lines += [f"  {a:>9,.0f}  {b:>10,.1f}  {p}" for a, b, p in shown]
        return lines
