"""decode's note under a table of batches and contexts says what decides each user's speed:
context where the cache grows with it, the window where a sliding window caps it."""

from __future__ import annotations

import json

import pytest

from ridgeline.catalog import resolve_model
from tests.conftest import run_cli


def _note_and_rows(capsys: pytest.CaptureFixture[str], *argv: str
                   ) -> tuple[str, dict[int, set[tuple[float, float | None]]]]:
    """The table's speed note, and each batch's (floor, expected) step times over the
    contexts asked."""
    code, out, err = run_cli(capsys, "decode", *argv)
    assert code == 0, err
    note = next(line for line in out.splitlines() if line.startswith("Card output rises"))
    code, out, err = run_cli(capsys, "decode", *argv, "--json")
    assert code == 0, err
    rows: dict[int, set[tuple[float, float | None]]] = {}
    for p in json.loads(out)["points"]:  # no expectation where the engine runs no such batch
        expected = p["expected"] and round(p["expected"]["time_s"], 12)
        rows.setdefault(p["batch"], set()).add((round(p["floor_step_time_s"], 12), expected))
    return note, rows


def _window(model: str) -> tuple[int, int]:
    """(the model's sliding window in tokens, how many layers have it)."""
    layers = [layer for layer in resolve_model(model).layers if layer.mixer == "sliding"]
    (window,) = {layer.window_tokens for layer in layers}
    assert window
    return window, len(layers)


CASES = [  # (arguments, whether context changes any row)
    (["mistral-7b", "--gpu", "h100", "--batch", "1,64", "--context", "4096,32000",
      "--max-model-len", "32000"], False),
    (["mistral-7b", "--gpu", "h100", "--batch", "1,64", "--context", "1000,32000",
      "--max-model-len", "32000"], True),
    # llama.cpp keeps Mistral's whole cache (it reads no sliding window for it)
    (["mistral-7b", "--gpu", "h100", "--batch", "1,64", "--context", "4096,32000",
      "--engine", "llama.cpp-cuda"], True),
    (["gemma-3-4b", "--gpu", "h100", "--batch", "1,64", "--context", "512,8000"], True),
    (["llama-3.1-8b", "--gpu", "h100", "--batch", "1,64", "--context", "512,8000"], True),
]


@pytest.mark.parametrize(("argv", "context_matters"), CASES,
                         ids=["mistral-past-window", "mistral-across-window",
                              "mistral-llama.cpp", "gemma-3-hybrid", "llama-full"])
def test_the_note_says_context_decides_only_where_the_rows_show_it(
        capsys: pytest.CaptureFixture[str], argv: list[str], context_matters: bool) -> None:
    note, rows = _note_and_rows(capsys, *argv)
    differs = any(len(times) > 1 for times in rows.values())
    assert differs == context_matters
    assert ("decided by context" in note) == differs
    assert ("alike at every context here" in note) == (not differs)


def test_past_mistrals_window_the_note_names_the_window_that_caps_the_cache(
        capsys: pytest.CaptureFixture[str]) -> None:
    window, _ = _window("mistral-7b")
    argv = ["mistral-7b", "--gpu", "h100", "--batch", "1,64", "--max-model-len", "32000"]
    note, _ = _note_and_rows(capsys, *argv, "--context", f"{window},32000")
    assert f"the {window:,}-token sliding window caps each sequence's cache" in note
    note, _ = _note_and_rows(capsys, *argv, "--context", f"{window // 4},32000")
    assert f"decided by context up to the {window:,}-token sliding window" in note


def test_a_hybrids_note_says_its_full_layers_cache_grows_and_its_windowed_layers_stops(
        capsys: pytest.CaptureFixture[str]) -> None:
    window, count = _window("gemma-3-4b")
    note, _ = _note_and_rows(capsys, "gemma-3-4b", "--gpu", "h100", "--batch", "1,64",
                             "--context", f"512,{window * 8}")
    assert "in the full-attention layers' cache" in note
    assert f"the {count} windowed layers' cache stops at their {window:,}-token sliding window" \
        in note
    # inside the window every layer's cache grows: the note is a full-attention model's
    inside, _ = _note_and_rows(capsys, "gemma-3-4b", "--gpu", "h100", "--batch", "1,64",
                               "--context", f"256,{window // 2}")
    full, _ = _note_and_rows(capsys, "llama-3.1-8b", "--gpu", "h100", "--batch", "1,64",
                             "--context", "256,512")
    assert inside == full


def test_a_model_with_no_attention_reads_the_same_state_at_every_context() -> None:
    from types import SimpleNamespace

    from ridgeline.model import Layer
    from ridgeline.reports.decode import speed_note

    mamba = SimpleNamespace(layers=(Layer("mamba", "dense"),) * 4)
    note = speed_note(mamba, [512, 8000], [])  # type: ignore[arg-type]
    assert "decided by context" not in note
    assert note.endswith("alike at every context here: each sequence keeps a fixed recurrent "
                         "state, whatever its context.")


def test_llama4_note_says_its_chunked_layers_read_their_own_chunk(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-4-Scout's 36 chunked layers read the keys of the chunk each token is in: at
    8,200 tokens 9 of them, so that context's floor is below 4,000's, and the note says why."""
    argv = ("llama-4-scout", "--gpu", "h100", "--num-gpus", "4", "--batch", "32",
            "--context", "4000,8200", "--max-model-len", "65536")
    note, _ = _note_and_rows(capsys, *argv)
    chunked = [layer for layer in resolve_model("llama-4-scout").layers
               if layer.mixer == "chunked"]
    assert (f"the {len(chunked)} chunked layers read only the keys of the current "
            f"{chunked[0].window_tokens:,}-token attention chunk") in note
    code, out, err = run_cli(capsys, "decode", *argv, "--json")
    assert code == 0, err
    floor = {p["context_len"]: p["floor_step_time_s"] for p in json.loads(out)["points"]}
    assert floor[8200] < floor[4000]
