"""vLLM's periodic stats lines, read into an Observation: the batch, the queue, KV usage and
token rates as the server logged them, per data-parallel engine where each logs its own line
(vllm/v1/metrics/loggers.py; V0's vllm/engine/metrics.py); and the pool each engine sized,
from its start-up lines (vllm/v1/core/kv_cache_utils.py; V0's executor_base.py)."""

from __future__ import annotations

import re
import statistics

from ridgeline.engine_metrics import MAX_ACCEPT_LENGTH
from ridgeline.errors import InputError, shorten
from ridgeline.observation import (
    COUNTER_RANGE,
    FRACTION_RANGE,
    MAX_COUNT,
    MAX_REQUESTS,
    MAX_TOKENS,
    REQUESTS_RANGE,
    Observation,
    checked,
)
from ridgeline.spec_decode import tokens_per_request_step

MAX_ENGINES = 4096  # data-parallel engines one log line may aggregate
# vLLM's periodic stats line, V0 and V1 (vllm/v1/metrics/loggers.py): "N Engines
# Aggregated: " sums DP engines (--aggregate-engine-logging); "Deferred" and "Preemptions"
# appear, when non-zero, in builds since Nov 2025 (PR #28522). "Waiting" is then
# num_waiting_reqs + num_skipped_waiting_reqs and "Deferred" the skipped ones (a KV transfer,
# a LoRA budget, a blocked status: LoggingStatLogger.log's total_waiting), which wait for no
# room in the batch. "Avg prompt throughput" counts the prompt tokens computed, cached and
# transferred ones left out, since Feb 2026 (PR #33290: prompt_token_stats.computed); every
# prompt token before. "Prefix cache hit rate" is the prefix cache's hits ÷ queries.
# Its numbers are read with a sign, so that a negative one is refused by its line and field
# rather than the line going unread.
_NUM, _INT = r"[-+]?[\d.]+", r"[-+]?\d+"
STATS_LINE = re.compile(
    r"(?:(?P<engines>\d+) Engines Aggregated: )?"
    rf"Avg prompt throughput: (?P<prompt>{_NUM}) tokens/s, Avg generation throughput: "
    rf"(?P<gen>{_NUM}) tokens/s, Running: (?P<running>{_INT}) reqs,(?P<v0> Swapped: "
    rf"(?P<swapped>{_INT}) reqs,)? "
    rf"(?:Pending|Waiting): (?P<waiting>{_INT}) reqs,(?: Deferred: (?P<deferred>{_INT}) reqs,)?"
    rf"(?: Preemptions: (?P<preempted>{_INT}),)? GPU KV cache usage: (?P<kv>{_NUM})%"
    rf"(?:, (?:GPU )?[Pp]refix cache hit rate: (?P<hit>{_NUM})%)?")
