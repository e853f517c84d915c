"""What TensorRT-LLM allocates before it sizes the KV cache, by backend.

TensorRT-LLM gives the KV cache ``kv_cache_free_gpu_mem_fraction`` of the memory free once
everything else is in place. The PyTorch backend (trtllm-serve's default from v1.0) profiles
a forward pass of max_num_tokens first, and its default sampler keeps nothing per seat. The
TensorRT engine backend (the prebuilt-engine path, trtllm-serve's default before v1.0)
allocates its runtime buffers and its C++ decoder first, and those are sized by
``max_batch_size`` × the vocabulary: at the default 2,048 seats and Llama-3's 128,256-token
vocabulary, four fp32 buffers of 0.98 GiB each. The coefficients are data
(engines.json ``trtllm.engine_backend_buffers``), with their sources. ``trtllm_pool`` builds
the KVPool from them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ridgeline.context_length import served_positions
from ridgeline.datafiles import engine_defaults, load_data
from ridgeline.deployment import Deployment
from ridgeline.engine_choices import tokens_per_block_problem
from ridgeline.engine_windows import has_windows
from ridgeline.errors import InputError
from ridgeline.kvpool import KVPool
from ridgeline.layouts import LINEAR, MAMBA
from ridgeline.model import ModelSpec
from ridgeline.stages import Stage
from ridgeline.trtllm_transceiver import transfer_buffer_bytes
from ridgeline.vllm_memory import activation_bytes_per_token

if TYPE_CHECKING:
    from ridgeline.memory import EngineSettings

BACKENDS = ("pytorch", "tensorrt")


def default_backend() -> str:
    return str(load_data("engines.json")["trtllm"]["backend"])


def check_backend(name: str) -> str:
    """``name`` if it is a backend ridgeline sizes, else a one-line error."""
    if name not in BACKENDS:
        raise InputError(f"unknown TensorRT-LLM backend {name!r} (expected one of "
                         f"{', '.join(BACKENDS)})")
    return name


def engine_backend_refusal(model: ModelSpec) -> str:
    """Why TensorRT-LLM's TensorRT engine backend cannot serve ``model``, or "": it builds an
    engine only for an architecture tensorrt_llm/models' MODEL_MAP takes (engines.json trtllm
    ``engine_backend_models``). That map's one MLA model is DeepseekV2ForCausalLM, so
    DeepSeek-V3/R1 (DeepseekV3ForCausalLM) has no engine to build, nor GLM-4.5, gpt-oss or
    Llama 4; its recurrent models are pure Mamba and RecurrentGemma, so a hybrid of Mamba or
    linear-attention layers beside attention (Nemotron-H's 54 Mamba-2 layers, Qwen3-Next's
    36 Gated DeltaNet, Jamba) has none either. The PyTorch backend serves them all."""
    if model.architectures_named and \
            model.architecture in engine_defaults("trtllm")["engine_backend_models"]["architectures"]:
        return ""
    served = ("trtllm-serve serves it on the PyTorch backend (--backend pytorch, the default "
              "from v1.0)")
    if not model.architectures_named:
        return (f"TensorRT-LLM's TensorRT engine backend (--backend tensorrt) picks its engine "
                f"model by config.json's architectures, and {model.name}'s lists none: name "
                "one in the config, or serve it on the PyTorch backend (--backend pytorch, the "
                "default from v1.0)")
    recurrent = model.count(mixer=MAMBA) + model.count(mixer=LINEAR)
    if recurrent:
        kind = "Mamba" if model.count(mixer=MAMBA) else "linear-attention"
        return (f"TensorRT-LLM's TensorRT engine backend (--backend tensorrt) builds no "
                f"{model.architecture} ({model.name}, {recurrent} {kind} "
                "layers beside attention): its engine models (tensorrt_llm/models) hold pure "
                "Mamba and RecurrentGemma only; trtllm-serve serves this hybrid on the PyTorch "
                "backend (--backend pytorch, the default from v1.0)")
    mla = model.attention is not None and model.attention.mla is not None
    return (f"TensorRT-LLM's TensorRT engine backend (--backend tensorrt) builds no "
            f"{model.architecture} ({model.name}): its engine models (tensorrt_llm/models "
            "MODEL_MAP) do not take that architecture"
            + (" (their one MLA model is DeepseekV2ForCausalLM)" if mla else "")
            + f"; {served}")


def trtllm_ssm_dtype(model: ModelSpec) -> str:
    """The dtype TensorRT-LLM keeps ``model``'s SSM state in (engines.json trtllm
    ``ssm_cache_dtype``): kv_cache_config.mamba_ssm_cache_dtype's default 'auto' reads the
    config's mamba_ssm_cache_dtype where it names one, else its torch_dtype; mamba_ssm_dtype,
    which ModelSpec.state_dtype also reads, is not read. Nemotron-H (bf16): bf16."""
    return model.state_dtype if model.ssm_cache_dtype_named else model.dtype


def flash_mla_block(model: ModelSpec, family: str, backend: str | None = None) -> int | None:
    """The tokens_per_block TensorRT-LLM's PyTorch backend forces for FlashMLA (engines.json
    trtllm.flash_mla): 64 for an MLA model whose cached latent is 576 wide (kv_lora_rank 512 +
    qk_rope_head_dim 64: DeepSeek-V3, Kimi K2) on a card of ``family`` hopper (SM 9.0), over
    whatever tokens_per_block was asked, in 1.0 as in 1.2; None elsewhere (an A100, a B200,
    Llama, the TensorRT engine backend). DeepSeek-V3 on an H200: its 163,840-token context
    takes 2,560 blocks of 64, not 5,120 of 32."""
    d = engine_defaults("trtllm")["flash_mla"]
    mla = None if model.attention is None else model.attention.mla
    if mla is None or (backend or default_backend()) not in d["backends"]:
        return None
    wide = mla.kv_lora_rank + mla.qk_rope_head_dim == int(d["latent_width"])
    return int(d["tokens_per_block"]) if wide and family in d["families"] else None


def tokens_per_block(dep: Deployment, asked: int | None = None,
                     backend: str | None = None) -> int:
    """The tokens_per_block TensorRT-LLM pages ``dep``'s cache in: FlashMLA's 64 where it
    applies (``flash_mla_block``), else what was asked, else the default 32."""
    return flash_mla_block(dep.model, dep.accelerator.family, backend) or asked \
        or int(engine_defaults("trtllm")["tokens_per_block"])


def flash_mla_caution(dep: Deployment, asked: int | None, backend: str | None = None) -> str:
    """What to say where --tokens-per-block asked TensorRT-LLM for a block FlashMLA overrides
    (``flash_mla_block``), or ""."""
    forced = flash_mla_block(dep.model, dep.accelerator.family, backend)
    if asked is None or forced is None or asked == forced:
        return ""
    return (f"TensorRT-LLM pages {dep.model.name}'s MLA cache in blocks of {forced} on "
            f"{dep.accelerator.id} (FlashMLA on SM 9.0), whatever tokens_per_block asks: "
            f"priced at {forced}, not the {asked} asked")


def _coefficients() -> dict[str, float]:
    data = load_data("engines.json")["trtllm"]["engine_backend_buffers"]
    return {k: float(v) for k, v in data.items() if not k.startswith("_") and k != "source"}


def engine_buffer_bytes(model: ModelSpec, max_batch_size: int, max_seq_len: int,
                        decoder: bool = True) -> float:
    """The TensorRT engine backend's runtime buffers and decoder workspaces on each GPU:
    4 vocabulary-sized fp32 buffers a seat (the runtime's logits; the decoder's logits copy,
    penalty workspace and top-k log-probs), the top-k scratch, and about 15 [seat,
    max_seq_len] 4-byte buffers (Llama-3.1-8B at 2,048 seats and a max_seq_len of 2,048:
    3.91 + 0.13 + 0.23 = 4.27 GiB; the [seat, max_seq_len] part grows with the length the
    engine was built for, 1.6 GiB more at 16,384). Without the ``decoder`` (a pipeline stage
    before the last): the runtime's share, one vocabulary buffer and 6 of the 15."""
    c = _coefficients()
    vocab = c["runtime_vocab_buffers"] + (c["decoder_vocab_buffers"] if decoder else 0)
    rows = c["runtime_seq_len_buffers"] + (c["decoder_seq_len_buffers"] if decoder else 0)
    per_seat = vocab * c["logit_bytes"] * model.vocab_size + rows * 4 * max_seq_len \
        + (c["topk_scratch_bytes_per_seat"] if decoder else 0)
    return max_batch_size * per_seat


