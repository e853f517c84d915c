"""Prefix caching: what an engine can reuse from one prompt when the next one arrives.

vLLM's automatic prefix caching hashes the prompt in FULL blocks of `block_size` tokens,
each hash chained on the one before, so a cache hit is the longest run of leading full
blocks that match (vllm/v1/core/kv_cache_utils.py, hash_block_tokens).  A partial block
is never a hit, and the hit stops short of the new prompt's last token, which must be
computed to get logits (kv_cache_manager.py, get_computed_blocks:
max_cache_hit_length = request.num_tokens - 1).  Not modelled: LoRA, multimodal or
cache-salt keys that also enter the hash, and eviction.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ridgeline.errors import InputError

DEFAULT_BLOCK_SIZE = 16  # prefix_reuse's block where none is given: vLLM's before 0.34
# each engine's name for the tokens in a cached block, its key in engines.json: SGLang's radix
# cache matches page by page, 1 token a page by default (and, as vLLM, never the prompt's last
# token: schedule_batch.py Req.adjust_max_prefix_ids, input_len - 1); TensorRT-LLM's block
# reuse (kv_cache_config.enable_block_reuse) works in tokens_per_block (llm_args.py
# KvCacheConfig, default 32)
BLOCK_SETTINGS = {"vllm": "block_size", "sglang": "page_size", "trtllm": "tokens_per_block"}
# the checkout's extra: no `ridgeline` on PyPI is this project
TOKENIZE_EXTRA = "pip install -e '.[tokenize]' in ridgeline's checkout"


@dataclass(frozen=True)
class PrefixReuse:
    """What prompt B (arriving second) can reuse from prompt A's cached blocks."""

    block_size: int
    prompt_a_tokens: int
    prompt_b_tokens: int
    common_prefix_tokens: int
    full_blocks_reused: int
    tokens_reused: int
    fraction_of_b_reused: float
    tokens_to_recompute: int
    capped_by_last_token: bool  # B's last token forced a whole block to be recomputed
    # the engine's name for the tokens in a block (BLOCK_SETTINGS): SGLang's page_size
    block_setting: str = "block_size"
    # whose block it is: "vLLM 0.34's default on NVIDIA GPUs", "as given" (engine_choices.engine_block_size)
    block_source: str = ""
    # why the model's set-up chose the block, where it did ("": as asked, or the default)
    block_reason: str = ""

    def explain_lines(self) -> list[str]:
        bs, common, n_b = self.block_size, self.common_prefix_tokens, self.prompt_b_tokens
        unit = "pages" if self.block_setting == "page_size" else "blocks"
        lines = [
            f"common prefix = {common} tokens (prompt A {self.prompt_a_tokens},"
            f" prompt B {n_b} tokens)",
            f"only full {unit} of {self.block_setting} = {bs} "
            f"{'token' if bs == 1 else 'tokens'}"
            + (f" ({self.block_source})" if self.block_source else "")
            + " are cached and matched;",
            *([f"  why {bs}: {self.block_reason}"] if self.block_reason else []),
            f"  the hit must leave B's last token to compute: at most {n_b} - 1 = {n_b - 1}",
            f"full {unit} reused = floor(min({common}, {n_b - 1}) / {bs})"
            f" = {self.full_blocks_reused}",
            f"tokens reused = {self.full_blocks_reused} x {bs} = {self.tokens_reused}"
            f" of {n_b} = {self.tokens_reused} / {n_b} = {self.fraction_of_b_reused:.1%}",
            f"tokens to recompute = {n_b} - {self.tokens_reused} = {self.tokens_to_recompute}",
        ]
        if self.capped_by_last_token:
            lines.append(
                f"  (B is all prefix: its last {unit[:-1]} of {bs} is recomputed to produce "
                "logits)"
            )
        return lines


def common_prefix_length(a_token_ids: Sequence[int], b_token_ids: Sequence[int]) -> int:
    """Number of leading token ids the two prompts share.

    Example: [1, 2, 3, 9] and [1, 2, 3, 4, 5] share 3.
    """
    common = 0
    for a, b in zip(a_token_ids, b_token_ids, strict=False):
        if a != b:
            break
        common += 1
    return common


