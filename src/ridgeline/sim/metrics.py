"""What a user sees: TTFT, TPOT, ITL, end-to-end, queueing; throughput and goodput.

Definitions (one place, used by every report):
- TTFT: first token time − arrival, the first token time the end of the engine step that
  made it. The engine alone: no HTTP server, tokenizer, engine-core IPC or detokenizer, which
  a client's TTFT (`vllm bench serve`) also holds. Queueing delay, as vLLM reports it
  (vllm:request_queue_time_seconds: its first SCHEDULED event less its QUEUED one,
  v1/metrics/stats.py): from when the engine took the request into its waiting queue to when
  the batch that first scheduled it was formed (``Request.queue_time_s``). Neither holds the
  step the engine was running when it arrived, which TTFT does; under async scheduling a
  batch is formed as the step before it begins (``Simulator.formed_s``).
- TPOT: (finish − first token) ÷ (output tokens − 1), per request (undefined for 1 token).
- ITL: the gap between a request's successive streamed chunks (what a streaming client sees,
  as `vllm bench serve` times it: one ITL per chunk, a preemption's stall one long gap). A
  step streams a request's tokens as one chunk, so with speculative decoding (several tokens
  a step) ITL exceeds TPOT; without it a request's gaps sum to its finish − first token.
  A window keeps the chunks of the requests arriving in it, as it keeps their TTFT and TPOT.
Every distribution is kept in a log histogram with 0.23%-wide bins (sim/histogram.py), so
memory stays flat however many requests run; percentiles are good to that width, and read as
`vllm bench serve` reads them (numpy.percentile, linear: the value at q/100 × (n − 1) in the
sorted samples, between the two either side; ``Histogram.percentile``).
- End-to-end: finish − arrival.
- Throughput: requests and output tokens per second of simulated time; per GPU ÷ GPUs.
- Goodput: completed requests per second that met every SLO given.
"""

from __future__ import annotations

import math

from ridgeline.engines import EngineProfile
from ridgeline.sim.histogram import Histogram, bin_index, bin_top, linear_position
from ridgeline.sim.request import Request
from ridgeline.sim.time_series import TimeSeries

KEEP_UP_SLACK = 0.03  # a steady window's arrivals may outnumber the finishes in it by this
STEADY_LIFETIMES = 5  # arrivals spanning fewer request lifetimes than this: mostly warm-up
# overload without a window (Recorder.falls_behind): of the arrivals past the batch's filling
# (as the run saw it, or where it never did, an estimate: this many mean service times after
# the first arrival, ``Recorder.steady_s``), the share more arriving than leaving …
FILL_LIFETIMES = 3
OVERLOAD_SLACK = 0.05  # (healthy loads at 8-10 req/s on one H100, 2,000 requests: under 1 %)
OVERLOAD_DEVIATIONS = 2.5  # … or this many Poisson deviations of the count, if more
OVERLOAD_BACKLOG = 20  # … and at least this many requests


class ClientWaits:
    """A capped open loop's client side (vllm bench serve's --max-concurrency beside a
    --request-rate): its cap, the requests that came while it was full and waited for a seat
    before they were sent, how long, and how many waited when the last request came. A client
    that keeps up has none, or a few, waiting then; more (OVERLOAD_BACKLOG and OVERLOAD_SLACK
    of the requests) is a backlog the cap holds back, growing with the run."""

    def __init__(self) -> None:
        self.cap = 0
        self.requests = 0  # every request the loop sent or held
        self.waited = 0
        self.wait_sum_s = 0.0
        self.wait_max_s = 0.0
        self.waiting_at_last_arrival = 0
        self.arrivals_s = (math.inf, -math.inf)  # the first and last request's own time

    def came(self, at_s: float) -> None:
        self.requests += 1
        self.arrivals_s = (min(self.arrivals_s[0], at_s), max(self.arrivals_s[1], at_s))

    def sent(self, waited_s: float) -> None:
        self.waited += 1
        self.wait_sum_s += waited_s
        self.wait_max_s = max(self.wait_max_s, waited_s)

    @property
    def offered_req_s(self) -> float:
        first, last = self.arrivals_s
        return (self.requests - 1) / (last - first) if last > first else math.inf

    @property
    def behind(self) -> bool:
        """Whether the cap held the load back: a backlog when the last request came."""
        return self.cap > 0 and self.waiting_at_last_arrival >= max(
            OVERLOAD_BACKLOG, OVERLOAD_SLACK * self.requests)
# a run cut short (Recorder.hopelessly_behind): past the fill, fewer than half the requests
# arriving have left, or more than half of all that came are waiting to start, and at least
# this many are left behind
CUT_SHARE = 0.5
CUT_BACKLOG = 1000
FLOWS_CUT = "flows"  # the reading that cut it: past the fill, fewer left than arrived …
QUEUE_CUT = "queue"  # … or, all arrived, most of them waiting to start


def beyond_noise(short: float, count: float) -> bool:
    """Whether ``short`` of ``count`` requests (more arriving than leaving, or waiting to
    start) is more than noise: at least OVERLOAD_BACKLOG, and the larger of OVERLOAD_SLACK and
    OVERLOAD_DEVIATIONS Poisson deviations of the count (of 2,000: 112)."""
    return count >= 1 and short >= max(OVERLOAD_BACKLOG, count * max(
        OVERLOAD_SLACK, OVERLOAD_DEVIATIONS / math.sqrt(count)))


