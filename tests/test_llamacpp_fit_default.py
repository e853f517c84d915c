"""llama.cpp's placement with no -ngl follows the build: from b7437 llama-server starts with
--fit on and -ngl auto (PR #16653), so a model too big for the card is placed as -ngl auto
places it; an older build keeps every layer on the GPU. A model that fits is answered as
before, whatever the build, less the margin --fit keeps free."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest

from ridgeline.capacity import engine_holds
from ridgeline.catalog import resolve_model
from ridgeline.deployment import Deployment
from ridgeline.hardware import resolve_accelerator
from ridgeline.llamacpp_fit import (
    default_fit_target_bytes,
    fit_default_since_build,
    fit_on_by_default,
    fit_on_for,
    whole_fit_margin,
)
from ridgeline.memory import EngineSettings
from tests.conftest import run_cli

BIG = ("llama-3.1-70b", "--gpu", "rtx-4090", "--weights", "q4_k_m", "--engine", "llama.cpp-cuda")
SMALL = ("llama-3.1-8b", "--gpu", "rtx-4090", "--weights", "q4_k_m", "--engine", "llama.cpp-cuda")
BEFORE_FIT = f"b{fit_default_since_build() - 1}"


def test_fit_is_the_default_from_its_build_and_in_the_newest_modelled() -> None:
    since = fit_default_since_build()
    assert fit_on_by_default(None) and fit_on_by_default(since)
    assert not fit_on_by_default(since - 1)


def test_an_engine_version_as_typed_is_read_by_one_check() -> None:
    since = fit_default_since_build()
    assert fit_on_for(None) and fit_on_for(f"b{since}") and fit_on_for(str(since))
    assert not fit_on_for(f"b{since - 1}") and not fit_on_for("0.11")  # 0.11 names no build


# Deployments --fit places: a dense model with no slot whole (one slot's -c); one slot of 16K
# on two cards, where --fit's 1 GiB margin moves a layer (at 8K one slot fits whole with the
# margin free, and a second is not made room for by moving one); an MoE's experts
PLACED = [
    (*BIG, "--max-model-len", "8192"),
    (*BIG, "--num-gpus", "2", "--max-model-len", "16384"),
    ("qwen3-30b-a3b", "--gpu", "rtx-3060", "--weights", "q4_k_m", "--engine", "llama.cpp-cuda",
     "--max-model-len", "4096"),
]
LOAD = ("--rate", "0.1", "--num-requests", "6")


@pytest.mark.parametrize("deployment", [*PLACED, BIG])
@pytest.mark.parametrize("output", [(), ("--json",)])
def test_simulate_is_the_same_with_and_without_ngl_auto_on_a_fit_build(
        capsys: pytest.CaptureFixture[str], deployment: tuple[str, ...],
        output: tuple[str, ...]) -> None:
    argv = ("simulate", *deployment, "--host-bandwidth-gbs", "60", *LOAD, *output)
    code, default, _ = run_cli(capsys, *argv)
    code_auto, auto, _ = run_cli(capsys, *argv, "-ngl", "auto")
    assert code == code_auto == 0 and default == auto and "--fit: " in default


@pytest.mark.parametrize("deployment", PLACED)
@pytest.mark.parametrize("ngl", [(), ("-ngl", "auto")])
def test_simulate_places_the_ngl_and_c_fit_prints(capsys: pytest.CaptureFixture[str],
                                                  deployment: tuple[str, ...],
                                                  ngl: tuple[str, ...]) -> None:
    argv = (*deployment, "--host-bandwidth-gbs", "60", *ngl, "--json")
    code, out, _ = run_cli(capsys, "fit", *argv)
    assert code == 0
    printed = json.loads(out)
    code, out, _ = run_cli(capsys, "simulate", *argv, *LOAD)
    settings = json.loads(out)["settings"]
    assert code == 0 and settings["num_blocks"] * settings["block_size"] == printed[
        "llama_server_c"]
    assert settings["offload"]["placement"] == printed["offload"]["placement"]


def test_a_model_too_big_for_the_card_is_placed_as_ngl_auto_places_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("fit", *BIG, "--max-model-len", "8192", "--json")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    default = json.loads(out)
    code, out, _ = run_cli(capsys, *argv, "-ngl", "auto")
    assert code == 0 and json.loads(out) == default
    assert default["conversations"] >= 1 and "--fit" in default["offload"]["placement"]
    code, out, _ = run_cli(capsys, *argv, "--engine-version", BEFORE_FIT)
    assert code == 0 and json.loads(out)["conversations"] == 0  # every layer on the GPU


def test_the_printed_command_is_the_one_placed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", *BIG, "--max-model-len", "8192")
    assert code == 0
    command = out.split("start it with:")[1].splitlines()[0]
    assert "-c 8192" in command and "--fit on" in command


@pytest.mark.parametrize("argv", [
    ("fit", *SMALL, "--max-model-len", "8192", "--json"),
    ("fit", *SMALL, "--target-concurrency", "4", "--json"),
    ("decode", *SMALL, "--batch", "1,8", "--context", "4096", "--json"),
    ("prefill", *SMALL, "--prompt-len", "4096", "--json"),
    ("simulate", *SMALL, "--max-model-len", "8192", "--concurrency", "2", "--num-requests", "6",
     "--json"),
    ("simulate", "llama-3.1-8b", "--gpu", "rtx-4090", "--weights", "q4_k_m", "--engine",
     "llama.cpp-cuda", "--concurrency", "2", "--num-requests", "6", "--json"),
])
def test_a_model_that_fits_is_answered_as_with_every_layer_on_the_gpu(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """The answer is the whole model's, less the margin --fit keeps free (fit, decode and
    prefill size the pool so: --fit-target 0 keeps none, and says so); only a lever that asks
    for more slots may differ, naming the weights --fit would move for them (a run with every
    layer pinned moves none)."""
    margin = ("--fit-target", "0") if argv[0] != "simulate" else ()
    code, default, _ = run_cli(capsys, *argv, *margin)
    assert code == 0
    code, every_layer, _ = run_cli(capsys, *argv, "-ngl", "all")
    assert code == 0
    assert re.sub(r"; --fit keeps [\d.,]+ GiB of weights on the host|, --fit-target 0 MiB left "
                  "free", "", default) == every_layer


@pytest.mark.parametrize("command", ["decode", "prefill"])
def test_decode_and_prefill_leave_the_fit_target_free_as_fit_does(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    """A slot per sequence, in the memory --fit leaves: llama-3.1-8b bf16 on an RTX 4090 at
    8K holds as many conversations as `fit` counts, fewer than with every layer pinned (-ngl
    all keeps no margin), and fewer again under a larger --fit-target."""
    card = ("llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda")
    length = ("--context" if command == "decode" else "--prompt-len", "8192")

    def batch(*flags: str) -> int:
        code, out, _ = run_cli(capsys, command, *card, *length, *flags, "--json")
        assert code == 0
        report = json.loads(out)
        line = report["engine_max_batch"][0] if command == "decode" else report
        # the slots the pool holds, a sequence each (llama-server's default 4 cap the batch)
        return int(line["conversations"] or line["engine_max_batch"])

    code, out, _ = run_cli(capsys, "fit", *card, "--max-model-len", "8192", "--json")
    assert code == 0
    held = json.loads(out)["conversations"]
    assert batch() == held < batch("-ngl", "all")
    assert batch("--fit-target", "4000") < held


@pytest.mark.parametrize("flags", [("--max-model-len", "8192"), ("--target-concurrency", "4")])
def test_a_model_that_fits_keeps_the_fit_target_free(
        capsys: pytest.CaptureFixture[str], flags: tuple[str, ...]) -> None:
    """Under --fit a whole model's pool leaves the margin free: a longer -c or more slots make
    --fit move weights to the host rather than fill it (common/fit.cpp), so `fit` had offered
    9 conversations of 8K on an RTX 4090 where its own 9-slot lever moved 1.79 GiB of weights.
    The cache is the every-layer run's less the margin, to within the compute buffer's cells."""
    default, every_layer = _default_and_every_layer(capsys, ("fit", *SMALL, *flags, "--json"))
    margin = default["taken_bytes_per_gpu"]["left_free_by_fit"]
    assert margin == default_fit_target_bytes()
    assert "left_free_by_fit" not in every_layer["taken_bytes_per_gpu"]
    assert default["pool_bytes_per_gpu"] == pytest.approx(
        every_layer["pool_bytes_per_gpu"] - margin, rel=0.01)
    assert default["llama_server_c"] <= default["tokens"] < every_layer["tokens"]
    assert default["conversations"] <= every_layer["conversations"]


def test_a_step_needs_the_hosts_bandwidth_before_the_default_fit_is_priced(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("decode", *BIG, "--batch", "1", "--context", "4096")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and "DOES NOT FIT" in out and "--host-bandwidth-gbs GB/s prices" in out
    host = ("--host-bandwidth-gbs", "76.8", "--json")
    code, out, _ = run_cli(capsys, *argv, *host)
    assert code == 0
    code, auto, _ = run_cli(capsys, *argv, *host, "-ngl", "auto")
    assert code == 0 and out == auto
    assert json.loads(out)["points"][0]["bound"] == "host memory"


def test_simulate_runs_the_command_fit_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """With --max-model-len L and no -ngl: -c L × the slots that fit, --fit placing the weights
    for it, as `fit` starts llama-server."""
    code, out, _ = run_cli(capsys, "fit", *BIG, "--max-model-len", "8192", "--json")
    cells = json.loads(out)["llama_server_c"]
    code, out, _ = run_cli(capsys, "simulate", *BIG, "--max-model-len", "8192", "--concurrency",
                           "1", "--num-requests", "3", "--host-bandwidth-gbs", "76.8")
    assert code == 0 and f"engine: {cells:,} KV cells" in out and "--fit: -ngl" in out


def test_fit_without_a_context_takes_llama_servers_c_0_on_a_fit_build(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("fit", "llama-3.1-8b", "--gpu", "rtx-3060", "--engine", "llama.cpp-cuda", "--json")
    code, out, _ = run_cli(capsys, *argv)
    code_auto, auto, _ = run_cli(capsys, *argv, "-ngl", "auto")
    assert code == code_auto == 0 and out == auto
    assert "-c 0 under --fit" in json.loads(out)["longest_context_search"]
    code, _, err = run_cli(capsys, *argv, "--engine-version", BEFORE_FIT)
    assert code == 2 and "--max-model-len" in err


@pytest.mark.parametrize(("flags", "named"), [
    (("-ngl", "auto", "--max-model-len", "8192", "--engine-version", BEFORE_FIT), "has no --fit"),
    (("--output-layer-last", "--max-model-len", "8192"), "give -ngl N"),
    (("--fit-target", "512", "--max-model-len", "8192", "--engine-version", BEFORE_FIT),
     "give -ngl auto"),
])
def test_fit_flags_where_the_build_has_no_fit_exit_2(capsys: pytest.CaptureFixture[str],
                                                    flags: tuple[str, ...], named: str) -> None:
    code, out, err = run_cli(capsys, "fit", *BIG, *flags)
    assert code == 2 and named in err and not out


def test_fits_knobs_need_no_ngl_on_a_fit_build(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("fit", *BIG, "--max-model-len", "8192", "--json")
    code, tight, _ = run_cli(capsys, *argv, "--fit-target", "4096")
    assert code == 0
    code, loose, _ = run_cli(capsys, *argv)
    assert json.loads(tight)["offload"]["host_weight_bytes"] > json.loads(loose)["offload"][
        "host_weight_bytes"]


def test_an_engine_comparison_runs_llama_cpp_at_its_builds_default(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "rtx-4090", "--weights",
                           "q4_k_m", "--engine", "vllm,llama.cpp-cuda", "--max-model-len",
                           "8192", "--json")
    assert code == 0
    rows = {r["engine"]: r for r in json.loads(out)["engines"]}
    assert rows["vllm"]["conversations"] == 0  # vLLM keeps every weight on the GPU
    assert rows["llama.cpp-cuda"]["conversations"] >= 1
    assert "--fit" in rows["llama.cpp-cuda"]["offload"]["placement"]


# the build's default --fit moves one MoE layer's experts here (`fit --max-model-len 4096`)
SET_ASIDE = ("qwen3-30b-a3b", "--gpu", "rtx-5090", "--weights", "q8_0", "--engine",
             "llama.cpp-cuda")


@pytest.mark.parametrize("argv", [
    ("decode", *SET_ASIDE, "--context", "4096", "--json"),
    ("prefill", *SET_ASIDE, "--prompt-len", "4096", "--json"),
    ("simulate", *SET_ASIDE, "--max-model-len", "4096", "--concurrency", "2", "--num-requests",
     "6", "--json"),
])
def test_a_default_fit_set_aside_is_priced_with_every_layer_and_says_so(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """Where the build's default --fit would move weights and no --host-bandwidth-gbs prices
    them, the answer is -ngl all's, its pool the whole card (simulate's -c too: it had sized
    -c by --fit's margin and priced the run with every layer), and one caution names what
    --fit would move, the weights `fit` places on the host."""
    code, out, _ = run_cli(capsys, "fit", *SET_ASIDE, "--max-model-len", "4096", "--json")
    assert code == 0
    moved = json.loads(out)["offload"]["host_weight_bytes"] / 2**30
    default, every_layer = _default_and_every_layer(capsys, argv)
    said, kept = default.pop("cautions"), every_layer.pop("cautions")
    if argv[0] == "decode":  # its max-batch line is llama-server's under --fit, fit's count
        (line,) = default.pop("engine_max_batch")
        every_layer.pop("engine_max_batch")
        assert line["engine_max_batch"] == json.loads(out)["conversations"]
    if argv[0] == "prefill":  # its engine_max_batch too, sized under --fit's margin
        assert default.pop("engine_max_batch") == json.loads(out)["conversations"]
        # the -ngl all run the prompt is priced under: the every-layer answer's own count
        assert default.pop("priced_run_batch") == every_layer.pop("priced_run_batch") \
            == every_layer["engine_max_batch"]
        assert "--fit-target" in default.pop("settings")
        every_layer.pop("engine_max_batch"), every_layer.pop("settings")
    (extra,) = [c for c in said if c not in kept]
    assert f"would move {moved:,.2f} GiB of weights to the host" in extra
    assert "-ngl all" in extra and "--host-bandwidth-gbs" in extra
    assert default == every_layer
    code, out, _ = run_cli(capsys, *argv, "--host-bandwidth-gbs", "60")
    assert code == 0 and not any("-ngl all" in c for c in json.loads(out)["cautions"])


def test_decodes_weights_too_big_for_the_card_are_said_to_be_every_layers_not_the_runs(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-2-9B fp16 (17.21 GiB) on a 16 GB MI50 at 8,192 tokens: fit places it as the
    default --fit does (one conversation, layers on the host); decode answers -ngl all's run,
    whose weights cannot load, and says that is the run it means, not llama-server's; its
    max-batch line is llama-server's under --fit, fit's one conversation."""
    gpu = ("gemma-2-9b", "--gpu", "mi50-16gb")
    code, out, _ = run_cli(capsys, "fit", *gpu, "--max-model-len", "8192", "--json")
    assert code == 0 and json.loads(out)["conversations"] == 1
    code, out, _ = run_cli(capsys, "decode", *gpu, "--batch", "1", "--context", "8192", "--json")
    decoded = json.loads(out)
    (seats,) = decoded["engine_max_batch"]
    assert seats["engine_max_batch"] == 1 and seats["priced_run_batch"] == 0
    assert decoded["points"][0]["expected_none_code"] == "does_not_fit"
    assert any(c.startswith("answered with every layer on the GPU") for c in decoded["cautions"])
    assert any("-ngl all's run holds no sequence" in c for c in decoded["cautions"])


