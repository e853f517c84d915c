"""SGLang's own set-up of a DeepSeek Sparse Attention model (a config with index_topk:
DeepSeek-V3.2; "DeepSeek NSA" in SGLang's words), engines.json sglang.nsa: on an NVIDIA GPU
server_args pages its cache in 64-token pages whatever --page-size says, reads
--kv-cache-dtype auto as fp8_e4m3 on Blackwell and bfloat16 below, takes no cache but those
two, and keeps fp8 in FlashMLA's 656-byte records (vLLM's fp8_ds_mla); from 0.5.3 to 0.5.5
it also ran attention data-parallel over every GPU (dp_size = tp_size), whatever the flags.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ridgeline.ds_mla_cache import FP8_DS_MLA, sparse_latent
from ridgeline.errors import InputError
from ridgeline.precision import KVDtype, kv_dtype
from ridgeline.sglang_memory import sglang_data, sglang_release

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.hardware import Accelerator
    from ridgeline.model import ModelSpec

# SGLang's spellings of the caches it keeps an NSA model in (bf16 is read as bfloat16)
NSA_CACHE_SPELLINGS = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp8_e4m3": "fp8_e4m3"}


def nsa_data() -> dict[str, Any]:
    data: dict[str, Any] = sglang_data()["nsa"]
    return data


def nsa_served(model: ModelSpec, accelerator: Accelerator) -> bool:
    """Whether SGLang sets ``model`` up as DeepSeek NSA on ``accelerator``: a DeepSeek Sparse
    Attention latent on an NVIDIA GPU (its NPU branch keeps the flags as given)."""
    return sparse_latent(model) is not None and accelerator.vendor == "nvidia"


def nsa_page_size(dep: Deployment) -> int | None:
    """SGLang's page for ``dep``'s cache where its NSA set-up forces one (64), else None."""
    return int(nsa_data()["page_size"]) if nsa_served(dep.model, dep.accelerator) else None


def nsa_default_cache(accelerator: Accelerator) -> str:
    """What --kv-cache-dtype auto becomes for an NSA model: fp8_e4m3 at compute capability
    10 or more (every Blackwell), bfloat16 below (Hopper)."""
    return "fp8_e4m3" if accelerator.family == "blackwell" else "bfloat16"


def nsa_cache_name(asked: str | None, model: ModelSpec, accelerator: Accelerator) -> str | None:
    """The cache SGLang keeps ``model`` in where asked for ``asked`` (None or "auto": its
    default, ``nsa_default_cache``); None where its NSA set-up does not apply. Any cache but
    bf16, bfloat16 and fp8_e4m3 is refused, as SGLang asserts."""
    if not nsa_served(model, accelerator):
        return None
    if asked in (None, "auto"):
        return nsa_default_cache(accelerator)
    if asked in NSA_CACHE_SPELLINGS:
        return NSA_CACHE_SPELLINGS[asked]
    if kv_dtype(asked).id == "fp8" and asked != "fp8_e5m2":  # ridgeline's --kv-dtype fp8
        return "fp8_e4m3"
    raise InputError(f"SGLang keeps {model.name}, a DeepSeek Sparse Attention model, in "
                     f"bfloat16 or fp8_e4m3 only ('DeepSeek NSA only supports bf16/bfloat16 or "
                     f"fp8_e4m3 kv_cache_dtype'), not {asked}: give --kv-cache-dtype "
                     "fp8_e4m3 or bf16")


def nsa_stored_cache(cache: KVDtype, model: ModelSpec) -> KVDtype:
    """An NSA model's fp8_e4m3 cache as SGLang keeps it: FlashMLA's 656-byte records
    (NSATokenToKVPool's kv_cache_dim, vLLM's fp8_ds_mla); bfloat16 as asked."""
    return kv_dtype(FP8_DS_MLA) if cache.id == "fp8" and sparse_latent(model) else cache


def nsa_forces_dp_attention(version: str | None) -> bool:
    """Whether SGLang ``version`` (None: the newest checked) runs an NSA model's attention
    data-parallel over every GPU (0.5.3 to 0.5.5: dp_size = tp_size)."""
    rule = nsa_data()["dp_attention_forced"]
    release = sglang_release(version or str(sglang_data()["newest_checked"]))
    return sglang_release(rule["from"]) <= release < sglang_release(rule["before"])


def nsa_layout(model: ModelSpec, accelerator: Accelerator, gpus: int, stages: int,
               version: str | None) -> tuple[int, int] | None:
    """(GPUs of one data-parallel rank, ranks) where SGLang ``version`` forces DP attention
    on ``model`` over its --tp-size ``gpus``: (1, gpus), each GPU a rank; None where it does
    not (a model without DeepSeek Sparse Attention, another vendor, another release)."""
    if not nsa_served(model, accelerator) or not nsa_forces_dp_attention(version) or gpus < 2:
        return None
    if stages > 1:
        raise InputError(f"{nsa_release_words(version)} runs {model.name} with DP attention "
                         "over every GPU of the server (dp_size = tp_size); data-parallel "
                         "attention over pipeline stages is not modelled: give "
                         "--pipeline-parallel-size 1")
    return 1, gpus


def nsa_layout_problem(dep: Deployment, version: str | None) -> str:
    """Why SGLang ``version`` does not run ``dep``'s layout as laid out, or "": where it
    forces DP attention on an NSA model (``nsa_layout``), any GPU count runs as that many
    one-GPU ranks, so a layout of several GPUs a rank (TP8, attention DP4 × TP2) or of
    pipeline stages is not what it launches; plan and fit's levers leave them out."""
    if dep.engine != "sglang" or not nsa_served(dep.model, dep.accelerator) \
            or not nsa_forces_dp_attention(version) \
            or (dep.tensor_parallel_size == 1 and dep.pipeline_parallel_size == 1):
        return ""
    return (f"{nsa_release_words(version)} runs {dep.model.name}, a DeepSeek Sparse Attention "
            f"model, with DP attention over every GPU (dp_size = tp_size), each GPU a rank of "
            f"its own, not as {dep.tensor_parallel_size} GPUs a rank"
            + (f" over {dep.pipeline_parallel_size} pipeline stages"
               if dep.pipeline_parallel_size > 1 else "")
            + f": give --engine-version {_pure_tp_release()} or later for tensor parallelism")


