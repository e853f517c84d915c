"""Whether the engine runs a floor's point, and why not, as decode's and prefill's JSON give it
(``engine_runs``, ``expected_none_reason``, ``expected_none_code``): the memory holds the
batch (raw_fit.FitCheck), and the engine, started as it would be, seats it
(capacity.EngineSeats). A floor's ``_if_fits`` speeds answer the first question
only: Llama-2-7B (4,096 positions) on an H100 at 8,000 tokens fits, but vLLM refuses the
length, so no engine runs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ridgeline.engine_names import engine_name
from ridgeline.units import plural

if TYPE_CHECKING:
    from ridgeline.capacity import EngineSeats
    from ridgeline.deployment import Deployment
    from ridgeline.raw_fit import FitCheck

DOES_NOT_FIT = "does_not_fit"  # the weights and the batch's cache outgrow the memory
OVER_ENGINE_POOL = "over_engine_pool"  # the engine runs some of this context, not the batch
ENGINE_RUNS_NONE = "engine_runs_none"  # none: a length refused, a start refused, no room
# a prompt past the step's whole token budget of an engine that runs contexts whole
# (TensorRT-LLM, enable_chunked_prefill off: chunked_prefill.refuses_whole_prompt)
OVER_MAX_NUM_TOKENS = "over_max_num_tokens"


def seated(fits: bool, seat: EngineSeats | None, batch: int) -> bool:
    """Whether the engine runs ``batch`` sequences at once: they fit, and ``seat`` (None, or
    a ``held`` of None: an engine with no memory model) holds that many."""
    held = None if seat is None else seat.held
    return fits and (held is None or batch <= held)


def none_code(fits: bool, seat: EngineSeats | None, batch: int) -> str:
    """Why not, for a program: DOES_NOT_FIT, OVER_ENGINE_POOL (a batch past what it seats) or
    ENGINE_RUNS_NONE (no sequence of this length); "" where it runs."""
    if seated(fits, seat, batch):
        return ""
    if not fits:
        return DOES_NOT_FIT
    return OVER_ENGINE_POOL if seat is not None and seat.held else ENGINE_RUNS_NONE


def seats_knob(engine: str) -> str:
    """The engine's own name for its cap on running sequences: vLLM's max_num_seqs, SGLang's
    max_running_requests, llama-server's -np (its slots)."""
    from ridgeline.candidate import ENGINE_KNOB_NAMES

    if engine.startswith("llama.cpp"):
        return "-np"
    return ENGINE_KNOB_NAMES.get(engine, ENGINE_KNOB_NAMES["vllm"])[0]


def decode_none_reason(fit: FitCheck, seat: EngineSeats, batch: int, context: int,
                       engine: str, defaults: bool = True) -> str:
    """Why ``engine`` runs no decode step of ``batch`` at ``context`` tokens, as decode says it
    (``defaults``: its pool sized under the engine's defaults, vllm serve's for vLLM); ""
    where it runs. Llama-2-7B under vLLM at 8,000 tokens: 'vllm refuses --max-model-len
    8,000, past llama-2-7b's 4,096 positions …'."""
    if seated(fit.fits, seat, batch):
        return ""
    if not fit.fits:
        return fit.does_not_fit
    if seat.held:
        return (f"{engine_name(engine)} cannot run a batch of {batch:,} at {context:,} "
                f"{plural(context, 'token')} of context: {seats_clause(seat, engine)}, so no "
                "step of that size happens")
    return no_sequence_clause(seat, engine, defaults)


def seats_clause(seat: EngineSeats, engine: str) -> str:
    """What caps the batch ``engine`` runs at ``seat``'s context, where it runs some: its
    seats (vLLM 0.6 at 512 tokens: 'its max_num_seqs lets at most 256 sequences run at once
    (its KV pool would hold more)') or its pool ('its KV pool runs at most 236 sequences');
    "" where it runs none (no_sequence_clause says why) or has no memory model."""
    if not seat.held:
        return ""
    if seat.default_slots:  # llama-server's default -np, a knob the user did not turn
        return (f"llama-server's default {seat.held:,} slots (-np) let at most {seat.held:,} "
                f"{plural(seat.held, 'sequence')} run at once (its KV pool would hold "
                f"{seat.pool_held or 0:,}, a slot each: --parallel N raises it)")
    if seat.seat_limited:
        return (f"its {seats_knob(engine)} lets at most {seat.held:,} "
                f"{plural(seat.held, 'sequence')} run at once (its KV pool would hold more)")
    return f"its KV pool runs at most {seat.held:,} {plural(seat.held, 'sequence')}"


def no_sequence_clause(seat: EngineSeats, engine: str, defaults: bool = True) -> str:
    """Why ``engine`` runs no sequence of ``seat``'s context, naming the settings' mode
    (``defaults``: vllm serve's pool, which vLLM's offline class sizes otherwise)."""
    # the offline class sizes its pool otherwise than vllm serve (its larger step budget
    # profiles a larger activation peak): a refusal names the mode it was judged in
    mode = (" (as vllm serve sizes its pool; --usage offline for the offline LLM class's)"
            if engine == "vllm" and defaults else "")
    c = seat.context
    return seat.why_none(engine_name(engine) + mode, f"sequence of {c:,} {plural(c, 'token')}")


def default_seat(dep: Deployment, context: int) -> EngineSeats:
    """What ``dep``'s engine runs of ``context`` tokens started at its defaults (its default
    length, the model's context; vllm serve's pool): capacity.engine_seats, as decode and
    prefill ask it with no engine flags."""
    from ridgeline.capacity import engine_seats

    return engine_seats(dep, context)


def prefill_none_reason(fit: FitCheck, seat: EngineSeats | None, batch: int, prompt_len: int,
                        engine: str, fit_command: str = "`ridgeline fit`",
                        held: int | None = None) -> str:
    """Why ``engine`` runs no prefill of ``batch`` prompts of ``prompt_len`` tokens at once, as
    prefill says it, pointing at ``fit_command`` for the breakdown (``held``: the prompts the
    pool holds where another run than ``seat``'s says, llama.cpp's --fit set aside; else
    ``seat``'s); "" where it runs."""
    if seated(fit.fits, seat, batch):
        return ""
    if not fit.fits:
        return "does not fit: " + fit.headline().removeprefix("DOES NOT FIT: ")
    if held is None:
        held = seat.held if seat is not None else None
    held = held or 0
    if held and seat is not None and seat.default_slots:  # -np not given
        return (f"llama-server's default {seat.seat_limit:,} slots (-np) run {held:,} "
                f"{plural(held, 'prompt')} at once, not {batch:,} (its KV pool would hold "
                f"{seat.pool_held or 0:,}, a slot each: --parallel N raises it; {fit_command} "
                "for the breakdown)")
    if held and seat is not None and seat.seat_limited:  # -np N, max_num_seqs
        knob = seats_knob(engine)
        return (f"its {knob} {seat.seat_limit:,} runs {held:,} {plural(held, 'prompt')} at "
                f"once, not {batch:,} (its KV pool would hold {seat.pool_held or 0:,}; "
                f"{fit_command} for the breakdown)")
    if held:
        return (f"its KV pool holds {held:,} {plural(held, 'prompt')} of {prompt_len:,} tokens "
                f"at once, not {batch:,} ({fit_command} for the breakdown)")
    assert seat is not None  # (a pool that holds none has a memory model)
    return (seat.why_none(engine_name(engine), f"{prompt_len:,}-token prompt")
            + f" ({fit_command} for the breakdown)")