def test_decodes_cache_short_of_one_sequence_says_how_many_cells_not_only_refuse_to_start(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-2-9B bf16 on a 20 GB RTX 4000 Ada at 8,192 tokens: fit's --fit moves 2.58 GiB of
    weights to the host and holds one conversation; with every layer on the GPU decode's
    cache room holds 7,727 cells (7,734 before the GGUF's norms were F32), and its reason says
    so (it had read only "it would refuse to start")."""
    card = ("gemma-2-9b", "--gpu", "rtx-4000-ada", "--engine", "llama.cpp-cuda")
    code, out, _ = run_cli(capsys, "fit", *card, "--max-model-len", "8192", "--json")
    assert code == 0 and json.loads(out)["conversations"] == 1
    code, out, _ = run_cli(capsys, "decode", *card, "--batch", "1", "--context", "8192", "--json")
    decoded = json.loads(out)
    (seats,) = decoded["engine_max_batch"]
    assert seats["engine_max_batch"] == 1 and seats["priced_run_batch"] == 0  # fit's, under --fit
    assert decoded["points"][0]["expected_none_reason"].endswith(
        "with every layer on the GPU, the 1.98 GiB per GPU left for its cache holds 7,727 cells, "
        "fewer than one such sequence, so llama-server would fail to allocate it at start-up")


def test_a_fit_that_keeps_weights_on_the_host_says_so_in_its_headline(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-405B fp16 on one 16 GB MI50: --fit keeps 1 of 126 layers on the GPU and
    746.11 GiB of weights on the host. "fits" alone had read as the card holding the model;
    the headline names the host's share, until --host-memory-gib checks it."""
    card = ("llama-3.1-405b", "--gpu", "mi50-16gb", "--max-model-len", "8192")
    code, out, _ = run_cli(capsys, "fit", *card, "--json")
    report = json.loads(out)
    assert code == 0 and report["verdict"] == "fits, under the ridge"
    host = report["offload"]["host_weight_bytes"] / 2**30
    assert host == pytest.approx(746.11, abs=0.01)
    code, out, _ = run_cli(capsys, "fit", *card)
    assert out.splitlines()[0].endswith(
        f"— with {host:,.2f} GiB of weights in host memory, which the host's RAM must hold "
        "(--host-memory-gib checks it)")
    code, out, _ = run_cli(capsys, "fit", *card, "--host-memory-gib", "1024")
    assert code == 0 and "host memory" not in out.splitlines()[0]
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine",
                           "llama.cpp", "--max-model-len", "8192")
    assert code == 0 and "host memory" not in out.splitlines()[0]  # every layer on the GPU


@pytest.mark.parametrize(("flags", "moves"), [
    (("--fit-target", "0"), True), ((), True), (("-ngl", "all"), False)])
def test_the_cells_past_the_pool_move_weights_only_under_fit(
        capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], moves: bool) -> None:
    """Under --fit a longer -c moves weights to the host, whatever its margin (--fit-target 0
    keeps none, and had lost the words); -ngl all stops --fit, so nothing moves."""
    code, out, _ = run_cli(capsys, "fit", *SMALL, "--max-model-len", "8192", *flags)
    assert code == 0
    (held,) = [line for line in out.splitlines() if line.startswith("holds ")]
    assert ("past it --fit moves weights to the host" in held) is moves