# what makes a file a vLLM log: a line that has it but that STATS_LINE cannot read is refused,
# naming the line, not skipped (nor the file read as a metrics page)
STATS_HINT = re.compile(r"Avg prompt throughput:")
# V1's per-engine lines under data parallelism, when not aggregated: "Engine 000: Avg …"
_LOG_ENGINE = re.compile(r"Engine (\d+): Avg prompt throughput")
_LOG_ENGINE_TAIL = re.compile(r"Engine (\d+): $")  # the line's text before STATS_LINE's match
# a vLLM log line's time: "INFO 11-20 10:00:00 [loggers.py:236] …" (month-day, no year)
_LOG_TIME = re.compile(r"\b(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")
ROUND_S = 2.0  # one logging round's lines, every engine's, written within this of the first
# V0 warns at the 1st, 51st, 101st … preemption (vllm/core/scheduler.py), with the total so
# far; builds before that throttle warned at every one, with no total
_V0_PREEMPTED = re.compile(r"is preempted by .*?total_num_cumulative_preemption=(\d+)")
# The pool each engine sized, logged once per engine process at start-up: V1's "GPU KV cache
# size: 423,408 tokens" (vllm/v1/core/kv_cache_utils.py: blocks ÷ KV-cache groups ×
# block_size; from v0.24 maximum concurrency × max_model_len, engines.json), after V0's
# "# cuda blocks: 27000, # CPU blocks: 2048" (executor_base.py initialize_cache; "# GPU
# blocks: N" in older V0 and early V1), whose "Maximum concurrency for 8192 tokens per
# request: 52.73x" line next is blocks × block_size ÷ max_model_len, naming the block size.
_KV_CACHE_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_GPU_BLOCKS = re.compile(r"# (?!CPU\b)\w+ blocks: (\d+)")
_MAX_CONCURRENCY = re.compile(
    r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


# vLLM V1's drafter line, logged each stats interval a step drafted (vllm/v1/spec_decode/
# metrics.py SpecDecodingLogging.log, its counts the interval's, reset after): "SpecDecoding
# metrics: Mean acceptance length: 2.51, Accepted throughput: …, Drafted throughput: …,
# Accepted: 251 tokens, Drafted: 300 tokens, Per-position acceptance rate: …, Avg Draft
# acceptance rate: 83.7%" (current main); "Draft acceptance rate: 88.8%, Mean acceptance
# length: 5.44, …" before it (the throughputs added by PR #24127, Sep 2025; the mean and the
# per-position rates by PR #16665, Apr 2025: v0.8.5 by its merge date; 1 + accepted ÷ drafts,
# the bonus token in); "Draft acceptance rate: …, Accepted: N tokens, Drafted: M tokens" alone
# from PR #15902 (Apr 2025: v0.8.3-0.8.4 by merge dates), whose drafts are not counted. Read
# by field, not by position.
SPEC_LINE = re.compile(r"SpecDecoding metrics: (?P<body>[^\n]*)")
# the mean and the throughput read as whatever word stands there, then as a number: a NaN
# or 'inf' there had the line read as one without them (an older vLLM's), without a word
_SPEC_MEAN = re.compile(r"Mean acceptance length: (?P<mean>[^,\s]+)")
_SPEC_ACCEPTED = re.compile(rf"\bAccepted: (?P<n>{_INT}) tokens")
_SPEC_DRAFTED = re.compile(rf"\bDrafted: (?P<n>{_INT}) tokens")
# the interval's accepted tokens over the seconds since the drafter's line was last logged
# (SpecDecodingLogging.log; PR #24127, Sep 2025): the same seconds as the stats line's
# generation throughput logged just before it (LoggingStatLogger.log), where the interval
# before also drafted
_SPEC_ACCEPTED_RATE = re.compile(r"Accepted throughput: (?P<rate>[^,\s]+) tokens/s")


def _log_number(match: re.Match[str], group: str, field: str, source: str, text: str) -> float:
    """A stats line's number, or the file refused naming its line and field ('1.2.3')."""
    try:
        return float(match[group])
    except ValueError:
        line = text.count("\n", 0, match.start()) + 1
        raise InputError(f"{source}, line {line}: {field} reads {match[group]!r}, not a "
                         "number") from None


def _unread_stats_line(text: str, source: str) -> None:
    """Refuse the first line that looks like a stats line (STATS_HINT) but is not one."""
    for number, line in enumerate(text.splitlines(), 1):
        if STATS_HINT.search(line) and not STATS_LINE.search(line):
            raise InputError(f"{source}, line {number}: {shorten(line.strip())!r} is not a vLLM "
                             "stats line ridgeline reads (a field missing, or a value that is "
                             "not a number)")


def from_log(text: str, source: str) -> Observation:
    _unread_stats_line(text, source)
    # the stats line ("Avg prompt throughput: …", STATS_LINE) is vLLM's: an --engine the
    # log's engine contradicts is cautioned, as a metrics page's is (ObserveReport.cross_checks)
    obs = Observation(source, "log", engine_family="vllm")
    prompt: list[float] = []
    gen: list[float] = []
    generated_tok_s = 0.0  # the lines' generation throughputs summed, every engine's
    preempted: list[float] = []
    hits: list[float] = []
    deferred = 0.0  # the most waiting requests one line deferred
    lines: list[tuple[str | None, float | None]] = []  # each stats line's engine and time
    numbers: list[int] = []  # each stats line's line number
    v0 = False
    line, counted_to = 1, 0  # the line each match starts on, counted on from the last
    for match in STATS_LINE.finditer(text):
        lines.append(_log_engine_and_time(text, match))
        line += text.count("\n", counted_to, match.start())
        counted_to = match.start()
        numbers.append(line)
        where = f"{source}, line {line}"

        def number(group: str, field: str, m: re.Match[str] = match) -> float:
            return _log_number(m, group, field, source, text)

        # an aggregated line sums its engines' batches and rates (and averages KV usage)
        k = int(checked(number("engines", "Engines Aggregated") if match.group("engines")
                        else 1.0, where, "Engines Aggregated", 1.0, MAX_ENGINES,
                        f"a number of engines, 1 to {MAX_ENGINES:,}"))
        obs.engines = max(obs.engines, k)
        obs.running.append(checked(number("running", "Running"), where, "Running", 0.0,
                                   MAX_REQUESTS * k, REQUESTS_RANGE) / k)
        waiting = checked(number("waiting", "Waiting"), where, "Waiting", 0.0,
                          MAX_REQUESTS * k, REQUESTS_RANGE)
        held = checked(number("deferred", "Deferred"), where, "Deferred", 0.0, MAX_REQUESTS * k,
                       REQUESTS_RANGE) if match.group("deferred") else 0.0
        if held > waiting:
            raise InputError(f"{where}: Deferred: {held:,.0f} reqs but Waiting: "
                             f"{waiting:,.0f} reqs; vLLM counts the deferred among the waiting")
        deferred = max(deferred, held)
        obs.waiting.append((waiting - held) / k)
        kv = number("kv", "GPU KV cache usage") / 100
        obs.kv_usage.append(checked(kv, where, "GPU KV cache usage (as a fraction)", 0.0, 1.0,
                                    FRACTION_RANGE))
        for series, group, name in ((prompt, "prompt", "Avg prompt throughput"),
                                    (gen, "gen", "Avg generation throughput")):
            series.append(checked(number(group, name), where, name, 0.0, MAX_COUNT,
                                  f"tokens per second, 0 to {MAX_COUNT:g}") / k)
        generated_tok_s += gen[-1] * k
        if match.group("preempted"):
            preempted.append(checked(number("preempted", "Preemptions"), where, "Preemptions",
                                     0.0, MAX_COUNT, COUNTER_RANGE))
        if match.group("swapped"):
            obs.swapped.append(checked(number("swapped", "Swapped"), where, "Swapped", 0.0,
                                       MAX_REQUESTS * k, REQUESTS_RANGE) / k)
        if match.group("hit"):
            hits.append(checked(number("hit", "Prefix cache hit rate") / 100, where,
                                "Prefix cache hit rate (as a fraction)", 0.0, 1.0,
                                "a share of the prompt tokens, 0 to 1"))
        v0 = v0 or bool(match.group("v0"))
    if deferred:
        obs.notes.append(f"up to {deferred:,.0f} waiting requests deferred ('Deferred: N reqs': "
                         "a KV transfer, a LoRA budget) are not counted as waiting for the "
                         "batch; vLLM's 'Waiting' includes them")
    if hits and max(hits) > 0:
        # not taken off the prompt rate, which since PR #33290 already leaves out the cached
        # tokens; before it the rate counted them, and pricing them computed errs high
        obs.notes.append(f"prefix cache hit rate {statistics.fmean(hits):.0%} (mean of the "
                         "lines): not taken off the prompt rate, which vLLM logs as computed "
                         "tokens alone since Feb 2026 (PR #33290); an older build's rate "
                         "counts the cached tokens too, and they are priced as computed")
    if obs.engines > 1:
        obs.notes.append(f"'{obs.engines} Engines Aggregated' lines: the batch, the queue and "
                         "the token rates are each engine's mean, the preemptions all "
                         "engines' together")
    apart = len(set(_LOG_ENGINE.findall(text)))
    if apart > 1 and obs.engines == 1:  # each line one engine's: their means are per engine
        rounds = _per_engine_rounds(obs, lines, prompt, gen)
        obs.notes.append(f"{obs.engines} data-parallel engines, a stats line each ('Engine "
                         "000: …'): the batch, the queue and the token rates are each engine's "
                         f"mean over the log's {rounds} logging rounds, a round without an "
                         "engine's line read as that engine idle (vLLM logs an idle engine at "
                         "debug level), the preemptions all engines' together")
    warned = [checked(float(n), source, "total_num_cumulative_preemption", 0.0, MAX_COUNT,
                      COUNTER_RANGE) for n in _V0_PREEMPTED.findall(text)]
    if preempted:
        obs.preemptions = sum(preempted)
    elif warned:  # V0 warns every 50th: its running total is the count
        obs.preemptions = float(max(warned))
        obs.notes.append(f"preemptions: V0's running total, {max(warned):,} when last warned "
                         "(it warns at every 50th)")
    elif v0 or "is preempted by" in text:  # V0 warns at the first one (early builds at each)
        obs.preemptions = float(text.count("is preempted by"))
    else:
        obs.preemptions = None
        obs.notes.append("preemptions: not in these stats lines (vLLM logs them, when any, "
                         "from Nov 2025 on)")
    obs.prompt_tok_s = statistics.fmean(prompt)
    obs.generation_tok_s = statistics.fmean(gen)
    obs.notes.append(f"{len(lines)} periodic stats lines")
    _backwards_time(text, obs, lines, numbers)
    _read_startup_pool(text, source, obs)
    _read_launch(text, source, obs)
    _read_spec_lines(text, source, obs, generated_tok_s)
    return obs


def _read_spec_lines(text: str, source: str, obs: Observation,
                     generated_tok_s: float = 0.0) -> None:
    """The tokens a verify step kept over the log, from vLLM's SpecDecoding lines: each
    interval's mean acceptance length, weighted by the draft tokens it drafted (each draft
    holds the drafter's --num-speculative-tokens, whole, so draft tokens count drafts; an
    n-gram's unmatched steps propose none, and count none). Lines of 2.0 over 300 draft tokens
    and 3.0 over 100: 2.25. Lines without a mean (v0.8.3-0.8.4) say a drafter serves, not
    what it keeps. Where every line gives its accepted throughput, the tokens a request's step
    kept over all its steps too (_read_request_steps)."""
    means: list[tuple[float, float]] = []  # (mean acceptance length, draft tokens)
    accepted_tok_s: list[float | None] = []
    drafted_total, lines = 0.0, 0
    for match in SPEC_LINE.finditer(text):
        lines += 1
        body, where = match["body"], f"{source}, line {text.count(chr(10), 0, match.start()) + 1}"
        rate = _SPEC_ACCEPTED_RATE.search(body)
        shown = None if rate is None else rate["rate"]
        try:
            tok_s = None if shown is None else float(shown)
        except ValueError:
            raise InputError(f"{where}: Accepted throughput reads {shown!r}, not a "
                             "number") from None
        accepted_tok_s.append(None if tok_s is None else checked(
            tok_s, where, "Accepted throughput", 0.0, MAX_COUNT,
            f"tokens per second, 0 to {MAX_COUNT:g}"))
        drafted = _SPEC_DRAFTED.search(body)
        tokens = checked(float(drafted["n"]), where, "Drafted", 0.0, MAX_COUNT,
                         COUNTER_RANGE) if drafted else None
        drafted_total += tokens or 0.0
        mean = _SPEC_MEAN.search(body)
        if mean is None:
            continue
        try:
            length = float(mean["mean"])
        except ValueError:
            raise InputError(f"{where}: Mean acceptance length reads {mean['mean']!r}, not a "
                             "number") from None
        kept = checked(length, where, "Mean acceptance length", 1.0, MAX_ACCEPT_LENGTH,
                       f"a verify step's kept tokens, 1 to {MAX_ACCEPT_LENGTH:g}")
        accepted = _SPEC_ACCEPTED.search(body)
        if accepted is None or tokens is None:
            raise InputError(f"{where}: a SpecDecoding line with a mean acceptance length but "
                             "no 'Accepted: N tokens, Drafted: M tokens' to weigh it by")
        kept_tokens = checked(float(accepted["n"]), where, "Accepted", 0.0, MAX_COUNT,
                              COUNTER_RANGE)  # its sign read, as Drafted's is
        if kept_tokens > tokens:
            raise InputError(f"{where}: Accepted: {accepted['n']} tokens past Drafted: "
                             f"{tokens:,.0f} tokens; a drafter accepts only tokens it drafted")
        means.append((kept, tokens))
    if not lines:
        return
    obs.spec_draft_tokens = drafted_total
    weight = sum(tokens for _, tokens in means)
    if weight:
        obs.spec_tokens_per_step = sum(kept * tokens for kept, tokens in means) / weight
        obs.notes.append(f"a drafter: {obs.spec_tokens_per_step:,.2f} tokens a verify step, the "
                         f"mean acceptance length of {len(means)} SpecDecoding "
                         f"{'line' if len(means) == 1 else 'lines'} weighted by the "
                         f"{weight:,.0f} tokens they drafted")
        _read_request_steps(obs, generated_tok_s, accepted_tok_s)
    elif drafted_total:
        obs.notes.append(f"{lines} SpecDecoding {'line' if lines == 1 else 'lines'} without a "
                         "mean acceptance length (vLLM before PR #16665, about 0.8.3-0.8.4): "
                         "a drafter serves, but the tokens a verify step keeps are not read")


def _read_request_steps(obs: Observation, generated_tok_s: float,
                        accepted_tok_s: list[float | None]) -> None:
    """The tokens a request's decode step kept over all its steps, drafted or not
    (spec_decode.tokens_per_request_step), from the stats lines' generation throughputs
    summed and the SpecDecoding lines' accepted throughputs summed: vLLM logs both each
    interval, over the same seconds, an interval without drafts no SpecDecoding line (it
    accepted none), so the sums stand for the log's tokens where its intervals are alike
    (VLLM_LOG_STATS_INTERVAL). Stats lines of 6,000, 4,000 and 6,000 tok/s, the first and
    last followed by drafter lines accepting 2,000 tok/s: 16,000 ÷ 12,000, 1.33 tokens a step,
    where their acceptance length reads 2.0. The log names no
    request, so each one's first token counts as a step (slightly low); a drafter's line
    after an interval that drafted nothing spreads its tokens over both intervals' seconds
    (low again). Unread, with a note, where a line gives no accepted throughput (before
    Sep 2025), or the sums leave no step."""
    if not accepted_tok_s or None in accepted_tok_s or not generated_tok_s:
        obs.notes.append("the SpecDecoding lines give no accepted throughput (vLLM before PR "
                         "#24127, Sep 2025) to set against the generation throughput: the steps "
                         "that drafted nothing are not counted, and a token's time is divided "
                         "by the acceptance length, which leaves them out")
        return
    accepted = sum(rate for rate in accepted_tok_s if rate is not None)
    try:
        per_step = tokens_per_request_step(generated_tok_s, accepted)
    except ValueError:
        obs.notes.append(f"the SpecDecoding lines accept {accepted:,.1f} tok/s summed, no less "
                         f"than the stats lines' {generated_tok_s:,.1f} generated: no decode "
                         "step left, so the tokens a request's step kept over all its steps "
                         "are not read")
        return
    kept = obs.spec_tokens_per_step or per_step
    obs.spec_tokens_per_request_step = min(per_step, kept)
    obs.notes.append(f"a drafter: {obs.spec_tokens_per_request_step:,.2f} tokens a request's "
                     f"decode step over all its steps (the stats lines' generation throughputs, "
                     f"{generated_tok_s:,.1f} tok/s summed, over those less the SpecDecoding "
                     f"lines' accepted, {accepted:,.1f}; each request's first token counted as "
                     f"a step), against {kept:,.2f} over the steps that drafted: a step that "
                     "proposed none (an n-gram drafter without a match, a request near "
                     "max_model_len) keeps 1 token")


# The launch, logged at start-up: "vLLM API server version 0.9.1" (entrypoints/openai/
# api_server.py) or V1's "Initializing a V1 LLM engine (v0.9.1) with config: …", and the
# seats as the arguments line gives them: "non-default args: {…, 'max_num_seqs': 64}" (a
# dict's repr) or the older "args: Namespace(…, max_num_seqs=64, …)". A dev build's suffix
# (0.9.2.dev12+g…) is left off: its release is what ridgeline models.
_LOG_VERSION = re.compile(r"(?:vLLM API server version |LLM engine \(v)(\d+\.\d+(?:\.\d+)?)")
# the same lines' word wherever it stands, to name one that is no release ("version abc")
_LOG_VERSION_WORD = re.compile(r"(?:vLLM API server version |LLM engine \(v)([^\s)]*)")
_LOG_MAX_NUM_SEQS = re.compile(r"'max_num_seqs': (\d+)|\bmax_num_seqs=(\d+)")
# V0's engine line on a release whose default was V1 ("Initializing a V0 LLM engine (v0.9.1)",
# VLLM_USE_V1=0): its pool is V0's, so the release is stated as "0.9.1 V0"
_LOG_V0_ENGINE = re.compile(r"\bV0 LLM engine \(v")


def _read_launch(text: str, source: str, obs: Observation) -> None:
    """The release and the seats the log's start-up lines state, each where it states one
    (several different, as from restarts of other launches: neither)."""
    versions = {m[1] for m in _LOG_VERSION.finditer(text)}
    junk = sorted({m[1] for m in _LOG_VERSION_WORD.finditer(text)
                   if not _LOG_VERSION.match(m[0])})
    if junk:  # read as no version stated: said, not passed over
        obs.notes.append(f"{source} states vLLM's version as "
                         f"{', '.join(shorten(repr(w)) for w in junk)}, not a release number "
                         "(such as 0.9.1): that line is left unread")
    if len(versions) == 1:
        obs.engine_version = versions.pop() + (" V0" if _LOG_V0_ENGINE.search(text) else "")
    seats = {int(checked(float(m[1] or m[2]), source, "max_num_seqs", 1, MAX_REQUESTS,
                         REQUESTS_RANGE)) for m in _LOG_MAX_NUM_SEQS.finditer(text)}
    if len(seats) == 1:
        obs.max_num_seqs = seats.pop()


def _read_startup_pool(text: str, source: str, obs: Observation) -> None:
    """Each engine's pool from its start-up lines, the smallest where several engines (or
    restarts) logged one: V1's "GPU KV cache size" in tokens; else V0's block count ×
    the block size its "Maximum concurrency" line implies (27,000 blocks at 52.73× of 8,192
    tokens: 16 a block, 432,000 tokens). Left unset where neither is logged. A line sizing 0
    tokens is a start-up that failed there (_zero_pool), refused or cautioned, not read."""
    zeros: list[tuple[int, str]] = []  # each line that sized a pool of 0 tokens, and its words
    sizes = []
    for m in _KV_CACHE_TOKENS.finditer(text):
        sizes.append(checked(float(m[1].replace(",", "")), source, "GPU KV cache size", 0.0,
                             MAX_TOKENS, f"a number of tokens, 0 to {MAX_TOKENS:g}"))
        if not sizes[-1]:
            zeros.append((text.count("\n", 0, m.start()) + 1, m[0]))
    what = "'GPU KV cache size'"
    unsized = []  # block counts no concurrency line follows: their block size is unknown
    if not sizes:
        for m in _GPU_BLOCKS.finditer(text):
            blocks = float(m[1])
            if not blocks:
                zeros.append((text.count("\n", 0, m.start()) + 1, m[0]))
                continue
            after = _MAX_CONCURRENCY.search(text, m.end())
            if after is None:
                unsized.append(m[0])
                continue
            length, times = float(after[1].replace(",", "")), float(after[2])
            size = times * length / blocks
            slack = 0.005 * length / blocks  # the concurrency is printed to 0.01
            if round(size) >= 1 and slack < 0.5 and abs(size - round(size)) <= slack + 1e-9:
                sizes.append(checked(blocks * round(size), source, "GPU blocks × block size",
                                     0.0, MAX_TOKENS, f"a number of tokens, 0 to {MAX_TOKENS:g}"))
        what = "'# GPU blocks' × the block size its 'Maximum concurrency' line implies"
    sizes = [v for v in sizes if v > 0]
    if zeros:
        _zero_pool(source, obs, zeros, served=bool(sizes))
    if not sizes:
        if unsized:  # said, not silently modelled past: the log's count is the server's pool
            obs.notes.append(f"the start-up log's {unsized[0]!r} is not read as the pool: no "
                             "'Maximum concurrency for N tokens per request' line after it "
                             "gives the tokens a block holds (--block-size); the pool is "
                             "modelled")
        return
    obs.pool_tokens = min(sizes)
    obs.notes.append(f"the pool: {obs.pool_tokens:,.0f} tokens an engine, from the start-up "
                     f"log's {what}" + (f" (the smallest of {len(sizes)} lines)"
                                        if len(sizes) > 1 else ""))


def _zero_pool(source: str, obs: Observation, zeros: list[tuple[int, str]],
               served: bool) -> None:
    """A start-up line sizing a KV cache of 0 tokens ('GPU KV cache size: 0 tokens', '# GPU
    blocks: 0'): an engine with no block to hold a token cannot serve a request, and vLLM
    stops its start-up there (V0's raise_if_cache_size_invalid, vllm/worker/worker.py: "No
    available memory for the cache blocks"; V1 refuses before it logs a size,
    kv_cache_utils.check_enough_kv_cache_memory). Where no start-up line sized a pool above
    0, the log's stats lines cannot be that engine's: refused, naming the first such line,
    as any impossible reading in a log is. Where another did (a restart after the failed
    start, the log appended), a caution names it and its 0 is left out of the pool."""
    first, shown = zeros[0]
    if not served:
        raise InputError(f"{source}, line {first}: {shown!r} sizes a KV cache of 0 tokens; an "
                         "engine with no room for a token cannot serve, and vLLM stops its "
                         "start-up there, yet this log has stats lines: a launch that failed, "
                         "joined to another's log? Keep the lines of the launch that served")
    obs.notes.append(f"caution: line {first}, {shown!r}, sizes a KV cache of 0 tokens, which "
                     "no engine serves from (vLLM stops its start-up there): read as a start "
                     "that failed before a restart, and left out of the pool"
                     + (f" ({len(zeros)} such lines)" if len(zeros) > 1 else ""))


def _log_engine_and_time(text: str, match: re.Match[str]) -> tuple[str | None, float | None]:
    """A stats line's engine ('Engine 001: ' before it, else None) and its time of year in
    seconds (months counted as 31 days: only its gaps matter), else None."""
    head = text[text.rfind("\n", 0, match.start()) + 1:match.start()]
    engine = _LOG_ENGINE_TAIL.search(head)
    stamp = _LOG_TIME.search(head)
    at = None
    if stamp:
        month, day, hour, minute, second = (int(g) for g in stamp.groups())
        at = (((month * 31 + day) * 24 + hour) * 60 + minute) * 60.0 + second
    return (engine[1] if engine else None), at


def _backwards_time(text: str, obs: Observation,
                    lines: list[tuple[str | None, float | None]], numbers: list[int]) -> None:
    """A caution where the stats lines' times go backwards, naming the first such step: one
    server logs its lines in time order (each interval's, every engine's, from the one
    frontend process: vllm/v1/metrics/loggers.py), so a line stamped before the one above it
    is another run's, or another server's, in the same file (logs joined, or sharing it), and
    the means over the lines mix them. The year is not logged: December's lines followed by
    January's are the year turning, not a step back."""
    last: tuple[int, float] | None = None  # the last stamped line: its number and time
    for (_, at), number in zip(lines, numbers, strict=True):
        if at is None:
            continue
        if last is not None and at < last[1]:
            was, now = (_stamp(text, n) for n in (last[0], number))
            if not (was.startswith("12-") and now.startswith("01-")):  # the year turned
                obs.notes.append(f"caution: the stats lines' times go backwards at line "
                                 f"{number} ({now}, after line {last[0]}'s {was}): not one "
                                 "server's log in time order (logs joined, or several servers "
                                 "writing one file?); the means are over every line, whichever "
                                 "run wrote it")
                return
        last = (number, at)


def _stamp(text: str, number: int) -> str:
    """The month-day and time a log line's stamp reads ('11-20 10:00:00')."""
    stamp = _LOG_TIME.search(text.split("\n")[number - 1])
    return stamp[0] if stamp else "?"


def _per_engine_rounds(obs: Observation, lines: list[tuple[str | None, float | None]],
                       prompt: list[float], gen: list[float]) -> int:
    """Each data-parallel engine's mean over the log's logging rounds, where each line is one
    engine's (V1 without --aggregate-engine-logging): vLLM logs every engine's line together
    each interval, an idle engine's at debug level, so a round without an engine's line is
    that engine idle (0 running, waiting, KV, tokens), not missing. Engine 000 logging 6 rounds
    at 1,000 tok/s and engine 001 one: (6,000 + 1,000) ÷ 6 rounds ÷ 2 engines = 583 tok/s each,
    1,167 in all — not the lines' mean of 1,000 × 2. A round ends where an engine logs again
    or the clock moves past ROUND_S from its first line. Rewrites the observation's series as
    each round's mean over the engines, with each engine's (KV usage, waiting) for the wall;
    returns the number of rounds."""
    engines = sorted({engine for engine, _ in lines if engine is not None})
    rounds: list[dict[str, int]] = []  # each round: engine -> its line's index
    start: float | None = None
    alone = sum(1 for engine, _ in lines if engine is None)
    if alone:  # another server's (V0, one engine): no engine's round to count it in
        obs.notes.append(f"{alone:,} stats {'line' if alone == 1 else 'lines'} without an "
                         "'Engine NNN:' prefix among the engines' left out: another server's?")
    for i, (engine, at) in enumerate(lines):
        if engine is None:
            continue
        late = at is not None and start is not None and not 0 <= at - start < ROUND_S
        if not rounds or engine in rounds[-1] or late:
            rounds.append({})
            start = at
        rounds[-1][engine] = i
    series = (obs.running, obs.waiting, obs.kv_usage, prompt, gen)
    old = [list(values) for values in series]
    for values in series:
        values.clear()
    n = len(engines)
    for members in rounds:
        for values, was in zip(series, old, strict=True):
            values.append(sum(was[i] for i in members.values()) / n)
        obs.core_pressure += [(old[2][members[e]], old[1][members[e]]) if e in members
                              else (0.0, 0.0) for e in engines]
        obs.busiest_running.append(max(old[0][i] for i in members.values()))
    obs.engines = n
    return len(rounds)
