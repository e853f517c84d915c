"""Amdahl's P taken from a model: the share of one decode step an operator group takes.

P = time in the group's operators / the step's time, both from step_cost (ridgeline.cost),
for a step the deployment can run: one whose weights and KV cache fit, and whose batch the
engine's KV pool holds at that context.
"""

from __future__ import annotations

from ridgeline.amdahl import FractionSource
from ridgeline.cost import decode_batch, step_cost
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.errors import DoesNotFit, InputError
from ridgeline.floors import decode_floor

# The operator groups a user names (--op) and the step_cost operators each adds up.
OP_GROUPS = {
    "attention": ("attention",),
    "weights": ("attention projections", "mlp", "experts", "shared experts", "router",
                "linear attention", "mamba", "lm head"),
    "communication": ("tp all-reduce", "pipeline send", "lora collectives"),
}


def decode_refusal(dep: Deployment, batch: int, context: int) -> str | None:
    """Why a decode step of ``batch`` sequences at ``context`` tokens cannot run, or None:
    the weights and cache do not fit, the engine's KV pool holds fewer sequences, or its seat
    cap (max_num_seqs, its own name for it) runs fewer than the pool holds, as decode says."""
    from ridgeline.candidate import ENGINE_KNOB_NAMES
    from ridgeline.capacity import context_refusal, engine_seats  # the engines' memory: heavy

    fit = decode_floor(dep, batch, context).fit
    if not fit.fits:  # in the words of the pool's refusals below: "does not fit: ..."
        return f"{fit.does_not_fit} (batch {batch:,}, context {context:,})"
    seats = engine_seats(dep, context, max_model_len=context)
    held = seats.held
    if held is None or held >= batch:
        return None
    if seats.seat_limited:
        knob = ENGINE_KNOB_NAMES.get(dep.engine, ENGINE_KNOB_NAMES["vllm"])[0]
        return (f"does not run: {dep.engine}'s {knob} lets at most {held:,} sequences run at "
                f"once, fewer than batch {batch:,} (its KV pool would hold more at {context:,} "
                "tokens of context; `ridgeline fit` for the breakdown)")
    if held == 0 and not context_refusal(dep, context):  # the weights fit the card, not the pool
        return (f"does not fit: {dep.engine}'s KV pool holds no sequence of {context:,} tokens: "
                f"the {fit.weight_bytes / 1e9:,.1f} GB of weights and what the engine reserves "
                "beside them leave it no room (`ridgeline fit` for the breakdown)")
    return "does not fit: " + (
        context_refusal(dep, context)
        or f"{dep.engine}'s KV pool runs {held:,} of batch {batch:,} at {context:,} tokens "
        "of context, started at that max_model_len (`ridgeline fit` for the breakdown)")


def decode_share(dep: Deployment, op: str, batch: int, context: int, profile: EngineProfile,
                 profile_file: str | None = None, op_defaulted: bool = False) -> FractionSource:
    """The share of the decode step that ``op``'s operators take, with the times behind it.
    A step that cannot run has no share to speed up: DoesNotFit names why."""
    if op not in OP_GROUPS:
        raise InputError(f"unknown operator group {op!r} (one of {', '.join(OP_GROUPS)})")
    refusal = decode_refusal(dep, batch, context)
    if refusal:  # an answer, not bad input: --json says it
        raise DoesNotFit(refusal)
    cost = step_cost(dep, decode_batch(batch, context), profile)
    # the group's operators this step has (a dense model has no experts, one GPU no all-reduce),
    # so that --explain's sum names only what it adds; the whole group where it has none
    ops = tuple(name for name in OP_GROUPS[op] if any(o.name == name for o in cost.ops))
    ops = ops or OP_GROUPS[op]
    fraction = cost.share(*ops)
    return FractionSource(
        fraction, given=False, model=dep.model.name, gpu=dep.accelerator.id,
        num_gpus=dep.num_gpus, weights=dep.weights.label, kv_dtype=dep.kv.id,
        engine=dep.engine, profile=profile_file, op=op, op_defaulted=op_defaulted, ops=ops,
        batch=batch, context=context, part_time_s=fraction * cost.time_s,
        step_time_s=cost.time_s, overhead_time_s=cost.share("overhead") * cost.time_s)
