"""Reading a serving benchmark's result JSON into an Observation: `vllm bench serve
--save-result`, SGLang's bench_serving, genai-perf and aiperf."""

from __future__ import annotations

import itertools
import math
from typing import Any

from ridgeline.errors import InputError, shorten
from ridgeline.observation import (
    MAX_COUNT,
    MAX_REQUESTS,
    MAX_TOKENS,
    REQUEST_TOKENS_RANGE,
    REQUESTS_RANGE,
    Observation,
    checked,
)
from ridgeline.spec_decode import FEWER_STEPS, drafted_rows, tokens_per_request_step
from ridgeline.userfiles import json_loads

# vllm bench serve's names; SGLang's bench_serving names end-to-end e2e_latency_ms
_BENCH_KEYS = {"ttft": ("ttft_ms",), "itl": ("itl_ms",), "tpot": ("tpot_ms",),
               "e2e": ("e2el_ms", "e2e_latency_ms")}
# Both benchmarks write np.mean(itls or 0) (and tpots, ttfts): 0.0 for a family they measured
# nothing of — every request one token long, or a stream that never came (vllm/benchmarks/
# serve.py calculate_metrics; SGLang's bench_serving alike); read as absent, not as 0 ms
_ZERO_WHEN_NONE = ("ttft", "itl", "tpot")
# The backend names the client's request format, not the server: `vllm bench serve`
# defaults to "openai" and writes it as "backend" and "endpoint_type"; its "vllm" and
# "sglang" post OpenAI completions, which any server answers. SGLang's bench_serving
# "sglang" (or "sglang-native") posts to SGLang's own /generate: only that names the engine.
_NATIVE_BACKENDS = {"sglang": "sglang", "sglang-native": "sglang"}
PER_CHUNK_ITL = 1.5  # mean ITL over mean TPOT past which the stream carries several tokens
_GENAI = {"ttft": "time_to_first_token", "itl": "inter_token_latency",
          "e2e": "request_latency"}


