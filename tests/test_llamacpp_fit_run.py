"""The page and utilization count llama.cpp's run as llama-server's default --fit starts it
(llamacpp_fit_run.default_fit_run): where --fit moves weights to the host, `fit`'s count and
placement, its speed left unpriced (no host bandwidth); where it keeps every layer on the
GPU, -ngl all's count under its margin, as before."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import decode_held
from ridgeline.llamacpp_fit_run import default_fit_run, fit_sequences
from ridgeline.memory import EngineSettings
from ridgeline.page import CONTEXTS, page_data
from ridgeline.units import GIB
from tests.conftest import run_cli


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return dict(json.loads(out))


# (model, weights flags, card, cards, context): -ngl all holds none, or (Llama-3.1-8B on a
# T4 at 512 tokens) 4 on the whole card, where --fit keeps its margin free by moving weights
HOSTED = [("llama-3.1-70b", ("--weights", "q4_k_m"), "rtx-4090", "1", "4096"),
          ("llama-3.1-70b", ("--weights", "q4_k_m"), "rtx-4090", "2", "32768"),
          ("llama-3.1-8b", (), "t4", "1", "512"),
          ("qwen3-next-80b-a3b", ("--weights", "q4_k_m"), "l40s", "1", "32768"),
          ("glm-4.5", (), "a100-sxm-80gb", "8", "4096")]


@pytest.mark.parametrize(("model", "weights", "card", "cards", "context"), HOSTED)
def test_utilization_counts_the_run_fit_places_with_weights_on_the_host(
        capsys: pytest.CaptureFixture[str], model: str, weights: tuple[str, ...], card: str,
        cards: str, context: str) -> None:
    """utilization's pool holds what `fit --max-model-len` counts for the run --fit places
    (and decode's max-batch line), with fit's weights on the host and its -ngl; the whole
    step's share is not given, its host layers needing --host-bandwidth-gbs."""
    line = ("--gpu", card, "--num-gpus", cards, "--engine", "llama.cpp", *weights)
    fit = _json(capsys, "fit", model, *line, "--max-model-len", context)
    decode = _json(capsys, "decode", model, *line, "--context", context)
    util = _json(capsys, "utilization", "--model", model, *line, "--context", context,
                 "--running", "1")
    assert util["conversations"] == fit["conversations"] \
        == decode["engine_max_batch"][0]["engine_max_batch"] >= 1
    assert util["fit_host_weight_bytes"] == pytest.approx(fit["offload"]["host_weight_bytes"],
                                                          rel=1e-12)
    assert util["fit_placement"] == fit["offload"]["placement"]
    assert util["step_fraction_of_peak"] is None
    assert any("--host-bandwidth-gbs" in c for c in util["cautions"])


def test_llama_70b_q4_on_an_rtx_4090_runs_one_with_18_gib_on_the_host(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The text: -ngl all's weights overflow the card (the old answer was "does not fit");
    llama-server's default --fit runs one 4,096-token conversation with 18.43 GiB of weights
    on the host at -ngl 44, as `fit` prints it (its placement: 43 of 80 layers on the GPU)."""
    code, out, err = run_cli(capsys, "utilization", "--model", "llama-3.1-70b", "--gpu",
                             "rtx-4090", "--engine", "llama.cpp", "--weights", "q4_k_m",
                             "--context", "4096", "--running", "1")
    assert code == 0, err
    assert ("default --fit keeping 18.43 GiB of weights on the host, this context) "
            "holds 1 conversation of 4,096 tokens") in out
    assert "(-ngl 44: 43 of 80 layers on the GPU, the output layer too)" in out
    assert "the whole step's share of peak is not given" in out


def test_page_counts_fits_run_and_prices_none_of_it() -> None:
    """Llama-3.1-70B Q4_K_M on 2 x RTX 4090: every layer on the GPU up to 8,192 tokens (the
    count -ngl all's, priced); at 32,768 and 131,072 --fit moves weights to the host, and the
    page gives fit's count and weights there, no speed."""
    data = page_data(["llama-3.1-70b"], ["rtx-4090"], [2], ["q4_k_m"], ["f16"], "llama.cpp")
    combo = data["combos"]["llama-3.1-70b|rtx-4090|2|q4_k_m|f16"]
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("rtx-4090"),
                           "q4_k_m", "f16", 2, engine="llama.cpp-cuda")
    for i, context in enumerate(CONTEXTS):
        run = default_fit_run(dep, context)
        if run is None:
            assert combo["conversations"][i] == decode_held(dep, context) > 0
            assert combo["fits"][i][0] and combo["fit_host_gib"][i] is None
        else:
            assert combo["conversations"][i] == run.held >= 1
            assert combo["fit_host_gib"][i] == run.host_weight_bytes / GIB
            assert not any(combo["fits"][i]) and not any(combo["agg_exp"][i])
    assert [g is not None for g in combo["fit_host_gib"]] == [False, False, False, True, True]
    # the figures `fit --num-gpus 2 --max-model-len 32768` prints: 1 conversation, 4.93 GiB
    assert combo["conversations"][3] == 1
    assert combo["fit_host_gib"][3] == pytest.approx(4.9315, abs=5e-4)


def test_page_says_what_runs_where_only_fit_runs_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-Next Q4_K_M on one L40S runs only with weights on the host: the page has no
    speed to draw, and says --fit's count rather than "does not fit"."""
    code, _, err = run_cli(capsys, "page", "qwen3-next-80b-a3b", "--gpu", "l40s", "--engine",
                           "llama.cpp", "--weights", "q4_k_m", "--counts", "1", "--json")
    assert code == 2
    assert "nothing the page can price" in err and "does not fit" not in err
    assert "llama-server's default --fit runs 1 conversation with" in err


def test_page_json_counts_the_deployments_that_run_only_with_weights_on_the_host(
        capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, "page", "llama-3.1-70b", "--gpu", "rtx-4090", "--engine", "llama.cpp",
                "--weights", "q4_k_m", "--kv-dtypes", "f16", "--counts", "1,2")
    assert out["host_only"] == 1 and out["holding_none"] == 0  # one card: only with --fit's
    assert "1 of them run conversations only with weights on the host" in out["what"]


@pytest.mark.parametrize(("model", "card"), [("llama-3.1-8b", "rtx-4090"),
                                             ("llama-3.1-8b", "h100-sxm"),
                                             ("gpt-oss-20b", "rtx-4090")])
def test_no_hosted_run_where_every_layer_fits(model: str, card: str) -> None:
    """Where --fit keeps every layer on the GPU, there is no other run: the count stays
    -ngl all's under the margin (decode_held), the page's and utilization's as before."""
    dep = Deployment.build(resolve_model(model), resolve_accelerator(card), None, None, 1,
                           engine="llama.cpp-cuda")
    assert all(default_fit_run(dep, c) is None for c in (512, 2048, 8192))


def test_no_hosted_run_on_one_memory() -> None:
    """Apple silicon has nowhere to move weights: -ngl all's run is the one that starts."""
    dep = Deployment.build(resolve_model("llama-3.1-70b"),
                           resolve_accelerator("apple-m4-pro-20c"), "q4_k_m", None, 1,
                           engine="llama.cpp-metal")
    assert default_fit_run(dep, 4096) is None


def test_fit_places_for_the_slots_that_fit_with_every_layer_on_the_gpu() -> None:
    """Llama-3.1-8B bf16 on an RTX 4090 at 8,192 tokens: 8 conversations fit under the
    margin, llama-server's 4 slots hold 4, so --fit places for 4 (sim.config
    .llamacpp_context); a target of 6 asks for 6."""
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("rtx-4090"),
                           None, None, 1, engine="llama.cpp-cuda")
    settings = EngineSettings(max_model_len=8192)
    assert decode_held(dep, 8192) == 8
    assert fit_sequences(dep, settings, None, None) == 4
    assert fit_sequences(dep, settings, 6, None) == 6


def test_page_html_says_so_only_where_a_context_is_hosted() -> None:
    """The page's script gains the words for --fit's hosted runs only where some context has
    one; every other page keeps the plain script, byte for byte."""
    from ridgeline.page import _SCRIPT, page_html

    hosted = page_data(["llama-3.1-70b"], ["rtx-4090"], [2], ["q4_k_m"], ["f16"], "llama.cpp")
    assert "llama-server's default --fit runs " in page_html(hosted, "t")
    plain = page_data(["llama-3.1-8b"], ["h100-sxm"], [1], ["q4_k_m"], ["f16"], "llama.cpp")
    html = page_html(plain, "t")
    assert _SCRIPT in html and "default --fit runs" not in html
