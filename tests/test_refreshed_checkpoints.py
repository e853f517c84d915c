"""Refreshed checkpoints offline: Qwen3-235B-A22B's 2507 release is bundled (262,144 positions,
not the original's 40,960), its Thinking twin and Qwen3-Next's Instruct resolve as variants,
and the refreshes with no sourced config are refused naming the closest entry and what is
known of the difference."""

from __future__ import annotations

import pytest

from ridgeline.catalog import (
    load_data,
    model_entries,
    model_entry,
    resolve_model,
    unbundled_repo,
    unbundled_repos,
)
from ridgeline.cli import main
from ridgeline.errors import InputError

REFRESH = "Qwen/Qwen3-235B-A22B-Instruct-2507"


def config(model_id: str) -> dict:
    return dict(load_data(f"models/{model_entry(model_id).file}"))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_2507_refresh_resolves_offline_with_its_262k_positions() -> None:
    refresh, original = resolve_model(REFRESH), resolve_model("qwen3-235b-a22b")
    assert refresh.max_position_embeddings == 262144
    assert original.max_position_embeddings == 40960
    assert resolve_model("Qwen3-235B-A22B-Instruct-2507") == refresh


def test_the_2507_config_is_the_original_but_for_positions_and_rope_theta() -> None:
    refresh, original = config("qwen3-235b-a22b-instruct-2507"), config("qwen3-235b-a22b")
    assert list(refresh) == list(original)  # same keys, same order
    changed = {k for k in refresh if refresh[k] != original[k]}
    assert changed == {"max_position_embeddings", "rope_theta"}
    assert refresh["rope_theta"] == 5_000_000


def test_thinking_2507_and_next_instruct_resolve_to_their_twins() -> None:
    assert resolve_model("Qwen/Qwen3-235B-A22B-Thinking-2507") == resolve_model(REFRESH)
    assert resolve_model("Qwen/Qwen3-Next-80B-A3B-Instruct") \
        == resolve_model("Qwen/Qwen3-Next-80B-A3B-Thinking")


def test_the_2507_recipes_context_fits_where_the_original_refuses_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    gpus = ("--gpu", "h200", "--num-gpus", "8", "--max-model-len", "262144")
    code, out, _ = run(capsys, "fit", REFRESH, *gpus, "--weights", "fp8")
    assert code == 0 and "conversations of 262,144 tokens" in out.splitlines()[0]
    code, out, err = run(capsys, "fit", "qwen3-235b-a22b-fp8", *gpus)
    assert "DOES NOT FIT" in out + err and "40,960 positions" in out + err


@pytest.mark.parametrize("repo", [r.hf_id for r in unbundled_repos()])
def test_an_unbundled_refresh_is_refused_naming_its_closest_entry(
        capsys: pytest.CaptureFixture[str], repo: str) -> None:
    known = unbundled_repo(repo)
    assert known is not None and known.source
    assert known.hf_id not in {h for e in model_entries() for h in e.hf_ids}
    resolve_model(known.closest)  # the entry named is bundled
    with pytest.raises(InputError) as refused:
        resolve_model(repo)
    message = str(refused.value)
    assert f"closest: {known.closest} ({known.note})" in message
    assert "--fetch" in message
    assert unbundled_repo(repo.split("/")[1]) == known  # the name without its owner too
    code, out, err = run(capsys, "fit", repo, "--gpu", "h200")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1


def test_the_kimi_0905_note_states_kimi_k2s_own_figures() -> None:
    known = unbundled_repo("moonshotai/Kimi-K2-Instruct-0905")
    assert known is not None
    kimi = config(known.closest)
    scaling = kimi["rope_scaling"]
    assert f"kimi-k2's is {scaling['factor']:g}" in known.note
    assert f"kimi-k2's {kimi['max_position_embeddings']:,}" in known.note
    assert f"{scaling['original_max_position_embeddings'] * 64:,} positions" in known.note


def test_the_fp8_2507_note_states_both_entries_positions() -> None:
    known = unbundled_repo("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8")
    assert known is not None
    assert f"{resolve_model(known.closest).max_position_embeddings:,} positions" in known.note
    original = resolve_model("qwen3-235b-a22b-fp8").max_position_embeddings
    assert f"{original:,} positions" in known.note
