"""llama.cpp's slots: decode's "a slot per sequence" and fit's -np lever are one count
(capacity.llamacpp_slots), the most slots whose pool, sized for that many, holds one
conversation in each."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import engine_holds, held_conversations, llamacpp_slots
from ridgeline.llamacpp_fit import default_fit_target_bytes, run_pool
from ridgeline.memory import EngineSettings
from tests.conftest import run_cli


def _held_at(dep: Deployment, context: int, slots: int, margin: float) -> int:
    """The conversations of ``context`` tokens llama-server started with -np ``slots`` holds
    under --fit's margin: the pool sized for those slots, not extrapolated from one."""
    settings = EngineSettings(max_model_len=context, max_num_seqs=slots)
    return held_conversations(run_pool(dep, settings, True, margin), dep, context)


@pytest.mark.parametrize(("model", "card"), [("gemma-3-4b", "rtx-4090"),
                                             ("llama-3.2-1b", "h100-sxm")])
def test_decode_gives_the_slots_a_pool_sized_for_them_holds(model: str, card: str) -> None:
    """Each slot adds a logits row to the compute buffer (PR #23861) and, for a windowed
    model, its window cache: a pool sized for one slot and divided by a conversation held one
    or more too many (Gemma-3-4B on an RTX 4090 at 4,096 tokens: 76, where -np 76 holds 74;
    Llama-3.2-1B on an H100: 585, where -np 585 holds 582). Decode's count K is held by -np K,
    and -np K + 1 holds fewer than K + 1."""
    dep = Deployment.build(resolve_model(model), resolve_accelerator(card), None, None, 1,
                           engine="llama.cpp-cuda")
    margin = default_fit_target_bytes()
    held = engine_holds(dep, 4096, settings=EngineSettings(fit_target_bytes=margin))
    assert held is not None and held > 4
    assert _held_at(dep, 4096, held, margin) >= held
    assert _held_at(dep, 4096, held + 1, margin) < held + 1
    assert held == llamacpp_slots(dep, 4096, EngineSettings(), True, margin)


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return dict(json.loads(out))


@pytest.mark.parametrize(("model", "card"), [("gpt-oss-20b", "h100-sxm"),
                                             ("gemma-3-4b", "rtx-4090"),
                                             ("gemma-2-9b", "l4")])
def test_decode_and_fit_name_one_slot_count(capsys: pytest.CaptureFixture[str], model: str,
                                            card: str) -> None:
    """decode's batch (a slot per sequence) is fit's -np lever, more slots than the default 4
    or fewer: they had differed by one to eleven (gpt-oss-20b on an H100 at 4,096 tokens:
    decode 666, fit's lever -np 665 holding 660); gemma-2-9b on an L4, whose 4 default slots'
    window caches leave one conversation, holds 2 at -np 2 in both."""
    flags = ("--model", model, "--gpu", card, "--engine", "llama.cpp")
    decoded = _json(capsys, "decode", *flags, "--context", "4096")
    fitted = _json(capsys, "fit", *flags, "--max-model-len", "4096")
    held = decoded["engine_max_batch"][0]["batch"]
    lever = next(lv for lv in fitted["levers"] if "-np" in lv["name"])
    assert lever["conversations"] == lever["batch"] == held > 0
    assert lever["name"].startswith(f"{held} slot")
    assert f"(-np {held}" in lever["name"]
