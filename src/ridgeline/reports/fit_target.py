"""`ridgeline fit`'s word on --target-concurrency and the seats: whether the launch as given
runs the target at once, and where the engine's seats (max_num_seqs or its own name for it)
run fewer than the pool holds, the seats first and the pool after them."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ridgeline.units import plural

if TYPE_CHECKING:
    from ridgeline.reports.fit import FitReport


class SeatsLever(NamedTuple):
    """The seats lever that raises the batch at this context: its flag, the seats it sets
    (the flag's value: each data-parallel rank's) and the batch it then runs (the lever's
    own figures: more seats can take memory, so it holds no more than it says)."""

    flag: str
    seats: int
    batch: int

    def __str__(self) -> str:
        return f"{self.flag} {self.seats:,}"  # as the levers table names it


def seats_lever(r: FitReport) -> SeatsLever | None:
    """The lever among ``r.levers`` that raises the engine's seats at ``r``'s context and
    runs the most at once (--max-num-seqs 309 for Qwen3-32B on 4 A100-40GB at 1,024 tokens,
    309 at once where max_num_seqs 256 runs 256); None where none does."""
    from ridgeline.capacity import engine_seat_limit
    from ridgeline.reports.utilization import seats_flag

    flag = seats_flag(r.deployment.engine).split("/")[0]
    seats = engine_seat_limit(r.pool, r.deployment)
    raised = [lever for lever in r.levers if lever.seats > seats and lever.batch > r.batch
              and lever.context == r.context
              and (lever.name.startswith(f"{flag} ") or f"({flag} " in lever.name)]
    if not raised:
        return None
    best = max(raised, key=lambda lever: lever.batch)
    return SeatsLever(flag, best.seats // r.deployment.data_parallel_size, best.batch)


def target_met(r: FitReport) -> bool | None:
    """Whether the launch as given runs the target at once: the pool holds it and the seats
    run it (None: no target given). Qwen3-32B on 4 A100-40GB at 1,024 tokens: the pool
    holds 310, max_num_seqs 256 runs 256, so a target of 300 is not met."""
    from ridgeline.reports.fit_verdict import DOES_NOT_FIT

    if not r.target:
        return None
    return r.verdict != DOES_NOT_FIT and r.batch >= r.target


def target_met_with(r: FitReport) -> SeatsLever | None:
    """Where the pool holds the target but the seats run fewer, the seats lever that runs it
    at once; None where the target is met as launched, the pool falls short, or no seats
    lever raises the batch to the target."""
    from ridgeline.reports.fit_verdict import DOES_NOT_FIT

    if target_met(r) is not False or r.verdict == DOES_NOT_FIT or r.target is None:
        return None
    lever = seats_lever(r)
    return lever if lever is not None and lever.batch >= r.target else None


def seats_bind(r: FitReport) -> bool:
    """The engine's seats, not the pool, cap what runs at once (max_num_seqs 256 beside a
    pool of 310)."""
    return r.batch < r.conversations


def seats_words(r: FitReport) -> str:
    """The seats as the held line names them: 'max_num_seqs 256', ' × 2 ranks' under data
    parallelism, SGLang's drafter default where it set them."""
    from ridgeline.reports.fit_ranks import seats_ranks_note
    from ridgeline.reports.fit_state import drafter_seats_note
    from ridgeline.reports.fit_terms import seats_name

    return (f"{seats_name(r.pool)} {r.pool.max_num_seqs:,}{seats_ranks_note(r.deployment)}"
            f"{drafter_seats_note(r)}")


def seats_first_words(r: FitReport) -> str:
    """The headline's count where the seats bind, the batch first and the pool after it, as
    the launch runs them: '256 at once (max_num_seqs 256); the pool holds 310 conversations
    of 1,024 tokens', then the target (``target_clause``)."""
    return (f"{r.batch:,} at once ({seats_words(r)}); the pool holds {r.conversations:,} "
            f"{plural(r.conversations, 'conversation')} of {r.context:,} "
            f"{plural(r.context, 'token')}{target_clause(r)}")


def target_clause(r: FitReport) -> str:
    """The target in a headline that has said what runs at once: '; target 200 met'; where
    the seats run fewer, the seats that meet it named as the condition, '; target 300 met
    only with --max-num-seqs 300 to 309'; without such a lever, '; target 300 not met: …'
    and why; "" without a target or under a search (its line says it)."""
    met = target_met(r)
    if met is None or r.searched:
        return ""
    if met:
        return f"; target {r.target:,} met"
    lever = target_met_with(r)
    if lever is not None:
        return f"; target {r.target:,} met only with {seats_range(r, lever)}"
    return f"; target {r.target:,} not met: {seats_short(r)}"


def seats_range(r: FitReport, lever: SeatsLever) -> str:
    """The seats that run the target at once: from the target to the lever's (more seats
    take memory, so the pool under fewer holds no fewer, as the lever's bisection reads it):
    '--max-num-seqs 300 to 309'; the lever's alone where it is the target."""
    least = least_seats(r) or lever.seats
    return (f"{lever.flag} {least:,}" + (f" to {lever.seats:,}" if lever.seats > least else "")
            + _each_rank(r.deployment.data_parallel_size))


def least_seats(r: FitReport) -> int:
    """The seats flag's value that runs the target at once: the target, under data
    parallelism each rank's share of it, ⌈target ÷ ranks⌉ (0: no target)."""
    return -(-(r.target or 0) // r.deployment.data_parallel_size)


def _each_rank(ranks: int) -> str:
    """' on each of 2 data-parallel ranks' after a seats flag's value, or ""."""
    return f" on each of {ranks} data-parallel ranks" if ranks > 1 else ""


def target_words(r: FitReport) -> str:
    """' (target 32 met)' where a target was given and the deployment runs it at once (the
    failing headline says ' against a target of 64'); where the memory holds it but the
    seats run fewer at once, a tuning knob and not a DOES NOT FIT, that it is not met as
    launched, the seats and what raising them runs (the seats lever's own figures):
    ' (target 32 not met as launched: --max-num-seqs 16 runs 16 at once; --max-num-seqs 32
    runs 32)'; else nothing. The side-by-side table says it after the verdict."""
    from ridgeline.reports.fit_verdict import DOES_NOT_FIT

    met = target_met(r)
    # no target; a search, whose line names it; or short of it, said 'against a target of'
    if met is None or r.searched or r.verdict == DOES_NOT_FIT:
        return ""
    if met:
        return f" (target {r.target:,} met)"
    return f" (target {r.target:,} not met as launched: {seats_short(r)})"


def seats_short(r: FitReport) -> str:
    """The seats that run fewer than the target at once, and the lever that raises them:
    '--max-num-seqs 16 runs 16 at once; --max-num-seqs 32 runs 32' (llama.cpp: '-np 2 runs 2
    at once; -np 32 runs 32'); without that lever (more seats than the engine starts with),
    the first half alone; where SGLang's state pool sets the seats, which its flag cannot
    raise, that (the caution below says what does)."""
    from ridgeline.reports.fit_cautions import state_capped_seats
    from ridgeline.reports.utilization import seats_flag

    flag = seats_flag(r.deployment.engine).split("/")[0]
    each = _each_rank(r.deployment.data_parallel_size)
    if state_capped_seats(r):
        return f"the state pool's slots run {r.batch:,} at once, which {flag} cannot raise"
    said = f"{flag} {r.pool.max_num_seqs:,}{each} runs {r.batch:,} at once"
    lever = seats_lever(r)
    if lever is not None:
        said += f"; {flag} {lever.seats:,}{each} runs {lever.batch:,}"
    return said
