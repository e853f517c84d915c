"""Words around the numbers: the article before a count, the level a note names, the extra a
missing tokenizer needs, thousands separators in binary sizes."""

from __future__ import annotations

import pytest

from ridgeline import prefix
from ridgeline.cli import main
from ridgeline.errors import InputError
from ridgeline.units import fmt_binary_bytes, indefinite


@pytest.mark.parametrize(("n", "word"), [(8000, "an"), (8, "an"), (11, "an"), (18_000, "an"),
                                         (80, "an"), (850_000, "an"), (1024, "a"), (1, "a"),
                                         (100, "a"), (4096, "a"), (88_000, "an")])
def test_indefinite_article_follows_the_number_as_read(n: int, word: str) -> None:
    assert indefinite(n) == word


def test_binary_sizes_past_a_thousand_carry_separators() -> None:
    assert fmt_binary_bytes(1280 * 2**30) == "1,280 GiB"
    assert fmt_binary_bytes(36 * 2**10) == "36 KiB"


def test_the_overlap_note_names_the_level_asked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evalstats", "--pct-a", "39.02", "--pct-b", "41.46", "--n", "164",
                 "--alpha", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "Two 99% intervals" in out and "significant at 0.01" in out
    assert "95%" not in out.split("Overlapping")[-1]


def test_a_tiktoken_encoding_without_tiktoken_names_tiktoken(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefix, "_optional_module", lambda name: None)
    with pytest.raises(InputError, match=r"cl100k_base.*tiktoken encoding.*not installed"):
        prefix.tokenize("a b", "cl100k_base")
    with pytest.raises(InputError, match="Hugging Face tokenizers need transformers"):
        prefix.tokenize("a b", "meta-llama/Llama-3.1-8B")
