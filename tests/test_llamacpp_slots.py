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
from ridgeline.reports.expectation import FIT_RUNS_IT
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
    line = decoded["engine_max_batch"][0]
    held = line["conversations"] or line["engine_max_batch"]  # past the default 4: the pool's
    lever = next(lv for lv in fitted["levers"] if "-np" in lv["name"])
    assert lever["conversations"] == lever["engine_max_batch"] == held > 0
    assert lever["name"].startswith(f"{held} slot")
    assert f"(-np {held}" in lever["name"]


def _gemma_a100() -> Deployment:
    return Deployment.build(resolve_model("gemma-2-9b"), resolve_accelerator("a100-sxm-80gb"),
                            None, None, 1, engine="llama.cpp-cuda")


@pytest.mark.parametrize("batches", ["1", "46", "1,64"])
def test_decode_max_batch_does_not_move_with_the_batches_asked(
        capsys: pytest.CaptureFixture[str], batches: str) -> None:
    """The engine's max batch is one fact about the card and context: gemma-2-9b on an
    A100-80GB at 4,096 tokens read 45 for --batch 1 and 46 for --batch 46 or 1,64, where a
    batch asked needs --fit to move weights and the answer's run is -ngl all's (no 1,024 MiB
    margin). The line gives llama-server's run under its default --fit, fit's -np lever, as
    the slots its pool holds (its default 4 running), whatever the list; with --parallel 46 a
    priced row past the count says so."""
    dep = _gemma_a100()
    lever = llamacpp_slots(dep, 4096, EngineSettings(), True, default_fit_target_bytes())
    priced = llamacpp_slots(dep, 4096, EngineSettings(), False)  # -ngl all's, no margin
    assert lever < 46 <= priced  # the case the list used to move
    flags = ("--model", "gemma-2-9b", "--gpu", "a100-sxm-80gb", "--engine", "llama.cpp")
    decoded = _json(capsys, "decode", *flags, "--batch", batches, "--context", "4096")
    line = decoded["engine_max_batch"][0]
    assert line["conversations"] == lever and line["engine_max_batch"] == line["max_num_seqs"]
    assert "--fit-target 1,024 MiB" in line["settings"]
    fitted = _json(capsys, "fit", *flags, "--max-model-len", "4096")
    assert any(lv["name"].startswith(f"{lever} slots (-np {lever}")
               for lv in fitted["levers"])
    code, out, _ = run_cli(capsys, "decode", *flags, "--batch", batches, "--context", "4096")
    assert code == 0 and f"its KV pool holds {lever:,}, a slot each" in out
    if batches == "46":  # -np 46: priced as before, past the line's count, and said so
        code, out, _ = run_cli(capsys, "decode", *flags, "--batch", batches, "--context",
                               "4096", "--parallel", "46")
        raised = _json(capsys, "decode", *flags, "--batch", batches, "--context", "4096",
                       "--parallel", "46")
        held = raised["engine_max_batch"][0]["engine_max_batch"]
        assert held < 46 and raised["points"][0]["expected"] is not None
        assert raised["engine_max_batch"][0]["priced_run_batch"] == 46
        assert (f"batch 46 at 4,096 tokens (1 x a100-sxm-80gb) is past the {held} sequences "
                "llama-server runs under --fit") in out


def test_decode_max_batch_is_fits_where_only_fit_places_the_model(
        capsys: pytest.CaptureFixture[str]) -> None:
    """GLM-4.5 in bf16 on 8 x A100-80GB at 4,096 tokens: -ngl all holds no sequence (the
    weights overflow the cards), while llama-server's default --fit moves weights to the host
    and runs one, as fit says; decode's max-batch line gives fit's count, its row stays
    "does not fit" (no --host-bandwidth-gbs prices the host's layers), and a caution says
    why the two differ."""
    flags = ("--model", "glm-4.5", "--gpu", "a100-sxm-80gb", "--num-gpus", "8",
             "--engine", "llama.cpp")
    fitted = _json(capsys, "fit", *flags, "--max-model-len", "4096")
    decoded = _json(capsys, "decode", *flags, "--batch", "1", "--context", "4096")
    line = decoded["engine_max_batch"][0]
    assert line["engine_max_batch"] == fitted["engine_max_batch"] == fitted["conversations"] > 0
    assert line["priced_run_batch"] == 0
    assert decoded["points"][0]["expected_none_code"] == "does_not_fit"
    assert any(c.startswith("at 4,096 tokens (8 x a100-sxm-80gb) -ngl all's run holds no sequence; "
                            f"llama-server's default --fit runs {line['engine_max_batch']}")
               for c in decoded["cautions"])


