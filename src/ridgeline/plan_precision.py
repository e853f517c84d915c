"""What a plan says where its winner quantizes (fp8 weights, an fp8 KV cache) and a
candidate keeping more bits costs the same: a note naming it and the flag that keeps it.

``cheapest`` breaks a tie in price on headroom, and quantization moves headroom, not the
bill. Llama-3.1-8B at 10 req/s on one H100: fp8 weights and cache win at $2.99/h, bf16
weights with the same cache sizing at the same $2.99/h (the answer had turned on online fp8
quantization with no word that the model's own weights would do at the same price). The
winner stays; the note names the alternative and the flag that keeps it, since accuracy is
the team's call, not a latency figure's."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ridgeline.candidate import Candidate
from ridgeline.errors import InputError
from ridgeline.precision import is_stored_format, kv_dtype, weight_format
from ridgeline.units import fmt_latency


def _bits(c: Candidate) -> tuple[float, float] | None:
    """(bits per weight, bytes per KV element) of ``c``'s formats, or None where its weights
    are a checkpoint's own mix ("as stored"), which no one figure ranks."""
    if is_stored_format(c.weights):
        return None
    try:
        return weight_format(c.weights).bits_per_weight, kv_dtype(c.kv).bytes_per_element
    except (InputError, KeyError):
        return None


def precision_note(win: Candidate | None, candidates: Sequence[Candidate], percentile: float,
                   check: Callable[[Candidate], Candidate | None] | None = None,
                   engine: str = "vllm") -> str:
    """Where another candidate costs what ``win`` costs, on as many GPUs, and keeps at least
    its bits in weights and KV cache, more in one: the one keeping the most (a simulated one
    first), and how to ask for it; "" elsewhere. One not simulated is checked with ``check``
    (``plan_checks.verify``) where given, and named only where it holds at the same price;
    without ``check`` (a plan asked to simulate nothing) it is named as analytic. It is
    labelled in ``engine``'s names for its knobs, as the plan's lists label it (TensorRT-LLM's
    max_num_tokens 2048, not vLLM's max_num_batched_tokens)."""
    alt = _alternative(win, candidates)
    if win is None or alt is None:
        return ""
    if not alt.verified and check is not None:
        checked = check(alt)
        if checked is None or checked.cost_per_hour is None or not math.isclose(
                checked.cost_per_hour, alt.cost_per_hour or 0.0, rel_tol=1e-9):
            return ""  # it needs more replicas: the winner won on price after all
        alt = checked
    own, bits = _bits(win), _bits(alt)
    assert own is not None and bits is not None
    kept = [f"{alt.weights} weights"] if bits[0] > own[0] else []
    kept += [f"a {alt.kv} KV cache"] if bits[1] > own[1] else []
    meet = "meets" if kept == [f"a {alt.kv} KV cache"] else "meet"  # one cache; weights
    flags = ([f"--weights {alt.weights}"] if bits[0] > own[0] else []) + (
        [f"--kv-dtype {alt.kv}"] if bits[1] > own[1] else [])
    if alt.verified:
        held = (f"{meet} the SLO too at the same ${alt.cost_per_hour:,.2f}/h "
                f"({alt.label_for(engine)}, simulated: p{percentile:g} TTFT "
                f"{fmt_latency(alt.sim_ttft_s or 0, ',.0f')}, TPOT {fmt_latency(alt.sim_tpot_s or 0)})")
    else:
        held = (f"{meet.replace('meet', 'size')} at the same ${alt.cost_per_hour:,.2f}/h too "
                f"({alt.label_for(engine)}, analytic, not simulated)")
    return (f"{' and '.join(kept)} {held}: the winner's {win.weights} weights, KV {win.kv} "
            "won the tie on headroom, not on price; quantizing may move accuracy, and "
            f"{' '.join(flags)} keeps the higher precision")


def _alternative(win: Candidate | None, candidates: Sequence[Candidate]) -> Candidate | None:
    """The candidate ``precision_note`` names, or None."""
    if win is None or win.cost_per_hour is None or win.disaggregated:
        return None
    own = _bits(win)
    if own is None:
        return None
    alike = []
    for c in candidates:
        bits = _bits(c)
        if c is win or c.disaggregated or bits is None or c.gpus != win.gpus \
                or c.cost_per_hour is None \
                or not math.isclose(c.cost_per_hour, win.cost_per_hour, rel_tol=1e-9):
            continue
        if bits[0] >= own[0] and bits[1] >= own[1] and bits != own:
            alike.append((c.verified, bits, c))
    return max(alike, key=lambda a: (a[0], a[1]))[2] if alike else None
