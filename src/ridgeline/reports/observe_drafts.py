"""`ridgeline observe` with a drafter serving: the verify step a token's time is priced by
(decode --spec-tokens' step, its acceptance read off the source), and why a drafter's steps
are priced as plain decoding where they are."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ridgeline.explain import Step, q, step

if TYPE_CHECKING:
    from ridgeline.reports.observe import ObserveReport


def unpriced_drafts_note(report: ObserveReport) -> str:
    """Why a drafter's steps are priced as plain decoding, where one serves and they are
    (SGLang's gauge without the flags is said with its seats); "" elsewhere."""
    o, s = report.obs, report.engine_settings
    if report.spec is not None or report.drafting_by_metrics:
        return ""
    if s.speculative_decoding and not o.spec_tokens_per_step:
        return ("drafts are not priced: the step is priced as plain decoding, since "
                f"{o.source} gives no acceptance length (SGLang's sglang:spec_accept_length, "
                "a vLLM bench's spec_decode_acceptance_length, vLLM's spec_decode counters "
                "or its log's SpecDecoding lines) to say how many tokens a verify step keeps; "
                "the measured ITL is a drafting server's")
    if o.spec_tokens_per_step and not s.speculative_decoding:
        return (f"a drafter keeps {o.spec_tokens_per_step:,.2f} tokens a step "
                f"(the source's acceptance length), but drafts are not priced: the step is "
                "priced as plain decoding without the drafter's flags (--spec-tokens and "
                "--spec-method, or the engine's own) to give its draft length")
    return ""


def verify_step(report: ObserveReport) -> Step:
    """A token's time with drafts priced: the verify step, the prompt work the plain mean step
    carries, and the tokens the step keeps a request, with what each is read from."""
    drafted = report.spec_step
    assert drafted is not None
    spec, work = drafted.spec, report.prompt_work_ms
    return step("the server's verify step and a token's time",
                "(spec_step(the batch, its drafts, at the context) + the prompt work a step "
                "carries) ÷ tokens per step, one micro-batch (decode --spec-tokens' step; the "
                "measured ITL spreads a step over the tokens it streams: SGLang's histogram, a "
                "bench's TPOT)",
                q("predicted ITL", report.predicted_itl_ms or 0.0, "ms",
                  f"{report.profile.engine} profile"),
                q("verify step", drafted.step_s * 1e3, "ms",
                  "the target over each row's drafts + 1 tokens, then the drafter's passes"
                  if not drafted.partial else "the target over each row's fed token and the "
                  "drafts it proposed, then the drafter's passes (a model drafter's for every "
                  "row, an n-gram's for the drafting rows)"),
                q("verify tokens", drafted.verify_tokens, "",
                  "the rows × (1 + drafted share × draft tokens a drafted row), rounded "
                  "(verify_row_tokens)"),
                q("drafted share", drafted.drafted_share, "",
                  report.obs.spec_drafted_source or "none counted: every row priced drafting"),
                q("draft tokens a drafted row",
                  spec.drafts if drafted.drafts_each is None else drafted.drafts_each, "",
                  "the source's draft tokens over its drafts" if drafted.drafts_each is not None
                  else "the drafter's flags: every draft whole"),
                *([q("prompt work a step", work, "ms",
                     "the step without drafts less its decodes alone")] if work else []),
                q("tokens per step", report.tokens_per_step, "",
                  "over all decode steps: the source's generation tokens over those less the "
                  "accepted drafts, a step without drafts keeping 1 (tokens_per_request_step)"
                  if report.tokens_per_step_over == "all decode steps" else
                  "the source's acceptance length, the bonus token included: the steps that "
                  "drafted alone"),
                *([q("acceptance length", spec.tokens_per_step, "", "over the steps that "
                     "drafted: 1 + accepted ÷ drafts")]
                  if report.tokens_per_step != spec.tokens_per_step else []),
                q("drafts", spec.drafts, "", "the drafter's flags"),
                q("acceptance", spec.acceptance, "", "the rate at which the drafts keep those "
                  "tokens: 1 + a + … + a^drafts inverted"),
                q("drafter cost", spec.draft_cost, "", "of the target's time for the same "
                  "tokens: --spec-draft-cost, decode's default where not given"))
