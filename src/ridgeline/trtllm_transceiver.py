"""TensorRT-LLM's KV transfer buffer: what a disaggregated pool's cache_transceiver_config
takes from the memory the KV cache would have had.

The C++ transceiver (CacheTransBufferManager) allocates its send and receive buffers when the
executor starts, before the KV cache is sized. Each buffer holds, per layer, the tokens of
``max_tokens_in_buffer`` (at most the layer's attention window, rounded up to whole blocks)
plus one more block, at the cache's bytes per token; without ``max_tokens_in_buffer``,
TRTLLM_KVCACHE_TRANSFER_BUFFER_SIZE (512 MiB). One send and one receive buffer by default:
Llama-3.1-8B's bf16 cache (128 KiB a token) at max_tokens_in_buffer 8,192 and max_seq_len
131,072 holds (8,192 + 32) × 128 KiB = 1.00 GiB a buffer, 2.01 GiB both. The PyTorch backend
profiles with the transceiver in place, so the buffers come out of what its fraction applies
to; the TensorRT engine backend subtracts them after the fraction (extraCostMemory). The
numbers and their sources are data (engines.json trtllm.cache_transceiver).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ridgeline.datafiles import load_data
from ridgeline.errors import InputError, shorten
from ridgeline.flag_json import json_object

FLAG = "--cache-transceiver-config"


def transceiver_data() -> dict[str, Any]:
    found: dict[str, Any] = load_data("engines.json")["trtllm"]["cache_transceiver"]
    return found


@dataclass(frozen=True)
class CacheTransceiver:
    """A pool's cache_transceiver_config, as ridgeline prices it: its backend (DEFAULT, UCX,
    NIXL, MPI, MOONCAKE) and ``max_tokens_in_buffer`` (None: the 512 MiB default buffer)."""

    backend: str
    max_tokens_in_buffer: int | None = None

    def describe(self) -> str:
        tokens = ("TRTLLM_KVCACHE_TRANSFER_BUFFER_SIZE's default" if self.max_tokens_in_buffer
                  is None else f"max_tokens_in_buffer {self.max_tokens_in_buffer:,}")
        return f"backend {self.backend}, {tokens}"


def parse_transceiver(text: str) -> CacheTransceiver | None:
    """--cache-transceiver-config's JSON (the YAML's mapping), checked as the LLM API checks
    it; None where ``backend`` is null, which turns the transceiver off. A field that
    changes the memory and that ridgeline does not price is refused by name."""
    d = transceiver_data()
    value = json_object(text, FLAG, '{"backend": "UCX", "max_tokens_in_buffer": 8192}')
    for field, given in value.items():
        if field in ("backend", "max_tokens_in_buffer") or field in d["ignored_fields"]:
            continue
        if field in d["priced_at"] and given in d["priced_at"][field]:
            continue
        raise InputError(f"cache_transceiver_config.{field}: {given!r} is not modelled by "
                         "ridgeline (it changes the transfer buffers' memory); "
                         + d["priced_note"])
    tokens = value.get("max_tokens_in_buffer")  # checked with the transceiver off too, as
    # the LLM API's config model checks each field it is given
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)
                               or tokens < 1):
        raise InputError(f"cache_transceiver_config.max_tokens_in_buffer must be a whole "
                         f"number of tokens, at least 1; got {shorten(repr(tokens))}")
    backend = value.get("backend")
    if backend is None:
        return None
    if backend not in d["backends"]:
        raise InputError(f"cache_transceiver_config.backend must be one of "
                         f"{', '.join(d['backends'])}; got {shorten(repr(backend))}")
    return CacheTransceiver(str(backend), tokens)


def transfer_buffer_bytes(t: CacheTransceiver, kv_bytes_per_token: float,
                          tokens_per_block: int, max_seq_len: int) -> float:
    """The transceiver's buffers on one GPU (CacheTransBufferManager::preAllocBufferSize):
    (min(max_seq_len rounded up to blocks, max_tokens_in_buffer) + one block) × the cache's
    bytes per token, or the 512 MiB default, × (send + receive buffers). TensorRT-LLM's
    PyTorch backend gives every layer a window of max_seq_len (engine_windows.py), so one
    window size. A ``max_tokens_in_buffer`` that is not whole blocks stops it at start-up."""
    d = transceiver_data()
    buffers = int(d["send_buffers"]) + int(d["recv_buffers"])
    if t.max_tokens_in_buffer is None:
        return float(d["default_buffer_bytes"]) * buffers
    if t.max_tokens_in_buffer % tokens_per_block:
        raise InputError(f"cache_transceiver_config.max_tokens_in_buffer "
                         f"{t.max_tokens_in_buffer:,} is not a multiple of tokens_per_block "
                         f"{tokens_per_block}: TensorRT-LLM stops at start-up "
                         "(CacheTransBufferManager checks maxNumTokens % tokensPerBlock == 0)")
    window = math.ceil(max_seq_len / tokens_per_block) * tokens_per_block
    tokens = min(window, t.max_tokens_in_buffer) + int(d["extra_blocks"]) * tokens_per_block
    return tokens * kv_bytes_per_token * buffers


def buffer_tokens(longest_prompt: int, tokens_per_block: int) -> int:
    """The max_tokens_in_buffer a split's pool is launched with: the load's longest prompt, as
    the docs advise, rounded up to whole blocks, which the transceiver requires."""
    return max(1, math.ceil(longest_prompt / tokens_per_block)) * tokens_per_block


def split_transceiver(engine: str, longest_prompt: int,
                      tokens_per_block: int | None = None) -> CacheTransceiver | None:
    """The transceiver plan's printed TensorRT-LLM split pools run with (engines.json
    trtllm.cli.disaggregated.role_config), its buffer whole blocks of the pools'
    ``tokens_per_block`` (the default 32; FlashMLA's 64: trtllm_memory.tokens_per_block), None
    for another engine: both roles' settings are the same."""
    if engine != "trtllm":
        return None
    engines = load_data("engines.json")["trtllm"]
    role = engines["cli"]["disaggregated"]["role_config"]["decode"]["cache_transceiver_config"]
    block = tokens_per_block or int(engines["tokens_per_block"])
    return CacheTransceiver(str(role["backend"]), buffer_tokens(longest_prompt, block))