def from_bench(text: str, source: str) -> Observation:
    """`vllm bench serve --save-result`, SGLang bench_serving, or genai-perf/aiperf JSON."""
    runs = 1
    try:
        data: Any = json_loads(text, source)
    except ValueError:  # not JSON, or a number past Python's 4,300 digits
        lines = [ln for ln in text.splitlines() if ln.strip()]
        try:  # SGLang, and vllm bench serve --append-result, add one JSON object per run
            data = json_loads(lines[-1], source)
        except (ValueError, IndexError):
            raise InputError(f"{source} is not a benchmark result JSON, nor a log with vLLM's "
                             "stats lines") from None
        runs = sum(1 for ln in lines if ln.lstrip().startswith("{"))
    if isinstance(data, list) and data:
        data, runs = data[-1], len(data)
    if not isinstance(data, dict):
        raise InputError(f"{source} is not a benchmark result JSON object")
    obs = Observation(source, "bench")
    request_rate = None  # requests finished per second, for Little's law without an ITL
    if runs > 1:
        obs.notes.append(f"{runs} runs in the file: the last one read"
                         + (f" (max concurrency {data['max_concurrency']})"
                            if data.get("max_concurrency") is not None else ""))
    if "output_throughput" in data:  # vLLM / SGLang
        def field(key: str, high: float, what: str) -> float | None:
            return _bench_field(data, key, source, high, what)

        obs.generation_tok_s = field("output_throughput", MAX_COUNT, "tokens per second")
        cap = field("max_concurrency", MAX_COUNT, "requests")
        if cap == 0:  # not 'no cap': vllm bench serve writes null for that
            raise InputError(f"{source}: max_concurrency is 0, a cap under which no request "
                             "runs (a run without a cap writes null)")
        if cap is not None and cap != round(cap):  # 0.5 was read as a batch of 0.5
            raise InputError(f"{source}: max_concurrency is {cap:g}; a cap on the requests "
                             "in flight is a whole number")
        obs.client_concurrency = cap or None
        _check_offered_rate(data.get("request_rate"), source)
        obs.duration_s = field("duration", MAX_BENCH_S, "seconds")
        if obs.duration_s == 0:
            raise InputError(f"{source}: duration is 0; a benchmark lasts some seconds")
        done = field("completed", MAX_COUNT, "requests")
        if done == 0 and obs.generation_tok_s:
            raise InputError(f"{source}: completed is 0 while output_throughput is "
                             f"{obs.generation_tok_s:,.1f} tok/s: no request finished to "
                             "measure")
        produced = field("total_output_tokens", MAX_COUNT, "tokens")
        if produced and obs.generation_tok_s == 0:
            raise InputError(f"{source}: output_throughput is 0 while {produced:,.0f} output "
                             "tokens were produced")
        if done is not None and done != round(done):
            raise InputError(f"{source}: completed is {done:g}; requests complete whole")
        obs.finished_requests = done
        if done:
            for attr, key in (("mean_prompt_tokens", "total_input_tokens"),
                              ("mean_output_tokens", "total_output_tokens")):
                tokens = field(key, MAX_COUNT, "tokens")
                if tokens is None:  # not written: the length unknown, not 0 tokens (read as
                    continue  # 0, a missing total_input_tokens made the context the outputs')
                if tokens != round(tokens):
                    raise InputError(f"{source}: {key} is {tokens:g}; tokens are counted whole")
                if tokens == 0 and key == "total_input_tokens":  # read as prompts of 0 tokens
                    raise InputError(f"{source}: total_input_tokens is 0 over {done:,.0f} "
                                     "completed requests; a prompt holds one token at least")
                setattr(obs, attr, checked(tokens / done, source, f"{key} ÷ completed", 0.0,
                                           MAX_TOKENS, REQUEST_TOKENS_RANGE))
        for key, stems in _BENCH_KEYS.items():
            stem = next((st for st in stems if f"mean_{st}" in data or f"median_{st}" in data),
                        stems[0])
            values = {stat: field(f"{stat}_{stem}", MAX_BENCH_S * 1e3, "milliseconds")
                      for stat in ("mean", "median", "p90", "p99")}
            found = {("p50" if k == "median" else k): v for k, v in values.items() if v is not None}
            if key in _ZERO_WHEN_NONE and found and not any(found.values()):
                obs.notes.append(f"{stem} is 0 throughout: nothing measured (single-token "
                                 "outputs, or no streaming), read as absent")
                continue
            _rising(found, stem, source)
            if found:
                obs.latency_ms[key] = found
        _per_token_itl(data, obs, source)
        itl = obs.latency_ms.get("itl", {}).get("mean")
        for key in ("total_output_tokens", "output_throughput"):
            if itl and field(key, MAX_COUNT, "a count") == 0:
                raise InputError(f"{source}: {key} is 0, yet the mean time between a request's "
                                 f"tokens is {itl:g} ms: there are no tokens to have gaps "
                                 "between")
        request_rate = field("request_throughput", MAX_COUNT, "requests per second")
        if request_rate is None and done is not None and obs.duration_s:
            request_rate = done / obs.duration_s
    elif "time_to_first_token" in data:  # genai-perf / aiperf
        def stat(stem: str, key: str, high: float, what: str) -> float | None:
            return _genai_stat(data, stem, key, source, high, what)

        obs.generation_tok_s = stat("output_token_throughput", "avg", MAX_COUNT,
                                    "tokens per second")
        for key, stem in _GENAI.items():
            scale = _genai_ms(data, stem, source)
            found = {k: v * scale for k, v in
                     ((k, stat(stem, f, MAX_BENCH_S * 1e3 / scale, "a latency"))
                      for k, f in (("mean", "avg"), ("p50", "p50"), ("p90", "p90"),
                                   ("p99", "p99"))) if v is not None}
            _rising(found, stem, source)
            if found:
                obs.latency_ms[key] = found
        count = stat("request_count", "avg", MAX_COUNT, "requests")
        request_rate = stat("request_throughput", "avg", MAX_COUNT, "requests per second")
        if count is not None and count < 1:
            raise InputError(f"{source}: request_count is {count:g}; a run counts whole "
                             "requests, at least 1")
        for attr, stem, total in (("mean_prompt_tokens", "input_sequence_length", "total_isl"),
                                  ("mean_output_tokens", "output_sequence_length", "total_osl")):
            length = stat(stem, "avg", MAX_TOKENS, "tokens")  # genai-perf: each request's
            summed = stat(total, "avg", MAX_COUNT, "tokens")  # aiperf: the run's sum
            if length is None and summed is not None and count:
                length = checked(summed / count, source, f"{total} ÷ request_count", 0.0,
                                 MAX_TOKENS, REQUEST_TOKENS_RANGE)
            if length is not None:
                setattr(obs, attr, length)
        config = data.get("input_config")
        endpoint = config.get("endpoint") if isinstance(config, dict) else None
        names = endpoint.get("model_names") if isinstance(endpoint, dict) else None
        if isinstance(names, list):
            obs.model_names += [n.strip() for n in names if isinstance(n, str) and n.strip()]
    else:
        raise InputError(f"{source}: not a vLLM, SGLang or genai-perf benchmark result "
                         "(no output_throughput or time_to_first_token)")
    if obs.generation_tok_s is None:
        raise InputError(f"{source}: the benchmark result has no output throughput")
    itl = obs.latency_ms.get("itl", {}).get("mean")
    if itl is not None and itl < MIN_ITL_MS:
        raise InputError(f"{source}: the mean inter-token latency is {itl:g} ms: under a "
                         "microsecond is not a measurement")
    checked(obs.generation_tok_s, source, "the output throughput", 0.0, MAX_COUNT,
            f"tokens per second, 0 to {MAX_COUNT:g}")
    batch = obs.batch
    if batch is not None:
        checked(batch, source, "the running batch (output tok/s × mean ITL)", 0.0, MAX_REQUESTS,
                REQUESTS_RANGE)
    if "output_throughput" in data:
        _counts_agree(data, obs, source)
    model = data.get("model_id")
    if isinstance(model, str) and model.strip():
        obs.model_names.append(model.strip())
    backend = str(data.get("backend") or "").strip().lower()
    sglang_bench = any(k.endswith("_e2e_latency_ms") for k in data)  # vLLM's: e2el_ms
    if sglang_bench and backend in _NATIVE_BACKENDS:  # SGLang's own /generate
        obs.engine_family = _NATIVE_BACKENDS[backend]
    elif backend:
        obs.notes.append(f"backend {shorten(backend)!r} names the benchmark's request format, "
                         "not the server it ran against: --engine names the engine (else "
                         "the card's default)")
    _settle_batch(obs, request_rate)
    return obs