def misses_settling(requests: list[Request], window_s: tuple[float, float],
                    percentile: float) -> int:
    """The most of the requests arriving in ``window_s`` whose TTFT (or TPOT) may land in a
    bin past the SLO's before the latency at ``percentile`` surely does
    (``Recorder.stop_past``): (1 − p) of them, whole, and one to spare. With M past it (more
    than this: M ≥ floor((1 − p) × W) + 2 > (1 − p) × W + p), of T kept and R rejected
    (T + R ≤ W arrived in the window), the bins up to the SLO's hold T − M < p × (T + R − 1),
    all before the position ``SimResult.latency_s_at`` reads (p × (T + R − 1), interpolated
    towards the next sample), so it reads later bins, above the SLO. 1,523 arriving in the
    window at p90: 153."""
    low, high = window_s
    arrived = sum(low <= r.arrival_s <= high for r in requests)
    return math.floor((1 - percentile / 100) * arrived) + 1


def itl_misses_settling(requests: list[Request], window_s: tuple[float, float],
                        percentile: float) -> int:
    """The most streamed chunks of the requests arriving in ``window_s`` whose gap may land
    in a bin past the ITL SLO's before the ITL at ``percentile`` surely does
    (``Recorder.itl_stop_past``): as ``misses_settling``, of the most chunks they can
    stream, one per output token after the first (fewer where a step streams several, a
    speculative decode's). 1,500 windowed requests of 250 tokens at p90: 37,351."""
    low, high = window_s
    chunks = sum(r.output_tokens - 1 for r in requests if low <= r.arrival_s <= high)
    return math.floor((1 - percentile / 100) * chunks) + 1


