"""vLLM V1 gives a running request, besides the step's tokens, the draft length in lookahead
slots when its proposer runs a model (EAGLE, MTP, a draft model: Scheduler
num_lookahead_tokens); n-gram lookup and the other engines get none."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.config import SPEC_METHODS, sim_config
from ridgeline.sim.request import Request
from ridgeline.sim.scheduler import Scheduler, SchedulerConfig

DEP = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
DRAFTS, BS = 3, 16


def _blocks_after_a_decode_step(lookahead: int) -> tuple[int, int]:
    """A 60-token prompt computed and its first token out: the next step verifies 1 + 3
    drafts. Returns (the blocks it then holds, the tokens that step caches)."""
    s = Scheduler(SchedulerConfig(64, 8192, spec_tokens=DRAFTS, lookahead_tokens=lookahead),
                  BlockPool(1000, BS))
    r = Request(0, 0.0, 60, 10)
    s.add(r)
    (first,) = s.schedule(0.0)
    r.num_computed, r.num_generated = first.tokens, 1
    (decode,) = s.schedule(0.1)
    return r.blocks_held, decode.context + decode.tokens


@pytest.mark.parametrize("lookahead", [0, DRAFTS])
def test_a_decode_holds_blocks_for_its_drafts_and_the_lookahead(lookahead: int) -> None:
    held, cached = _blocks_after_a_decode_step(lookahead)
    assert cached == 60 + 1 + DRAFTS  # the step's tokens do not grow with the lookahead
    assert held == -(-(cached + lookahead) // BS)


def test_lookahead_slots_for_model_drafters_on_vllm_only() -> None:
    def lookahead(dep: Deployment, method: str) -> int:
        return sim_config(dep, spec_tokens=DRAFTS, spec_method=method).spec_lookahead_tokens

    assert lookahead(DEP, "eagle") == lookahead(DEP, "draft-model") == DRAFTS
    assert lookahead(DEP, "ngram") == 0
    assert lookahead(replace(DEP, engine="sglang"), "eagle") == 0
    assert sim_config(DEP).spec_lookahead_tokens == 0  # no drafts, no lookahead


def test_spec_method_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "1",
                 "--num-requests", "5", "--spec-method", "ngram"]) == 2  # no drafts
    assert "--spec-tokens" in capsys.readouterr().err
    with pytest.raises(SystemExit) as raised:
        main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--spec-method", "medusa"])
    assert raised.value.code == 2
    err = capsys.readouterr().err  # the CLI offers every method sim_config knows
    assert all(f"'{method}'" in err for method in SPEC_METHODS)
