"""CLI: speculative decoding's flags (--spec-tokens, --spec-acceptance, --spec-draft-cost,
--spec-method), as simulate and decode both read them."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli_types import _count, _share
from ridgeline.errors import InputError

SPEC_ACCEPTANCE, SPEC_DRAFT_COST = 0.7, 0.05  # the speculative-decoding defaults


def spec_flags(g: Any) -> None:  # a parser or an argument group
    g.add_argument("--spec-tokens", type=_count("draft length"), default=0,
                   help="speculative decoding: draft length")
    g.add_argument("--spec-acceptance", type=_share("draft acceptance rate"),
                   help=f"chance each draft token is accepted (default {SPEC_ACCEPTANCE})")
    g.add_argument("--spec-draft-cost", type=float,
                   help="a drafter pass's cost as a share of the target model's time for "
                   "the same tokens: one pass over the step's tokens, then drafts − 1 of one "
                   f"token per sampling row (default {SPEC_DRAFT_COST})")
    g.add_argument("--spec-method", choices=("eagle", "draft-model", "ngram"),
                   help="the drafter (default eagle): vLLM gives each running request the "
                   "draft length in lookahead slots more for eagle (EAGLE, MTP) and "
                   "draft-model, none for ngram")


def spec_args(args: argparse.Namespace) -> None:
    """Refuse a speculative flag without --spec-tokens; fill in the defaults of the rest."""
    stray = [flag for flag, value in (("--spec-acceptance", args.spec_acceptance),
                                      ("--spec-draft-cost", args.spec_draft_cost),
                                      ("--spec-method", args.spec_method))
             if value is not None and not args.spec_tokens]
    if stray:
        raise InputError(f"{', '.join(stray)} describe{'s' if len(stray) == 1 else ''} "
                         "speculative decoding: give --spec-tokens N, a draft of at least "
                         "1 token")
    args.spec_acceptance = SPEC_ACCEPTANCE if args.spec_acceptance is None else args.spec_acceptance
    args.spec_draft_cost = SPEC_DRAFT_COST if args.spec_draft_cost is None else args.spec_draft_cost