def prefix_reuse(
    prompt_a_token_ids: Sequence[int],
    prompt_b_token_ids: Sequence[int],
    block_size: int = DEFAULT_BLOCK_SIZE,
    block_setting: str = "block_size",
    block_source: str = "",
) -> PrefixReuse:
    """Tokens of prompt B served from the cache after prompt A, under vLLM's block hashing.

    full blocks = floor(min(common prefix, len(B) - 1) / block_size); reused = blocks x size.
    Example: a 6-token match at block_size 16 reuses 0 blocks, 0 tokens (0%);
    a 1,000-token shared system prompt reuses 62 blocks = 992 tokens.
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise InputError(f"block_size must be a whole number >= 1, got {block_size!r}")
    _check_token_ids("prompt A", prompt_a_token_ids)
    _check_token_ids("prompt B", prompt_b_token_ids)
    n_b = len(prompt_b_token_ids)
    common = common_prefix_length(prompt_a_token_ids, prompt_b_token_ids)
    blocks = min(common, n_b - 1) // block_size
    reused = blocks * block_size
    return PrefixReuse(
        block_size=block_size,
        prompt_a_tokens=len(prompt_a_token_ids),
        prompt_b_tokens=n_b,
        common_prefix_tokens=common,
        full_blocks_reused=blocks,
        tokens_reused=reused,
        fraction_of_b_reused=reused / n_b,
        tokens_to_recompute=n_b - reused,
        capped_by_last_token=common // block_size > blocks,
        block_setting=block_setting,
        block_source=block_source,
    )


def explain_lines(result: PrefixReuse) -> list[str]:
    """The formula behind `result` with its numbers substituted, one line per step."""
    return result.explain_lines()


# tiktoken's own encodings (tiktoken.list_encoding_names()), named when it is not installed
TIKTOKEN_ENCODINGS = ("gpt2", "r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base",
                      "o200k_harmony")


def tokenize(text: str, tokenizer_name: str, add_special_tokens: bool = True) -> list[int]:
    """Token ids of `text` from a tokenizer already on this machine; never guesses one.

    A tiktoken encoding name ("cl100k_base", "o200k_base") uses tiktoken, which fetches
    its BPE file once unless cached (TIKTOKEN_CACHE_DIR); any other name is a Hugging Face
    tokenizer read with local_files_only=True.  Both are optional extras, imported here.
    `add_special_tokens` (Hugging Face only) adds BOS etc., as vLLM does for a prompt.
    """
    tiktoken = _optional_module("tiktoken")
    if tiktoken is not None and tokenizer_name in tiktoken.list_encoding_names():
        return list(tiktoken.get_encoding(tokenizer_name).encode_ordinary(text))
    if tiktoken is None and tokenizer_name in TIKTOKEN_ENCODINGS:
        raise InputError(f"cannot tokenize with {tokenizer_name!r}: it is a tiktoken encoding, "
                         f"and tiktoken is not installed. Install the extra: {TOKENIZE_EXTRA}"
                         " (or pip install tiktoken), or pass token ids directly")
    transformers = _optional_module("transformers")
    if transformers is None:
        found = "tiktoken is installed but has no such encoding; " if tiktoken else ""
        raise InputError(
            f"cannot tokenize with {tokenizer_name!r}: {found}Hugging Face tokenizers need"
            f" transformers. Install the extra: {TOKENIZE_EXTRA}"
            " (or pip install transformers / tiktoken), or pass token ids directly"
        )
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            tokenizer_name, local_files_only=True
        )
    except (OSError, ValueError) as exc:
        raise InputError(
            f"tokenizer {tokenizer_name!r} is not in the local Hugging Face cache and"
            f" ridgeline does not download; fetch it first (huggingface-cli download"
            f" {tokenizer_name}) or give a local directory ({exc.__class__.__name__})"
        ) from exc
    return list(tokenizer.encode(text, add_special_tokens=add_special_tokens))


def _optional_module(name: str) -> Any:
    """The module if installed, else None: extras are imported only when used."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _check_token_ids(which: str, token_ids: Sequence[int]) -> None:
    if isinstance(token_ids, (str, bytes)):
        raise InputError(f"{which} must be a list of token ids, not text; use tokenize() first")
    if len(token_ids) == 0:
        raise InputError(f"{which} has no tokens; a prompt needs at least one")
    for position, token_id in enumerate(token_ids):
        if isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0:
            raise InputError(
                f"{which}: token ids must be whole numbers >= 0, got {token_id!r}"
                f" at position {position}"
            )