def test_a_set_aside_caution_names_the_fit_target_given(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The caution's margin is the --fit-target typed, not the default: --fit-target 4000
    keeps 4,000 MiB free and moves more weights (3.89 GiB, as `fit` places them) than the
    default 1,024 MiB (0.91 GiB); the caution had said "keeps 1,024 MiB free" either way."""
    target = ("--fit-target", "4000")
    code, out, _ = run_cli(capsys, "fit", *SET_ASIDE, "--max-model-len", "4096", *target,
                           "--json")
    assert code == 0
    moved = json.loads(out)["offload"]["host_weight_bytes"] / 2**30
    code, out, _ = run_cli(capsys, "decode", *SET_ASIDE, "--context", "4096", *target, "--json")
    assert code == 0
    (said,) = [c for c in json.loads(out)["cautions"] if "-ngl all" in c]
    assert "keeping 4,000 MiB free (--fit-target)" in said and "1,024" not in said
    assert f"would move {moved:,.2f} GiB of weights to the host" in said


def test_a_side_by_side_decode_names_the_card_whose_fit_was_set_aside(
        capsys: pytest.CaptureFixture[str]) -> None:
    """decode --gpu A,B lists every card's cautions once, below the table: the set-aside
    caution names its card (the RTX 5090, whose default --fit moves experts at 4K), not the
    H100 beside it, which holds the whole model."""
    code, out, _ = run_cli(capsys, "decode", "qwen3-30b-a3b", "--gpu", "rtx-5090,h100-sxm",
                           "--weights", "q8_0", "--engine", "llama.cpp-cuda", "--context",
                           "4096")
    assert code == 0
    (said,) = [line for line in out.splitlines() if "-ngl all" in line]
    assert "1 x rtx-5090" in said and "h100" not in said


def test_where_no_layer_placement_holds_a_sequence_the_caution_still_names_fits_move(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama-3.1-8b bf16 on an RTX 4080 at 32K: -ngl all holds no sequence, so decode and
    prefill answer "does not fit", which alone read as if llama-server would refuse to start;
    its default --fit starts it with 4.23 GiB of weights on the host (as `fit` places them),
    and the caution says so and asks for the host's bandwidth."""
    card = ("llama-3.1-8b", "--gpu", "rtx-4080", "--engine", "llama.cpp-cuda")
    code, out, _ = run_cli(capsys, "fit", *card, "--max-model-len", "32768", "--json")
    assert code == 0
    moved = json.loads(out)["offload"]["host_weight_bytes"] / 2**30
    for argv in (("decode", *card, "--context", "32768"),
                 ("prefill", *card, "--prompt-len", "32768")):
        code, out, _ = run_cli(capsys, *argv)
        assert code == 0 and "does not fit" in out
        (said,) = [line for line in out.splitlines() if "-ngl all, which stops" in line]
        assert f"would move {moved:,.2f} GiB of weights to the host" in said
        assert "--host-bandwidth-gbs" in said


def _card(gpu: str, num_gpus: int = 1, split_mode: str | None = None) -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator(gpu), None, None,
                            num_gpus, engine="llama.cpp-cuda" if gpu.startswith("rtx")
                            else "llama.cpp-metal", split_mode=split_mode)


