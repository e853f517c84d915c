"""The load a plan serves and the SLO it keeps: request rate and lengths (drawn, or replayed
from a trace), and how one replica's share of it is simulated to a steady state."""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import lru_cache

from ridgeline.errors import InputError
from ridgeline.sim.metrics import STEADY_LIFETIMES
from ridgeline.sim.request import Request
from ridgeline.sim.workload import MIN_RATE, Workload, length_sampler, read_trace

# At least this many requests per checked replica: some 1,200 arrive in the window, so the
# keep-up test's two Poisson deviations (2/√n) come to 6 % — a queue growing that fast is
# caught (with 400, a 10 % overload of a short-lived load passed: plan audit, 2026-11-30) …
SIM_REQUESTS = 1600
MAX_SIM_REQUESTS = 6000  # … and up to this many, to reach the steady state
SHARE_RATE_DIGITS = 6  # a replica's share of the rate, significant digits (Load.share_rate)
TAIL_REQUESTS = 10  # requests past the SLO's percentile, the fewest to rest it on
# … and, at a percentile past p99.4, enough for TAIL_REQUESTS past it, up to this many: at
# p99.9 1,600 requests put 1.6 past it, the slowest of them deciding (an 8 GPU answer where
# 10,000 requests showed 2 GPUs holding; plan audit, 2026-12-02)
MAX_TAIL_REQUESTS = 20_000
# A check's arrivals span STEADY_SPANS request lifetimes (analytic TTFT + output × TPOT); the
# latencies counted are of those arriving after WARMUP_SPANS lifetimes and at least one before
# the last arrival: a short run measures the batch still filling up (or draining) and reads
# an overloaded replica as fine (Llama-3.1-8B on one H100 at 40 req/s: p90 TPOT 43 ms over
# 400 requests, 69 ms over 4,000, where it serves 18 req/s).
STEADY_SPANS = 10
WARMUP_SPANS = 2
# A trace's rate is its requests per second: one whose arrivals span less than a second holds
# no second of them, a burst whose "rate" is its clock's resolution (3 requests stamped 1 ns
# apart read as 1e9 req/s, planned at ten million GPUs). `simulate --trace` replays such a
# burst as recorded (it needs no rate, and cautions the span); the plan refuses it.
MIN_TRACE_SPAN_S = 1.0
SLO_PERCENTILE = 90.0  # the percentile an SLO is kept at where none is asked (plan's default)


def itl_kept(itl_s: float, slo_itl_s: float | None) -> bool:
    """Whether a run's ITL at the SLO's percentile (``SimResult.itl_s_at``) keeps an ITL SLO
    of ``slo_itl_s``: always without one, and where no chunk was streamed after a first (NaN),
    as a TPOT of NaN, nothing to judge: plan refuses an ITL SLO for a load of 1-token outputs
    (``plan._plan``), so only a check whose window drew none of a rare longer output reads so
    (its line says "ITL n/a"), and simulate's --slo-itl-ms says "not measured" there
    (``SimulateReport.itl_verdict``). plan's checks and simulate's --slo-itl-ms judge so."""
    return slo_itl_s is None or math.isnan(itl_s) or itl_s <= slo_itl_s


@dataclass(frozen=True)
class Slo:
    """The latencies a plan keeps at ``percentile``: TTFT and TPOT, each request's own, and
    where given ITL (``itl_s``), the gap between streamed chunks over the chunks of the
    requests a check's window keeps (its TTFT's and TPOT's), as `simulate` reads it
    (``SimResult.itl_s_at``); None: no ITL SLO."""

    ttft_s: float
    tpot_s: float
    percentile: float = SLO_PERCENTILE
    itl_s: float | None = None

    def __post_init__(self) -> None:
        if self.itl_s is not None and not (math.isfinite(self.itl_s) and self.itl_s > 0):
            raise InputError(f"an ITL SLO must be positive and finite, got {self.itl_s!r} s")

    def itl_ok(self, itl_s: float) -> bool:
        """Whether ``itl_s`` (at the percentile) keeps the ITL SLO (``itl_kept``)."""
        return itl_kept(itl_s, self.itl_s)


def check_trace_rate(path: str, requests: int, span_s: float) -> float:
    """A trace's mean rate, (requests − 1) ÷ its arrivals' span, refused under MIN_RATE as
    --rate refuses it (plan's sizing would price a near-idle card; simulate's rates would read
    0.00): 2 requests over 1,700,000,002 s are 5.88e-10 req/s. inf where they span no time."""
    rate = (requests - 1) / span_s if span_s > 0 else math.inf
    if rate < MIN_RATE:
        digits = next(d for d in range(3, 18) if f"{rate:.{d}g}" != f"{MIN_RATE:.{d}g}")
        raise InputError(f"{path}: {requests:,} requests over {span_s:,.0f} s are "
                         f"{rate:.{digits}g} req/s, under the {MIN_RATE:g} req/s a load may have "
                         "(the floor --rate keeps)")
    return rate


