"""Speculative decoding in one decode step: the tokens a verify step yields and what it costs.

A verify step runs the target over each sequence's fed token and its K drafts (batch ×
(K + 1) tokens), as vLLM runs it: a uniform decode, in its CUDA graphs; where a server's
counters say only a share of its rows drafted, over the tokens the step carries (batch × (1 +
share × drafts a drafted row): verify_row_tokens). It keeps
``tokens_per_step`` tokens a sequence on average (sim/config.py, the simulator's own), and
its drafter costs what the simulator charges (``spec_step_s``). Per-user speed is those tokens
over the whole step; the aggregate, the batch's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ridgeline.cost import Seq, batch_shape, decode_batch, graph_mode
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
    # the drafter as the user named it where it is priced as another (an MTP drafter, vLLM's
    # deepseek_mtp, as eagle: cli_spec.spec_method); "" where it is ``method`` itself
    named: str = ""
    # an n-gram drafter that Model Runner V2 runs on the GPU (vLLM 0.32+): the max_model_len
    # its scan's grid spans (vllm_mrv2_drafter.ngram_lookup_s); 0 where the lookup runs on the
    # CPU (the V1 runner's NgramProposer), priced at ``draft_cost`` alone
    gpu_lookup_len: int = 0

    def __post_init__(self) -> None:
        check_spec(self.drafts, self.acceptance, self.draft_cost)
        if self.drafts < 1:
            raise ValueError("speculative decoding drafts at least 1 token")
        if self.gpu_lookup_len and self.method != "ngram":
            raise ValueError(f"only an n-gram drafter looks its drafts up, not {self.method}")

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
        kind = f"{self.named}, priced as {self.method}" if self.named and \
            self.named != self.method else self.method
        where = ", looked up on the GPU" if self.gpu_lookup_len else ""
        return (f"{kind}{where}, {self.drafts} draft{'s' if self.drafts > 1 else ''} accepted "
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


def verify_row_tokens(rows: int, drafts: int, drafted_share: float = 1.0,
                      drafts_each: float | None = None) -> list[int]:
    """Each row's tokens in a verify step of ``rows`` rows, ``drafted_share`` of them drafting
    ``drafts_each`` tokens on average (None: all ``drafts``): rows × (1 + share × drafts_each)
    in all, rounded, as vLLM schedules a row its one fed token and the drafts it proposed (none
    for an n-gram drafter without a match, fewer near max_model_len: vllm/v1/core/sched/
    scheduler.py schedule trims spec_token_ids there). round(share × rows) rows draft (more
    where the draft tokens need them, none past the draft tokens), their drafts spread evenly
    and the drafting rows spread over the batch (a data-parallel rank's slice takes its
    share). 40 rows, half drafting 3: 20 of 4 tokens and 20 of 1, 100 in all."""
    if not 0 < drafted_share <= 1:  # NaN fails too
        raise ValueError(f"a share of the rows drafting is above 0 and at most 1, "
                         f"got {drafted_share:g}")
    each = float(drafts) if drafts_each is None else drafts_each
    if not 0 < each <= drafts:
        raise ValueError(f"a drafting row drafts more than 0 and at most its {drafts}, "
                         f"got {each:g}")
    draft_tokens = round(rows * drafted_share * each)
    drafting = min(rows, draft_tokens, max(-(-draft_tokens // drafts),
                                           round(rows * drafted_share)))
    tokens = [1] * rows
    placed = 0
    for i in range(rows):  # row i drafts where the running count of drafting rows steps up
        if (i + 1) * drafting // rows > i * drafting // rows:
            tokens[i] += (placed + 1) * draft_tokens // drafting - placed * draft_tokens // drafting
            placed += 1
    return tokens


def drafted_rows(steps: float, drafts: float,
                 draft_tokens: float | None) -> tuple[float, float | None]:
    """The share of a server's decode steps that drafted, drafts ÷ steps (vLLM counts a draft
    for each request's step that scheduled draft tokens: scheduler.py update_from_output;
    at most 1, as a request that stopped inside accepted drafts leaves a few fewer steps than
    drafts: FEWER_STEPS), and the draft tokens a drafting step proposed on average, draft
    tokens ÷ drafts (None without a draft-token count). 36,000 steps, 18,000 drafts of
    54,000 draft tokens: 0.5 of the rows drafting 3.0."""
    if not (steps > 0 and drafts > 0):  # NaN fails too
        raise ValueError(f"{drafts:,.0f} drafts over {steps:,.0f} decode steps give no share")
    if draft_tokens is not None and not draft_tokens >= drafts:
        raise ValueError(f"{draft_tokens:,.0f} draft tokens in {drafts:,.0f} drafts: a draft "
                         "proposes at least one")
    return min(1.0, drafts / steps), None if draft_tokens is None else draft_tokens / drafts


@dataclass(frozen=True)
class SpecStep:
    """One verify step of ``spec`` for ``batch`` sequences at ``context`` tokens, expected."""

    spec: SpecDecode
    batch: int
    context: int
    verify_s: float  # the target's pass over batch × (K + 1) tokens (verify_tokens)
    step_s: float  # with the drafter's passes
    plain_s: float  # a decode step of the same batch without drafts
    # the tokens the target's pass carried, one micro-batch's rows (verify_row_tokens): rows ×
    # (K + 1) where every row drafted its K; the share of rows that drafted, and the drafts
    # a drafting row carried on average (the server's counters; 1 and K where none say)
    verify_tokens: int = 0
    drafted_share: float = 1.0
    drafts_each: float | None = None
    # the target's pass as the step cost priced it (cost.graph_mode): its tokens and sequences
    # (one micro-batch's, the busiest data-parallel rank's), and the tokens its matmuls ran,
    # padded to the engine's next captured CUDA-graph size; None where it ran ungraphed (0:
    # a SpecStep built elsewhere, not priced here)
    verify_shape: tuple[int, int] = (0, 0)
    verify_graph_tokens: int | None = 0
    # Model Runner V2's GPU n-gram lookup, in step_s (0: none, or on the CPU)
    lookup_s: float = 0.0

    @property
    def partial(self) -> bool:
        """Whether the step carries fewer drafts than every row's whole draft."""
        each = self.spec.drafts if self.drafts_each is None else self.drafts_each
        return self.drafted_share < 1 or each < self.spec.drafts

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
                "verify_tokens": self.verify_tokens, "drafted_share": self.drafted_share,
                "drafts_each": s.drafts if self.drafts_each is None else self.drafts_each,
                "verify_graph_tokens": self.verify_graph_tokens, "lookup_s": self.lookup_s,
                "per_user_tok_s": self.per_user_tok_s, "aggregate_tok_s": self.aggregate_tok_s,
                "speedup": self.speedup}


