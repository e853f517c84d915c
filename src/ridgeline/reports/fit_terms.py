"""Each engine's own words in `ridgeline fit`'s output: vLLM's model runner, the flag that
caps a pool's tokens, what an engine calls its seats, how it is told to keep an fp8 KV cache
or a context length (engines.json ``cli``), and whether the pool is llama.cpp's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ridgeline.datafiles import engine_defaults
from ridgeline.hardware import dies_added
from ridgeline.memory import KVPool
from ridgeline.units import GIB, fmt_binary_bytes, plural

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment


def runner_label(p: KVPool) -> str:
    """vLLM's GPU model runner, as the header names it."""
    return "Model Runner V2" if p.runner == "MRV2" else p.runner or "V1"


def cap_flag(p: KVPool) -> str:
    """The engine's own name for the cap on its pool's tokens."""
    return "kv_cache_config.max_tokens" if p.engine == "trtllm" else "--max-total-tokens"


def per_gpu(p: KVPool, device: str = "GPU") -> str:
    """What a row's "per GPU" counts: a card, or where the runtime lists the card as several
    devices (an MI250's two GCDs under vLLM), the card with its devices' figures added;
    ``device`` the card's noun (Accelerator.device_noun: a TPU's "per chip")."""
    return f"per {device}" + dies_added(p.runtime_devices)


@dataclass(frozen=True)
class RuntimeWords:
    """What a card's runtime calls the memory fit's rows name: its context, its collectives
    library and its captured graphs ("CUDA context", "NCCL", "CUDA graphs" on NVIDIA)."""

    context: str
    collectives: str
    graphs: str


# ROCm's on AMD; a TPU's XLA runtime (PJRT) over ICI; a Gaudi's HPU runtime, HCCL and HPU graphs
RUNTIME_WORDS = {"amd": RuntimeWords("HIP context", "RCCL", "HIP graphs"),
                 "tpu": RuntimeWords("XLA/PJRT runtime", "ICI collectives", "XLA graphs"),
                 "gaudi": RuntimeWords("HPU runtime", "HCCL", "HPU graphs")}
CUDA_WORDS = RuntimeWords("CUDA context", "NCCL", "CUDA graphs")


def runtime_words(vendor: str | None, family: str = "") -> RuntimeWords:
    """The runtime's words for a card of ``vendor`` and ``family``: an MI300X's "HIP context",
    "RCCL", "HIP graphs"; a TPU's and a Gaudi's their own; NVIDIA's (and any other's) CUDA's."""
    return RUNTIME_WORDS.get(family) or RUNTIME_WORDS.get(vendor or "") or CUDA_WORDS


def sglang_pool_words(pages: int, page_size: int) -> str:
    """SGLang's pool as its start-up log gives it: a token count, max_total_num_tokens (pages ×
    page_size, rounded down to whole pages: model_runner.py init_memory_pool), in pages of
    --page-size tokens (1 by default): '389,351 tokens (SGLang's max_total_num_tokens; page
    size 1)'."""
    pages_note = f": {pages:,} pages" if page_size > 1 else ""
    return (f"{pages * page_size:,} tokens (SGLang's max_total_num_tokens; page size "
            f"{page_size}{pages_note})")


def conversation_size(n_bytes: float, gib: str = " GiB") -> str:
    """A conversation's bytes as fit prints them: GiB to three decimals (``gib`` the unit
    after it, "" in a table whose header names GiB), but under 0.0005 GiB, whose thousandths
    read 0.000, in its own unit (Llama-3.1-8B's 1-token conversation under SGLang, whose
    page is 1 token: '128 KiB', not '0.000')."""
    if n_bytes >= GIB / 2000 or n_bytes == 0:
        return f"{n_bytes / GIB:,.3f}{gib}"
    return fmt_binary_bytes(n_bytes)


def is_llamacpp(p: KVPool) -> bool:
    return p.engine.startswith("llama.cpp")