def _counts_agree(data: dict[str, Any], obs: Observation, source: str) -> None:
    """A vLLM or SGLang result's rates are its counts over its duration (serve.py
    calculate_metrics: sum(output lens) ÷ duration, completed ÷ duration); a file where they
    part by more than COUNTS_AGREE is refused: 20,000 output tok/s beside 128,000 tokens in
    61.2 s (2,091.5 tok/s) would read as a batch ten times the one that ran."""
    duration = obs.duration_s
    if not duration:
        return
    for rate_key, count_key, unit in (("output_throughput", "total_output_tokens", "tok/s"),
                                      ("request_throughput", "completed", "req/s")):
        rate = _bench_field(data, rate_key, source, MAX_COUNT, unit)
        count = _bench_field(data, count_key, source, MAX_COUNT, "a count")
        if rate is None or count is None:
            continue
        expected = count / duration
        if abs(rate - expected) > COUNTS_AGREE * max(rate, expected):
            raise InputError(f"{source}: {rate_key} is {rate:,.1f} {unit}, but {count_key} ÷ "
                             f"duration is {expected:,.1f} ({count:,.0f} ÷ {duration:g} s): the "
                             "result contradicts itself")


def _settle_batch(obs: Observation, request_rate: float | None) -> None:
    """The running batch a bench implies, by Little's law: output tok/s × the mean time per
    token where it measured one (2,091.5 × 28 ms = 58.6); else requests per second × the
    time a request spends decoding, mean end-to-end − mean TTFT (8.17 × 7.15 s = 58.4); none
    where every request had one output token or neither latency is there. A batch past the
    client's cap on requests in flight (max_concurrency) is impossible: read as the cap,
    with a caution."""
    cap = obs.client_concurrency
    itl = obs.latency_ms.get("itl", {}).get("mean")
    if itl:
        batch = obs.batch
        if batch is None:  # no output throughput to multiply
            return
        how = "output tok/s × mean ITL"
        obs.notes.append(f"running batch estimated by Little's law: {how}")
    else:
        e2e = obs.latency_ms.get("e2e", {}).get("mean")
        ttft = obs.latency_ms.get("ttft", {}).get("mean", 0.0)
        if obs.mean_output_tokens is not None and obs.mean_output_tokens <= 1:
            obs.notes.append("one output token a request: no decode, so no running batch")
            return
        if request_rate is None or e2e is None:
            obs.notes.append("no ITL or TPOT, and no request rate and end-to-end latency to "
                             "read the running batch by: the batch is unknown")
            return
        decode_s = max(0.0, e2e - ttft) / 1e3
        batch = obs.estimated_batch = request_rate * decode_s
        how = "request_throughput × (mean end-to-end − mean TTFT)"
        obs.notes.append(f"no ITL or TPOT in the result: the running batch is Little's law on "
                         f"requests, {how} = {request_rate:,.2f} req/s × {decode_s:,.2f} s = "
                         f"{batch:,.1f}")
    if cap and batch > cap * (1 + COUNTS_AGREE):
        obs.notes.append(f"caution: {how} gives a batch of {batch:,.1f}, past the client's cap "
                         f"of {cap:,.0f} requests in flight (max_concurrency), which no batch "
                         "passes: the stream carries several tokens a chunk, or a field is "
                         "wrong; the batch is read as the cap")
        obs.estimated_batch = cap


