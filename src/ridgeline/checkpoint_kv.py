"""The KV cache a checkpoint's quantization_config asks for, as vLLM's, SGLang's and
TensorRT-LLM's default KV dtype (auto) serves it (vllm_cache_dtype.py reads vLLM's
cache_config_info label by it).

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

SGLang and TensorRT-LLM leave their KV flag at ``auto`` too, and read the checkpoint their own
way (``engine_checkpoint_kv``; read 2026):

- SGLang: ModelRunner.configure_kv_cache_dtype (python/sglang/srt/model_executor/
  model_runner.py, later mem_cache/kv_cache_dtype.py) turns --kv-cache-dtype auto into
  fp8_e4m3 where the loaded quant_config's kv_cache_quant_algo is ``FP8``, else the model's
  dtype; PR #18394 (Feb 2026) made server_args follow it. Only the ModelOpt configs carry that
  attribute (layers/quantization/modelopt_quant.py ModelOptQuantConfig): from_config takes the
  ``quantization`` block's kv_cache_quant_algo, or in config.json's flat layout an 8-bit float
  kv_cache_scheme (dynamic or not), and ModelOptFp4Config a flat kv_cache_quant_algo as well;
  ModelOptFp8Config's flat branch reads the scheme only. An older ModelOptFp8Config (2025) kept
  the algorithm as kv_cache_quant_method, which the check missed. CompressedTensorsConfig
  keeps a kv_cache_scheme but no kv_cache_quant_algo: the cache stays the model's dtype, as
  maintainers said ("directly specify --kv-cache-dtype", PR #4743, Mar 2025).
- TensorRT-LLM (PyTorch backend, trtllm-serve and the LLM API): KvCacheConfig.dtype ``auto``
  keeps the checkpoint's QuantConfig.kv_cache_quant_algo (tensorrt_llm/_torch/pyexecutor/
  model_loader.py validate_and_set_kv_cache_quant: "Using checkpoint KV quantization"), which
  _torch/model_config.py reads from hf_quant_config.json's ``quantization`` block or, since PR
  #14088 (May 2026, tensorrt_llm/quantization/modelopt_config.py read_modelopt_quant_config),
  from config.json's ModelOpt quantization_config, flat: kv_cache_quant_algo, overridden by a
  kv_cache_scheme ({float, 8} FP8, {float, 4} NVFP4, {int, 8} INT8); and from an
  llm-compressor kv_cache_scheme of 8-bit floats (update_quant_config_from_compressed_tensors,
  FP8; another scheme is refused). FP8, NVFP4 and INT8 are its fp8, fp4 and int8 caches.
- llama.cpp runs a GGUF: convert_hf_to_gguf.py writes no KV quantization, and the cache is
  -ctk/-ctv's (f16 by default), whatever the checkpoint asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

COMPRESSED_TENSORS = "compressed-tensors"
# TensorRT-LLM's KV algorithms (QuantAlgo) as formats.json's KV dtypes
TRTLLM_KV_ALGOS = {"FP8": "fp8", "NVFP4": "fp4", "INT8": "int8"}
# a ModelOpt kv_cache_scheme as TensorRT-LLM names it (modelopt_config._KV_SCHEME_DICT_MAP)
TRTLLM_KV_SCHEMES: dict[tuple[Any, Any], str] = {("float", 8): "FP8", ("float", 4): "NVFP4",
                                                 ("int", 8): "INT8"}


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


def _modelopt_blocks(qc: Any) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """(the algorithms' block, the whole config) of a ModelOpt quantization_config: the
    ``quantization`` block where it has one (hf_quant_config.json's layout), else the flat
    config itself; None for another producer's."""
    if not isinstance(qc, Mapping):
        return None
    producer = qc.get("producer")
    named = isinstance(producer, Mapping) and producer.get("name") == "modelopt"
    if not (str(qc.get("quant_method") or "").lower().startswith("modelopt") or named):
        return None
    inner = qc.get("quantization")
    return (inner if isinstance(inner, Mapping) else qc), qc


def _is_float8(scheme: Any) -> bool:
    return isinstance(scheme, Mapping) and scheme.get("type") == "float" \
        and scheme.get("num_bits") == 8


def sglang_checkpoint_kv_dtype(qc: Any) -> str:
    """The KV cache SGLang's --kv-cache-dtype auto serves for a quantization_config: 'fp8'
    where its ModelOpt config's kv_cache_quant_algo is FP8 (the ``quantization`` block's, or
    in the flat layout an 8-bit float kv_cache_scheme, and for FP4 weights a flat
    kv_cache_quant_algo); '' otherwise, compressed-tensors' kv_cache_scheme included."""
    blocks = _modelopt_blocks(qc)
    if blocks is None:
        return ""
    inner, whole = blocks
    if inner is not whole:
        algo = inner.get("kv_cache_quant_algo")
    elif _is_float8(whole.get("kv_cache_scheme")):
        algo = "FP8"
    elif "FP8" in str(whole.get("quant_algo") or "").upper():
        algo = None  # ModelOptFp8Config's flat branch reads the scheme only
    else:
        algo = whole.get("kv_cache_quant_algo")
    return "fp8" if isinstance(algo, str) and algo.upper() == "FP8" else ""


def trtllm_checkpoint_kv_dtype(qc: Any) -> str:
    """The KV cache TensorRT-LLM's kv_cache_config dtype auto keeps for a
    quantization_config: ModelOpt's kv_cache_quant_algo (a flat kv_cache_scheme over it) as
    'fp8', 'fp4' or 'int8'; 'fp8' for a compressed-tensors kv_cache_scheme of 8-bit floats;
    '' where it asks for none."""
    if isinstance(qc, Mapping) and str(qc.get("quant_method") or "").lower() == \
            COMPRESSED_TENSORS:
        return "fp8" if _is_float8(qc.get("kv_cache_scheme")) else ""
    blocks = _modelopt_blocks(qc)
    if blocks is None:
        return ""
    inner, whole = blocks
    algo = inner.get("kv_cache_quant_algo")
    scheme = whole.get("kv_cache_scheme") if inner is whole else None
    if isinstance(scheme, Mapping):
        algo = TRTLLM_KV_SCHEMES.get((scheme.get("type"), scheme.get("num_bits")), algo)
    elif isinstance(scheme, str) and scheme.upper() in TRTLLM_KV_ALGOS:
        algo = scheme
    return TRTLLM_KV_ALGOS.get(algo.upper(), "") if isinstance(algo, str) else ""


def engine_checkpoint_kv(qc: Any) -> tuple[tuple[str, str], ...]:
    """(engine, KV dtype) for each engine whose default KV dtype follows this
    quantization_config and finds a cache in it: vLLM's, SGLang's and TensorRT-LLM's auto.
    llama.cpp's cache is its own flag's, whatever the checkpoint asks for."""
    found = (("vllm", checkpoint_kv_dtype(qc)), ("sglang", sglang_checkpoint_kv_dtype(qc)),
             ("trtllm", trtllm_checkpoint_kv_dtype(qc)))
    return tuple((engine, kv) for engine, kv in found if kv)