def lm_head_output_bytes(model: ModelSpec, max_batch_size: int, tensor_parallel_size: int) -> float:
    """The engine's activations hold at least the lm_head's bf16 output for every seat (its
    generation profile lets max_batch_size rows through): seats × vocab ÷ TP × 2 B."""
    return max_batch_size * model.vocab_size / tensor_parallel_size \
        * _coefficients()["lm_head_output_bytes"]


# #12185's pooled state is not modelled: only 1.3/1.4 rc pre-releases have it, past the
# releases --engine-version takes for trtllm (engines.json trtllm.releases: 1.0 to 1.2)
def seat_state_bytes(dep: Deployment, max_batch_size: int, stage: Stage | None = None) -> float:
    """The recurrent state TensorRT-LLM's Python Mamba cache manager holds on each GPU from
    start-up, in the releases ridgeline models (to 1.2): conv_states and ssm_states are
    ``torch.empty([layers, max_batch_size, ...])`` (mamba_cache_manager.py, MambaCacheManager
    .__init__), built with the estimating KV manager, so the profiled peak holds them and
    cal_max_tokens gives the cache (total − peak + the estimating KV) × the fraction: every
    seat's state comes out before the fraction. After 1.2 the state moved into the KV pool,
    a block a request (PR #12185, 2026-03-13). Nemotron-H-56B on one H100 (bf16 state):
    2,048 seats × 438.3 MiB = 876.7 GiB; 0 for a model without recurrent layers."""
    from ridgeline.capacity import state_bytes_per_gpu  # the step-cost module: heavy

    share = 1.0 if stage is None else stage.kv_share
    return max_batch_size * state_bytes_per_gpu(dep) * share


