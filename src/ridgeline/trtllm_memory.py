"""What TensorRT-LLM allocates before it sizes the KV cache, by backend.

TensorRT-LLM gives the KV cache ``kv_cache_free_gpu_mem_fraction`` of the memory free once
everything else is in place. The PyTorch backend (trtllm-serve's default from v1.0) profiles
a forward pass of max_num_tokens first, and its default sampler keeps nothing per seat. The
TensorRT engine backend (the prebuilt-engine path, trtllm-serve's default before v1.0)
allocates its runtime buffers and its C++ decoder first, and those are sized by
``max_batch_size`` × the vocabulary: at the default 2,048 seats and Llama-3's 128,256-token
vocabulary, four fp32 buffers of 0.98 GiB each. The coefficients are data
(engines.json ``trtllm.engine_backend_buffers``), with their sources.
"""

from __future__ import annotations

from ridgeline.datafiles import load_data
from ridgeline.errors import InputError
from ridgeline.model import ModelSpec

BACKENDS = ("pytorch", "tensorrt")


def default_backend() -> str:
    return str(load_data("engines.json")["trtllm"]["backend"])


def check_backend(name: str) -> str:
    """``name`` if it is a backend ridgeline sizes, else a one-line error."""
    if name not in BACKENDS:
        raise InputError(f"unknown TensorRT-LLM backend {name!r} (expected one of "
                         f"{', '.join(BACKENDS)})")
    return name


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
