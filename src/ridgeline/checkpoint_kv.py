"""The KV cache a checkpoint's quantization_config asks for, as vLLM's --kv-cache-dtype auto
serves it (vllm_cache_dtype.py reads vLLM's cache_config_info label by it).

vLLM reads a checkpoint's KV quantization two ways (vllm-project/vllm, read 2026):

- ModelOpt (quant_method ``modelopt``, ``modelopt_fp4``, …): a kv_cache_quant_algo ``FP8``
  (hf_quant_config.json's ``quantization`` block, or config.json's quantization_config) or a
  kv_cache_scheme ``{type: float, num_bits: 8, dynamic: false}`` turns auto into fp8_e4m3 when
  the engine arguments build the CacheConfig (vllm/utils/torch_utils.py
  get_kv_cache_quant_algo_string, resolve_kv_cache_dtype_string, called in
  EngineArgs.create_engine_config; PR #30785): cache_config_info then labels it fp8_e4m3.
  Another algorithm falls back to auto (the model's dtype), as vLLM warns.
- compressed-tensors (llm-compressor's kv_cache_scheme): any scheme makes each Attention layer
  set cache_config.cache_dtype to fp8 where it is auto (vllm/model_executor/layers/attention/
  attention.py Attention.__init__), in the engine's process as the model loads, after the API
  server built its metrics: cache_config_info keeps ``auto`` for an fp8 cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

COMPRESSED_TENSORS = "compressed-tensors"


def checkpoint_kv_dtype(qc: Any) -> str:
    """The KV cache dtype a quantization_config asks for where vLLM's --kv-cache-dtype is
    auto: 'fp8' for ModelOpt's kv_cache_quant_algo FP8 (or its 8-bit float, static
    kv_cache_scheme) and for any compressed-tensors kv_cache_scheme; '' where it asks for
    none, or for one vLLM falls back to auto from (ModelOpt's NVFP4 KV, a dynamic scheme)."""
    if not isinstance(qc, Mapping):
        return ""
    method = str(qc.get("quant_method") or "").lower()
    if method == COMPRESSED_TENSORS:
        return "fp8" if isinstance(qc.get("kv_cache_scheme"), Mapping) else ""
    if not method.startswith("modelopt"):
        return ""
    inner = qc.get("quantization")
    inner = inner if isinstance(inner, Mapping) else qc
    # vLLM's order: a scheme before an algorithm, the inner block before the outer
    algo = (inner.get("kv_cache_scheme") or qc.get("kv_cache_scheme")
            or inner.get("kv_cache_quant_algo") or qc.get("kv_cache_quant_algo"))
    if isinstance(algo, Mapping):
        static_fp8 = (algo.get("dynamic") is False and algo.get("num_bits") == 8
                      and algo.get("type") == "float")
        return "fp8" if static_fp8 else ""
    return "fp8" if isinstance(algo, str) and algo.lower() == "fp8" else ""


def label_hides_checkpoint_kv(quant_method: str, checkpoint_kv: str) -> bool:
    """Whether vLLM's cache_config_info reads ``auto`` for a cache the checkpoint makes fp8:
    a compressed-tensors kv_cache_scheme, applied as the engine's process loads the model (a
    ModelOpt checkpoint's is resolved before, and labelled fp8_e4m3)."""
    return bool(checkpoint_kv) and quant_method == COMPRESSED_TENSORS