@pytest.mark.parametrize("batch", ["1", "46", "64"])
def test_prefill_max_batch_is_decodes_whatever_the_batch_asked(
        capsys: pytest.CaptureFixture[str], batch: str) -> None:
    """prefill's engine_max_batch is the same fact as decode's line: gemma-2-9b on an
    A100-80GB with 4,096-token prompts read 45 for --batch 1 and 46 (-ngl all's run, no
    margin) for --batch 46 or 64. It is llama-server's run under its default --fit, fit's
    -np lever, whatever the batch; the prompt stays priced as -ngl all's, and a batch that
    runs past the count says so."""
    dep = _gemma_a100()
    lever = llamacpp_slots(dep, 4096, EngineSettings(), True, default_fit_target_bytes())
    priced = llamacpp_slots(dep, 4096, EngineSettings(), False)  # -ngl all's, no margin
    assert lever < 46 <= priced
    flags = ("--model", "gemma-2-9b", "--gpu", "a100-sxm-80gb", "--engine", "llama.cpp")
    pre = _json(capsys, "prefill", *flags, "--batch", batch, "--prompt-len", "4096")
    decoded = _json(capsys, "decode", *flags, "--batch", "1", "--context", "4096")
    line = decoded["engine_max_batch"][0]
    assert pre["engine_max_batch"] == line["engine_max_batch"]  # the default 4 slots
    assert pre["conversations"] == lever == line["conversations"]
    assert "--fit-target 1,024 MiB" in pre["settings"]
    if batch == "46":  # -np 46: still priced (-ngl all's run holds 46), past the count
        pre = _json(capsys, "prefill", *flags, "--batch", batch, "--prompt-len", "4096",
                    "--parallel", "46")
        assert pre["priced_run_batch"] == priced
        assert pre["engine_runs"] and pre["expected"] is not None
        assert any(c.startswith(f"batch 46 at 4,096 tokens (1 x a100-sxm-80gb) is past the "
                                f"{pre['engine_max_batch']} sequences llama-server runs under "
                                "--fit") for c in pre["cautions"])


def test_prefill_max_batch_is_fits_where_only_fit_places_the_model(
        capsys: pytest.CaptureFixture[str]) -> None:
    """GLM-4.5 in bf16 on 8 x A100-80GB, 4,096-token prompts: -ngl all holds none, --fit
    moves weights to the host and runs one (fit's count); prefill's engine_max_batch gives
    it as decode's line does, with -ngl all's 0 beside it and the caution."""
    flags = ("--model", "glm-4.5", "--gpu", "a100-sxm-80gb", "--num-gpus", "8",
             "--engine", "llama.cpp")
    fitted = _json(capsys, "fit", *flags, "--max-model-len", "4096")
    pre = _json(capsys, "prefill", *flags, "--batch", "1", "--prompt-len", "4096")
    assert pre["engine_max_batch"] == fitted["conversations"] > 0
    assert pre["priced_run_batch"] == 0
    assert any(c.startswith("at 4,096 tokens (8 x a100-sxm-80gb) -ngl all's run holds no "
                            f"sequence; llama-server's default --fit runs "
                            f"{pre['engine_max_batch']}") for c in pre["cautions"])


def test_utilization_counts_fits_run_where_ngl_all_holds_none(
        capsys: pytest.CaptureFixture[str]) -> None:
    """GLM-4.5 in bf16 on 8 x A100-80GB at 4,096 tokens: -ngl all holds none; utilization
    counts --fit's run, weights on the host, as fit and decode's max-batch line do
    (llamacpp_fit_run), with fit's weights on the host, and gives no whole-step share."""
    flags = ("--gpu", "a100-sxm-80gb", "--num-gpus", "8", "--engine", "llama.cpp")
    fitted = _json(capsys, "fit", "glm-4.5", *flags, "--max-model-len", "4096")
    decoded = _json(capsys, "decode", "glm-4.5", *flags, "--batch", "1", "--context", "4096")
    assert fitted["conversations"] == decoded["engine_max_batch"][0]["engine_max_batch"] > 0
    util = _json(capsys, "utilization", "--model", "glm-4.5", *flags, "--context", "4096",
                 "--running", "1")
    assert util["conversations"] == fitted["conversations"]
    hosted = fitted["offload"]["host_weight_bytes"]  # --fit's run of one, as fit prints it
    assert util["fit_host_weight_bytes"] == pytest.approx(hosted, rel=1e-12)
    assert util["step_fraction_of_peak"] is None


def test_decode_and_prefill_do_not_say_no_engine_runs_what_fit_runs(
        capsys: pytest.CaptureFixture[str]) -> None:
    """GLM-4.5 in bf16 on 8 x A100-80GB at 4,096 tokens: the floor is priced as -ngl all's
    run, which overflows the cards, and is arithmetic only; but llama-server's default --fit
    runs fit's count, weights on the host, as the caution beside it says. The header said
    "no engine can run this" over that caution; it says which run overflows instead. Past
    fit's count it still says no engine can."""
    flags = ("--model", "glm-4.5", "--gpu", "a100-sxm-80gb", "--num-gpus", "8",
             "--engine", "llama.cpp")
    held = _json(capsys, "fit", *flags, "--max-model-len", "4096")["conversations"]
    assert held > 0
    for command, length in (("decode", "--context"), ("prefill", "--prompt-len")):
        code, out, _ = run_cli(capsys, command, *flags, "--batch", str(held), length, "4096")
        assert code == 0
        assert FIT_RUNS_IT in out and "no engine can run this" not in out
        assert f"llama-server's default --fit runs {held}" in out
        code, out, _ = run_cli(capsys, command, *flags, "--batch", str(held + 1), length,
                               "4096")
        assert code == 0
        assert FIT_RUNS_IT not in out and "(arithmetic only: no engine can run this)" in out
