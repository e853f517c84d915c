import dataclasses
import json
import sys
import types
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridgeline.prefix import (
    DEFAULT_BLOCK_SIZE,
    TOKENIZE_EXTRA,
    common_prefix_length,
    explain_lines,
    prefix_reuse,
    tokenize,
)
from tests.conftest import run_cli

SYSTEM_PROMPT = list(range(1000, 2000))  # 1,000 shared tokens


def test_default_block_size_is_vllms_16() -> None:
    assert DEFAULT_BLOCK_SIZE == 16


def test_prompts_sharing_three_leading_ids_have_a_common_prefix_of_3() -> None:
    assert common_prefix_length([1, 2, 3, 9], [1, 2, 3, 4, 5]) == 3


def test_a_6_token_match_reuses_no_block_at_block_size_16() -> None:
    result = prefix_reuse([1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 8, 9, 10])
    assert result.common_prefix_tokens == 6
    assert result.full_blocks_reused == 0
    assert result.tokens_reused == 0
    assert result.fraction_of_b_reused == 0.0
    assert result.tokens_to_recompute == 9


def test_a_1000_token_system_prompt_reuses_62_blocks_of_16() -> None:
    result = prefix_reuse([*SYSTEM_PROMPT, 1, 2, 3], SYSTEM_PROMPT + [7] * 200)
    assert result.common_prefix_tokens == 1000
    assert result.full_blocks_reused == 62
    assert result.tokens_reused == 992
    assert result.tokens_to_recompute == 208
    assert round(result.fraction_of_b_reused, 3) == 0.827


def test_the_same_1000_tokens_at_block_size_1_reuse_every_token() -> None:
    result = prefix_reuse([*SYSTEM_PROMPT, 1], [*SYSTEM_PROMPT, 2], block_size=1)
    assert result.tokens_reused == 1000


def test_a_repeated_32_token_prompt_recomputes_its_last_block_for_logits() -> None:
    prompt = list(range(32))
    result = prefix_reuse(prompt, prompt)
    assert result.common_prefix_tokens == 32
    assert result.full_blocks_reused == 1
    assert result.tokens_reused == 16
    assert result.capped_by_last_token


def test_a_33_token_prompt_inside_a_cached_40_token_one_reuses_both_full_blocks() -> None:
    result = prefix_reuse(list(range(40)), list(range(33)))
    assert result.tokens_reused == 32
    assert result.tokens_to_recompute == 1
    assert not result.capped_by_last_token


token_lists = st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=200)


@given(token_lists, token_lists, st.integers(min_value=1, max_value=64))
def test_reused_tokens_are_whole_blocks_within_the_common_prefix(
    a: list[int], b: list[int], block_size: int
) -> None:
    result = prefix_reuse(a, b, block_size)
    assert result.tokens_reused <= result.common_prefix_tokens <= min(len(a), len(b))
    assert result.tokens_reused % block_size == 0
    assert result.tokens_reused < len(b)  # the last token is always computed
    assert result.tokens_reused + result.tokens_to_recompute == len(b)
    assert 0.0 <= result.fraction_of_b_reused < 1.0


@given(token_lists, token_lists)
def test_a_smaller_block_never_reuses_less(a: list[int], b: list[int]) -> None:
    assert prefix_reuse(a, b, 8).tokens_reused >= prefix_reuse(a, b, 16).tokens_reused


@pytest.mark.parametrize(
    ("a", "b", "block_size", "word"),
    [
        ([1, 2], [1, 2], 0, "block_size"),
        ([1, 2], [1, 2], True, "block_size"),
        ([1, -2], [1, 2], 16, "token ids"),
        ([1, 2], [1, 2.0], 16, "token ids"),
        ([1, 2], [], 16, "no tokens"),
        ("hello", [1, 2], 16, "not text"),
    ],
)
def test_bad_input_is_refused_with_a_message_naming_it(
    a: Any, b: Any, block_size: Any, word: str
) -> None:
    with pytest.raises(ValueError, match=word):
        prefix_reuse(a, b, block_size)


def test_explain_lines_show_the_block_floor_and_the_fraction() -> None:
    text = "\n".join(explain_lines(prefix_reuse([*SYSTEM_PROMPT, 1], SYSTEM_PROMPT + [7] * 200)))
    assert "floor(min(1000, 1199) / 16) = 62" in text
    assert "62 x 16 = 992" in text
    assert "992 / 1200 = 82.7%" in text
    assert "1200 - 992 = 208" in text


def test_result_serialises_to_json() -> None:
    json.dumps(dataclasses.asdict(prefix_reuse([1, 2, 3], [1, 2, 4])))