def test_decodes_slot_pool_leaves_the_default_margin_where_fit_keeps_every_layer() -> None:
    """llama-3.1-8b bf16 on an RTX 4090 at 8,192 tokens: 8 sequences under the default
    --fit's 1,024 MiB, 9 with -ngl all (capacity._slot_pool's worked numbers). The margin is
    the default's where --fit starts on and keeps every layer (llamacpp_fit.whole_fit_margin):
    on 2 cards split by layer, and on a Mac within its margin; none before b7437, under -sm
    tensor (it starts with --fit off), or past what the margin leaves (-ngl all's answer)."""
    one = EngineSettings(max_model_len=8192, max_num_seqs=1)
    card = _card("rtx-4090")
    margin = default_fit_target_bytes()
    assert whole_fit_margin(card, one, 8192) == margin
    assert engine_holds(card, 8192, settings=replace(one, fit_target_bytes=margin)) == 8
    assert engine_holds(card, 8192, settings=one) == 9
    assert whole_fit_margin(_card("rtx-4090", 2), one, 8192) == margin
    assert whole_fit_margin(card, replace(one, engine_version=BEFORE_FIT), 8192) is None
    assert whole_fit_margin(_card("rtx-4090", 2, "tensor"), one, 8192) is None
    assert whole_fit_margin(card, one, 8192, sequences=9) is None
    mac = _card("apple-m4-max-32c")  # 69,266 cells with the margin free, 77,394 without
    assert whole_fit_margin(mac, one, 65536) == margin
    assert whole_fit_margin(mac, one, 72000) is None


