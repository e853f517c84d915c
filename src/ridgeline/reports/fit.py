"""`ridgeline fit`: the KV pool an engine leaves, what it holds, and the capacity verdict.

Two failures people confuse are kept apart: a deployment that does not fit (too few
conversations of this length; no engine tuning rescues it) and one that fits but stays
under the ridge (the batch the pool allows is bandwidth-bound at any load).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ridgeline.capacity import (
    admission_gate,
    context_refusal,
    conversation_bytes,
    held_conversations,
    longest_holding,
    past_trained_context,
    refuses_to_start,
)
from ridgeline.context_length import served_positions
from ridgeline.datafiles import engine_defaults
from ridgeline.deployment import Deployment
from ridgeline.explain import Step, q, step
from ridgeline.kvcache import kv_footprint
from ridgeline.llamacpp_batching import llamacpp_n_batch
from ridgeline.memory import EngineSettings, KVPool, kv_pool
from ridgeline.parallel import cross_node_caution
from ridgeline.render import table
from ridgeline.reports.fit_budget import (
    budget_rows,
    cap_flag,
    fixed_state_size,
    is_llamacpp,
    runner_label,
    seats_name,
    state_pool_note,
    vision_bytes_in_pool,
)
from ridgeline.reports.fit_levers import Lever, gpus_needed, levers
from ridgeline.reports.fit_offload import host_bytes, offload_flags, offload_lines
from ridgeline.reports.fit_state import (
    most_running_requests,
    running_slots,
    running_step,
    state_overrun,
    state_overrun_reason,
    state_pool_dict,
    state_shortfall,
    state_shortfall_step,
)
from ridgeline.reports.fit_steps import (
    conversations_step,
    pool_step,
    stage_steps,
    start_steps,
    state_pool_steps,
)
from ridgeline.roofline import expert_ridge_batch, ridge_step
from ridgeline.sglang_memory import (
    past_checked,
    sglang_data,
    sglang_slots_per_request,
    sglang_state_ratio,
)
from ridgeline.stages import micro_batch, micro_batches, pipeline_stages
from ridgeline.units import GIB, MIB, plural
from ridgeline.vllm_hybrid import cache_mode
from ridgeline.vllm_memory import mla_block_size, past_modelled
from ridgeline.vllm_pool import vllm_pool_advice

NON_CUDA_VENDORS = ("google", "intel")  # TPU (JAX/XLA) and Gaudi backends: no CUDA graphs
DOES_NOT_FIT = "does not fit"
UNDER_RIDGE = "fits, under the ridge"
CLEARS_RIDGE = "clears the ridge"


def _overflow(p: KVPool) -> str:
    """Which of what comes before the cache overflow the memory reserved: the weights and the
    profiling pass, or, after them, the CUDA graphs and the sampler's seats."""
    budget = p.total_bytes * p.reserved_fraction
    first = p.weight_bytes + p.activation_bytes + p.non_torch_bytes
    if first > budget:
        return f"the weights and the profiling pass alone overflow the {budget / GIB:,.1f} GiB " \
               "it reserves"
    rest = " and the ".join(name for name, size in (("CUDA graphs", p.cuda_graph_bytes),
                                                    ("sampler's seats", p.seat_buffer_bytes))
                            if size > 0)
    return (f"the weights and the profiling pass take {first / GIB:,.2f} of the "
            f"{budget / GIB:,.2f} GiB it reserves, and the {rest} "
            f"({(p.cuda_graph_bytes + p.seat_buffer_bytes) / GIB:,.2f} GiB) overflow it")


