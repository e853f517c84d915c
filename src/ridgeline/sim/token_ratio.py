"""SGLang's admission estimate: how much of the running requests' remaining output to hold
room for when a new request asks to start (``new_token_ratio``).

SGLang admits a waiting request only if its prompt and its clipped output fit in the free and
evictable cache after every running request's remaining output (clipped), scaled by the ratio,
is set aside. The ratio starts at 0.7, falls by (0.7 − 0.098) ÷ 600 each decode step to 0.098,
and after a retraction restarts at what the survivors have shown they use; it returns to 0.7
when the server is idle. Sources (SGLang v0.5.23; the same numbers since v0.4.6 in
global_config.py): srt/environ.py (SGLANG_INIT_NEW_TOKEN_RATIO 0.7,
SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14, SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS 600,
SGLANG_RETRACT_DECODE_STEPS 20, SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION 4096);
srt/managers/scheduler_components/new_token_ratio_tracker.py (decay, reset, the ratio after a
retraction); srt/managers/schedule_policy.py (PrefillAdder: the budget and the admission test).
"""

from __future__ import annotations

from collections.abc import Iterable

from ridgeline.sim.request import Request

INIT_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO × schedule_conservativeness (1.0)
MIN_RATIO = INIT_RATIO * 0.14  # × SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
DECAY_STEPS = 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS: init to min in this many decode steps
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS: tokens a survivor is granted ahead
CLIP_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION: the most output any estimate counts
PAGE_TOKENS = 1  # SGLang's default page_size: one token of room each admission adds


class NewTokenRatio:
    """The ratio as a start value and the decode steps taken since it was set, so that k steps
    at once and k single steps give the same number, bit for bit."""

    def __init__(self) -> None:
        self.start = INIT_RATIO
        self.steps = 0

    @property
    def value(self) -> float:
        """The start value until a decode step; then falling by the decay, floored at the
        minimum (a retraction's value below the minimum stands until the next decode step)."""
        if not self.steps:
            return self.start
        return max(self.start - self.steps * (INIT_RATIO - MIN_RATIO) / DECAY_STEPS, MIN_RATIO)

    def decay(self, steps: int = 1) -> None:
        """``steps`` decode steps that retracted nobody."""
        self.steps += steps

    def reset(self) -> None:
        """The server went idle: nothing running, nothing waiting."""
        self.start, self.steps = INIT_RATIO, 0

    def retracted(self, survivors: Iterable[Request]) -> None:
        """After a retraction: the survivors' outputs so far, each granted
        RETRACT_DECODE_STEPS more, over their whole outputs (at most 1)."""
        done = total = n = 0
        for r in survivors:
            done += r.num_generated
            total += r.output_tokens
            n += 1
        self.start = min(1.0, (done + RETRACT_DECODE_STEPS * n) / (total + 1))
        self.steps = 0


def held_for_output(r: Request) -> int:
    """The output tokens an estimate counts for r: what it has left, clipped."""
    return min(r.output_tokens - r.num_generated, CLIP_TOKENS)