@dataclass(frozen=True)
class Load:
    rate_req_s: float
    input_len: str
    output_len: str
    seed: int = 0
    trace: tuple[tuple[float, int, int], ...] = ()  # (arrival s, prompt, output), if replayed
    trace_path: str = ""  # … and the file they came from

    @classmethod
    def from_trace(cls, path: str, seed: int = 0) -> Load:
        """A recorded load: its mean rate and lengths for sizing, its requests for checking.
        Its arrivals must span MIN_TRACE_SPAN_S or more: a shorter burst has no rate."""
        rows = tuple((r.arrival_s, r.prompt_tokens, r.output_tokens) for r in read_trace(path))
        span = rows[-1][0] - rows[0][0]
        if len(rows) < 2 or span <= 0:
            raise InputError(f"{path}: a trace needs at least two requests at different times")
        if span < MIN_TRACE_SPAN_S:
            raise InputError(f"{path}: {len(rows):,} requests arrive within {span:.3g} s, a "
                             f"burst with no rate to plan for (a trace must span at least "
                             f"{MIN_TRACE_SPAN_S:g} s); `ridgeline simulate --trace` replays it, "
                             "or plan for --rate")
        rate = check_trace_rate(path, len(rows), span)
        load = cls(rate, path, path, seed, rows)
        mean_in, mean_out = load.means()
        return replace(load, input_len=f"{path} (mean {mean_in:,.0f})",
                       output_len=f"mean {mean_out:,.0f}", trace_path=path)

    def samples(self) -> list[tuple[int, int]]:
        """(prompt, output) of every request of a trace, or of 2,000 drawn from the load."""
        return list(_samples(self))

    def means(self) -> tuple[float, float]:
        """The mean prompt and output of the requests ``samples`` gives."""
        return _means(self)

    def refused_share(self, max_model_len: int | None) -> float:
        """The share of the load's requests longer than ``max_model_len`` tokens (prompt and
        output), which an engine started so refuses: of a trace, its own requests; of a drawn
        load, TAIL_DRAWS requests drawn from its length distributions, not the 2,000 the
        sizing draws, whose longest is refused about as often as p99.9 spares (lognormal
        1,000 and 300 tokens, σ 1: 0.2 % are past 18,432 tokens, where the 2,000 end)."""
        if not max_model_len:
            return 0.0
        totals = _totals(self)
        return (len(totals) - bisect_right(totals, max_model_len)) / len(totals)

    def longest_request(self) -> int:
        """The longest request's tokens, prompt and output, of those ``refused_share`` reads
        (a trace's own; of a drawn load, its tail draws): 1,000 + 250 tokens each, 1,250."""
        return _totals(self)[-1]

    def shortest_request(self) -> int:
        """The shortest of the same requests (``longest_request``): equal to it where every
        request is one length."""
        return _totals(self)[0]

    def longest_prompt(self, max_model_len: int) -> int:
        """The longest prompt of the requests an engine started at ``max_model_len`` serves
        (prompt and output within it): of a trace, its own; of a drawn load, the 2,000 the
        sizing draws (``samples``)."""
        return max((p for p, o in _samples(self) if p + o <= max_model_len), default=0)

    def for_sizing(self) -> Load:
        """The same means without the trace rows (what the candidate workers need)."""
        if not self.trace:
            return self
        mean_in, mean_out = self.means()
        return Load(self.rate_req_s, str(max(1, round(mean_in))), str(max(1, round(mean_out))),
                    self.seed)

    def share_rate(self, replicas: int) -> float:
        """One of ``replicas`` replicas' rate, req/s, to SHARE_RATE_DIGITS significant digits,
        so that a check's printed command (`plan`'s `--rate`) reads short and reruns the very
        run: 5 req/s over 3 replicas is 1.66667, not 1.6666666666666667."""
        return float(f"{self.rate_req_s / replicas:.{SHARE_RATE_DIGITS}g}")

    def share(self, replicas: int, first_token_only: bool = False,
              count: int = SIM_REQUESTS, first: int = 0) -> Iterator[Request]:
        """What one of ``replicas`` replicas receives: its share of the synthetic load, or
        every replicas-th request of the trace (round-robin), ``count`` of them from the
        ``first`` of that share on (each request numbered by its place in the share)."""
        if not self.trace:
            return iter(Workload(count, self.input_len,
                                 "1" if first_token_only else self.output_len,
                                 self.share_rate(replicas), seed=self.seed))
        rows = self.trace[::replicas][first:first + count]
        return (Request(i, t, p, 1 if first_token_only else o)
                for i, (t, p, o) in enumerate(rows, start=first))

    def heaviest(self, replicas: int, count: int) -> int:
        """Where in one replica's share of a trace its heaviest ``count`` consecutive requests
        start: the most prompt and output tokens per second of their arrivals. A check of
        the first ``count`` alone passed a trace whose burst came later (plan audit,
        2026-12-01: p90 TTFT 40 ms checked, 32 s over the whole file)."""
        rows = self.trace[::replicas]
        if len(rows) <= count:
            return 0
        tokens = [0]
        for _, p, o in rows:
            tokens.append(tokens[-1] + p + o)

        def weight(i: int) -> float:
            span = rows[i + count - 1][0] - rows[i][0]
            held = tokens[i + count] - tokens[i]
            return held / span if span > 0 else math.inf
        return max(range(len(rows) - count + 1), key=weight)

    def steady(self, replicas: int, lifetime_s: float, first_token_only: bool = False,
               percentile: float = 0.0) -> tuple[list[Request], tuple[float, float]]:
        """One replica's share, long enough to reach the steady state and to hold
        TAIL_REQUESTS past ``percentile`` (tail_requests), and the arrival window whose
        latencies count: of a synthetic load, past the warm-up, and (set from the requests'
        own arrivals) ending before the last of them, so that it holds no drain; of a trace,
        every request of the share (``trace_share``)."""
        rate = self.share_rate(replicas)
        life = max(lifetime_s, 1e-3)
        count = int(min(MAX_SIM_REQUESTS, max(SIM_REQUESTS, math.ceil(rate * STEADY_SPANS * life))))
        count = max(count, tail_requests(percentile))
        if self.trace:
            return self.trace_share(replicas, life, count, first_token_only)
        work = list(self.share(replicas, first_token_only, count))
        start, span = work[0].arrival_s, work[-1].arrival_s - work[0].arrival_s
        warm, tail = min(WARMUP_SPANS * life, 0.3 * span), min(life, 0.2 * span)
        return work, _inward(start + warm, start + span - tail)  # short figures for a command

    def trace_share(self, replicas: int, life_s: float, count: int,
                    first_token_only: bool = False) -> tuple[list[Request], tuple[float, float]]:
        """A trace's check (``steady``): one replica's share, or of a long trace its heaviest
        ``count`` requests in a row (``heaviest``), every one of them counted. A recorded
        trace has no warm-up to drop: its opening seconds are real traffic, and a window
        past two lifetimes dropped the 150-request burst a trace opened with, passing a
        deployment whose p90 TTFT over the whole file was 8.2 s against 500 ms. The window
        is (-inf, inf) where the share is replayed whole, as `simulate --trace` replays it; a
        stretch is run with the share's requests of WARMUP_SPANS lifetimes before it and one
        after (uncounted), so that its first and last requests meet the engine as the trace
        loads it, not an empty one, and its window is its own arrivals."""
        rows = self.trace[::replicas]
        count = min(count, len(rows))
        first = self.heaviest(replicas, count)
        last = first + count - 1
        lead, trail = first, last
        while lead and rows[lead - 1][0] >= rows[first][0] - WARMUP_SPANS * life_s:
            lead -= 1
        while trail + 1 < len(rows) and rows[trail + 1][0] <= rows[last][0] + life_s:
            trail += 1
        work = list(self.share(replicas, first_token_only, trail - lead + 1, lead))
        if count == len(rows):  # the share whole
            return work, (-math.inf, math.inf)
        return work, (rows[first][0], rows[last][0])

    def transient(self, lifetime_s: float) -> str:
        """What to say of a trace too short, or too bursty, to reach a steady state, or ""."""
        if not self.trace:
            return ""
        span = self.trace[-1][0] - self.trace[0][0]
        if span >= STEADY_LIFETIMES * lifetime_s:
            return ""
        return (f"the trace's arrivals span {span:,.1f} s, under {STEADY_LIFETIMES} request "
                f"lifetimes ({lifetime_s:,.1f} s): the checks read its batch filling up and "
                "draining, lighter than a steady load of the same rate")

    def thin(self, percentile: float, simulated: int | None = None) -> str:
        """What to say where too few requests lie past ``percentile`` to rest it on (fewer
        than TAIL_REQUESTS), or "": a trace's own requests, or the ``simulated`` requests a
        synthetic load's check read (a few thousand cannot carry p99.99)."""
        if self.trace:
            return tail_caution(len(self.trace), percentile, "the trace holds",
                                "record at least {n:,}")
        if simulated is None:
            return ""
        return tail_caution(simulated, percentile, "the check simulated",
                            "check it with `ridgeline simulate --num-requests {n:,}`")