def spec_step(dep: Deployment, spec: SpecDecode, batch: int, context: int,
              profile: EngineProfile, drafted_share: float = 1.0,
              drafts_each: float | None = None) -> SpecStep:
    """The verify step of ``batch`` sequences at ``context``, priced as the simulator prices
    it: the target over each row's K + 1 tokens (a CUDA-graphed decode, padded to the
    engine's next captured size as a decode is: graph_batches.graph_tokens), then the drafter's
    pass over them and its K − 1 one-token passes, a step past the cache (a pipeline: one
    stage's micro-batch, as decode's own expectation). Where only ``drafted_share`` of the
    rows drafted, ``drafts_each`` tokens on average, the target runs the tokens the rows carry
    (verify_row_tokens). A drafter that runs a model (EAGLE, MTP, a draft model) still runs
    its passes for every row: vLLM's EagleProposer.propose takes the step's every scheduled
    token, then keeps each request in its one-token passes, those past max_model_len
    included (vllm/v1/spec_decode/eagle.py); an n-gram lookup on the CPU (the V1 runner's,
    priced at --spec-draft-cost as the user sets it) is charged for the drafting rows alone.
    Model Runner V2's n-gram lookup (``spec.gpu_lookup_len``) runs two GPU kernels over every
    row, a match found or not, after the verify (vllm_mrv2_drafter.ngram_lookup_s): 29 µs
    for 64 rows of Llama-3.1-8B at 4,096 tokens on an H100."""
    rows = micro_batch(dep, batch)
    timer = StepTimer(dep, profile)
    drafter = drafter_timer(dep, profile, timer)
    row_tokens = verify_row_tokens(rows, spec.drafts, drafted_share, drafts_each)
    rows_k = batch_shape(dep, [Seq(n, context) for n in row_tokens])
    verify = timer.time_s(rows_k, True)
    # the padding the timer priced, from the one place a step's graph is decided
    ungraphed, priced = graph_mode(dep, rows_k._replace(verify=True), profile)
    drafting = rows if spec.method != "ngram" else sum(n > 1 for n in row_tokens)
    drafted = one = 0.0
    if drafting:
        drafter_rows = rows_k if drafting == rows else batch_shape(
            dep, [Seq(n, context) for n in row_tokens if n > 1])
        drafted = drafter.time_s(drafter_rows, True)
        one = drafter.time_s(batch_shape(dep, decode_batch(drafting,
                                                           context + spec.drafts + 1)))
    plain = timer.time_s(batch_shape(dep, decode_batch(rows, context)))
    step = spec_step_s(verify, one, spec.drafts, spec.draft_cost, drafted) if drafting \
        else verify
    lookup = 0.0
    if spec.gpu_lookup_len:
        from ridgeline.vllm_mrv2_drafter import ngram_lookup_s

        lookup = ngram_lookup_s(dep, profile, rows, context, spec.gpu_lookup_len, spec.drafts)
    return SpecStep(spec, batch, context, verify, step + lookup, plain, sum(row_tokens),
                    drafted_share, drafts_each, (rows_k.tokens, rows_k.sequences),
                    None if ungraphed else priced.tokens, lookup)