def nsa_no_dp_problem(model: ModelSpec, gpus: Sequence[str], engine: str,
                      version: str | None) -> str:
    """Why --no-dp leaves the plan nothing to search, or "": SGLang ``version`` runs a DeepSeek
    Sparse Attention model with DP attention over every GPU of each card given
    (``nsa_layout``), so only one-GPU ranks launch there and --no-dp drops them."""
    from ridgeline.hardware import resolve_accelerator

    if engine != "sglang" or not nsa_forces_dp_attention(version) or not all(
            nsa_served(model, resolve_accelerator(g)) for g in gpus):
        return ""
    return (f"{nsa_release_words(version)} runs {model.name}, a DeepSeek Sparse Attention "
            "model, with DP attention over every GPU (dp_size = tp_size), so --no-dp leaves "
            "no layout it launches on more than one GPU: drop --no-dp, or give "
            f"--engine-version {_pure_tp_release()} or later")


def _pure_tp_release() -> str:
    """The first release that runs an NSA model's tensor parallelism as asked (0.5.6)."""
    return str(nsa_data()["dp_attention_forced"]["before"])


def nsa_release_words(version: str | None) -> str:
    """'SGLang 0.5.4', or the releases that force DP attention where none is named."""
    rule = nsa_data()["dp_attention_forced"]
    return (f"SGLang {version}" if version is not None
            else f"SGLang {rule['from']} to before {rule['before']}")


def nsa_layout_caution(model: ModelSpec, gpus: int, version: str | None,
                       asked_ranks: int | None, switch: bool) -> str:
    """What fit says where SGLang forced DP attention on an NSA model, naming the flags it
    overrode."""
    given = " ".join(flag for flag in (f"--dp-size {asked_ranks}" if asked_ranks else "",
                                       "--enable-dp-attention" if switch else "") if flag)
    overrode = "" if asked_ranks == gpus and switch else \
        f" ({given} given)" if given else " (no --dp-size given)"
    return (f"{nsa_release_words(version)} runs {model.name}, a DeepSeek Sparse Attention "
            f"model, with DP attention over all {gpus} GPUs: it sets enable_dp_attention and "
            f"dp_size = tp_size = {gpus}{overrode}, so each GPU is a rank with its own "
            "requests and cache (from 0.5.6 pure TP runs as asked)")