def tail_requests(percentile: float) -> int:
    """Requests a check needs for TAIL_REQUESTS past ``percentile``, at most MAX_TAIL_REQUESTS:
    10 ÷ (1 − p/100), 10,000 at p99.9, 1,000 at p99 (under SIM_REQUESTS, which then holds)."""
    if percentile <= 0:
        return 0
    return min(MAX_TAIL_REQUESTS,  # (1 − 0.999 is 0.000999…: rounded before the ceiling)
               math.ceil(round(TAIL_REQUESTS / (1 - percentile / 100), 6)))


def tail_caution(requests: int, percentile: float, held: str, more: str) -> str:
    """What to say of ``requests`` with fewer than TAIL_REQUESTS past ``percentile``, or "":
    there the percentile is nearly the slowest request's latency. ``more`` says how to get
    enough, formatted with ``n``, the fewest that would do."""
    # rounded as tail_requests rounds: 100 × (1 − 0.9) is 9.999…, and 100 requests hold the
    # 10 past p90 that rest it (the caution had fired, asking for 101)
    tail = round(requests * (1 - percentile / 100), 6)
    if tail >= TAIL_REQUESTS:
        return ""
    past = f"{tail:,.1f}" if tail >= 1 else f"{tail:.2g}"
    return (f"{held} {requests:,} requests: {past} of them lie past p{percentile:g}, too "
            f"few to rest that percentile on, nearly the slowest one's latency ("
            + more.format(n=math.ceil(round(TAIL_REQUESTS / (1 - percentile / 100), 6)))
            + ")")


