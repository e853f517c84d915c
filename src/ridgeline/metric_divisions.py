"""Each speed metric of a measurement row as the division of step times it is, through step_cost.

Metric definitions (validation/README.md), converted once here:
- decode_tok_s_per_user: output tokens ÷ the time to generate them at batch 1; llama-bench
  ``tgN @ dD`` grows the cache from D to D+N, so the mean step is at D + N/2 (step time is
  linear in context).
- prefill_tok_s: prompt tokens ÷ prefill time; llama.cpp splits a prompt into ubatches of
  512 tokens, each attending to what came before.
- output_throughput_tok_s: generated tokens per second over all sequences and GPUs. With a
  batch: a static batch (prefill, then output_len decode steps). llama-batched-bench S_TG:
  the decode steps only. Without a batch: the engine runs as many sequences as its KV pool
  and batch limit allow.
- ttft_ms: one prompt's prefill in one pass, whose last position's logits are the first token.
Each is a frozen division (PromptDivision, DecodeDivision, ThroughputDivision) whose parts
`validate --explain` shows, so the division shown is the prediction (predict.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ridgeline.capacity import max_batch
from ridgeline.cost import Seq, decode_batch, mean_decode_context, step_time_s
from ridgeline.datafiles import engine_defaults
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.errors import InputError
from ridgeline.llamacpp_batching import llamacpp_n_ubatch, prefill_time_s
from ridgeline.measurements import Measurement

# the serving throughputs: generated tokens over every sequence (a static batch with its
# prefill, an engine's full pool, or llama-batched-bench's S_TG decode steps)
THROUGHPUT_METRICS = ("output_throughput_tok_s", "output_throughput_tok_s_per_gpu")


@dataclass(frozen=True)
class PromptDivision:
    """A prompt figure as the division it is: ``prompts`` × ``tokens`` ÷ ``prefill_s`` (a
    prefill speed), or ``prefill_s`` in ms (a TTFT); ``ubatch``: llama.cpp's tokens a pass
    (each re-reads the weights and attends to the ``depth`` cached tokens and the ubatches
    before it), None where the prompt runs in one pass."""

    prompts: int
    tokens: int
    depth: int
    ubatch: int | None
    prefill_s: float

    @property
    def tok_s(self) -> float:
        return self.prompts * self.tokens / self.prefill_s

    @property
    def ttft_ms(self) -> float:
        return self.prefill_s * 1e3

    @property
    def passes(self) -> int:
        """The steps the prefill ran: its prompts' ubatches, or one."""
        return self.prompts * -(-self.tokens // self.ubatch) if self.ubatch else 1


def prompt_division(row: Measurement, dep: Deployment,
                    profile: EngineProfile) -> PromptDivision | None:
    """The prefill a prefill-speed or TTFT row is priced at: a llama-bench ``ppN`` in ubatches
    of its n_ubatch (512 unless stated) after its depth; a TTFT, one prompt in one pass, whose
    last position's logits are the first token. None for any other row, and for one with no
    prompt length."""
    if row.metric == "prefill_tok_s":
        prompt = row.input_len or 0
        if prompt <= 0:
            return None
        depth = max(0, (row.context_len or prompt) - prompt)
        ubatch = row.setting_count("n_ubatch") or llamacpp_n_ubatch()  # llama-bench -ub
        prompts = row.batch or 1
        return PromptDivision(prompts, prompt, depth,
                              ubatch if dep.engine.startswith("llama.cpp") else None,
                              prefill_time_s(dep, profile, prompt, depth, prompts, ubatch))
    if row.metric == "ttft_ms":
        ttft_prompt = row.input_len or row.context_len
        if not ttft_prompt:
            return None
        return PromptDivision(1, ttft_prompt, 0, None,
                              prefill_time_s(dep, profile, ttft_prompt, 0, 1, chunk=None))
    return None


@dataclass(frozen=True)
class DecodeDivision:
    """A decode speed as the division it is: ``sequences`` ÷ (the mean decode step of
    ``batch`` sequences, their contexts growing from ``start`` by ``generated`` tokens, +
    ``others_s``, the other requests' prompts a serving TPOT's step carries)."""

    sequences: int  # 1 for a per-user speed, the batch for a llama-batched-bench S_TG row
    batch: int
    start: int
    generated: int
    step_s: float
    others_s: float = 0.0

    @property
    def tok_s(self) -> float:
        return self.sequences / (self.step_s + self.others_s)


def decode_division(row: Measurement, dep: Deployment,
                    profile: EngineProfile) -> DecodeDivision | None:
    """The division a decode-speed row's tok/s is: a per-user speed, 1 ÷ the mean step at
    the row's batch (a serving TPOT's step + others_prompts_s); a llama-batched-bench S_TG
    throughput, the batch ÷ the step (the decode steps only). None for any other row, and for
    a decode speed at no stated context (unfinished)."""
    if row.metric == "decode_tok_s_per_user":
        if not (row.context_len or row.input_len or row.output_len):
            return None
        batch, (start, generated) = row.batch or 1, _decode_span(row)
        others = others_prompts_s(dep, profile, row) if row.serving_tpot() else 0.0
        return DecodeDivision(1, batch, start, generated,
                              decode_step_time_s(dep, profile, batch, start, generated), others)
    if "S_TG" in row.notes and row.metric in THROUGHPUT_METRICS and (row.output_len or 0) > 0:
        batch, start, generated = row.batch or 1, row.input_len or 0, row.output_len or 0
        return DecodeDivision(batch, batch, start, generated,
                              decode_step_time_s(dep, profile, batch, start, generated))
    return None


def _decode_span(row: Measurement) -> tuple[int, int]:
    """(start context, tokens generated) of a decode measurement."""
    out = row.output_len or 1
    end = row.context_len or ((row.input_len or 0) + out)
    return max(0, end - out), out


def others_prompts_s(dep: Deployment, profile: EngineProfile, row: Measurement) -> float:
    """What the other requests' prompts add to each of a request's decode steps in a serving
    benchmark at concurrency c: over a request's life each of the c seats takes a new request,
    so c − 1 other prompts are prefilled among its output − 1 steps, each in chunks of the
    engine's token budget riding on a decode step (what the chunk adds to that step). Static
    batches (benchmark_latency, llama-bench) prefill before they decode: no such term."""
    batch, isl, osl = row.batch or 1, row.input_len or 0, row.output_len or 1
    if batch < 2 or isl < 1 or osl < 2:
        return 0.0
    start, generated = _decode_span(row)
    decoding = decode_batch(batch - 1, mean_decode_context(start, generated))
    chunks = -(-isl // step_token_budget(dep.engine))
    chunk = -(-isl // chunks)
    alone = step_time_s(dep, decoding, profile)
    carried = step_time_s(dep, [*decoding, Seq(chunk, 0)], profile)
    return (batch - 1) * chunks * (carried - alone) / (osl - 1)


def step_token_budget(engine: str) -> int:
    """The engine's default tokens a step takes (max_num_tokens, max_num_batched_tokens)."""
    d = engine_defaults(engine)
    return int(d.get("max_num_tokens", d.get("max_num_batched_tokens", 8192)))


def decode_step_time_s(dep: Deployment, profile: EngineProfile, batch: int, start: int,
                       generated: int) -> float:
    """Mean decode step time while contexts grow from ``start`` to ``start + generated``."""
    mid = mean_decode_context(start, generated)
    return step_time_s(dep, decode_batch(batch, mid), profile)


@lru_cache(maxsize=4096)
def priced_decode_batch(row: Measurement, dep: Deployment) -> int | None:
    """The sequences each decode step of the row is priced at: its batch; with none stated, one
    (a decode speed, a llama-batched-bench S_TG row) or, for a serving throughput, as many as
    the KV pool holds at input + output tokens (max_batch: 2,048 for Llama-3.1-8B FP8 on an
    H100 at 128/128, the batch limit). None where the metric prices no decode step."""
    if row.metric == "decode_tok_s_per_user" or (
            "S_TG" in row.notes and row.metric in THROUGHPUT_METRICS):
        return row.batch or 1
    if row.metric not in THROUGHPUT_METRICS:
        return None
    return row.batch or max_batch(dep, (row.input_len or 0) + (row.output_len or 0))


@dataclass(frozen=True)
class ThroughputDivision:
    """A static batch's (or a full pool's) output throughput as the division it is:
    ``sequences`` × ``output`` tokens ÷ (``prefill_s``, the prompts packed into steps of the
    engine's token budget, + ``output`` × ``step_s``, the mean decode step of the batch as its
    contexts grow from ``input`` tokens)."""

    sequences: int
    input: int
    output: int
    prefill_s: float
    step_s: float

    @property
    def tok_s(self) -> float:
        return self.sequences * self.output / (self.prefill_s + self.output * self.step_s)


def throughput_division(row: Measurement, dep: Deployment,
                        profile: EngineProfile) -> ThroughputDivision | None:
    """The division a serving-throughput row is (not a llama-batched-bench S_TG row's, which
    is decode_division's): its batch, or as many sequences as the KV pool holds
    (priced_decode_batch), prefilled then decoded. None for any other row, and for one with
    no output."""
    if row.metric not in THROUGHPUT_METRICS or decode_division(row, dep, profile) is not None:
        return None
    isl, osl = row.input_len or 0, row.output_len or 0
    if osl <= 0:
        return None
    batch = priced_decode_batch(row, dep) or 0
    if batch < 1:
        raise InputError("does not fit: the KV pool holds no full sequence")
    prefill = batch_prefill_time_s(dep, profile, batch, isl) if isl > 0 else 0.0
    return ThroughputDivision(batch, isl, osl, prefill,
                              decode_step_time_s(dep, profile, batch, isl, osl))


def prompts_per_step(engine: str, isl: int) -> int:
    """Prompts of ``isl`` tokens a prefill step takes under the engine's token budget, one at
    least: 8 of 1,000 tokens in vLLM's 8,192."""
    return max(1, step_token_budget(engine) // isl)


def batch_prefill_time_s(dep: Deployment, profile: EngineProfile, batch: int, isl: int) -> float:
    """Prompts of a batch, packed into steps of the engine's token budget (prompts_per_step)."""
    per_step = prompts_per_step(dep.engine, isl)
    steps, rest = divmod(batch, per_step)
    time = steps * step_time_s(dep, [Seq(isl, 0)] * per_step, profile) if steps else 0.0
    if rest:
        time += step_time_s(dep, [Seq(isl, 0)] * rest, profile)
    return time
