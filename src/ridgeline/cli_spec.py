"""CLI: speculative decoding's flags (--spec-tokens, --spec-acceptance, --spec-draft-cost,
--spec-method), as simulate and decode both read them."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli_types import _count, _share
from ridgeline.errors import InputError

SPEC_ACCEPTANCE, SPEC_DRAFT_COST = 0.7, 0.05  # the speculative-decoding defaults
# vLLM's names for a drafter made of the checkpoint's own multi-token-prediction layers
# (SpeculativeConfig.method; docs/features/spec_decode: qwen3_next_mtp, deepseek_mtp, and
# mtp, which newer releases map every *_mtp to)
MTP_METHODS = ("mtp", "deepseek_mtp", "qwen3_next_mtp")


def spec_flags(g: Any) -> None:  # a parser or an argument group
    g.add_argument("--spec-tokens", type=_count("draft length"), default=0,
                   help="speculative decoding: draft length")
    g.add_argument("--spec-acceptance", type=_share("draft acceptance rate"),
                   help=f"chance each draft token is accepted (default {SPEC_ACCEPTANCE})")
    g.add_argument("--spec-draft-cost", type=float,
                   help="a drafter pass's cost as a share of the target model's time for "
                   "the same tokens: one pass over the step's tokens, then drafts − 1 of one "
                   f"token per sampling row (default {SPEC_DRAFT_COST})")
    g.add_argument("--spec-method", choices=("eagle", "draft-model", "ngram", *MTP_METHODS),
                   help="the drafter (default eagle): vLLM gives each running request the "
                   "draft length in lookahead slots more for eagle (EAGLE, MTP) and "
                   "draft-model, none for ngram; mtp (vLLM's deepseek_mtp, qwen3_next_mtp) "
                   "is priced as eagle, for a checkpoint that ships MTP layers")


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


def spec_method(args: argparse.Namespace, model: Any) -> str:
    """--spec-method as the simulator prices it (default eagle). An MTP drafter is an
    EAGLE-like head: one decoder layer fed the target's last hidden state and the sampled
    token, proposing one token a pass, so it is priced as eagle, the same lookahead slots and
    the same async scheduling; it is refused for a checkpoint without MTP layers
    (config.json's num_nextn_predict_layers or mtp_num_hidden_layers: DeepSeek-V3 has 1,
    Llama 3.1 none). ``model`` is read only for an MTP method."""
    from ridgeline.sim.config import SPEC_METHODS

    method = args.spec_method or SPEC_METHODS[0]
    if method not in MTP_METHODS:
        return str(method)
    if not model.mtp_layers:
        raise InputError(f"--spec-method {method} drafts with the checkpoint's multi-token-"
                         f"prediction layers, and {model.name} has none (no "
                         "num_nextn_predict_layers in its config.json): give eagle for an "
                         "EAGLE head, or draft-model")
    return SPEC_METHODS[0]
