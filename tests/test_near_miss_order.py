"""An unknown model or accelerator name lists the closest known ids best first, in the
order difflib ranks the aliases, so a one-letter slip names its intended id first."""

from __future__ import annotations

import difflib
import re

import pytest

from ridgeline.catalog import normalise, resolve_name
from ridgeline.errors import InputError

TABLE = {"llama-3-8b": "llama-3-8b", "llama-3.1-8b": "llama-3.1-8b",
         "llama-3.1-70b": "llama-3.1-70b", "llama-3.1-405b": "llama-3.1-405b",
         "llama-3.2-3b": "llama-3.2-3b"}


def suggestions(name: str) -> list[str]:
    with pytest.raises(InputError) as caught:
        resolve_name(name, TABLE, "model")
    found = re.search(r"closest: (.*)$", str(caught.value))
    assert found is not None
    return found.group(1).split(", ")


def test_a_doubled_letter_names_its_model_first() -> None:
    named = suggestions("llama-3.1-8bb")
    ranked = difflib.get_close_matches(normalise("llama-3.1-8bb"), list(TABLE), n=5,
                                       cutoff=0.5)
    assert named == [TABLE[a] for a in ranked]
    assert named[0] == "llama-3.1-8b"


def test_an_id_reached_by_two_aliases_is_named_once() -> None:
    table = {**TABLE, "meta-llama-llama-3.1-8b": "llama-3.1-8b"}
    with pytest.raises(InputError) as caught:
        resolve_name("llama-3.1-8bb", table, "model")
    named = str(caught.value).split("closest: ")[1].split(", ")
    assert len(named) == len(set(named))
    assert named[0] == "llama-3.1-8b"