# the 1,024 MiB margin leaves no room for 90,000 cells here; the whole memory does
UNPLACED = ("qwen3-next-80b-a3b", "--gpu", "apple-m4-pro-20c", "--engine", "llama.cpp-metal",
            "--weights", "q4_k_m")


def test_where_the_default_fit_finds_no_placement_llama_server_loads_every_layer(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama-server ignores --fit's failure and loads the model as given (common/common.cpp
    ignores common_fit_params' result): on one memory, where --fit cannot move a weight, every
    layer, with no margin kept. `fit` had said "does not fit" (0 conversations) where decode,
    prefill and simulate ran one sequence, each without a word; now all answer -ngl all's one
    conversation, and say why."""
    code, out, _ = run_cli(capsys, "fit", *UNPLACED, "--max-model-len", "90000", "--json")
    assert code == 0
    default = json.loads(out)
    code, out, _ = run_cli(capsys, "fit", *UNPLACED, "--max-model-len", "90000", "--json",
                           "-ngl", "all")
    assert code == 0
    assert default["conversations"] == json.loads(out)["conversations"] == 1
    (said,) = [c for c in default["cautions"] if "finds no placement" in c]
    assert "loads" not in said and "starts as given, every layer on the GPU" in said
    for argv in (("decode", *UNPLACED, "--context", "90000", "--json"),
                 ("simulate", *UNPLACED, "--max-model-len", "90000", "--concurrency", "1",
                  "--num-requests", "2", "--json")):
        code, out, _ = run_cli(capsys, *argv)
        assert code == 0 and said in json.loads(out)["cautions"]
    code, out, _ = run_cli(capsys, "decode", *UNPLACED, "--context", "90000", "--json")
    assert json.loads(out)["engine_max_batch"][0]["engine_max_batch"] == 1


def _default_and_every_layer(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
                             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``argv``'s --json answer under the build's default placement, and with -ngl all."""
    answers = []
    for extra in ((), ("-ngl", "all")):
        code, out, _ = run_cli(capsys, *argv, *extra)
        assert code == 0
        answers.append(json.loads(out))
    return answers[0], answers[1]
