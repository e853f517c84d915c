"""ModelOpt's hf_quant_config.json: the quantization an NVIDIA ModelOpt export keeps beside its
config.json, read where config.json has no quantization_config of its own, as the engines read it.

The file is ``{"producer": {"name": "modelopt", …}, "quantization": {"quant_algo": "FP8" |
"NVFP4" | "MIXED_PRECISION" | …, "kv_cache_quant_algo": "FP8" | null, "group_size": 16,
"exclude_modules": […]}}``. ModelOpt 0.29 and before wrote the quantization there alone; 0.31
and after write it into config.json too. Each engine reads it so (read 2026):

- vLLM: get_config (vllm/transformers_utils/config.py) takes config.json's quantization_config,
  and only where it has none and the file is there (file_or_path_exists: the folder's, or the
  Hub repo's at the revision) the file's whole JSON as the quantization_config ("ModelOpt 0.29.0
  and before saves the quantization config in a separate hf_quant_config.json").
  _normalize_quantization_config (transformers_utils/model_arch_config_convertor.py; before it
  ModelConfig._parse_quant_hf_config) names the method from producer.name ``modelopt`` and the
  block's quant_algo: FP8 (FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO) modelopt, NVFP4 modelopt_fp4,
  another refused ("Unknown ModelOpt quant algo"); ModelOpt's override_quantization_method takes
  MIXED_PRECISION as modelopt_mixed.
- SGLang: ModelConfig._parse_quant_hf_config (python/sglang/srt/configs/model_config.py), where
  config.json has neither quantization_config nor compression_config, reads the file from the
  folder or the Hub (hf_hub_download), and _parse_modelopt_quant_config names the method from
  the block's quant_algo: MIXED_PRECISION modelopt_mixed (with quantized_layers, else w4afp8),
  FP4/NVFP4 modelopt_fp4, FP8 modelopt_fp8. Its ModelOpt configs load from that file
  (get_config_filenames ["hf_quant_config.json"]; from_config reads the block's
  kv_cache_quant_algo).
- TensorRT-LLM: ModelConfig.from_pretrained (tensorrt_llm/_torch/model_config.py) reads the
  file first wherever it is there, config.json's quantization_config or not ("The file is
  authoritative", warn_if_inline_diverges), through read_modelopt_quant_config (the block's
  quant_algo, kv_cache_quant_algo, group_size, exclude_modules).

ridgeline folds it in as vLLM and SGLang do: where config.json's top level has no
quantization_config, the file, whole, is its quantization_config, with quant_method
``modelopt`` whatever its producer says (SGLang and TensorRT-LLM read the block whoever wrote
it; ridgeline's one name for ModelOpt's methods, quant_algo telling them apart:
quantization.checkpoint_algo); the weights' formats (quantization.stored_formats) and each
engine's checkpoint KV (checkpoint_kv.py reads the block) follow it. Where config.json has its
own, that one stands, as in vLLM and SGLang; TensorRT-LLM would read the file, which ModelOpt
writes with the same content.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ridgeline.config_reader import spec_from_hf_config
from ridgeline.errors import InputError, shorten_path
from ridgeline.model import ModelSpec
from ridgeline.userfiles import json_object, read_text

SIDECAR = "hf_quant_config.json"
CONFIG = "config.json"


def needs_sidecar(config: Mapping[str, Any]) -> bool:
    """Whether the engines look for hf_quant_config.json beside ``config``: its top level has
    no quantization_config (null is none, as vLLM's config_dict.get reads it)."""
    return config.get("quantization_config") is None


def parse_sidecar(text: str, origin: str) -> Mapping[str, Any]:
    """hf_quant_config.json's JSON, or a one-line InputError naming ``origin``: empty, not
    JSON, not an object, or without the ``quantization`` object every engine reads the
    algorithms from (SGLang's quant_config_dict["quantization"], TensorRT-LLM's
    "'quantization' must be a dict")."""
    sidecar = json_object(text, origin, f"ModelOpt's {SIDECAR}")
    if not isinstance(sidecar.get("quantization"), dict):
        raise InputError(f"{origin} has no \"quantization\" object, where ModelOpt writes its "
                         "quant_algo and kv_cache_quant_algo")
    return sidecar


def sidecar_quantization_config(sidecar: Mapping[str, Any]) -> dict[str, Any]:
    """The quantization_config the file stands for: the file whole, as vLLM takes it, named
    ``modelopt`` (vLLM names it modelopt or modelopt_fp4 by quant_algo; ridgeline keeps the
    one method and reads quant_algo from the block)."""
    return {**sidecar, "quant_method": "modelopt"}


def with_sidecar(config: Mapping[str, Any], sidecar: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``config`` with the file as its quantization_config where it has none; else ``config``
    itself (its own stands, or there is no file)."""
    if sidecar is None or not needs_sidecar(config):
        return config
    return {**config, "quantization_config": sidecar_quantization_config(sidecar)}


def sidecar_path(path: Path) -> Path | None:
    """Where hf_quant_config.json sits for the config ``path`` names: in the folder ``path``
    is, or in the one holding a file named config.json; None for a file named otherwise (a
    renamed copy has no folder of its own to read beside) or a pipe."""
    try:
        if path.is_dir():
            return path / SIDECAR
        return path.parent / SIDECAR if path.name == CONFIG and path.is_file() else None
    except OSError:  # a name too long for a path
        return None


def read_sidecar(path: Path | None) -> Mapping[str, Any] | None:
    """The file at ``path``, parsed; None where there is no file there."""
    if path is None or not path.is_file():
        return None
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {shorten_path(path)}: {exc}") from None
    return parse_sidecar(text, shorten_path(path))


def spec_with_sidecar(config: Mapping[str, Any], sidecar: Mapping[str, Any] | None,
                      name: str) -> ModelSpec:
    """The spec of ``config`` with the file folded in (with_sidecar), its quantization_file
    naming the file where it gave the quantization_config."""
    folded = with_sidecar(config, sidecar)
    spec = spec_from_hf_config(folded, name=name)
    return spec if folded is config else replace(spec, quantization_file=SIDECAR)


def disk_name(path: Path) -> str:
    """The name a config read from ``path`` goes by: a folder's name, whole (Llama-3.1-8B,
    not its stem Llama-3), and so a config.json's folder's (…/Llama-3.1-8B/config.json:
    Llama-3.1-8B, as a Hub id is named by its repo); a file named otherwise by its stem
    (llama.json: llama). Where the path names no folder of its own (``.``, ``..``, ``/``,
    config.json in the folder you stand in), the folder's name resolved."""
    try:
        folder = path if path.is_dir() else path.parent if path.name == CONFIG else None
    except OSError:  # a name too long for a path
        folder = None
    if folder is None:
        return path.stem or "config"
    if folder.name not in ("", ".", ".."):
        return folder.name
    try:
        return folder.resolve().name or "config"
    except (OSError, RuntimeError):  # a path that loops
        return "config"


def spec_from_disk(path: Path, config: Mapping[str, Any]) -> ModelSpec:
    """The spec of the config.json read from ``path`` (a file or its folder), with the
    hf_quant_config.json beside it where config.json has no quantization_config; the file is
    not opened otherwise, as vLLM does not."""
    beside = sidecar_path(path)
    if config.get("quantization_config") == {} and beside is not None and beside.is_file():
        raise InputError(empty_config_refusal(shorten_path(beside.parent / CONFIG)))
    sidecar = read_sidecar(beside) if needs_sidecar(config) else None
    return spec_with_sidecar(config, sidecar, name=disk_name(path))


def empty_config_refusal(origin: str) -> str:
    """Why a config.json whose quantization_config is ``{}`` is refused beside an
    hf_quant_config.json: vLLM's get_config and SGLang's _parse_quant_hf_config read the file
    only where the key ``is None``, so an empty one stands, naming no quant_method, which
    vLLM's _verify_quantization reads as no quantization ("" → None): the engines would load
    the file's quantized weights as unquantized ones."""
    return (f"{origin}: quantization_config is empty ({{}}), and ModelOpt's {SIDECAR} beside "
            "it goes unread: vLLM and SGLang read that file only where config.json has no "
            "quantization_config, and read an empty one as no quantization; delete the empty "
            "quantization_config so that the engines (and ridgeline) read the file")