def logs_concurrency_tokens(p: KVPool, context: int) -> bool:
    """Whether vLLM's logged token count for one full-attention KV-cache group (v0.24+:
    maximum concurrency × max_model_len) is not blocks × block size, as it is where
    max_model_len is no multiple of the scheduler's block (Llama-3.1-8B on an H100 at 17
    tokens: 27,975 blocks of 16, 13,987.5 conversations of 17, 237,787 tokens logged; under
    -dcp N the block is N × --block-size)."""
    g = p.groups
    return g is not None and not (g.count > 1 or g.windows or g.states) \
        and p.logged_tokens(context) != p.blocks * p.block_size


def cache_all_on_host(p: KVPool) -> bool:
    """llama.cpp with no layer that keeps a growing cache on the GPU (-ngl 0): the cells are
    host memory's, and what the GPU has left holds none of them."""
    return is_llamacpp(p) and p.split_device is None and bool(p.host_cells) \
        and not p.kv_bytes_per_token


def host_cache_unbounded(p: KVPool, d: Deployment) -> bool:
    """The cache all in host memory (-ngl 0) and the host's RAM not given (--host-memory-gib):
    nothing ridgeline knows bounds its conversations but the GPU's compute-buffer mask (24
    million cells for llama-3.1-8b on an RTX 4090, 23 GiB of it: terabytes of host cache),
    which no host reaches, so fit counts none."""
    return cache_all_on_host(p) and (d.offload is None or d.offload.host_memory_bytes is None)


def held_label(context: int) -> str:
    """What fit's batch figure counts, as its line names it: conversations of the whole
    context, each holding its full length's blocks, at once ("conversations of 32,768 tokens
    at once"). Not a cap on the running batch: shorter requests hold fewer blocks, and vLLM
    admits a request on its prompt, so simulate's batch can pass it (``batch_past_fit``)."""
    return f"conversations of {context:,} {plural(context, 'token')} at once"


def seats_name(p: KVPool) -> str:
    """What the engine calls its seats (candidate.ENGINE_KNOB_NAMES); llama-server's slots."""
    from ridgeline.candidate import ENGINE_KNOB_NAMES

    return "slots (-np)" if is_llamacpp(p) else ENGINE_KNOB_NAMES.get(
        p.engine, ENGINE_KNOB_NAMES["vllm"])[0]


def _cli(p: KVPool) -> dict[str, str]:
    """The engine's launch flags (engines.json ``cli``); vLLM's for an engine without any."""
    cli: dict[str, str] = engine_defaults(p.engine).get("cli") or engine_defaults("vllm")["cli"]
    return cli


def fp8_kv_words(p: KVPool, version: str | None = None) -> str:
    """How the engine at ``version`` (None: the newest modelled) is told to keep an fp8 KV
    cache: vLLM's --kv-cache-dtype fp8 (fp8_e5m2 before 0.4.1), SGLang's --kv-cache-dtype
    fp8_e4m3 (fp8_e5m2 before 0.4.2: launch_commands.kv_fp8_word); TensorRT-LLM's is no
    flag but kv_cache_config's dtype in the YAML trtllm-serve reads with --config (its PyTorch
    backend), which ridgeline's --config reads too (cli_config_file), or the prebuilt
    engine's quantization (the TensorRT engine backend)."""
    cli = _cli(p)
    if "kv_fp8_config" in cli:
        return (f"a TensorRT engine built with {cli['kv_fp8_engine']}" if p.engine_buffers
                else f"--config FILE with {cli['kv_fp8_config']}")
    from ridgeline.reports.launch_commands import kv_fp8_word

    return f"{cli['kv_dtype']} {kv_fp8_word(cli, version)}"


def context_lever(p: KVPool, context: int, target: int) -> str:
    """The longest-context lever in the engine's own setting, as pasted: vLLM's
    --max-model-len 5968, SGLang's --context-length, TensorRT-LLM's --max_seq_len;
    llama-server's -c, the cells the ``target`` conversations share (-c 8192 for 2 of 4,096)."""
    holds = f"the longest that holds {target:,}"
    if is_llamacpp(p):
        return f"-c {context * target} ({target:,} × {context:,} tokens, {holds})"
    return f"{_cli(p)['max_len']} {context} ({holds})"