class Recorder:
    """Per-request outcomes, kept in histograms so memory stays flat at a million requests."""

    def __init__(self, num_gpus: int, slo_ttft_s: float | None = None,
                 slo_tpot_s: float | None = None, slo_itl_s: float | None = None) -> None:
        self.num_gpus = num_gpus
        self.slo = (slo_ttft_s, slo_tpot_s)
        # an ITL SLO is the run's, over its chunks (``SimResult.itl_s_at``), not a request's:
        # read here only to stop a check early (``itl_stop_past``), never in ``good``
        self.slo_itl_s = slo_itl_s
        self.hist = {name: Histogram() for name in ("ttft", "tpot", "e2e", "queue", "itl")}
        self.output_tokens = 0
        self.completed = 0
        self.good = 0  # requests that met every SLO given
        self.rejected: dict[str, int] = {}  # by reason
        self.rejected_first: dict[str, str] = {}  # each reason's first request, its numbers
        self.prompt_tokens = 0
        self.grouped = 0  # completed requests in a prefix group …
        self.grouped_prompt_tokens = 0  # … their prompts …
        self.shared_prefix_tokens = 0  # … and the shared prefixes inside them
        self.series = TimeSeries()
        # vllm:num_requests_running as the scheduler sets it after each step (its finished
        # requests gone), held until the next step's: its integral over time and its most,
        # exact (the thinned series only draws it)
        self.running_request_s = 0.0
        self.running_max = 0
        self.gauge = 0  # its value now
        # per request: id, arrival (its send), prompt, output, TTFT, TPOT, e2e, preemptions,
        # status, and the offered arrival (before a capped loop's wait for a seat)
        self.rows: list[tuple[int, float, int, int, float, float, float, int, str, float]] = []
        self.keep_rows = False  # per-request rows for export (memory grows with requests)
        # arrivals whose latencies the histograms keep (the steady state; default: all)
        self.window_s: tuple[float, float] = (-math.inf, math.inf)
        self.finished_in_window = 0  # completed requests finishing in it (whenever they came)
        self.windowed = 0  # completed requests arriving in it: the histograms keep theirs …
        self.windowed_rejected = 0  # … and the rejected ones arriving in the window
        # the running batch as the window opens and as it closes (the gauge holding then),
        # so that a batch still filling is told from a growing queue (``window_growth``)
        self.running_at_window = [0, 0]
        self.arrived_s = (math.inf, -math.inf)  # the first and last arrival (run or rejected)
        # when each request arrived, and when it left (finished, or rejected as it came): how
        # many had come and gone by any time, for the overload test (``falls_behind``)
        self.arrivals = Histogram()
        self.departures = Histogram()
        self.counts_arrivals = False  # arrivals recorded as they come (``arrive``), not as
        # they leave: a run cut short counts those still queued too
        # by arrival time, the completed requests and their queueing delays summed: how long
        # the later arrivals waited against the earlier (``queue_trend``)
        self.finished_by_arrival = Histogram()
        self.queued_by_arrival = Histogram()
        # the longest a counted completed request waited from its arrival to its first step:
        # with every request sent at t = 0, the last one's start (overload.saturated_req_s)
        self.longest_wait_s = -math.inf
        self.service_s = 0.0  # the completed requests' time from first scheduled to finish
        # when the running batch first stopped growing, a request left waiting, and what
        # stopped it (sim.scheduler's FULL_*): the end of the step that found it full
        # (``batch_filled``); NaN and "" where it never did
        self.filled_s = math.nan
        self.fill_reason = ""
        self.grouped_arrived = 0  # requests in a prefix group, as they arrive …
        self.prefix_followers = 0  # … those arriving after another of their group …
        self._groups_seen: set[int] = set()  # … and the groups that have had one
        self.readmit_hit_blocks = 0  # prefix-cache hits of preempted requests on their own blocks
        self.stopped_early = False  # the run was cut short (``hopelessly_behind``)
        # the requests waiting to start just after the latest arrival (it included), set by
        # the simulator as each comes (``queued``): at the run's end, the queue the last one
        # joined
        self.waiting_at_arrival = 0
        # … and the requests its running batch could still take then (``Simulator._note_queue``)
        self.batch_room_at_arrival = 0.0
        # the largest queue beyond that room an arrival joined, as (beyond the room, the
        # queue, when, requests arrived by then, of them since the queue was last empty), and
        # when the queue was next empty (``sim.overload.burst``)
        self.peak_queue: tuple[float, int, float, float, float] = (0.0, 0, math.nan, 0.0, 0.0)
        self.peak_cleared_s = math.nan
        self._peak_open = False  # the peak's queue has not yet emptied
        self._arrived_when_empty = 0.0  # requests arrived when a step last left none waiting
        # which reading cut the run short (``hopelessly_behind``): FLOWS_CUT or QUEUE_CUT
        self.stop_reading = ""
        self.closed_loop = False  # each arrival follows a completion: no backlog to read
        # a capped open loop (``Run.max_in_flight``): the client's own backlog, read here as
        # the engine's queue is for an uncapped one (``client_behind``)
        self.client = ClientWaits()
        # without chunked prefill (TensorRT-LLM's default): prompts longer than the step's
        # whole token budget, which that engine cannot run (the simulator chunks them)
        self.over_budget_prompts = 0
        # steps whose scheduled tokens (decodes and prompt chunks) took the whole token budget
        # while a request still waited (``Scheduler.budget_full``): admission held by the
        # budget, not the pool or seats (simulate's OVERLOADED names it); data-parallel ranks'
        # counted rank by rank, a share of ``SimResult.rank_steps``
        self.budget_full_steps = 0
        # a run that asks only whether its SLO holds at a percentile (plan's checks) stops
        # once more than this many of the window's requests passed the TTFT SLO, or the
        # TPOT's (``missed``): the percentile then passes it too (``misses_settling``)
        self.stop_past: int | None = None
        self.ttft_misses = 0
        self.tpot_misses = 0
        # … or more than this many of the window's requests' streamed chunks passed the ITL
        # SLO (``itl_misses_settling``): the ITL at the percentile then passes it too
        self.itl_stop_past: int | None = None
        self.itl_misses = 0.0
        self.missed = False

    def finish(self, r: Request) -> None:
        self.completed += 1
        low, high = self.window_s
        self.finished_in_window += low <= r.finish_s <= high
        self.output_tokens += r.num_generated
        self.prompt_tokens += r.prompt_tokens
        if r.prefix_group >= 0:
            self.grouped += 1
            self.grouped_prompt_tokens += r.prompt_tokens
            self.shared_prefix_tokens += r.prefix_tokens
        ttft = r.first_token_s - r.arrival_s
        e2e = r.finish_s - r.arrival_s
        tpot = (r.finish_s - r.first_token_s) / (r.num_generated - 1) \
            if r.num_generated > 1 else math.nan
        if self.keep_rows:  # every request, whether or not its latencies count
            self.rows.append((r.id, r.arrival_s, r.prompt_tokens, r.num_generated, ttft, tpot,
                              e2e, r.preemptions, "finished", r.offered_arrival_s))
        if not self.counts_arrivals:
            self._arrived(r)
        self.departures.add(r.finish_s)
        self.finished_by_arrival.add(r.arrival_s)
        self.queued_by_arrival.add(r.arrival_s, r.first_scheduled_s - r.arrival_s)
        self.service_s += r.finish_s - r.first_scheduled_s
        if not self.window_s[0] <= r.arrival_s <= self.window_s[1]:
            return
        self.windowed += 1
        self.hist["ttft"].add(ttft)
        self.hist["e2e"].add(e2e)
        self.hist["queue"].add(r.queue_time_s)
        if r.first_scheduled_s - r.arrival_s > self.longest_wait_s:
            self.longest_wait_s = r.first_scheduled_s - r.arrival_s
        if r.num_generated > 1:
            self.hist["tpot"].add(tpot)
        if self.stop_past is not None:
            self._count_miss(ttft, tpot)
        slo_ttft, slo_tpot = self.slo
        if (slo_ttft is None or ttft <= slo_ttft) and (
                slo_tpot is None or math.isnan(tpot) or tpot <= slo_tpot):
            self.good += 1

    def _count_miss(self, ttft: float, tpot: float) -> None:
        """A windowed request's latencies against the SLO, by histogram bin (a latency in the
        SLO's own bin may read as either): ``missed`` once more than ``stop_past`` passed."""
        slo_ttft, slo_tpot = self.slo
        if slo_ttft is not None and bin_index(ttft) > bin_index(slo_ttft):
            self.ttft_misses += 1
        if slo_tpot is not None and not math.isnan(tpot) and bin_index(tpot) > bin_index(slo_tpot):
            self.tpot_misses += 1
        self.missed = self.missed or max(self.ttft_misses, self.tpot_misses) > (
            self.stop_past or 0)

    @property
    def window_growth(self) -> tuple[int, int, int]:
        """(more arrived than finished, of them taken into the running batch, of them left
        waiting) over the window. A request arriving in it and not finishing in it is still
        in the engine at its end (a rejected one leaves as it comes), running or waiting, so
        the arrivals' excess over the finishes is the rise in the running batch plus the rise
        in the queue: 194 arriving against 159 finishing, the batch 45 → 80, is (35, 35, 0),
        a batch filling up, not a queue growing."""
        grew = self.windowed - self.finished_in_window
        start, end = self.running_at_window
        return grew, end - start, grew - (end - start)

    @property
    def keeps_up(self) -> bool:
        """Whether the engine served the arrivals as they came: in a steady state as many
        requests finish in the window (past the warm-up) as arrive in it, the requests in the
        engine at its end as many as at its start; an overloaded engine finishes only its
        capacity, and its queue grows. Arrivals outnumbering the finishes by a rise in the
        running batch (one still filling, within its pool) leave no queue
        (``window_growth``); by a rise in the waiting queue of more than the larger of 3 %
        and two Poisson deviations of the count, the engine falls behind. A run cut short for
        falling behind did not keep up."""
        if self.stopped_early:
            return False
        n = self.windowed
        if math.isinf(self.window_s[0]) or not n or self.runs_past_arrivals:
            return True
        return self.window_growth[2] <= self.keep_up_slack

    @property
    def held_steady(self) -> bool:
        """Whether the window was a steady state: as many finished in it as arrived, beyond
        the noise (``keep_up_slack``), neither a queue nor the running batch growing. What a
        plan's check asks: a batch still growing in the window reads its latencies lighter
        than the load's own, and under overload it grows until the pool or the seats stop it
        (``keeps_up`` excuses a batch filling, for simulate's own verdict)."""
        return self.keeps_up and not self.batch_took_arrivals

    @property
    def keep_up_slack(self) -> float:
        """The requests a window's count may move by as noise: the larger of 3 % and two
        Poisson deviations of those arriving in it."""
        n = self.windowed
        return n * max(KEEP_UP_SLACK, 2 / math.sqrt(n)) if n else 0.0

    @property
    def batch_took_arrivals(self) -> bool:
        """Whether more arrived in the window than finished in it, beyond the noise
        (``keep_up_slack``): where the engine still keeps up, its running batch took the
        excess on (``window_growth``), as a batch filling does, and an overloaded one too
        while its pool and seats have room."""
        return self.window_growth[0] > self.keep_up_slack

    @property
    def runs_past_arrivals(self) -> bool:
        """Whether the window reaches past the last arrival, into the drain, where the
        backlog of an overloaded engine finishes: keeping up cannot be read there."""
        high = self.window_s[1]
        return math.isfinite(high) and high > self.arrived_s[1]

    def falls_behind(self) -> tuple[int, int, float] | None:
        """(arrived, left, seconds) over the arrivals past the batch's filling, where fewer
        requests left the engine (finished, or rejected) than arrived, by more than the
        larger of OVERLOAD_SLACK and 2.5 Poisson deviations of the count, and by at least
        OVERLOAD_BACKLOG: its queue grew while they came, so it serves less than is offered.
        A stable engine's backlog stays level once the batch has filled: the count starts
        there (``steady_s``: where the run saw it fill, else FILL_LIFETIMES mean service
        times, first scheduled to finish, after the first arrival), and a run whose arrivals
        end before it is not read (None). Else None.
        Llama.cpp's 4 slots at 1.05 req/s of lognormal:1000,0.8 / 250,0.8 serve 0.92: of
        the 9,984 arriving past the fill 8,603 left, 1,381 (14 %) fewer; Llama-3.1-8B on one
        H100 at 0.8 req/s of 20,000-token prompts (0.73 served, seed 0): of 1,937, 142 (7 %)
        fewer, where the second half of the arrivals alone had read 42 of 974 (4 %), under
        its noise (8 %)."""
        start, last = self.steady_s
        if not start < last:
            return None
        arrived = round(self.arrivals.count_to(last) - self.arrivals.count_to(start))
        left = round(self.departures.count_to(last) - self.departures.count_to(start))
        if not beyond_noise(arrived - left, arrived):
            return None
        return arrived, left, last - start

    def overloaded(self) -> bool:
        """Whether the engine fell behind its arrivals (simulate's OVERLOADED). A stable
        engine starts each request about as it comes (its batch has room: rate × service time
        under the batch), so its queue stays level near none however short the run; an
        overloaded one's grows while they arrive, in its queue or, while the pool has room, in
        its running batch. Read two ways:
        - the queue alone, beyond the noise of all the arrivals' count (``beyond_noise``):
          started from none, it grew over the arrivals. The one reading of a burst that ends
          before the batch has filled, where no arrival is past the fill: Llama-3.1-8B on one
          H100 (about 17 req/s served) given 990 chat requests at 22 req/s, all in by 47 s
          (its pool full from 22-25 s), leaves 114 to 136 waiting (seeds 0, 2 and 3; seed 1,
          77) against 79; at 15 req/s, 1 or 2;
        - fewer leaving than arriving past the fill (``falls_behind``), the shortfall a queue,
          not a batch still filling (where no step found the batch full, the estimated fill,
          from a mean service time that early light batches shorten, can come early: 765
          requests at 17 req/s, which that engine keeps up with, read 313 arrived and 250 left
          over the 18 s past it): at least
          OVERLOAD_BACKLOG waiting; or preemptions past the fill (the batch outgrew its pool);
          or, at the pace the backlog grew past the fill, more growth within a mean service
          time (as long as a request holds its seat) than the running batch had room for when
          the last arrived (``batch_room_at_arrival``), so that the excess must soon queue.
          A filling batch's growth slows before its room runs out. vLLM at 48 req/s, 2,000
          requests (44 served, seed 1): 255 short over 14 s, 168 more within 9.3 s, room for
          71 (703 running at 91 % of the pool), 4 waiting; gamma arrivals at 60 req/s
          (2,000, seed 0): 30 preempted; the 17 req/s run: 33 more within 9.1 s, room for 156
          (230 running, 59 %).
        A run cut short (``hopelessly_behind``: the same readings past a higher bar) is.
        Never a closed loop (its arrivals follow its completions), nor arrivals spanning no
        time (no rate is offered). ``sim.overload`` reads two more, beyond the counts: arrivals
        past the most the engine serves with its batch full, and a burst's long queue."""
        first, last = self.arrived_s
        if self.closed_loop or not first < last:
            return False
        waiting = self.waiting_at_arrival
        if self.stopped_early or beyond_noise(waiting, self.arrivals.total):
            return True
        behind = self.falls_behind()
        if behind is None:
            return False
        arrived, left, seconds = behind
        start, last = self.steady_s
        return waiting >= OVERLOAD_BACKLOG or self.series.preempted_between(start, last) > 0 \
            or (arrived - left) / seconds * self.mean_service_s > self.batch_room_at_arrival

    @property
    def mean_service_s(self) -> float:
        """The completed requests' mean time from first scheduled to finish (nan: none)."""
        return self.service_s / self.completed if self.completed else math.nan

    def batch_filled(self, at_s: float, reason: str) -> None:
        """The running batch stopped growing for ``reason`` (a scheduler's ``full``) by the
        step ending at ``at_s``; only the first time counts, and "" is no reading."""
        if reason and not self.fill_reason:
            self.filled_s, self.fill_reason = at_s, reason

    @property
    def fill_observed(self) -> bool:
        """Whether the run saw its batch fill (``batch_filled``), so that ``steady_s``
        starts there rather than at an estimate."""
        return bool(self.fill_reason)

    @property
    def steady_s(self) -> tuple[float, float]:
        """The arrivals past the batch's filling, to the last: from when the run saw it fill
        (``batch_filled``: DeepSeek-V3 on 8 H200s at 10 req/s of 2,000 + 1,000 tokens, its
        KV cache full at about 40 s), or where it never did, an estimate, FILL_LIFETIMES
        mean service times after the first arrival (that run's would be 246 s, its arrivals
        ending at 305 s); (nan, nan) where the arrivals span no time, or neither is known."""
        first, last = self.arrived_s
        if not (math.isfinite(last) and last > first):
            return math.nan, math.nan
        if self.fill_observed:
            return max(first, self.filled_s), last
        service = self.mean_service_s
        if not service > 0:
            return math.nan, math.nan
        return first + FILL_LIFETIMES * service, last

    def queue_trend(self, start_s: float, end_s: float) -> tuple[float, float] | None:
        """The mean queueing delay of the completed requests arriving in the first and in the
        second half of start_s–end_s (to the histograms' bin, 0.23 %); None where a half has
        none. An overloaded engine's queue grows, so the later arrivals wait longer."""
        mid = (start_s + end_s) / 2
        means = []
        for low, high in ((start_s, mid), (mid, end_s)):
            n = self.finished_by_arrival.count_to(high) - self.finished_by_arrival.count_to(low)
            if n < 1:
                return None
            waited = self.queued_by_arrival.count_to(high) - self.queued_by_arrival.count_to(low)
            means.append(waited / n)
        return means[0], means[1]

    def hopelessly_behind(self, now_s: float, all_arrived: bool) -> str:
        """Which reading says that by ``now_s`` the engine serves under half of what is
        offered, so that the rest of the run only lengthens the queue, or works through it
        (FLOWS_CUT, QUEUE_CUT; "" where neither): the two readings of ``overloaded`` with
        CUT_SHARE and at least CUT_BACKLOG requests behind for its noise. Past the batch's
        filling, fewer left than arrived (``behind_past_fill``); or, ``all_arrived`` (no
        request still to come), more than half of them were waiting to start when the last came
        (``swamped``), the reading that holds where the arrivals end before the fill (200,000
        requests of 100,000-token prompts sent to one H100 in 2 s had run on to the step cap).
        Not while requests are still to come: a burst's queue may drain before they do (2,000
        requests in a second, then 50 over 5,000-6,000 s, to 8 seats: cleared by 1,100 s).
        An engine that keeps up has its arrivals leave within a lifetime of coming, and its
        queue level."""
        if self.behind_past_fill(now_s):
            return FLOWS_CUT
        return QUEUE_CUT if all_arrived and self.swamped else ""

    def behind_past_fill(self, now_s: float) -> bool:
        """Whether, past the batch's filling up to ``now_s``, the requests that left the
        engine fall short of those that arrived by CUT_SHARE of them and CUT_BACKLOG."""
        start = self.steady_s[0]
        if not start < now_s:
            return False
        arrived = self.arrivals.count_to(now_s) - self.arrivals.count_to(start)
        left = self.departures.count_to(now_s) - self.departures.count_to(start)
        return arrived - left >= max(CUT_BACKLOG, CUT_SHARE * arrived)

    @property
    def swamped(self) -> bool:
        """Whether more than CUT_SHARE of the requests that have come, and CUT_BACKLOG, were
        waiting to start when the latest came, those spanning some time (a rate offered)."""
        first, last = self.arrived_s
        return first < last and self.waiting_at_arrival >= max(
            CUT_BACKLOG, CUT_SHARE * self.arrivals.total)

    def queued(self, now_s: float, waiting: int, room: float) -> None:
        """An arrival at now_s (already counted) left ``waiting`` requests waiting to start,
        the running batch room for ``room`` more: the latest queue, and the largest beyond
        that room (``sim.overload.burst``)."""
        self.waiting_at_arrival = waiting
        self.batch_room_at_arrival = room
        if waiting - room > self.peak_queue[0]:
            arrived = self.arrivals.total
            self.peak_queue = (waiting - room, waiting, now_s, arrived,
                               arrived - self._arrived_when_empty)
            self.peak_cleared_s = math.nan
            self._peak_open = True

    def arrive(self, r: Request) -> None:
        """r has come (run or rejected): counted now, whether or not the run lets it leave."""
        self.counts_arrivals = True
        r.counted = self.counts(r)
        self._arrived(r)
        if r.prefix_group >= 0:
            self.grouped_arrived += 1
            if r.prefix_group in self._groups_seen:
                self.prefix_followers += 1
            else:
                self._groups_seen.add(r.prefix_group)

    def _arrived(self, r: Request) -> None:
        self.arrivals.add(r.arrival_s)
        first, last = self.arrived_s
        if not first <= r.arrival_s <= last:
            self.arrived_s = (min(first, r.arrival_s), max(last, r.arrival_s))

    @property
    def measured_window_s(self) -> tuple[float, float]:
        """The window as far as arrivals reach into it: past the last arrival (or before the
        first) it holds the drain (or nothing), which no rate or keep-up reads can use."""
        low, high = self.window_s
        first, last = self.arrived_s
        return max(low, first), min(high, last)

    def reject(self, r: Request, detail: str = "") -> None:
        """Count r under its reason; keep the first one's own numbers (``detail``)."""
        if not self.counts_arrivals:
            self._arrived(r)
        self.departures.add(r.arrival_s)  # it leaves as it comes
        if self.keep_rows:  # in the export too, with no latency and why; its output the
            # one it asked for, as a finished row's is (the export replays as a --trace)
            self.rows.append((r.id, r.arrival_s, r.prompt_tokens, r.output_tokens, math.nan,
                              math.nan, math.nan, 0, f"rejected: {r.reason}",
                              r.offered_arrival_s))
        self.windowed_rejected += self.window_s[0] <= r.arrival_s <= self.window_s[1]
        self.rejected[r.reason] = self.rejected.get(r.reason, 0) + 1
        if detail and r.reason not in self.rejected_first:
            self.rejected_first[r.reason] = detail

    def absorb(self, other: Recorder) -> None:
        """Add another engine's outcomes (one lane of a pipeline) to this one's; the time
        series is summed apart (``summed_series``)."""
        for name, hist in other.hist.items():
            self.hist[name].absorb(hist)
        for mine, theirs in ((self.arrivals, other.arrivals),
                             (self.departures, other.departures),
                             (self.finished_by_arrival, other.finished_by_arrival),
                             (self.queued_by_arrival, other.queued_by_arrival)):
            mine.absorb(theirs)
        self.stopped_early = self.stopped_early or other.stopped_early
        self.missed = self.missed or other.missed
        self.closed_loop = self.closed_loop or other.closed_loop
        self.stop_reading = self.stop_reading or other.stop_reading
        self.running_request_s += other.running_request_s  # lanes side by side: summed
        self.longest_wait_s = max(self.longest_wait_s, other.longest_wait_s)
        for name in ("output_tokens", "completed", "good", "prompt_tokens", "grouped",
                     "grouped_prompt_tokens", "shared_prefix_tokens", "finished_in_window",
                     "windowed", "windowed_rejected", "over_budget_prompts", "budget_full_steps",
                     "grouped_arrived", "prefix_followers", "readmit_hit_blocks",
                     "service_s", "waiting_at_arrival", "batch_room_at_arrival"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.running_at_window = [mine + theirs for mine, theirs in
                                  zip(self.running_at_window, other.running_at_window)]
        if other.peak_queue[0] > self.peak_queue[0]:  # lanes side by side: the longer one
            self.peak_queue, self.peak_cleared_s = other.peak_queue, other.peak_cleared_s
        for reason, n in other.rejected.items():
            self.rejected[reason] = self.rejected.get(reason, 0) + n
        for reason, detail in other.rejected_first.items():
            self.rejected_first.setdefault(reason, detail)
        self.rows = sorted(self.rows + other.rows)
        self.arrived_s = (min(self.arrived_s[0], other.arrived_s[0]),
                          max(self.arrived_s[1], other.arrived_s[1]))
        # lanes side by side have filled once every one has: the latest, or none seen
        if not (self.fill_observed and other.fill_observed):
            self.filled_s, self.fill_reason = math.nan, ""
        elif other.filled_s > self.filled_s:
            self.filled_s, self.fill_reason = other.filled_s, other.fill_reason

    def counts(self, r: Request) -> bool:
        """Whether r's latencies count: it arrived in the window (``finish`` keeps its TTFT
        and TPOT so; ``arrive`` marks its ITL chunks so, ``Request.counted``)."""
        return self.window_s[0] <= r.arrival_s <= self.window_s[1]

    def itl(self, seconds: float, chunks: float) -> None:
        """``chunks`` streamed chunks (a request's tokens of one step) ``seconds`` after
        their requests' last, of requests arriving in the window (``Request.counted``): the
        warm-up's and the drain's are left out, as their TTFT and TPOT are."""
        if chunks:
            self.hist["itl"].add(seconds, chunks)
            if self.itl_stop_past is not None:
                self._count_itl_misses(chunks if self._past_itl(seconds) else 0)

    def itl_each(self, gaps_s: list[float]) -> None:
        """One streamed chunk for each of ``gaps_s`` (seconds after its request's last, the
        window's requests' only), in order."""
        self.hist["itl"].add_each(gaps_s)
        if self.itl_stop_past is not None:
            self._count_itl_misses(sum(map(self._past_itl, gaps_s)))

    def itl_line(self, first_s: float, last_s: float, steps: int, chunks: float) -> None:
        """``steps`` steps whose times run linearly from first_s to last_s, each streaming
        ``chunks`` chunks (the window's requests' only)."""
        if not chunks:
            return
        self.hist["itl"].add_line(first_s, last_s, steps, chunks)
        if self.itl_stop_past is not None and steps >= 1 and self._past_itl(last_s):
            # the samples at or below the SLO's bin, placed as ``Histogram.add_line`` places
            # them: below its top edge
            edge = bin_top(bin_index(self.slo_itl_s or 0.0))
            below = 0 if self._past_itl(first_s) else min(
                steps, max(0, math.ceil((edge - first_s) * (steps - 1) / (last_s - first_s))))
            self._count_itl_misses((steps - below) * chunks)

    def _past_itl(self, seconds: float) -> bool:
        """A gap in a histogram bin past the ITL SLO's (one in the SLO's own bin may read as
        either, as ``_count_miss`` reads TTFT and TPOT)."""
        return self.slo_itl_s is not None and bin_index(seconds) > bin_index(self.slo_itl_s)

    def _count_itl_misses(self, chunks: float) -> None:
        self.itl_misses += chunks
        self.missed = self.missed or self.itl_misses > (self.itl_stop_past or 0)

    def sample(self, t: float, running: int, waiting: int, usage: float, preemptions: int) -> None:
        """The gauges after the step that ended at ``t``."""
        self.series.add(t, running, waiting, usage, preemptions)
        self.gauge = running
        self._gauge_from(t, running)
        if running > self.running_max:
            self.running_max = running
        if not waiting:
            self._arrived_when_empty = self.arrivals.total
            if self._peak_open:
                self.peak_cleared_s = t
                self._peak_open = False

    def _gauge_from(self, t: float, running: int) -> None:
        """The running gauge reads ``running`` from ``t`` on: the value at each of the
        window's ends it reaches (the last such reading before an end holds there)."""
        low, high = self.window_s
        if t <= low:
            self.running_at_window[0] = running
        if t <= high:
            self.running_at_window[1] = running

    def ran(self, start_s: float, end_s: float, steps: int, running: int, waiting: int,
            usage: float, preemptions: int) -> None:
        """``steps`` steps of ``running`` requests took start_s to end_s (a run of identical
        decode steps, ended by a finish or an arrival): through the first the gauge still
        reads the last step's value, after each of the others all of them (none finished
        yet); the last one's, set by ``sample``, holds from end_s."""
        if steps < 1 or end_s <= start_s:
            return
        first = (end_s - start_s) / steps
        self.running_request_s += self.gauge * first + running * (end_s - start_s - first)
        if steps > 1:
            self.running_max = max(self.running_max, running)
            self.series.add(start_s + first, running, waiting, usage, preemptions)
            self._gauge_from(start_s + first, running)
        else:
            self.series.add(start_s, self.gauge, waiting, usage, preemptions)

    def result(self, end_s: float, preemptions: int, prefix_hits: int, steps: int,
               busy_s: float = math.nan, profile: EngineProfile | None = None,
               rank_steps: int | None = None) -> SimResult:
        return SimResult(self, end_s, preemptions, prefix_hits, steps, busy_s, profile,
                         rank_steps)


def run_recorder(num_gpus: int, slo: tuple[float | None, ...], keep_rows: bool,
                 stop_past: int | tuple[int, int] | None, window_s: tuple[float, float] | None,
                 closed_loop: int) -> Recorder:
    """A run's recorder, set as ``Simulator.run``'s arguments ask (the plain engine, the
    lock-step ranks and the independent ones alike); a capped open loop is not a closed one
    and keeps its engine readings."""
    rec = Recorder(num_gpus, *slo)
    rec.keep_rows = keep_rows
    # stop_past: the window's requests, or (those, its chunks) past the SLOs that settle it
    rec.stop_past, rec.itl_stop_past = stop_past if isinstance(stop_past, tuple) \
        else (stop_past, None)
    if window_s is not None:
        rec.window_s = window_s
    rec.closed_loop = closed_loop > 0
    return rec


class SimResult:
    """Percentiles, rates and goodput of one simulation."""

    def __init__(self, rec: Recorder, end_s: float, preemptions: int, prefix_hits: int,
                 steps: int, busy_s: float = math.nan,
                 profile: EngineProfile | None = None, rank_steps: int | None = None) -> None:
        self.rec = rec
        self.duration_s = end_s
        self.preemptions = preemptions
        self.prefix_hit_blocks = prefix_hits
        self.steps = steps
        # the steps a scheduler formed a batch for: ``steps``, but where data-parallel ranks
        # step together, each busy rank's summed (a lock-step counts once in ``steps``)
        self.rank_steps = steps if rank_steps is None else rank_steps
        self.busy_s = busy_s  # simulated time with a step running (the rest: idle, no request)
        self.profile = profile  # the engine profile the step times came from

    @property
    def completed(self) -> int:
        return self.rec.completed

    @property
    def rejected(self) -> int:
        return sum(self.rec.rejected.values())

    def percentiles(self, name: str) -> dict[str, float]:
        """p50/p90/p95/p99 (``Histogram.percentile``: `vllm bench serve`'s linear reading) and
        mean, to the histograms' 0.23% resolution."""
        h = self.rec.hist[name]
        return {f"p{q}": h.percentile(q) for q in (50, 90, 95, 99)} | {"mean": h.mean}

    @property
    def request_rate_req_s(self) -> float:
        return self.completed / self.duration_s if self.duration_s else 0.0

    @property
    def output_tok_s(self) -> float:
        return self.rec.output_tokens / self.duration_s if self.duration_s else 0.0

    @property
    def total_tok_s(self) -> float:
        """vllm bench serve's "Total Token throughput": the completed requests' prompt and
        output tokens ÷ the span ``output_tok_s`` is over ((total_input + total_output) ÷
        dur_s, vllm/benchmarks/serve.py calculate_metrics). A prompt counts whole, as sent:
        bench adds each successful request's prompt_len whatever the server's prefix cache
        held, so a cache hit saves the engine work but not this count. 200 requests of 512 +
        128 tokens in 37.1 s: 640 × 200 ÷ 37.1 ≈ 3,450 tok/s."""
        tokens = self.rec.prompt_tokens + self.rec.output_tokens
        return tokens / self.duration_s if self.duration_s else 0.0

    @property
    def good(self) -> int:
        """Completed requests that met every SLO the run was given."""
        return self.rec.good

    @property
    def goodput_req_s(self) -> float:
        """Completed requests per second that met every SLO the run was given: of the run's
        duration, or, with a window, of the window's arrivals per second of it."""
        low, high = self.rec.measured_window_s
        if math.isfinite(self.rec.window_s[0]):
            return self.rec.good / (high - low) if high > low else math.nan
        return self.rec.good / self.duration_s if self.duration_s else 0.0

    def latency_s_at(self, name: str, percentile: float) -> float:
        """The ``name`` latency at ``percentile`` (any, not only the p50/p90/p95/p99 a report
        prints), a request the engine rejected counting as one that never got its answer (of a
        window, those arriving in it): an infinite latency, sorted last, read at position
        p × (T + R − 1) of the T kept and R rejected as ``Histogram.percentile`` reads its
        own; a position past the last kept one interpolates towards infinity. NaN where no
        request has one (1-token outputs have no TPOT)."""
        h = self.rec.hist[name]
        rejected = self.rec.windowed_rejected
        if not h.total:
            return math.inf if rejected and name == "ttft" else math.nan
        position = linear_position(percentile, h.total + rejected)
        return math.inf if position > h.total - 1 else h.at_position(position)

    def itl_s_at(self, percentile: float) -> float:
        """The ITL at ``percentile`` over the streamed chunks of the requests arriving in the
        window (every request's without one), the warm-up and the drain left out as for TTFT
        and TPOT, as `simulate`'s ITL row reads it (``percentiles``: its p50–p99 are this at
        those). A rejected request streams no chunk, so none counts here (its TTFT is the
        miss). NaN where no chunk followed a first."""
        return self.rec.hist["itl"].percentile(percentile)

    @property
    def running_batch(self) -> dict[str, float]:
        """What vllm:num_requests_running would have shown, time-weighted from the first
        arrival to the last finish: each step's running requests × its time, summed."""
        rec = self.rec
        start = rec.arrived_s[0] if math.isfinite(rec.arrived_s[0]) else 0.0
        span = self.duration_s - start
        return {"mean": rec.running_request_s / span if span > 0 else 0.0,
                "max": float(rec.running_max)}