@dataclass(frozen=True)
class FitReport:
    deployment: Deployment
    settings: EngineSettings
    pool: KVPool
    context: int
    target: int | None
    conversations: int
    per_conversation_bytes: float  # per GPU
    ridge_batch: float  # the batch at which the weights every token reads reach the ridge
    levers: tuple[Lever, ...]
    steps: tuple[Step, ...]
    searched: str = ""  # what longest_context found, when it chose the context

    @property
    def batch(self) -> int:
        """Sequences that can run at once: the pool, then the engine's seat limit."""
        return min(self.conversations, self.pool.max_num_seqs)

    @property
    def expert_ridge_batch(self) -> float:
        """The article's batch at which an MoE model's routed experts reach the ridge: the
        ridge batch at the experts' bytes per weight ÷ (k/E)."""
        moe = self.deployment.model.moe
        if moe is None:
            return self.ridge_batch
        d = self.deployment
        return expert_ridge_batch(d.accelerator, d.expert_compute_dtype,
                                  d.bytes_per_weight_split[1], moe.routed_fraction)

    @property
    def verdict(self) -> str:
        if self.conversations < max(1, self.target or 1) or self.batch < 1:
            return DOES_NOT_FIT  # (a batch of none: the engine would refuse to start)
        return CLEARS_RIDGE if self.stage_batch >= self.ridge_batch else UNDER_RIDGE

    @property
    def stage_batch(self) -> int:
        """The batch a stage multiplies: under pipeline parallelism one micro-batch of it."""
        return micro_batch(self.deployment, self.batch)

    def _batch_label(self) -> str:
        """The batch, and under pipeline parallelism its micro-batches."""
        pp = micro_batches(self.deployment)
        if pp == 1:
            return f"{self.batch:,}"
        even = self.batch == pp * self.stage_batch
        return (f"{self.batch:,}: {pp} micro-batches of {'' if even else 'up to '}"
                f"{self.stage_batch:,}, one in each pipeline stage")

    @property
    def cautions(self) -> list[str]:
        """What holds the conversations back besides memory, or makes the context suspect."""
        from ridgeline.reports.expectation import context_caution

        d = self.deployment
        out = [c for c in (context_caution(d, self.context), d.model.architecture_caution,
                           cross_node_caution(d.tensor_parallel_size, d.accelerator, d.engine))
               if c]
        seats, pool = self.pool.max_num_seqs, self.pool
        per = running_slots(self) if pool.state_request_bytes else 0
        if self.target and self.target > seats and self.conversations >= self.target \
                and per and seats == pool.state_slots // per:  # SGLang's state pool caps it
            out.append(f"the pool holds the {self.target:,} conversations, but at most "
                       f"{seats:,} run at once: max_running_requests is the state pool's "
                       f"{pool.state_slots:,} slots // {per} (the slots a running request "
                       "takes), which --max-running-requests cannot raise; more state slots "
                       "(a larger static pool"
                       + (", or --disable-radix-cache: one slot a request" if per > 1 else "")
                       + ") run more")
        elif self.target and self.target > seats and self.conversations >= self.target:
            out.append(f"the pool holds the {self.target:,} conversations, but at most "
                       f"{seats:,} run at once ({seats_name(self.pool)}): raise it to run "
                       "them together")
        p, d = self.pool, self.deployment
        state = kv_footprint(d.model, 1, d.kv.bytes_per_element).state_bytes \
            / d.tensor_parallel_size
        if p.engine == "trtllm" and state:
            out.append(f"TensorRT-LLM's Python Mamba cache manager allocates every seat's "
                       f"recurrent state up front ({p.max_num_seqs:,} seats × "
                       f"{state / MIB:,.1f} MiB = {p.max_num_seqs * state / GIB:,.1f} GiB per "
                       "GPU, before its free-memory fraction), which this sizing leaves out; "
                       "later releases keep the state inside the KV pool (PR #12185), as it is "
                       "counted here, a request at a time")
        if p.token_cap and not p.capped:
            out.append(f"{cap_flag(p)} {p.token_cap:,} is more than the memory leaves "
                       f"({p.blocks * p.block_size:,} tokens): the engine keeps the smaller"
                       + (", as SGLang warns ('Use the profiled value instead')"
                          if p.engine == "sglang" else ""))
        if p.set_pool_bytes and self.settings.gpu_memory_utilization is not None:
            out.append("vLLM ignores --gpu-memory-utilization when --kv-cache-memory-bytes sets "
                       "the pool (its worker logs 'This does not respect the "
                       "gpu_memory_utilization config')")
        if d.accelerator.vendor in NON_CUDA_VENDORS and not is_llamacpp(p):
            out.append(f"{p.engine} on {d.accelerator.id} is sized with the CUDA accounting "
                       "(a CUDA context, CUDA graphs); no start-up log of its "
                       f"{d.accelerator.vendor} backend checks it: read the pool as approximate")
        if d.accelerator.form == "soc" and d.accelerator.vendor != "apple" \
                and p.accounting is not None:
            out.append(f"{d.accelerator.id} shares its memory with the OS: vLLM refuses to "
                       f"start unless {p.reserved_fraction:g} × {p.total_bytes / GIB:,.2f} GiB "
                       f"= {p.reserved_fraction * p.total_bytes / GIB:,.1f} GiB is free at "
                       "start-up, and what the OS, its page cache and other processes hold "
                       "counts against that (drop the caches, or lower "
                       "--gpu-memory-utilization)")
        asked = self.settings.block_size
        if p.accounting is not None and asked and d.model.attention is not None \
                and d.model.attention.mla is not None:
            block, why = mla_block_size(d, p.accounting.version, asked)
            if block != asked:  # the MLA kernel overwrote the --block-size given
                out.append(why)
        if p.accounting is not None and past_modelled(p.accounting):
            out.append(past_modelled(p.accounting))
        if p.engine == "sglang" and past_checked(self.settings.engine_version):
            out.append(past_checked(self.settings.engine_version))
        if p.accounting is not None and p.accounting.tp_caveat and d.tensor_parallel_size > 1:
            out.append(f"vLLM {p.accounting.version} {p.accounting.tp_caveat}")
        if p.accounting is not None and cache_mode(
                d.model, self.settings.prefix_caching, p.accounting.version) == "all":
            out.append(f"vLLM {p.accounting.version} with prefix caching keeps "
                       f"{d.model.name}'s Mamba state at every block (mamba_cache_mode 'all'), "
                       "which is not modelled: its blocks round up to the Mamba chunk and its "
                       "start-up check counts a state block per block of tokens, so it holds "
                       "fewer conversations than this sizing, which --no-prefix-caching (its "
                       "default before v0.28) matches")
        moe = d.model.moe
        if moe and self.verdict == CLEARS_RIDGE and self.stage_batch < self.expert_ridge_batch:
            out.append(f"MoE: the routed experts see B × {moe.routed_fraction:.3f} tokens each "
                       f"and reach the ridge only near batch {self.expert_ridge_batch:,.0f}; "
                       f"at batch {self._batch_label()} they stay bandwidth-bound")
        if self.verdict == CLEARS_RIDGE:
            out += [c for c in (self._kv_bound_caution(),) if c]
        return out

    def _kv_bound_caution(self) -> str:
        """Where the batch clears the ridge in the weights but the whole step, every cache read
        at the full context, stays memory-bound (the cache is private: batching never amortises
        it): Llama-3.1-8B on an H100 at 1,000 tokens, 444 conversations read 58.3 GB of cache
        beside 15.0 GB of weights a step, 22.3 ms of memory against 7.0 of arithmetic. The
        floor is decode's (``pipelined_floor``: under PP, a micro-batch's trip)."""
        from ridgeline.reports.decode import pipelined_floor

        d, b, s = self.deployment, self.batch, self.settings
        floor = pipelined_floor(d, b, self.context)
        if floor.bound != "memory bandwidth":
            return ""
        micro = micro_batch(d, b)
        who = f"{b:,} conversations" if micro == b else \
            f"each micro-batch of {micro:,} conversations (of {b:,})"
        flags = f"--batch {b} --context {self.context} --max-model-len {self.context}" + (
            f" --usage {s.usage}" if d.engine == "vllm" else "")
        return (f"the matmuls over the weights every token reads reach the ridge at this batch, "
                f"but the whole step does not: {who} at {self.context:,} tokens read "
                f"{floor.kv_bytes_read / 1e9:,.1f} GB of KV cache beside "
                f"{floor.weight_bytes_read / 1e9:,.1f} GB of weights a step, "
                f"{floor.memory_time_s * 1e3:,.1f} ms of memory against "
                f"{floor.compute_time_s * 1e3:,.1f} ms of arithmetic at the floor, so it stays "
                "memory-bound; each cache is private, and batching never amortises it "
                f"(`ridgeline decode {flags}` with this deployment and its engine settings)")

    @property
    def shortfall_bytes(self) -> float:
        """Extra memory per GPU the target needs (0 when it fits), counted from what is
        left after the weights and the profiling pass, so an overflow counts too."""
        p = self.pool
        need = max(max(1, self.target or 1) * self.per_conversation_bytes, self.start_bytes,
                   self.admitted_bytes)
        if p.set_pool_bytes:  # a set pool: the card short of it, or it short of the need
            return max(need, p.set_pool_bytes) - p.rest_bytes if p.overflow_bytes \
                else max(0.0, need - p.pool_bytes)
        if p.state_request_bytes:
            return state_shortfall(self, need)
        held = need + p.slot_cache_bytes  # llama.cpp's slot caches, a fixed size beside it
        if p.capped:  # a token cap binds: the pool short of the need, as far as memory allows
            return max(0.0, held - p.pool_bytes)
        return max(0.0, held / p.free_fraction_of_rest - p.rest_bytes)

    @property
    def most_running_requests(self) -> int:
        """The largest --max-running-requests that leaves room for the target (fit_state)."""
        return most_running_requests(self)

    @property
    def admitted_bytes(self) -> float:
        """What the target needs per GPU under vLLM's whole-prompt admission gate (v0.19+):
        the last one's admission charge beside the others decoding (0 where no gate, or
        where the charge is no more than a decoding request holds)."""
        gate = admission_gate(self.pool, self.context)
        if gate is None:
            return 0.0
        admission, decoding = gate
        return (admission + (max(1, self.target or 1) - 1) * decoding) * self.pool.page_bytes

    @property
    def never_admitted(self) -> bool:
        """vLLM v0.19 starts, but its gate charges a prompt of the context more blocks than
        the pool holds: no such request is ever admitted (issue #39734)."""
        p = self.pool
        admission = p.admission_blocks(self.context)
        return admission is not None and not self.refused_start and p.blocks < admission

    @property
    def start_blocks(self) -> int | None:
        """Blocks vLLM asks of the pool at start-up for one max_model_len request: its window
        groups at window + the profiled tokens (None: no KV-cache groups)."""
        p = self.pool
        if p.groups is None:
            return None
        return p.request_blocks(self.context)

    @property
    def start_bytes(self) -> float:
        """The start-up requirement in bytes per GPU (0 where it is one conversation's)."""
        blocks = self.start_blocks
        return 0.0 if blocks is None else blocks * self.pool.page_bytes

    @property
    def refused_start(self) -> bool:
        return refuses_to_start(self.pool, self.deployment, self.context)

    def to_dict(self) -> dict[str, Any]:
        p = self.pool
        refusal = context_refusal(self.deployment, self.context)
        out = {
            "admission_blocks": p.admission_blocks(self.context),
            "model": self.deployment.model.name, "accelerator": self.deployment.accelerator.id,
            "num_gpus": self.deployment.num_gpus,
            "tensor_parallel_size": self.deployment.tensor_parallel_size,
            "pipeline_parallel_size": self.deployment.pipeline_parallel_size,
            "binding_stage": None if p.stage is None else {
                "index": p.stage.index, "layers": p.stage.layers,
                "describe": p.stage.describe()},
            "engine": p.engine, "context": self.context,
            "memory_bytes_per_gpu": p.total_bytes, "reserved_fraction": p.reserved_fraction,
            "reserved_bytes_per_gpu": p.total_bytes * p.reserved_fraction,
            # TensorRT-LLM: the pool is this share of what is left (kv_cache_free_gpu_mem_fraction)
            "free_fraction_of_rest": p.free_fraction_of_rest,
            # vLLM's "Available KV cache memory": negative where nothing is left
            "available_kv_bytes_per_gpu": p.rest_bytes * p.free_fraction_of_rest
            if not p.set_pool_bytes else p.pool_bytes,
            # SGLang's hybrids: the static pool their state pool is carved from (state_pool)
            "pool_bytes_per_gpu": p.pool_bytes, "pool_gib_total": p.pool_bytes
            * self.deployment.num_gpus / GIB, "tokens": p.logged_tokens(self.context),
            "kv_cache_bytes_per_gpu": p.kv_cache_bytes,  # the KV cache itself, everywhere
            "blocks_per_gpu": p.blocks, "vllm_max_concurrency": None if p.groups is None
            else p.concurrency(self.context),
            "block_size": p.block_size, "conversations": self.conversations,
            "max_num_seqs": p.max_num_seqs, "batch": self.batch, "target": self.target,
            "ridge_batch": self.ridge_batch, "verdict": self.verdict,
            "stage_batch": self.stage_batch,  # under pipeline parallelism: a micro-batch
            "expert_ridge_batch": self.expert_ridge_batch if self.deployment.model.moe else None,
            "shortfall_bytes_per_gpu": None if refusal else self.shortfall_bytes,  # no memory
            "refusal": refusal or None,  # rescues a length the engine refuses
            "per_conversation_bytes_per_gpu": self.per_conversation_bytes,
            "offload": None if self.deployment.offload is None else {
                "placement": self.deployment.offload.describe(self.deployment.model),
                "host_weight_bytes": host_bytes(self.deployment)},
            "taken_bytes_per_gpu": {"weights": p.weight_bytes, "activations": p.activation_bytes,
                              "non_torch": p.non_torch_bytes, "cuda_graphs": p.cuda_graph_bytes,
                              # TRT-LLM's engine runtime and decoder; vLLM MRV2's sampler state
                              "seat_buffers": p.seat_buffer_bytes},
            "slot_cache_bytes_per_gpu": p.slot_cache_bytes,
            # vLLM --kv-cache-memory-bytes: the pool as set, the room the card leaves it, and
            # (unset) the values vLLM's start-up log advises
            "max_total_tokens": {"cap": p.token_cap, "binds": p.capped} if p.token_cap
            else None,
            "kv_cache_memory_bytes": {
                "set": p.set_pool_bytes, "room_bytes_per_gpu": p.rest_bytes,
                "overflow_bytes_per_gpu": p.overflow_bytes} if p.set_pool_bytes else None,
            "vllm_advice": None if self.advice is None else {
                "kv_cache_memory_bytes_requested": int(self.advice[0]),
                "kv_cache_memory_bytes_card": int(self.advice[1])},
            "llama_server_c": self.launch_cells if is_llamacpp(p) and self.batch else None,
            "flash_attn": self.settings.flash_attn if is_llamacpp(p) else None,
            "profile": {"tokens": p.profile_tokens, "forward_bytes": p.forward_bytes,
                        "sampler_bytes": p.sampler_bytes,
                        # vLLM MRV2: a cold torch.compile, inside the activations
                        "compile_bytes": p.compile_bytes},
            "engine_version": self.settings.engine_version if p.accounting is None
            else p.accounting.version,
            "model_runner": p.runner or None,  # vLLM: V0, V1 or MRV2 (Model Runner V2)
            # TensorRT-LLM: the backend that sized it; SGLang: its default rule's era
            "backend": (self.settings.backend or "pytorch") if p.engine == "trtllm" else None,
            "engine_era": p.engine_era or None,
            "levers": [vars(lv) for lv in self.levers],
            "longest_context_search": self.searched or None,
            "cautions": self.cautions,
            "start_up_check": None if p.groups is None else {
                "blocks_asked": self.start_blocks, "pool_blocks": p.blocks,
                "starts": not self.refused_start,
                "window_batches_in_flight": p.in_flight_batches,
                "state_blocks_per_request": p.groups.state_blocks},
            "vision_tower_bytes_per_gpu": vision_bytes_in_pool(self.deployment, p),
            "kv_cache_groups": None if p.groups is None else {
                "layers_per_group": p.groups.layers_per_group, "full": p.groups.full,
                "windows": [{"tokens": w, "groups": g} for w, g in p.groups.windows],
                "states": p.groups.states, "page_bytes_per_gpu": p.groups.page_bytes,
                "blocks_per_conversation": p.groups.decode_blocks(self.context)},
        }
        if p.state_request_bytes:  # SGLang's hybrid: only where there is a state pool
            out["state_pool"] = state_pool_dict(self)
        return out

    @property
    def advice(self) -> tuple[float, float] | None:
        """vLLM's start-up advice for --kv-cache-memory-bytes (requested memory, whole card);
        None where vLLM would not get as far as printing it (it logs the advice after
        capturing CUDA graphs, so not where it refuses to start or cannot load)."""
        if self.refused_start or self.pool.rest_bytes <= 0 or self.conversations == 0:
            return None
        return vllm_pool_advice(self.deployment, self.pool, self.settings)

    @property
    def launch_cells(self) -> int:
        """The -c llama-server is started with: what --fit placed for, else the batch's."""
        o = self.deployment.offload
        return o.fit_cells if o is not None and o.fit_cells else max(1, self.batch) * self.context

    def text_lines(self) -> list[str]:
        d, p = self.deployment, self.pool
        verdict = self.verdict.upper() if self.verdict == DOES_NOT_FIT else self.verdict
        headline = (f"{verdict}: {self.conversations:,} "
                    f"{plural(self.conversations, 'conversation')} of {self.context:,} tokens")
        if self.verdict == DOES_NOT_FIT and context_refusal(d, self.context):
            headline = f"DOES NOT FIT: {context_refusal(d, self.context)}"
        elif self.verdict == DOES_NOT_FIT and state_overrun(p):
            headline = f"DOES NOT FIT: {state_overrun_reason(self)}"
        elif self.verdict == DOES_NOT_FIT and p.state_request_bytes and p.max_num_seqs < 1 \
                and (self.conversations or (not p.state_slots and p.blocks > 0)):
            per = sglang_slots_per_request(self.settings.prefix_caching is not False,
                                           self.settings.engine_version, d.model)
            zero = sglang_data()["mamba_pool"]["no_running_request"]
            if p.state_slots:
                headline = (f"DOES NOT FIT: SGLang runs no request at once: its state pool's "
                            f"{p.state_slots:,} {plural(p.state_slots, 'slot')} leave "
                            f"max_running_requests at {p.state_slots:,} // {per}"
                            " = 0 (a running request's state and its radix cache's), so it "
                            f"would refuse to start ('{zero}'); a bigger pool or "
                            "--disable-radix-cache")
            else:  # carved: the ratio's share of the static pool holds no request's state
                ratio = sglang_state_ratio(self.settings.engine_version)
                headline = (f"DOES NOT FIT: SGLang runs no request at once: its state pool "
                            f"holds no request's state (mamba_full_memory_ratio {ratio:g}: "
                            f"{p.pool_bytes / GIB:,.4f} GiB static pool × {ratio:g} ÷ "
                            f"{1 + ratio:g} = {p.pool_bytes * ratio / (1 + ratio) / GIB:,.4f} "
                            f"GiB, less than one request's "
                            f"{p.state_request_bytes / GIB:,.4f} GiB), which leaves "
                            f"max_running_requests at 0 // {per} = 0, so it would refuse to "
                            f"start ('{zero}'); a bigger pool")
        elif self.verdict == DOES_NOT_FIT and p.overflow_bytes:
            headline = (f"DOES NOT FIT: the {p.set_pool_bytes / GIB:,.2f} GiB pool "
                        f"--kv-cache-memory-bytes sets overruns the card by "
                        f"{p.overflow_bytes / GIB:,.2f} GiB per GPU (the weights, the profiled "
                        f"peak, non-torch memory and CUDA graphs leave "
                        f"{max(0.0, p.rest_bytes) / GIB:,.2f} GiB); vLLM skips its memory "
                        "check for a set pool, so it would run out of memory (allocating the "
                        "cache or capturing graphs at start-up, or later under load) rather "
                        "than refuse")
        elif self.verdict == DOES_NOT_FIT and p.state_pool_fixed and not self.shortfall_bytes \
                and max(1, self.target or 1) > p.state_slots:  # the slots bind, not the memory
            want = max(1, self.target or 1)
            headline += (f" against a target of {want:,}: its state pool holds "
                         f"{p.state_slots:,} requests' states ({fixed_state_size(self.settings)})"
                         f", a conversation each, and the memory is not short: "
                         f"--max-running-requests {want:,} to {self.most_running_requests:,} "
                         "holds them, a state slot each")
        elif self.verdict == DOES_NOT_FIT:
            short = self.shortfall_bytes / GIB
            headline += (f" against a target of {max(1, self.target or 1):,}; the pool is short "
                         f"by {short:,.{2 if 0 < short < 0.1 else 1}f} GiB per GPU")
            if self.refused_start and self.start_blocks is not None and p.rest_bytes >= 0:
                windows = p.groups is not None and bool(p.groups.windows)
                headline += (f" (vLLM refuses to start: one {self.context:,}-token request "
                             f"asks {self.start_blocks:,} blocks of the pool's {p.blocks:,}"
                             + (", its window layers at window + "
                                + ("max_num_batched_tokens)" if p.in_flight_batches == 1 else
                                   f"{p.in_flight_batches} × max_num_batched_tokens in flight)")
                                if windows else ")"))
            elif self.never_admitted:
                headline += (f" (vLLM {p.accounting.version if p.accounting else ''} starts, "
                             f"but its admission gate charges a {self.context:,}-token prompt "
                             f"{p.admission_blocks(self.context):,} blocks, its window layers the "
                             f"whole prompt, and the pool holds {p.blocks:,}: such a request "
                             "waits forever, issue #39734; v0.20 charges a window its window "
                             "and a prefill's room)")
            elif p.state_pool_fixed and max(1, self.target or 1) > p.state_slots:
                headline += (f" (and its state pool holds {p.state_slots:,} requests' "
                             f"states, {fixed_state_size(self.settings)}: "
                             f"--max-running-requests {max(1, self.target or 1):,} gives each "
                             "conversation one, and the shortfall counts their states)")
            elif p.rest_bytes < 0 and is_llamacpp(p):
                headline += (f" (the weights, the runtime and the compute buffer alone "
                             f"overflow its {p.total_bytes / GIB:,.1f} GiB)")
            elif p.capped:
                tokens = -(-int(self.per_conversation_bytes * max(1, self.target or 1))
                           // int(p.page_bytes)) * p.block_size
                left = max(0.0, p.rest_bytes * p.free_fraction_of_rest)
                if p.state_request_bytes:  # SGLang caps what its state pool leaves
                    left = max(0.0, p.pool_bytes - p.slot_cache_bytes)
                room = int(left // p.page_bytes) * p.block_size
                headline += (f" ({cap_flag(p)} caps it at {p.token_cap:,} tokens; "
                             + (f"{tokens:,} would hold it, and the memory leaves room for "
                                f"{room:,})" if tokens <= room else
                                f"the memory leaves room for only {room:,})"))
            elif p.set_pool_bytes:
                need = p.pool_bytes + self.shortfall_bytes
                headline += (f" (--kv-cache-memory-bytes {int(need)}, {need / GIB:,.2f} GiB, "
                             f"would hold it; the card "
                             f"has room for {p.rest_bytes / GIB:,.2f} GiB)" if need <= p.rest_bytes
                             else f" (the card has room for {p.rest_bytes / GIB:,.2f} GiB)")
            elif p.weights_overflow:
                headline += (f" (the weights alone, {p.weight_bytes / GIB:,.1f} GiB per GPU, "
                             f"exceed the card's {p.total_bytes / GIB:,.1f} GiB: it could not "
                             "load them)")
            elif p.rest_bytes < 0:
                headline += f" ({_overflow(p)})"
        elif self.verdict == UNDER_RIDGE:
            headline += (f"; the batch they allow ({self._batch_label()}) is under the ridge "
                         f"({self.ridge_batch:,.0f}): bandwidth-bound at any load")
        elif micro_batches(d) > 1:
            headline += (f"; a batch of {self._batch_label()}, reaches the ridge "
                         f"({self.ridge_batch:,.0f})")
        else:
            headline += f"; a batch of {self.batch:,} reaches the ridge ({self.ridge_batch:,.0f})"
        if self.verdict == CLEARS_RIDGE and d.model.moe is not None \
                and self.stage_batch < self.expert_ridge_batch:
            headline += (" in the weights every token reads; the routed experts stay "
                         "bandwidth-bound (caution below)")
        engine = p.engine if p.accounting is None else (
            f"vLLM {p.accounting.version} ({runner_label(p)} memory accounting)")
        if p.accounting is None and self.settings.engine_version:
            engine += f" {self.settings.engine_version}"
        if p.engine_buffers:
            engine += " (TensorRT engine backend)"
        if is_llamacpp(p) and d.num_gpus > 1:
            engine += " -sm " + ("layer" if d.pipeline_parallel_size > 1 else "tensor")
        lines = [*([self.searched] if self.searched else []), headline,
                 f"{d.model.name} on {d.gpus_label}, {engine}, weights "
                 f"{d.weights.label}, KV {d.kv.id}",
                 *offload_lines(d, self.launch_cells), *_stage_lines(p, d), ""]
        lines += table(budget_rows(p, self.settings, d.model, vendor=d.accelerator.vendor), ["", ""])[1:]
        held = f"holds {p.logged_tokens(self.context):,} tokens in {p.blocks:,} blocks of " \
            f"{p.block_size}"
        if is_llamacpp(p):
            held = f"holds {p.tokens:,} cells (-c up to {p.tokens:,})"
            if p.slot_cache_bytes:
                held += (f" beside {p.slot_cache_bytes / GIB:,.2f} GiB of sliding-window and "
                         f"recurrent cache sized for {p.max_num_seqs} slots")
        if p.groups is not None and (p.groups.count > 1 or p.groups.windows or p.groups.states):
            held = (f"holds {p.logged_tokens(self.context):,} tokens as vLLM logs them "
                    f"(its maximum concurrency {p.concurrency(self.context):,.2f}x"
                    + (", a request charged its windows' prefill room" if p.groups.windows
                       else "") + f"): {p.blocks:,} blocks of "
                    f"{p.block_size} tokens shared by {p.groups.count} KV-cache "
                    f"{plural(p.groups.count, 'group')} "
                    f"({p.groups.full} full, {p.groups.count - p.groups.full - p.groups.states}"
                    f" windowed, {p.groups.states} state)")
        slot = ""
        if is_llamacpp(p) and p.slot_bytes_each:
            slot = (f", plus {p.slot_bytes_each / GIB:,.3f} GiB for its "
                    "slot's window and state cache")
        gate = admission_gate(p, self.context)
        gated = ""
        if gate is not None and p.blocks >= gate[0]:
            admission, decoding = gate
            gated = (f"; vLLM admits a {self.context:,}-token prompt only with {admission:,} "
                     f"blocks free (scheduler_reserve_full_isl), and one decoding holds "
                     f"{decoding:,}: 1 + ({p.blocks:,} − {admission:,}) ÷ {decoding:,} = "
                     f"{1 + (p.blocks - admission) // decoding:,} at once")
        lines += ["", f"{held}; one conversation of {self.context:,} tokens takes "
                  f"{self.per_conversation_bytes / GIB:,.3f} GiB per GPU{slot}{gated}",
                  f"batch the engine can run: min({self.conversations:,} "
                  f"{plural(self.conversations, 'conversation')}, "
                  f"{seats_name(p)} {p.max_num_seqs:,}) = {self.batch:,}"]
        if p.state_pool_fixed and not state_overrun(p):
            lines.append(f"{state_pool_note(p, self.settings, d.model)}, whatever the "
                         "memory; a running request takes one slot")
        if self.advice is not None:
            fit_requested, fill_card = self.advice
            lines.append(f"vLLM's start-up advice: --kv-cache-memory-bytes {int(fit_requested)} "
                         f"({fit_requested / GIB:,.2f} GiB) fits the memory requested, "
                         f"{int(fill_card)} ({fill_card / GIB:,.2f} GiB) fills the card")
        if is_llamacpp(p) and self.batch:
            ub = self.settings.max_num_batched_tokens
            flags = "".join((
                # -b rises with a -ub past it
                (f" -b {ub}" if ub and ub > llamacpp_n_batch() else "")
                + (f" -ub {ub}" if ub else ""),
                "" if self.settings.flash_attn else " -fa off",
                "" if d.kv.id in ("fp16", "f16") else f" -ctk {d.kv.id} -ctv {d.kv.id}",
                # llama-server's default split is by layer; a tensor split must be asked
                " -sm tensor" if d.num_gpus > 1 and d.pipeline_parallel_size == 1 else "",
                offload_flags(d)))
            lines.append(f"start it with: llama-server -c {self.launch_cells} "
                         f"-np {p.max_num_seqs} --kv-unified{flags} ({p.max_num_seqs} slots share "
                         f"the cache; {self.batch} {plural(self.batch, 'conversation')} of "
                         f"{self.context:,} tokens "
                         f"{'fits' if self.batch == 1 else 'fit'} at once)")
        lines += [f"caution: {c}" for c in self.cautions]
        if self.levers:
            lines += ["", "levers:"]
            width = max(34, *(len(lv.name) for lv in self.levers))
            lines += [f"  {lv.name:<{width}} {lv.conversations:>8,} "
                      f"{plural(lv.conversations, 'conversation')}, batch {lv.batch:,}"
                      for lv in self.levers]
        if self.verdict == DOES_NOT_FIT and not past_trained_context(d, self.context) \
                and all(lv.conversations < max(1, self.target or 1) for lv in self.levers):
            lines += ["", "levers: none alone is enough; " + gpus_needed(self)] \
                if not self.levers else [f"  none alone holds {max(1, self.target or 1):,}; "
                                         + gpus_needed(self)]
        return lines


SHORTEST_CONTEXT = 1024  # where a failed search reports: a short conversation


def longest_context(dep: Deployment, settings: EngineSettings, target: int) -> FitReport:
    """The fit at the longest context at which ``target`` conversations still fit at once
    (bisection: the pool shrinks, or stays, as conversations grow), up to the model's
    max_position_embeddings; where none does, the fit at a short conversation says by how
    much it falls short."""
    limit = served_positions(dep.model, dep.engine) or 1 << 20

    def holds(context: int) -> bool:
        return fit_report(dep, context, settings, target).conversations >= target

    if not holds(1):
        short = fit_report(dep, min(SHORTEST_CONTEXT, limit), settings, target)
        return replace(short, searched=f"no context holds {target:,} conversations at once; "
                       f"at {short.context:,} tokens:")
    low = longest_holding(holds, 1, limit)
    report = fit_report(dep, low, settings, target)
    cap = "" if low != limit else " (the model's limit)" if served_positions(dep.model,
                                                                            dep.engine) \
        else " (as far as the search goes: the config states no context length)"
    return replace(report, searched=f"longest context at which {target:,} "
                   f"{plural(target, 'conversation')} {'fits' if target == 1 else 'fit'} at "
                   f"once: {low:,} tokens{cap}")


def slots_for_target(dep: Deployment, settings: EngineSettings,
                     target: int | None) -> EngineSettings:
    """llama-server started for the target: -np target where the default slots are fewer and
    -np was not given, each slot with its own window and recurrent cache (a target past the
    default 4 slots is not held by 4). Other engines' seats do not size memory."""
    if not dep.engine.startswith("llama.cpp") or not target or settings.max_num_seqs:
        return settings
    default = int(engine_defaults(dep.engine).get("n_parallel", 1))
    return replace(settings, max_num_seqs=target) if target > default else settings


def fit_report(dep: Deployment, context: int, settings: EngineSettings,
               target: int | None = None) -> FitReport:
    s = slots_for_target(dep, replace(settings, max_model_len=settings.max_model_len or context),
                         target)
    pool = kv_pool(dep, s)
    per_seq = conversation_bytes(pool, dep, context)
    n = held_conversations(pool, dep, context)
    acc = dep.accelerator
    # the ridge only where a step can be timed, as decode and simulate time it: a record with
    # no rate for the cache's attention matmuls (fp32 alone, a bf16 cache) is refused there
    dep.attention_compute_dtype  # noqa: B018 (raises, naming the peaks the record has)
    ridge = dep.dense_ridge_flop_per_byte
    dense_bpw = dep.bytes_per_weight_split[0]
    ridge_batch = dep.dense_ridge_batch
    steps = (
        *stage_steps(dep, s, pool),
        pool_step(dep, pool, s),
        *state_pool_steps(dep, pool, s),
        conversations_step(dep, pool, s, context, n, per_seq),
        *start_steps(pool, dep, context),
        ridge_step(acc, dep.dense_compute_dtype),
        step("ridge batch", "ridge × bytes per weight ÷ 2 FLOP (the batch whose tokens, "
             "sharing each read of the weights every token reads, reach the ridge)",
             q("batch", ridge_batch), q("ridge", ridge, "FLOP/byte"),
             q("bytes per weight", dense_bpw, "B", f"{dep.weights.label}; all but the routed "
               "experts and the input embedding" if dep.model.moe else
               f"{dep.weights.label}; all but the input embedding")),
    )
    report = FitReport(dep, s, pool, context, target, n, per_seq, ridge_batch, (), steps)
    report = replace(report, levers=tuple(levers(report)))
    return replace(report, steps=(*steps, *_held_steps(report)))


def _held_steps(r: FitReport) -> tuple[Step, ...]:
    """The pool in blocks, the shortfall and the levers, each with its division."""
    p = r.pool
    unit = "cells" if is_llamacpp(p) else "blocks"
    slots = [q("slots' window cache", p.slot_cache_bytes / GIB, "GiB")] \
        if is_llamacpp(p) else []
    per_block = q(f"bytes per {unit[:-1]}", p.page_bytes / 2**20, "MiB",
                  f"{p.block_size} token(s) × KV bytes per token per GPU"
                  + (" across every KV-cache group" if p.groups else ""))
    out = [step("blocks the KV cache holds", "floor(KV cache ÷ bytes per block)",
                q(unit, p.blocks), q("KV cache", p.state_kv_bytes / GIB, "GiB",
                                     "beside the state pool, above"), per_block)
           if p.state_request_bytes else
           step(f"{unit} the pool holds", (f"floor((pool − {slots[0].name}) ÷ bytes per "
                                            f"{unit[:-1]})") if slots else
                f"floor(pool ÷ bytes per {unit[:-1]})", q(unit, p.blocks),
                q("pool", p.pool_bytes / GIB, "GiB"), *slots, per_block)]
    if p.state_request_bytes:
        out.append(running_step(r))
    if r.verdict == DOES_NOT_FIT and p.state_request_bytes \
            and not past_trained_context(r.deployment, r.context):
        out.append(state_shortfall_step(r))
    elif r.verdict == DOES_NOT_FIT and not past_trained_context(r.deployment, r.context):
        out.append(step("shortfall per GPU", "(max(target × per conversation, start-up blocks) "
                        "+ slots' window cache) ÷ share of the rest for the cache − the rest",
                        q("shortfall", r.shortfall_bytes / GIB, "GiB"),
                        q("target", max(1, r.target or 1)),
                        q("per conversation", r.per_conversation_bytes / GIB, "GiB"),
                        q("start-up", r.start_bytes / GIB, "GiB"),
                        q("share of the rest", p.free_fraction_of_rest),
                        q("rest after weights and profiling", p.rest_bytes / GIB, "GiB")))
    if is_llamacpp(p) and r.batch:
        placed = r.deployment.offload is not None and bool(r.deployment.offload.fit_cells)
        out.append(step("llama-server -c", "the cells --fit placed for" if placed else
                        "batch × context: every running conversation its whole context",
                        q("-c", r.launch_cells), q("batch", r.batch), q("context", r.context)))
    if r.levers:
        out.append(step("levers", "this fit re-run with one change each: conversations held "
                        "(vLLM's start-up check included), batch = min(them, seats)",
                        q("levers", len(r.levers)),
                        *(q(lv.name, lv.conversations, plural(lv.conversations, "conversation"))
                          for lv in r.levers)))
    return tuple(out)


def _stage_lines(p: KVPool, d: Deployment) -> list[str]:
    """Which pipeline stage's pool binds, where the deployment has stages."""
    if p.stage is None:
        return []
    layers = [stage.layers for stage in pipeline_stages(d)]
    return [f"layers per stage {', '.join(map(str, layers))}; each stage sizes its own pool "
            "and the engine holds no more than its tightest, so the figures below are those "
            f"of {p.stage.describe()}"]
