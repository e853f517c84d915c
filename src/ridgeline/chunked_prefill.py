"""A serving engine's prompt steps: vLLM, SGLang and TensorRT-LLM take at most a token budget
a step (vLLM's max_num_batched_tokens, SGLang's chunked_prefill_size, TensorRT-LLM's
max_num_tokens), first come, first served. With chunked prefill (vLLM V1's and SGLang's
default) a prompt longer than the budget runs in chunks, one a step, each re-reading the
weights and attending to the chunks before it; without it (TensorRT-LLM's default) a step
takes whole prompts. Each step is priced by step_time_s, the step cost the simulator runs
too, so `prefill` and `simulate` agree on one prompt at the same budget (both take
`vllm serve`'s default unless given --usage offline). llama.cpp's ubatches are
``llamacpp_batching``'s."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ridgeline.candidate import ENGINE_KNOB_NAMES
from ridgeline.cost import Seq, step_time_s
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.errors import InputError
from ridgeline.units import plural, require_positive

if TYPE_CHECKING:
    from ridgeline.memory import EngineSettings

# a prompt's steps are priced one by one (58 µs each for Llama-3.1-70B): past this many, the
# budget is too small for the prompt to be worth pricing step by step
MAX_PREFILL_STEPS = 100_000


# TensorRT-LLM's PyTorch backend turns enable_chunked_prefill off again for an MLA model
# (is_mla: a config with kv_lora_rank and qk_rope_head_dim) where get_sm_version() is not
# 90, 100, 103 or 120: "Chunked Prefill for MLA can only be enabled on
# SM90/SM100/SM103/SM120, disable enable_chunked_context for SM{sm_version}" (create_py_executor,
# tensorrt_llm/_torch/pyexecutor/py_executor_creator.py @ 000429d5). The catalog records a
# family, not a compute capability: Hopper is SM 9.0, Blackwell SM 10.0 (B200, GB200), 10.3
# (B300) or 12.0 (RTX 50, RTX PRO 6000), all kept; these families are below SM 9.0 (Ampere 8.0
# and 8.6, Ada 8.9, Turing 7.5, Volta 7.0, Pascal 6.x), and GB10 (DGX Spark) is SM 12.1 (its
# record's NVIDIA source). A card of another or no family keeps what was asked.
TRTLLM_MLA_UNCHUNKED_FAMILIES = ("ampere", "ada", "turing", "volta", "pascal")
TRTLLM_MLA_UNCHUNKED_IDS = ("dgx-spark-gb10",)


def trtllm_mla_unchunked(dep: Deployment) -> bool:
    """Whether TensorRT-LLM turns enable_chunked_prefill off again for this deployment: an
    MLA model (DeepSeek-V3) on a card outside SM 90/100/103/120 (an A100, an L40S)."""
    acc = dep.accelerator
    return (dep.engine == "trtllm" and dep.model.attention is not None
            and dep.model.attention.mla is not None
            and (acc.family in TRTLLM_MLA_UNCHUNKED_FAMILIES
                 or acc.id in TRTLLM_MLA_UNCHUNKED_IDS))


def chunks_prefill(dep: Deployment, enable_chunked_prefill: bool = False) -> bool:
    """Whether the engine cuts a prompt longer than what its budget has left into chunks:
    vLLM V1 and SGLang always; TensorRT-LLM with ``enable_chunked_prefill`` (its LLM API
    option, off in the releases modelled: BaseLlmArgs ``Field(default=False)``,
    tensorrt_llm/llmapi/llm_args.py, still False on main: PR #9499 "BREAKING: Enable chunked
    prefill by default", whose branch's docs say "enabled by default", was closed unmerged, as
    was PR #8346), but not for an MLA model outside SM 90/100/103/120, where its PyTorch
    backend turns it off again (``trtllm_mla_unchunked``; so does its
    FLASHINFER_STAR_ATTENTION backend, which ridgeline does not model), and where it otherwise
    runs a context whole. On, its
    PyTorch backend's MicroBatchScheduler fills max_num_tokens first come, first served
    (ContextChunkingConfig(FIRST_COME_FIRST_SERVED, tokens_per_block), _torch/pyexecutor),
    a cut chunk rounded down to a whole number of tokens_per_block, which the steps here do
    not round ("set max_num_tokens to an integer multiple of tokens_per_block":
    https://nvidia.github.io/TensorRT-LLM/features/long-sequence.html)."""
    if dep.engine != "trtllm":
        return True
    return enable_chunked_prefill and not trtllm_mla_unchunked(dep)


def mla_unchunked_caution(dep: Deployment, enable_chunked_prefill: bool) -> str:
    """What to say where enable_chunked_prefill was asked of TensorRT-LLM and its PyTorch
    backend turns it off again (``trtllm_mla_unchunked``), or ""."""
    if not enable_chunked_prefill or not trtllm_mla_unchunked(dep):
        return ""
    acc = dep.accelerator
    return (f"TensorRT-LLM turns enable_chunked_prefill off again for an MLA model "
            f"({dep.model.name}) outside SM 90/100/103/120, so on {acc.id} ({acc.family}) it "
            "runs a context whole, priced here as if enable_chunked_prefill were not given "
            "(its PyTorch backend warns \"Chunked Prefill for MLA can only be enabled on "
            "SM90/SM100/SM103/SM120\")")


def refuses_whole_prompt(prompt_tokens: int, budget_tokens: int, chunked: bool) -> bool:
    """Whether an engine that runs a context whole (``chunked`` False: TensorRT-LLM with
    enable_chunked_prefill off, its default, ``chunks_prefill``) refuses a prompt: one longer
    than its step's whole token budget, which no step could take (TensorRT-LLM's LLM API:
    "The sum of prompt length (…), query length (0) should not exceed max_num_tokens (…)",
    llmapi/llm.py _check_arguments). `simulate` refuses it on arrival, `prefill` leads with
    the refusal, `fit` cautions where its max_model_len admits one: a 16,000-token prompt at
    max_num_tokens 8,192 is refused; 8,192 runs in one step."""
    return not chunked and prompt_tokens > budget_tokens


def whole_prompt_refusal(engine: str, budget_tokens: int) -> str:
    """Why ``refuses_whole_prompt`` refuses, as a rejected request's reason (simulate's
    summary counts requests by it): TensorRT-LLM's words, else a step budget's."""
    if engine == "trtllm":
        return (f"prompt longer than max_num_tokens {budget_tokens:,}, which TensorRT-LLM "
                "refuses while it runs contexts whole (\"should not exceed max_num_tokens\")")
    return f"prompt longer than the step's token budget {budget_tokens:,}, chunked prefill off"


def splits_a_prompt(prompt: int, batch: int, budget_tokens: int) -> bool:
    """Whether chunked steps (``prefill_steps``) cut some prompt between two steps: one longer
    than the budget, or, with several, a step boundary landing inside one (``batch`` prompts
    fill ``batch`` × ``prompt`` tokens; the boundaries fall at multiples of the budget). 32
    prompts of 512 tokens at 8,192 a step fill two steps whole; 3 of 5,000 cut the second."""
    return prompt > budget_tokens or (batch * prompt > budget_tokens
                                      and budget_tokens % prompt != 0)


def prefill_steps(prompt: int, batch: int, budget_tokens: int,
                  chunked: bool = True) -> list[list[Seq]]:
    """The steps ``batch`` prompts of ``prompt`` tokens run in under a budget of
    ``budget_tokens`` a step, first come, first served: chunked, each step takes the budget's
    worth, a prompt split where it runs out (its later chunk after the tokens before it);
    whole, each step takes the prompts that fit, at least one. One 32,000-token prompt at
    512 tokens a step: 63 steps, the last of 256 tokens."""
    require_positive(prompt, "prompt length")
    require_positive(batch, "batch")
    require_positive(budget_tokens, "step token budget")
    if not chunked and prompt <= budget_tokens:
        per_step = budget_tokens // prompt
        full, rest = divmod(batch, per_step)
        return [[Seq(prompt, 0)] * per_step for _ in range(full)] + (
            [[Seq(prompt, 0)] * rest] if rest else [])
    count = -(-batch * prompt // budget_tokens)
    if count > MAX_PREFILL_STEPS:
        raise InputError(f"{batch:,} x {prompt:,} prompt tokens at {budget_tokens:,} a step are "
                         f"{count:,} steps, past the {MAX_PREFILL_STEPS:,} ridgeline prices one by "
                         "one: give a larger step token budget (--max-num-batched-tokens)")
    steps: list[list[Seq]] = []
    step: list[Seq] = []
    room = budget_tokens
    for _ in range(batch):
        done = 0
        while done < prompt:
            n = min(room, prompt - done)
            step.append(Seq(n, done))
            done, room = done + n, room - n
            if room == 0:
                steps.append(step)
                step, room = [], budget_tokens
    if step:
        steps.append(step)
    return steps


def rank_prefill_steps(prompt: int, batch: int, budget_tokens: int, chunked: bool,
                       ranks: int) -> list[list[Seq]]:
    """``prefill_steps`` under data-parallel attention: the prompts dealt over ``ranks``
    ranks one each in turn (rank r runs prompts r, r + N, …: cost.batch_shape's dealing),
    each rank stepping through its own prompts under its own budget (``budget_tokens``, a
    rank's: ``data_parallel.rank_budget_tokens``), and the ranks' k-th steps run together
    as one (a MoE's ranks step in lockstep), their sequences interleaved so that position
    i × N + r is rank r's (the busiest rank, the first, at every N-th). 8 prompts of 8,192
    tokens over 8 ranks at 8,192 tokens a rank: one step, a prompt on each rank."""
    if ranks == 1:
        return prefill_steps(prompt, batch, budget_tokens, chunked)
    each = [prefill_steps(prompt, n, budget_tokens, chunked)
            for n in (-(-(batch - r) // ranks) for r in range(min(ranks, batch)))]
    steps: list[list[Seq]] = []
    for k in range(len(each[0])):  # the first rank has the most prompts, the most steps
        mine = [rank[k] if k < len(rank) else [] for rank in each]
        width = len(mine[0])
        step: list[Seq] = []
        for i in range(width):
            step.extend(seqs[i] for seqs in mine if i < len(seqs))
        steps.append(step)
    return steps


def prompt_steps_beside(prompt: int, cached: int, room_tokens: int, chunked: bool = True
                        ) -> list[list[Seq]]:
    """The steps one prompt's ``prompt`` computed tokens take beside a running batch's
    decodes, which the scheduler places first (vLLM V1's decodes-first budget): the
    ``room_tokens`` the budget leaves them a step, a longer prompt chunked (``prefill_steps``),
    each chunk after the ``cached`` tokens the prefix cache served and the chunks before it.
    1,024 tokens beside 8 decodes under vLLM's 8,192 on an H100: one step."""
    return [[Seq(s.new_tokens, s.context_tokens + cached) for s in step]
            for step in prefill_steps(prompt, 1, room_tokens, chunked)]


def steady_step_time_s(dep: Deployment, profile: EngineProfile, decodes: list[Seq],
                       prompt_steps: list[list[Seq]], prompts_per_step: float) -> float:
    """The mean step of a steady load whose prompts each run in their own steps: decode
    alone, plus, for the ``prompts_per_step`` prompts that start each step, what their steps
    (``prompt_steps_beside``) add to it, each priced by step_time_s. Llama-3.1-8B on an H100
    under vLLM, 8 decodes at 1,152 tokens: 8.34 ms alone, 32.89 ms beside a 1,024-token
    prompt, one prompt every 32 steps: 8.34 + (32.89 − 8.34) ÷ 32 = 9.11 ms."""
    decode_s = step_time_s(dep, decodes, profile)
    added_s = sum(step_time_s(dep, [*decodes, *step], profile) - decode_s
                  for step in prompt_steps)
    return decode_s + prompts_per_step * added_s


def serving_prefill_time_s(dep: Deployment, profile: EngineProfile, steps: list[list[Seq]]
                           ) -> float:
    """Σ step_time_s over a prompt's steps (``prefill_steps``): Llama-3.1-70B bf16 on
    4 x H100 under vLLM's profile, a 32,000-token prompt takes 2.93 s in one step and
    3.73 s in 63 steps of 512 tokens, as `simulate` times it at that budget."""
    return sum(step_time_s(dep, s, profile) for s in steps)


def pipelined_steps_s(trips_s: list[float], stages: int) -> float:
    """vLLM V1 under pipeline parallelism: when a prompt's steps (each a trip through every
    stage) are all done. V1 advances a chunk's computed tokens as it is scheduled, "allowing
    us to schedule the prefill request again immediately in the next scheduling step"
    (vllm/v1/core/sched/scheduler.py _update_after_schedule), so the next chunk is sent as
    soon as the batch queue has room (at most ``stages`` in flight), each trip split evenly
    over the stages and entering one once it is free, as sim/pipeline.PipelineSimulator runs
    it. Two equal chunks of trip T over 2 stages: 1.5 T, not 2 T; one stage: the sum."""
    free = [0.0] * stages  # when each stage finishes its last chunk
    ends: list[float] = []
    for i, trip in enumerate(trips_s):
        t = ends[i - stages] if i >= stages else 0.0  # sent once the queue has room
        for k in range(stages):
            t = max(t, free[k]) + trip / stages
            free[k] = t
        ends.append(t)
    return ends[-1] if ends else 0.0


def step_budget(dep: Deployment, settings: EngineSettings) -> tuple[int, str]:
    """The serving engine's token budget a step under ``settings``, as its pool is profiled
    at it (``KVPool.profile_tokens``), and where it comes from: the flag given, or the
    engine's default on this card (vLLM on an H100: 16,384 for the offline LLM class, 8,192
    for vllm serve; its V0 engine the same for both, ``v0_budget_source``: 512 a step for a
    40,000-token max_model_len on 0.6.4)."""
    from ridgeline.memory import kv_pool

    tokens = kv_pool(dep, settings).profile_tokens
    name = ENGINE_KNOB_NAMES.get(dep.engine, ENGINE_KNOB_NAMES["vllm"])[1]
    if settings.max_num_batched_tokens is not None:
        return tokens, f"--{name.replace('_', '-')}"
    if dep.engine == "vllm":
        from ridgeline.vllm_memory import vllm_accounting
        from ridgeline.vllm_pool import v0_budget_source, vllm_batch_defaults
        from ridgeline.vllm_v0_chunking import v1_honours_off

        acc = vllm_accounting(settings.engine_version)
        if acc.engine == "V0":
            return tokens, v0_budget_source(dep, settings, tokens)
        usage = settings.usage
        if settings.no_chunked_prefill and v1_honours_off(acc):
            ours = vllm_batch_defaults(dep, usage, acc.version)["max_num_batched_tokens"]
            return tokens, (f"vLLM {acc.version}'s default max_num_batched_tokens with "
                            f"--no-enable-chunked-prefill: max(max_model_len, {ours:,}, its "
                            f"default on {dep.accelerator.id}), capped at max_num_seqs × "
                            "max_model_len, as a prompt runs whole")
        other = "serve" if usage == "offline" else "offline"
        theirs = vllm_batch_defaults(dep, other, acc.version)["max_num_batched_tokens"]
        ours = vllm_batch_defaults(dep, usage, acc.version)["max_num_batched_tokens"]
        lowered = f" ({ours:,}), lowered to max_num_seqs × max_model_len" if tokens < ours \
            else ""
        return tokens, (f"vLLM's default {name} on {dep.accelerator.id} for "
                        + ("the offline LLM class" if usage == "offline" else "vllm serve")
                        + f"{lowered}; --usage {other}: {theirs:,}")
    return tokens, f"{dep.engine}'s default {name} on {dep.accelerator.id}"


def whole_context_reason(turned_off: bool = False) -> str:
    """Why TensorRT-LLM runs a context whole: its enable_chunked_prefill off by default, or
    (``turned_off``) given and turned off again for an MLA model (mla_unchunked_caution)."""
    return ("its enable_chunked_prefill, though given, is off for this MLA model here"
            if turned_off else "its enable_chunked_prefill is off by default")


def over_budget_caution(prompts: int, budget_tokens: int, remedy: str,
                        turned_off: bool = False, refused: bool = False) -> str:
    """What to say of ``prompts`` that outran TensorRT-LLM's step budget (max_num_tokens,
    ``budget_tokens``), which the simulator chunked though the engine, enable_chunked_prefill
    off, runs a context whole: simulate's caution, with its ``remedy`` (``turned_off``: asked
    for, and turned off again for an MLA model, mla_unchunked_caution). (plan turns it on
    instead: plan_checks.verify.) ``refused``: the simulator refused them, as the engine
    does (SimConfig.refuse_past_budget), and the caution gives the remedy."""
    if refused:
        return (f"{prompts:,} {plural(prompts, 'prompt')} longer than max_num_tokens "
                f"{budget_tokens:,}: TensorRT-LLM runs a context whole "
                f"({whole_context_reason(turned_off)}) and refuses "
                + ("it, so it is" if prompts == 1 else "them, so they are")
                + f" counted rejected here ({remedy})")
    return (f"{prompts:,} {plural(prompts, 'prompt')} longer than max_num_tokens "
            f"{budget_tokens:,}: TensorRT-LLM runs a context whole "
            f"({whole_context_reason(turned_off)}) and would not run these; they are "
            f"chunked here as if it were on (or {remedy})")