# --- tokenize: fake backends only; nothing is downloaded ---


def _fake_tiktoken() -> types.ModuleType:
    module = types.ModuleType("tiktoken")
    encoding = types.SimpleNamespace(encode_ordinary=lambda text: [ord(ch) for ch in text])
    module.list_encoding_names = lambda: ["cl100k_base"]  # type: ignore[attr-defined]
    module.get_encoding = lambda name: encoding  # type: ignore[attr-defined]
    return module


def _fake_transformers(calls: list[dict[str, Any]], error: Exception | None = None) -> Any:
    def from_pretrained(name: str, **kwargs: Any) -> Any:
        calls.append({"name": name, **kwargs})
        if error is not None:
            raise error
        return types.SimpleNamespace(
            encode=lambda text, add_special_tokens: [1] * add_special_tokens + [5, 6]
        )

    module = types.ModuleType("transformers")
    module.AutoTokenizer = types.SimpleNamespace(from_pretrained=from_pretrained)  # type: ignore[attr-defined]
    return module


def test_tokenize_without_either_backend_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ValueError, match=r"pip install -e '\.\[tokenize\]'") as info:
        tokenize("hello", "meta-llama/Llama-3.1-8B")
    assert TOKENIZE_EXTRA in str(info.value) and "ridgeline[" not in str(info.value)


def test_tokenize_uses_tiktoken_for_a_tiktoken_encoding_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", _fake_tiktoken())
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert tokenize("ab", "cl100k_base") == [97, 98]


def test_tokenize_reads_hugging_face_tokenizers_from_local_files_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setitem(sys.modules, "tiktoken", _fake_tiktoken())
    monkeypatch.setitem(sys.modules, "transformers", _fake_transformers(calls))
    assert tokenize("hi", "org/model") == [1, 5, 6]
    assert tokenize("hi", "org/model", add_special_tokens=False) == [5, 6]
    assert calls[0] == {"name": "org/model", "local_files_only": True}


def test_tokenize_refuses_a_tokenizer_missing_from_the_local_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    monkeypatch.setitem(sys.modules, "transformers", _fake_transformers([], OSError("offline")))
    with pytest.raises(ValueError, match="not in the local Hugging Face cache"):
        tokenize("hi", "org/model")


def test_tokenize_with_only_tiktoken_refuses_a_hugging_face_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", _fake_tiktoken())
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ValueError, match="no such encoding"):
        tokenize("hi", "org/model")


# --- the command: token ids are digits separated by commas, nothing else ---


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "prefix", *argv)


@pytest.mark.parametrize(
    ("ids", "bad"),
    [
        ("1 2 3", "'1 2 3'"),  # int() of the spaceless text read this as 123
        ("1_000", "'1_000'"),  # int() reads Python's digit separators
        ("5,+7", "'+7'"),
        ("1,0x10", "'0x10'"),
        ("1,2.0", "'2.0'"),
        ("7,\u0661\u0662", "'\u0661\u0662'"),  # Arabic-Indic digits int() would accept
        ("1,²", "'²'"),
        ("1,-2", "'-2'"),
    ],
)
def test_a_token_list_that_is_not_plain_digits_and_commas_is_refused_naming_the_entry(
    capsys: pytest.CaptureFixture[str], ids: str, bad: str
) -> None:
    code, out, err = _cli(capsys, f"--tokens-a={ids}", "--tokens-b", "1,2,3", "--block-size", "1")
    assert code == 2 and not out
    assert len(err.splitlines()) == 1 and bad in err and "--tokens-a" in err


@pytest.mark.parametrize(("ids", "word"), [("1,,2", "empty entry"), ("", "no token ids"),
                                            ("1,", "empty entry")])
def test_an_empty_token_list_or_entry_is_refused(
    capsys: pytest.CaptureFixture[str], ids: str, word: str
) -> None:
    code, _, err = _cli(capsys, "--tokens-a", "1,2", f"--tokens-b={ids}")
    assert code == 2 and len(err.splitlines()) == 1 and word in err


def test_spaces_beside_the_commas_are_read_as_separate_ids(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _cli(capsys, "--tokens-a", "1, 2, 3", "--tokens-b", "1,2,3,9",
                        "--block-size", "1", "--json")
    assert code == 0
    assert json.loads(out)["prefix_reuse"] == dataclasses.asdict(
        prefix_reuse([1, 2, 3], [1, 2, 3, 9], 1, block_source="as given")
    )


def test_a_list_starting_with_a_minus_still_exits_2_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _cli(capsys, "--tokens-a", "-1,2", "--tokens-b", "1")
    assert code == 2 and not out and len(err.splitlines()) == 1
