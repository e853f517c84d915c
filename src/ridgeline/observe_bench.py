"""Reading a serving benchmark's result JSON into an Observation: `vllm bench serve
--save-result`, SGLang's bench_serving, genai-perf and aiperf."""

from __future__ import annotations

import itertools
import json
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
        data: Any = json.loads(text)
    except ValueError:  # not JSON, or a number past Python's 4,300 digits
        lines = [ln for ln in text.splitlines() if ln.strip()]
        try:  # SGLang, and vllm bench serve --append-result, add one JSON object per run
            data = json.loads(lines[-1])
        except (ValueError, IndexError):
            raise InputError(f"{source} is not a benchmark result JSON, nor a log with vLLM's "
                             "stats lines") from None
        runs = sum(1 for ln in lines if ln.lstrip().startswith("{"))
    if isinstance(data, list) and data:
        data, runs = data[-1], len(data)
    if not isinstance(data, dict):
        raise InputError(f"{source} is not a benchmark result JSON object")
    obs = Observation(source, "bench")
    if runs > 1:
        obs.notes.append(f"{runs} runs in the file: the last one read"
                         + (f" (max concurrency {data['max_concurrency']})"
                            if data.get("max_concurrency") is not None else ""))
    if "output_throughput" in data:  # vLLM / SGLang
        def field(key: str, high: float, what: str) -> float | None:
            return _bench_field(data, key, source, high, what)

        obs.generation_tok_s = field("output_throughput", MAX_COUNT, "tokens per second")
        obs.client_concurrency = field("max_concurrency", MAX_COUNT, "requests") or None
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
        if done:
            for attr, key in (("mean_prompt_tokens", "total_input_tokens"),
                              ("mean_output_tokens", "total_output_tokens")):
                setattr(obs, attr, checked((field(key, MAX_COUNT, "tokens") or 0) / done,
                                           source, f"{key} ÷ completed", 0.0, MAX_TOKENS,
                                           REQUEST_TOKENS_RANGE))
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
    if batch is not None:
        obs.notes.append("running batch estimated by Little's law: output tok/s × mean ITL")
    return obs


def _per_token_itl(data: dict[str, Any], obs: Observation, source: str) -> None:
    """The time per token per request, for Little's law and the comparison: the bench's ITL
    is the gap between streamed chunks (vllm bench serve: itls += output.itl), a token each
    only when each chunk carries one; its TPOT is (latency − TTFT) ÷ (output − 1), per token.
    With speculative decoding (vLLM writes spec_decode_acceptance_length, the tokens per
    step) TPOT is read; where the mean ITL is past PER_CHUNK_ITL × the mean TPOT without it,
    a caution: 2,000 tok/s × a 60 ms chunk is a batch of 120, × a 20 ms token 40."""
    latency = obs.latency_ms
    if "itl" not in latency:
        if "tpot" in latency:
            latency["itl"] = latency["tpot"]
        return
    if "tpot" not in latency:
        return
    itl, tpot = latency["itl"].get("mean"), latency["tpot"].get("mean")
    accepted = _bench_field(data, "spec_decode_acceptance_length", source, MAX_COUNT,
                            "tokens per step")
    if accepted is not None and accepted > 1:
        latency["itl"] = latency["tpot"]
        obs.notes.append(f"speculative decoding ({accepted:.2f} tokens a step): the bench's ITL "
                         "is per streamed chunk, so its TPOT is read as the time per token")
    elif itl and tpot and itl > PER_CHUNK_ITL * tpot:
        obs.notes.append(f"caution: the mean ITL ({itl:,.1f} ms) is {itl / tpot:.1f}× the mean "
                         f"TPOT ({tpot:,.1f} ms): the stream carries several tokens a chunk "
                         "(speculative decoding, a server stream interval), and the batch read "
                         "by Little's law, output tok/s × ITL, is that much too high")


MAX_BENCH_S = 1e7  # a benchmark's duration or a request's latency: under four months
MIN_ITL_MS = 1e-3  # a token a microsecond: past any engine


def _rising(found: dict[str, float], stem: str, source: str) -> None:
    """A result's percentiles rise with their rank, or the file is refused."""
    ranked = [found[k] for k in ("p50", "p90", "p99") if k in found]
    if any(b < a * (1 - 1e-6) for a, b in itertools.pairwise(ranked)):
        raise InputError(f"{source}: the {stem} percentiles fall as they rise "
                         f"(p50 ≤ p90 ≤ p99 expected): {ranked}")


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
