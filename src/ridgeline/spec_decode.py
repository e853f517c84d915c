"""Speculative decoding in one decode step: the tokens a verify step yields and what it costs.

A verify step runs the target over each sequence's fed token and its K drafts (batch ×
(K + 1) tokens), as vLLM runs it: a uniform decode, in its CUDA graphs. It keeps
``tokens_per_step`` tokens a sequence on average (sim/config.py, the simulator's own), and
its drafter costs what the simulator charges (``spec_step_s``). Per-user speed is those tokens
over the whole step; the aggregate, the batch's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ridgeline.cost import Seq, batch_shape, decode_batch
from ridgeline.sim.config import (
    SPEC_METHODS,
    acceptance_for_tokens,
    check_spec,
    spec_step_s,
    tokens_per_step,
)
from ridgeline.sim.timer import StepTimer, drafter_timer
from ridgeline.stages import micro_batch

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.engines import EngineProfile


@dataclass(frozen=True)
class SpecDecode:
    """--spec-tokens drafts a step, each accepted at --spec-acceptance, proposed by a drafter
    costing --spec-draft-cost of the target's time (the --spec-method kind)."""

    drafts: int
    acceptance: float
    draft_cost: float
    method: str = SPEC_METHODS[0]

    def __post_init__(self) -> None:
        check_spec(self.drafts, self.acceptance, self.draft_cost)
        if self.drafts < 1:
            raise ValueError("speculative decoding drafts at least 1 token")

    @classmethod
    def observed(cls, drafts: int, tokens: float, draft_cost: float,
                 method: str = SPEC_METHODS[0]) -> SpecDecode:
        """The drafter a server runs, its acceptance read off the ``tokens`` a verify step
        kept a request on average (an engine's acceptance length; acceptance_for_tokens)."""
        return cls(drafts, acceptance_for_tokens(drafts, tokens), draft_cost, method)

    @property
    def tokens_per_step(self) -> float:
        return tokens_per_step(self.drafts, self.acceptance)

    def label(self) -> str:
        return (f"{self.method}, {self.drafts} draft{'s' if self.drafts > 1 else ''} accepted "
                f"at {self.acceptance:g}, drafter at {self.draft_cost:g} of the target")


# how many fewer decode steps than drafts an engine's counts may leave (generation − first −
# accepted): a request that stops inside its accepted drafts has the rest trimmed from its
# output (vllm/v1/core/sched/scheduler.py _update_request_with_output) but counted accepted,
# up to num_speculative_tokens a request; past this, the counts are not one server's
FEWER_STEPS = 0.05


def tokens_per_request_step(generated: float, accepted: float, first: float = 0.0) -> float:
    """The tokens a request's decode step keeps over all its steps, drafted or not:
    (generated − first) ÷ (generated − first − accepted). Every decode step of a request keeps
    its one sampled token (the bonus, or the correction of the first draft refused) and the
    drafts it accepted; a step that proposed none (an n-gram drafter without a match, a
    request within its drafts of max_model_len) keeps the one token alone, and vLLM counts no
    draft for it (vllm/v1/core/sched/scheduler.py update_from_output observes a draft only
    where draft tokens were scheduled). So the steps number the tokens less the accepted ones;
    ``first`` is the tokens prefills sampled, one a request, no decode step's. 36,000 steps,
    half of them drafting and 18,000 drafts accepted: 54,000 tokens, 1.5 a step, where the
    acceptance length (1 + accepted ÷ drafts) reads 2.0."""
    steps = generated - first - accepted
    if not steps > 0 or accepted < 0:  # NaN fails too
        raise ValueError(f"{generated:,.0f} tokens less {first:,.0f} first and "
                         f"{accepted:,.0f} accepted leave no decode step")
    return (generated - first) / steps


@dataclass(frozen=True)
class SpecStep:
    """One verify step of ``spec`` for ``batch`` sequences at ``context`` tokens, expected."""

    spec: SpecDecode
    batch: int
    context: int
    verify_s: float  # the target's pass over batch × (K + 1) tokens
    step_s: float  # with the drafter's passes
    plain_s: float  # a decode step of the same batch without drafts

    @property
    def per_user_tok_s(self) -> float:
        return self.spec.tokens_per_step / self.step_s

    @property
    def aggregate_tok_s(self) -> float:
        return self.batch * self.per_user_tok_s

    @property
    def speedup(self) -> float:
        """Per-user speed over plain decoding's (the same for the aggregate)."""
        return self.per_user_tok_s * self.plain_s

    def to_dict(self) -> dict[str, Any]:
        s = self.spec
        return {"method": s.method, "spec_tokens": s.drafts, "spec_acceptance": s.acceptance,
                "spec_draft_cost": s.draft_cost, "tokens_per_step": s.tokens_per_step,
                "verify_s": self.verify_s, "step_s": self.step_s,
                "per_user_tok_s": self.per_user_tok_s, "aggregate_tok_s": self.aggregate_tok_s,
                "speedup": self.speedup}


def spec_step(dep: Deployment, spec: SpecDecode, batch: int, context: int,
              profile: EngineProfile) -> SpecStep:
    """The verify step of ``batch`` sequences at ``context``, priced as the simulator prices
    it: the target over each row's K + 1 tokens (a CUDA-graphed decode), then the drafter's
    pass over them and its K − 1 one-token passes, a step past the cache (a pipeline: one
    stage's micro-batch, as decode's own expectation)."""
    rows = micro_batch(dep, batch)
    timer = StepTimer(dep, profile)
    drafter = drafter_timer(dep, profile, timer)
    rows_k = batch_shape(dep, [Seq(spec.drafts + 1, context)] * rows)
    verify = timer.time_s(rows_k, True)
    drafted = drafter.time_s(rows_k, True)
    one = drafter.time_s(batch_shape(dep, decode_batch(rows, context + spec.drafts + 1)))
    plain = timer.time_s(batch_shape(dep, decode_batch(rows, context)))
    return SpecStep(spec, batch, context, verify,
                    spec_step_s(verify, one, spec.drafts, spec.draft_cost, drafted), plain)