def trtllm_pool(dep: Deployment, s: EngineSettings, total_bytes: float, weight_bytes: float,
                non_torch: float, kv_bytes_per_token: float, stage: Stage | None) -> KVPool:
    """TensorRT-LLM: kv_cache_free_gpu_mem_fraction of the memory free once the weights, the
    CUDA context, the profiled forward pass and (the engine backend) its per-seat buffers are
    in place, in blocks of tokens_per_block (FlashMLA's 64 on Hopper: ``tokens_per_block``);
    a disaggregated pool's KV transfer buffers (cache_transceiver_config:
    trtllm_transceiver.py) before the fraction on the PyTorch backend, after it on the engine
    backend."""
    d = engine_defaults("trtllm")
    block = s.block_size
    if block is not None and tokens_per_block_problem(block):
        raise InputError(tokens_per_block_problem(block))
    seqs = s.max_num_seqs or int(d["max_batch_size"])
    tokens = s.max_num_batched_tokens or int(d["max_num_tokens"])
    forward = tokens * activation_bytes_per_token(dep)
    peak, buffers = forward, 0.0
    engine_backend = (s.backend or default_backend()) == "tensorrt"
    if engine_backend and (refusal := engine_backend_refusal(dep.model)):
        raise InputError(refusal)
    block = tokens_per_block(dep, s.block_size, s.backend)  # FlashMLA's 64 over any asked
    context = s.max_model_len or served_positions(dep.model, dep.engine) or 131072
    transfer = 0.0 if s.cache_transceiver is None else \
        transfer_buffer_bytes(s.cache_transceiver, kv_bytes_per_token, block, context)
    if engine_backend:
        last = stage is None or stage.last  # the decoder and the lm_head: the last stage's
        if last:
            peak = max(forward, lm_head_output_bytes(dep.model, seqs, dep.tensor_parallel_size))
        buffers = engine_buffer_bytes(dep.model, seqs, context, decoder=last)
    free_rest = s.gpu_memory_utilization or float(d["kv_cache_free_gpu_mem_fraction"])
    return KVPool("trtllm", total_bytes, 1.0, weight_bytes, peak, non_torch, 0.0, free_rest,
                  kv_bytes_per_token, block, seqs, tokens, forward_bytes=forward,
                  stage=stage, seat_buffer_bytes=buffers,
                  seat_state_bytes=seat_state_bytes(dep, seqs, stage), token_cap=s.max_total_tokens or 0,
                  windows_apart=has_windows(dep),  # windows counted whole (engine_windows.py)
                  transfer_buffer_bytes=transfer, transfer_after_fraction=engine_backend)
