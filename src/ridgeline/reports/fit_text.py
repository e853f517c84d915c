"""`ridgeline fit` as text: the headline, the deployment, the memory budget, what the pool
holds, the conversations of full length it runs at once, how to start llama-server, the
cautions and the levers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ridgeline.capacity import (
    admission_gate,
    conversations,
    past_trained_context,
    reserved_blocks,
    served_context,
)
from ridgeline.cpu_offload import cpu_offload_note
from ridgeline.deployment import Deployment
from ridgeline.engine_versions import engine_release
from ridgeline.engine_windows import sglang_window_pool_words
from ridgeline.llamacpp_fit import placed_by_fit
from ridgeline.llamacpp_tensor import tensor_split_launch
from ridgeline.memory import KVPool
from ridgeline.render import table
from ridgeline.reports.fit_budget import budget_rows
from ridgeline.reports.fit_levers import more_gpus
from ridgeline.reports.fit_offload import fit_target_flag, offload_flags, offload_lines
from ridgeline.reports.fit_ranks import pool_ranks_note, seats_ranks_note
from ridgeline.reports.fit_state import (
    drafter_seats_note,
    running_slots,
    state_overrun,
    state_pool_note,
)
from ridgeline.reports.fit_terms import (
    cache_all_on_host,
    conversation_size,
    held_label,
    host_cache_unbounded,
    is_llamacpp,
    logs_concurrency_tokens,
    per_gpu,
    runner_label,
    seats_name,
    sglang_pool_words,
)
from ridgeline.reports.fit_verdict import logged_concurrency_line, verdict_line
from ridgeline.stages import pipeline_stages
from ridgeline.units import GIB, plural
from ridgeline.vllm_hybrid import ssm_state_dtype, ssm_state_dtype_why

if TYPE_CHECKING:
    from ridgeline.reports.fit import FitReport


def fit_text_lines(r: FitReport) -> list[str]:
    """The report as `ridgeline fit` prints it, the headline first (fit_verdict)."""
    d, p = r.deployment, r.pool
    headline = verdict_line(r)
    # the release the pool was sized as, named where none was given too (sglang 0.5.23)
    engine = engine_release(p.engine, r.settings.engine_version) if p.accounting is None \
        else f"vLLM {p.accounting.version} ({runner_label(p)} memory accounting)"
    if p.engine_buffers:
        engine += " (TensorRT engine backend)"
    if is_llamacpp(p) and d.num_gpus > 1:
        engine += " -sm " + ("layer" if d.pipeline_parallel_size > 1 else "tensor")
    logged = logged_concurrency_line(r)
    lines = [*([r.searched] if r.searched else []), headline, *([logged] if logged else []),
             f"{d.model.name} on {d.gpus_label}, {engine}, weights "
             f"{d.weights.label}, KV {d.kv.id}{cpu_offload_note(d)}",
             *offload_lines(d, r.launch_cells), *_stage_lines(p, d), ""]
    lines += table(budget_rows(p, r.settings, d.model, vendor=d.accelerator.vendor,
                               flash_attention=d.flash_attention, family=d.accelerator.family,
                               device=d.accelerator.device_noun), ["", ""])[1:]
    held = f"holds {p.logged_tokens(r.context):,} tokens in {p.blocks:,} " \
        f"{plural(p.blocks, 'block')} of {p.block_size:,}"
    if logs_concurrency_tokens(p, r.context):
        # vLLM v0.24+ logs concurrency × max_model_len, not blocks × block size: a
        # max_model_len off the block size leaves each request's last block part empty
        held = (f"holds {p.logged_tokens(r.context):,} tokens as vLLM logs them (its maximum "
                f"concurrency {p.concurrency(r.context):,.2f}x × max_model_len "
                f"{r.context:,}): {p.blocks:,} {plural(p.blocks, 'block')} of {p.block_size:,}, "
                f"{p.blocks * p.block_size:,} token slots")
    if p.engine == "sglang" and p.groups is None:  # its log's figure, in its words
        held = f"holds {sglang_pool_words(p.blocks, p.block_size)}"
    if is_llamacpp(p):
        more = "more " if d.offload is not None else ""
        # one memory (a Mac's, a GB10's): --fit has nowhere to move weights (fit_placement)
        # under --fit (its margin may be 0): more cells make it move weights
        fit_on = r.fit_host is not None or placed_by_fit(d)
        past = "" if not fit_on else \
            "; past it --fit fails, GPU and CPU sharing one memory, so it has nowhere to " \
            "move weights, and llama-server loads every layer into the margin" \
            if d.accelerator.one_memory else \
            f"; past it --fit moves {more}weights to the host"
        held = f"holds {p.tokens:,} cells (-c up to {p.tokens:,}{past})"
        if cache_all_on_host(p):  # -ngl 0: the host's RAM holds them, where it is given
            o = d.offload
            bound = "the host's RAM (--host-memory-gib) beside its weights" if \
                o is not None and o.host_memory_bytes is not None else \
                "only the GPU's compute-buffer mask; --host-memory-gib bounds it by the RAM"
            held = f"holds {p.tokens:,} cells in host memory (-c up to {p.tokens:,}: {bound})"
        if p.slot_cache_bytes:
            held += (f" beside {p.slot_cache_bytes / GIB:,.2f} GiB of sliding-window and "
                     f"recurrent cache sized for {p.max_num_seqs} slots")
    if p.groups is not None and (p.groups.count > 1 or p.groups.windows or p.groups.states):
        held = (f"holds {p.logged_tokens(r.context):,} tokens as vLLM logs them "
                f"(its maximum concurrency {p.concurrency(r.context):,.2f}x"
                + (", a request charged its windows' prefill room" if p.groups.windows
                   else "") + f"): {p.blocks:,} blocks of "
                f"{p.block_size} tokens shared by {p.groups.count} KV-cache "
                f"{plural(p.groups.count, 'group')} "
                f"({p.groups.full} full, {p.groups.count - p.groups.full - p.groups.states}"
                f" windowed, {p.groups.states} state"
                + (f"; a block sized to hold one layer's recurrent state, its SSM state in "
                   f"{ssm_state_dtype(r.deployment.model, p.accounting.version)}: "
                   f"{ssm_state_dtype_why(r.deployment.model, p.accounting.version)}"
                   if p.groups.alignment and p.accounting is not None else "") + ")")
    slot = ""
    if is_llamacpp(p) and p.slot_bytes_each:
        slot = (f", plus {p.slot_bytes_each / GIB:,.3f} GiB for its "
                "slot's window and state cache")
    gate = admission_gate(p, r.context)
    gated = ""
    if gate is not None and p.blocks >= gate[0]:
        admission, decoding = gate
        gated = (f"; vLLM admits a {r.context:,}-token prompt only with {admission:,} "
                 f"blocks free (scheduler_reserve_full_isl), and one decoding holds "
                 f"{decoding:,}: 1 + ({p.blocks:,} − {admission:,}) ÷ {decoding:,} = "
                 f"{1 + (p.blocks - admission) // decoding:,} at once")
    takes = f"{conversation_size(r.per_conversation_bytes)} {per_gpu(p, d.accelerator.device_noun)}" \
        + whole_blocks_note(p, r.context)
    if cache_all_on_host(p):  # -ngl 0: none of it on the GPU
        from ridgeline.llamacpp_pool import host_cache_bytes

        takes = f"{host_cache_bytes(d, r.context) / GIB:,.3f} GiB of host memory"
    windows = sglang_window_pool_words(d, r.settings.swa_full_tokens_ratio,
                                       r.settings.engine_version)
    if windows:  # more than kv's windows kept: say why
        takes += f": {windows}"
    lines += ["", f"{held}{pool_ranks_note(d, p, r.context)}; one conversation of "
              f"{r.context:,} {plural(r.context, 'token')} takes {takes}{slot}{gated}",
              _held_line(r)]
    if p.state_pool_fixed and not state_overrun(p):
        slots = running_slots(r)
        lines.append(f"{state_pool_note(p, r.settings, d.model)}, whatever the "
                     "memory; a running request takes "
                     + ("one slot" if slots == 1 else f"{slots} slots"))
    if r.advice is not None:
        fit_requested, fill_card = r.advice  # the flag is per device: a die of an MI250
        device = "card" if p.runtime_devices == 1 else "die"
        # one figure where the two agree (gpu_memory_utilization 1.0 requests the card)
        said = f"fits the memory requested and fills the {device}" \
            if int(fit_requested) == int(fill_card) else \
            (f"fits the memory requested, {int(fill_card)} ({fill_card / GIB:,.2f} GiB) "
             f"fills the {device}")
        lines.append(f"vLLM's start-up advice: --kv-cache-memory-bytes {int(fit_requested)} "
                     f"({fit_requested / GIB:,.2f} GiB) {said}"
                     + (f" (each of the {p.runtime_devices} dies of a {d.accelerator.id} takes "
                        "the flag)" if p.runtime_devices > 1 else ""))
    if is_llamacpp(p) and r.batch:
        # the ubatch the compute buffer was sized for: llama_context clamps -ub to -b, whose
        # default the pool keeps (llamacpp_pool), so the command starts what was sized
        ub = r.settings.max_num_batched_tokens and p.profile_tokens
        flags = "".join((
            f" -b {r.settings.n_batch}" if r.settings.n_batch else "",
            f" -ub {ub}" if ub else "",
            "" if d.flash_attention else " -fa off",
            "" if d.kv.id in ("fp16", "f16") else f" -ctk {d.kv.id} -ctv {d.kv.id}",
            # llama-server's default split is by layer; a tensor split must be asked, and its
            # --fit turned off (it does not place one)
            " " + tensor_split_launch() if d.num_gpus > 1 and d.pipeline_parallel_size == 1
            else "",
            offload_flags(d),
            fit_target_flag(r),
            d.rope.flags() if d.rope is not None else ""))
        slots = r.launch_slots
        held = (f"{r.batch} {plural(r.batch, 'conversation')} of {r.context:,} "
                f"{plural(r.context, 'token')} {'fits' if r.batch == 1 else 'fit'} at once")
        why = (f"{slots} slots share the cache; {held}" if slots == p.max_num_seqs else
               f"{slots} {plural(slots, 'slot')}, as {held}: llama-server's default "
               f"{p.max_num_seqs} slots would admit one more as long, which fills the cells, "
               "and then fail the requests running ('KV cache is full')")
        lines.append(f"start it with: llama-server -c {r.launch_cells} "
                     f"-np {slots} --kv-unified{flags} ({why})")
        lines += _read_back_note(r)
    if r.flash_attention_auto_off:
        lines.append(f"-fa off: llama.cpp's -fa auto turns flash attention off here ('Flash "
                     f"Attention was auto, set to disabled'): {r.flash_attention_auto_off}")
    lines += [f"caution: {c}" for c in r.cautions]
    if r.levers:
        lines += ["", "levers:"]
        width = max(34, *(len(lv.name) for lv in r.levers))
        lines += [f"  {lv.name:<{width}} {lv.conversations:>8,} "
                  f"{plural(lv.conversations, 'conversation')}, batch {lv.batch:,}"
                  for lv in r.levers]
    if (needed := more_gpus(r)) is not None:
        lines += ["", "levers: none alone is enough; " + needed.text] \
            if not r.levers else ["  none alone holds "
                                     + (f"{r.target:,}" if r.target else "one") + "; "
                                     + needed.text]
    return lines


def _read_back_note(r: FitReport) -> list[str]:
    """The line under the start line where pasting it back reads another length: a -c line is
    read as -np conversations of -c ÷ -np tokens (llamacpp_pool.per_slot_context), so -c
    96000 -np 4 (-np given), where 3 conversations of 32,000 fit, reads as 4 of 24,000. Under
    --kv-unified llama.cpp caps a slot at all -c cells, not -c ÷ -np (src/llama-context.cpp:
    n_ctx_seq = n_ctx), so -np 4 serves the 3 of 32,000; a fourth conversation as long would
    fill the cells, and llama-server then fails the requests running (tools/server
    update_slots: 'KV cache is full', every slot released with an error). Where -np was not
    given the line starts -np 3 instead (FitReport.launch_slots), which reads back as it is."""
    from ridgeline.llamacpp_pool import per_slot_context

    slots, cells = r.launch_slots, r.launch_cells
    if not slots or per_slot_context(cells, slots) == r.context:
        return []
    fills = slots > r.batch and cells < (r.batch + 1) * r.context  # one more would not fit
    more = ("; one more as long fills the cells, and llama-server then fails the requests "
            "running ('KV cache is full')" if fills else "")
    return [f"pasted back, -c {cells} -np {slots} reads as {slots} conversations of "
            f"{per_slot_context(cells, slots):,} tokens (-c ÷ -np); llama-server lets a slot "
            f"grow to all {cells:,} cells (--kv-unified), so the {r.batch} of {r.context:,} "
            f"run in it{more}; to price this run again, give --max-model-len {r.context} "
            f"-np {slots} in place of -c"]


def _held_line(r: FitReport) -> str:
    """The conversations of the whole context run at once: min(what the pool holds, the
    seats); where the engine serves none at this length (past the model's positions, the
    refusal line 1 gives), that zero's reason and what the pool alone would hold (Llama-2-13B
    at 16,384 tokens on an H100 under vLLM 0.2.5: 0, the pool's 58,880 tokens holding 3)."""
    d, p = r.deployment, r.pool
    label = held_label(r.context)
    if host_cache_unbounded(p, d):
        return (f"{label}: {seats_name(p)} {p.max_num_seqs:,} = {r.batch:,} (the host's RAM, "
                "not given, bounds the conversations; the GPU's mask alone would allow "
                f"{r.conversations:,})")
    if not r.conversations and past_trained_context(d, r.context):
        limit, positions = served_context(d)
        would = conversations(p, d, r.context) * d.data_parallel_size
        return (f"{label}: 0, as the engine serves none past {d.model.name}'s "
                f"{limit or 0:,} positions ({positions}; line 1)"
                + (f"; the pool alone would hold {would:,}" if would
                   else ", nor would the pool hold one"))
    return (f"{label}: min({r.conversations:,} {plural(r.conversations, 'conversation')}, "
            f"{seats_name(p)} {p.max_num_seqs:,}{seats_ranks_note(d)}{drafter_seats_note(r)}) "
            f"= {r.batch:,}")