def _per_token_itl(data: dict[str, Any], obs: Observation, source: str) -> None:
    """The time per token per request, for Little's law and the comparison: the bench's ITL
    is the gap between streamed chunks (vllm bench serve: itls += output.itl), a token each
    only when each chunk carries one; its TPOT is (latency − TTFT) ÷ (output − 1), per token.
    With speculative decoding (vLLM writes spec_decode_acceptance_length, the tokens per
    step) TPOT is read; where the mean ITL is past PER_CHUNK_ITL × the mean TPOT without it,
    a caution: 2,000 tok/s × a 60 ms chunk is a batch of 120, × a 20 ms token 40."""
    latency = obs.latency_ms
    accepted = _bench_field(data, "spec_decode_acceptance_length", source, MAX_COUNT,
                            "tokens per step")
    if accepted is not None and accepted > 1:  # 1 + accepted ÷ drafts: the bonus token's in
        obs.spec_tokens_per_step = accepted
        _read_request_steps(data, obs, source, accepted)
    if "itl" not in latency:
        if "tpot" in latency:
            latency["itl"] = latency["tpot"]
        return
    if "tpot" not in latency:
        return
    itl, tpot = latency["itl"].get("mean"), latency["tpot"].get("mean")
    if accepted is not None and accepted > 1:
        latency["itl"] = latency["tpot"]
        obs.notes.append(f"speculative decoding ({accepted:.2f} tokens a step): the bench's ITL "
                         "is per streamed chunk, so its TPOT is read as the time per token")
    elif itl and tpot and itl > PER_CHUNK_ITL * tpot:
        obs.notes.append(f"caution: the mean ITL ({itl:,.1f} ms) is {itl / tpot:.1f}× the mean "
                         f"TPOT ({tpot:,.1f} ms): the stream carries several tokens a chunk "
                         "(speculative decoding, a server stream interval), and the batch read "
                         "by Little's law, output tok/s × ITL, is that much too high")


def _read_request_steps(data: dict[str, Any], obs: Observation, source: str,
                        kept: float) -> None:
    """The tokens a request's decode step kept over all its steps, drafted or not
    (spec_decode.tokens_per_request_step), where vllm bench serve wrote the drafts it
    accepted: spec_decode_accepted_tokens, the server's counter over the run
    (vllm/benchmarks/serve.py: its /metrics before and after), against the run's
    total_output_tokens less a first token for each completed request (128,000 tokens of 500
    requests, 60,000 accepted: 1.89 a step). TPOT, per token over every step, is set against
    that; an older result without the fields keeps the acceptance length (a caution says so).
    Fewer steps than spec_decode_num_drafts past FEWER_STEPS (other traffic on the server
    while the run ran, or failed requests) leave it unread, with a note; else the drafts over
    the steps, and spec_decode_draft_tokens over the drafts, give the verify step's rows
    (spec_decode.drafted_rows)."""
    fields = [_bench_field(data, key, source, MAX_COUNT, what) for key, what in (
        ("spec_decode_accepted_tokens", "tokens"), ("total_output_tokens", "tokens"),
        ("completed", "requests"))]
    if None in fields:
        return
    accepted, produced, done = (float(v or 0.0) for v in fields)
    try:
        per_step = tokens_per_request_step(produced, accepted, done)
    except ValueError as exc:
        obs.notes.append(f"spec_decode_accepted_tokens against total_output_tokens: {exc}, so "
                         "the tokens a request's step kept over all its steps are not read")
        return
    steps = produced - done - accepted
    drafts = _bench_field(data, "spec_decode_num_drafts", source, MAX_COUNT, "drafts")
    if drafts is not None and drafts > steps * (1 + FEWER_STEPS):
        obs.notes.append(f"the run's {produced:,.0f} output tokens leave {steps:,.0f} decode "
                         f"steps once {done:,.0f} first and {accepted:,.0f} accepted tokens are "
                         f"taken off, fewer than its {drafts:,.0f} drafts: the server served "
                         "more than the run, so the tokens a request's step kept over all its "
                         "steps are not read")
        return
    obs.spec_tokens_per_request_step = min(per_step, kept)
    if drafts:  # the verify step's rows: the share that drafted, the drafts each proposed
        draft_tokens = _bench_field(data, "spec_decode_draft_tokens", source, MAX_COUNT,
                                    "tokens")
        try:
            obs.spec_drafted_share, obs.spec_drafts_per_draft = drafted_rows(
                steps, drafts, draft_tokens)
            obs.spec_drafted_source = ("spec_decode_num_drafts ÷ the run's decode steps "
                                       "(output less first less accepted tokens)")
        except ValueError as exc:
            obs.notes.append(f"{exc}, so the verify step is priced as if every row drafted "
                             "its whole draft")
    obs.notes.append(f"a drafter: {obs.spec_tokens_per_request_step:,.2f} tokens a request's "
                     f"decode step over all its steps ({produced:,.0f} output tokens less "
                     f"{done:,.0f} first, over those less the {accepted:,.0f} accepted), "
                     f"against {kept:,.2f} over the steps that drafted (its acceptance length)")