def _inward(low: float, high: float) -> tuple[float, float]:
    """(low, high) rounded inward to four figures of their span (23.45, 105.5): short to
    print in a command line, and never wider than asked."""
    if not high > low:
        return low, high
    digits = 3 - math.floor(math.log10(high - low))
    quantum = 10.0 ** -digits
    return (round(math.ceil(low / quantum - 1e-9) * quantum, digits),  # 1e-9: 0.072 is
            round(math.floor(high / quantum + 1e-9) * quantum, digits))  # 7,200 quanta


TAIL_DRAWS = 100_000  # requests drawn to read a length's refused share: to 1 in 100,000


def _totals(load: Load) -> tuple[int, ...]:
    """Prompt + output of every request of a trace, or of TAIL_DRAWS drawn from the load (a
    stream of their own, apart from the sizing's and the checks' draws), sorted."""
    return _drawn_totals(load.trace, load.input_len, load.output_len, load.seed)


def _means(load: Load) -> tuple[float, float]:
    """Load.means, summed once per load (the planner asks for them per candidate)."""
    return _drawn_means(load.trace, load.input_len, load.output_len, load.seed)


def _samples(load: Load) -> tuple[tuple[int, int], ...]:
    return _drawn_samples(load.trace, load.input_len, load.output_len, load.seed)


# The draws below depend on the lengths and the seed alone, not the rate: remembered by
# those, a plan at another rate (the closest miss's, a test's next) reads them again.
Trace = tuple[tuple[float, int, int], ...]


@lru_cache(maxsize=8)
def _drawn_totals(trace: Trace, input_len: str, output_len: str, seed: int
                  ) -> tuple[int, ...]:
    if trace:
        return tuple(sorted(p + o for _, p, o in trace))
    rng = random.Random(f"{seed}:lengths")
    draw_in, draw_out = length_sampler(input_len, "input length"), length_sampler(
        output_len, "output length")
    totals = [draw_in(rng) + draw_out(rng) for _ in range(TAIL_DRAWS)]
    totals.sort()
    return tuple(totals)


@lru_cache(maxsize=32)
def _drawn_means(trace: Trace, input_len: str, output_len: str, seed: int
                 ) -> tuple[float, float]:
    drawn = _drawn_samples(trace, input_len, output_len, seed)
    n = len(drawn)
    return sum(p for p, _ in drawn) / n, sum(o for _, o in drawn) / n


@lru_cache(maxsize=32)
def _drawn_samples(trace: Trace, input_len: str, output_len: str, seed: int
                   ) -> tuple[tuple[int, int], ...]:
    if trace:
        return tuple((p, o) for _, p, o in trace)
    rng = random.Random(seed)
    draw_in, draw_out = length_sampler(input_len, "input length"), length_sampler(
        output_len, "output length")
    n = 2000
    prompts = [draw_in(rng) for _ in range(n)]
    return tuple(zip(prompts, [draw_out(rng) for _ in range(n)]))