def _stage_lines(p: KVPool, d: Deployment) -> list[str]:
    """Which pipeline stage's pool binds, where the deployment has stages."""
    if p.stage is None:
        return []
    layers = [stage.layers for stage in pipeline_stages(d)]
    what = "blocks (attention, Mamba-2: two a layer)" if d.model.parallel_hybrid else "layers"
    return [f"{what} per stage {', '.join(map(str, layers))}; each stage sizes its own pool "
            "and the engine holds no more than its tightest, so the figures below are those "
            f"of {p.stage.describe()}"]


def whole_blocks_note(p: KVPool, context: int) -> str:
    """How fit counts one conversation where the engine holds it in whole blocks, unlike kv's
    exact bytes: vLLM's blocks of every group, TensorRT-LLM's reserved blocks; "" where it is
    the bytes themselves. Llama-3.1-70B at TP2, 2,000 tokens under vLLM 0.34: " (32 whole
    blocks of 64 tokens, 2,048 slots)", 0.312 GiB where kv's exact bytes are 0.305 GiB."""
    if p.groups is not None:
        blocks = p.groups.peak_decode_blocks(context)
        across = f" across {p.groups.count} KV-cache groups" if p.groups.count > 1 else \
            f", {blocks * p.block_size:,} slots"
        return f" ({blocks:,} whole {plural(blocks, 'block')} of {p.block_size} tokens{across})"
    blocks = reserved_blocks(p, context)
    return f" ({blocks:,} whole {plural(blocks, 'block')} of {p.block_size} tokens, " \
        f"{blocks * p.block_size:,} {plural(blocks * p.block_size, 'slot')})" if blocks else ""