MAX_BENCH_S = 1e7  # a benchmark's duration or a request's latency: under four months
COUNTS_AGREE = 0.05  # a rate and its counts over the duration, or a batch and the cap, past this
MIN_ITL_MS = 1e-3  # a token a microsecond: past any engine


def _rising(found: dict[str, float], stem: str, source: str) -> None:
    """A result's percentiles rise with their rank, and its mean is above 0 where any of
    them is (a mean of latencies ≥ 0 is at least (1 - q) × their q-th percentile: a mean
    TTFT of 0 beside a p50 of 150 ms printed as measured); else the file is refused."""
    ranked = [found[k] for k in ("p50", "p90", "p99") if k in found]
    if any(b < a * (1 - 1e-6) for a, b in itertools.pairwise(ranked)):
        raise InputError(f"{source}: the {stem} percentiles fall as they rise "
                         f"(p50 ≤ p90 ≤ p99 expected): {ranked}")
    above = next((k for k in ("p50", "p90", "p99") if found.get(k, 0) > 0), None)
    if found.get("mean") == 0 and above is not None:
        raise InputError(f"{source}: the {stem} mean is 0 but its {above} is "
                         f"{found[above]:g}: a mean of latencies is above 0 where any is")


_TIME_UNITS_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3}


def _genai_ms(data: dict[str, Any], stem: str, source: str) -> float:
    """Milliseconds per unit of a genai-perf/aiperf latency entry (ms when it names none)."""
    entry = data.get(stem)
    unit = entry.get("unit") if isinstance(entry, dict) else None
    if unit is None:
        return 1.0
    if unit not in _TIME_UNITS_MS:
        raise InputError(f"{source}: {stem} has unit {shorten(str(unit))!r}, not a time unit "
                         f"({', '.join(_TIME_UNITS_MS)})")
    return _TIME_UNITS_MS[unit]


def _genai_stat(data: dict[str, Any], stem: str, key: str, source: str, high: float,
                what: str) -> float | None:
    """genai-perf/aiperf's {stem: {key: number}}: absent is None; anything else but a number
    from 0 to ``high`` is refused naming the field."""
    entry = data.get(stem)
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise InputError(f"{source}: {stem} must be an object of statistics (avg, p50, …), got "
                         f"{shorten(repr(entry))}")
    if entry.get(key) is None:
        return None
    number = _num(entry[key])
    if number is None:
        raise InputError(f"{source}: {stem}.{key} must be a number ({what}), got "
                         f"{shorten(repr(entry[key]))}")
    return checked(number, source, f"{stem}.{key}", 0.0, high, f"{what}, 0 to {high:g}")


def _check_offered_rate(value: object, source: str) -> None:
    """The run's --request-rate as vllm bench serve and SGLang's bench_serving write it: a
    positive number of requests per second, or "inf" (every request at once; JSON's
    Infinity reads so too), or absent; anything else (-3, 0, "fast") is refused naming it.
    It is not read further: the run's own request_throughput is what was served."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("inf", "infinity")):
        return
    number = _num(value)
    if number is None or number <= 0:
        raise InputError(f"{source}: request_rate must be a positive number of requests per "
                         f"second or \"inf\", got {value!r}")


def _bench_field(data: dict[str, Any], key: str, source: str, high: float,
                 what: str) -> float | None:
    """A benchmark result's number: absent is None; present, it must be a number from 0 to
    ``high``, or the file is refused naming the field."""
    value = data.get(key)
    if value is None:
        return None
    number = _num(value)
    if number is None:
        raise InputError(f"{source}: {key} must be a number ({what}), got {value!r}")
    return checked(number, source, key, 0.0, high, f"{what}, 0 to {high:g}")


def _num(value: object) -> float | None:
    """A JSON number as a float (an integer too long for one is infinite); None otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return math.inf
    return None if math.isnan(number) else number
