"""When vLLM's V0 engine chunks a prompt, and when it runs one whole.

Left unset, V0's chunked prefill is on past 32K tokens of context (``use_long_context``,
"to avoid OOM errors in the initial memory profiling phase"), from v0.5.3, for the launches
and models its EngineArgs does not exempt; an exempt one, or one at 32K or fewer, runs each
prompt whole, so its token budget is max(max_model_len, 2048) and its profiling pass that
many tokens (vllm/engine/arg_utils.py EngineArgs.create_engine_config, from v0.9
_set_default_args_v0; read in the PyPI source tarballs 0.5.2, 0.5.3, 0.5.4, 0.5.5, 0.6.0 to
0.6.6, 0.7.0 to 0.7.3, 0.8.0, 0.8.5, 0.9.0 to 0.9.2, 0.10.0 and 0.10.1). The exemptions, by
release:

- a sliding window (``model_config.get_sliding_window() is not None``), every release. A
  model with full and windowed layers interleaved has none from 0.6.5 to 0.10.0: ModelConfig
  deletes the config's sliding_window and runs it as full attention ("the scheduler and the
  model treat it as full attention"), for Gemma 2 and Cohere2 (from 0.6.5), Gemma 3 (0.8.0)
  and any config naming sliding_window_pattern (0.9.0: EXAONE 4). Before 0.6.5 it turns Gemma 2's
  window off and caps max_model_len to it (4,096), so it never reaches 32K; from 0.10.1
  ModelConfig keeps the window, and the exemption holds.
- speculative decoding (a draft model or n-gram configured), every release;
- layers without a sequence length, Mamba's and the like
  (``contains_seqlen_agnostic_layers``), 0.5.4 to 0.6.2;
- --enable-prefix-caching, 0.5.3 to 0.6.0;
- a multimodal model (``is_multimodal_model``: ridgeline's, a config with a vision tower),
  from 0.6.2;
- MLA (``model_config.use_mla``: DeepSeek-V2/V3; Kimi K2's model type from 0.10.0), from
  0.8.0. In 0.7.1 to 0.7.3 VllmConfig turned chunked prefill off for MLA only after
  SchedulerConfig had set the chunked budget (2,048 tokens), so the pass profiles that budget
  and the scheduler admits no prompt longer than it (``_get_prompt_limit``): the budget is
  modelled, the limit is not;
- a device that is not CUDA (``device_type == "cuda"``, from 0.8.0
  ``current_platform.is_cuda()``): TPU, XPU, Gaudi; ROCm from 0.6.5 (``not is_rocm()``).

LoRA, prompt adapters and pooling models (from 0.6.5) are exempt too, and not modelled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ridgeline.datafiles import engine_defaults
from ridgeline.layouts import LINEAR, MAMBA, SLIDING
from ridgeline.vllm_memory import VLLMAccounting, parse_version

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.memory import EngineSettings

V0_CHUNKED_ABOVE = 32 * 1024  # use_long_context = max_model_len > 32768
LONG_CONTEXT_CHUNKING_FROM = (0, 5, 3)  # absent from 0.5.2's arg_utils.py
# model types whose interleaved window vLLM V0 turns off or runs as full attention, from the
# release that first names them, until WINDOW_KEPT_FROM
INTERLEAVED_AS_FULL = {"gemma2": (0, 5, 3), "cohere2": (0, 6, 5), "gemma3": (0, 8),
                       "gemma3_text": (0, 8), "exaone4": (0, 9)}
WINDOW_KEPT_FROM = (0, 10, 1)
SEQLEN_AGNOSTIC_EXEMPT = ((0, 5, 4), (0, 6, 3))  # [from, until)
PREFIX_CACHING_EXEMPT = ((0, 5, 3), (0, 6, 1))
MULTIMODAL_EXEMPT_FROM = (0, 6, 2)
MLA_EXEMPT_FROM = (0, 8)
ROCM_EXEMPT_FROM = (0, 6, 5)
CUDA_VENDORS = ("nvidia", "measured", "")  # a measured or custom card is taken as CUDA
NON_CUDA = {"google": "TPU", "intel": "XPU or Gaudi"}


def v0_exemption(dep: Deployment, s: EngineSettings, version: str) -> str:
    """Why vLLM ``version``'s V0 engine keeps chunked prefill off past 32K tokens of context
    for this launch, as a clause ("for a sliding-window model"), or "" where it turns it on:
    Mistral-7B-v0.1 (a 4,096-token window on every layer) is exempt on every release, a dense
    Llama on none; Gemma-3-27B (multimodal) from 0.6.2."""
    v = parse_version(version)
    if v < LONG_CONTEXT_CHUNKING_FROM:
        return "before v0.5.3, which first turned it on"
    model = dep.model
    vendor = dep.accelerator.vendor
    if vendor == "amd" and v >= ROCM_EXEMPT_FROM:
        return "on ROCm (from v0.6.5 it turns it on for CUDA only)"
    if vendor not in (*CUDA_VENDORS, "amd"):
        return f"off CUDA ({NON_CUDA.get(vendor, vendor)}; it turns it on for CUDA only)"
    if s.speculative_decoding:
        return "with speculative decoding"
    if v >= MULTIMODAL_EXEMPT_FROM and model.vision_params:
        return "for a multimodal model (from v0.6.2)"
    if v >= MLA_EXEMPT_FROM and model.attention is not None and model.attention.mla:
        return "for an MLA model (from v0.8)"
    if v0_keeps_window(model.model_type, v) and model.count(mixer=SLIDING):
        return "for a sliding-window model"
    if SEQLEN_AGNOSTIC_EXEMPT[0] <= v < SEQLEN_AGNOSTIC_EXEMPT[1] \
            and (model.count(mixer=MAMBA) or model.count(mixer=LINEAR)):
        return "for a model with Mamba layers (v0.5.4 to v0.6.2)"
    if PREFIX_CACHING_EXEMPT[0] <= v < PREFIX_CACHING_EXEMPT[1] and s.prefix_caching:
        return "with --enable-prefix-caching (v0.5.3 to v0.6.0)"
    return ""


def v0_keeps_window(model_type: str, version: tuple[int, ...]) -> bool:
    """Whether V0 at ``version`` keeps a windowed model's sliding_window (so exempts it): not
    for an interleaved model it runs as full attention (Gemma 3 from 0.8.0 until 0.10.1)."""
    since = INTERLEAVED_AS_FULL.get(model_type)
    return since is None or not since <= version < WINDOW_KEPT_FROM


def v0_runs_whole(dep: Deployment, s: EngineSettings, acc: VLLMAccounting,
                  max_model_len: int) -> bool:
    """Whether vLLM ``acc`` runs a prompt whole, chunked prefill off: --no-enable-chunked-
    prefill where the release honours it (``v1_honours_off``; V0 always), else its V0 engine
    at 32K tokens of context or fewer, or past them where it exempts the launch
    (``v0_exemption``), so that its token budget must hold max_model_len."""
    if s.no_chunked_prefill and v1_honours_off(acc):
        return True
    if acc.engine != "V0":
        return False
    return max_model_len <= V0_CHUNKED_ABOVE or bool(v0_exemption(dep, s, acc.version))


def v1_honours_off(acc: VLLMAccounting) -> bool:
    """Whether vLLM ``acc`` keeps --no-enable-chunked-prefill off: its V0 engine always (an
    explicit False skips ``use_long_context``), V1 from 0.12 (engines.json
    vllm.chunked_prefill_off; before, V1 set it back on for a generative model)."""
    if acc.engine == "V0":
        return True
    since = engine_defaults("vllm")["chunked_prefill_off"]["v1_honoured_from"]
    return parse_version(acc.version) >= parse_version(since)


def chunking_kept_note(acc: VLLMAccounting) -> str:
    """Why --no-enable-chunked-prefill changes nothing on vLLM ``acc`` (V1 before 0.12, which
    turned chunked prefill back on for a generative model), or "" where it is honoured."""
    if v1_honours_off(acc):
        return ""
    since = engine_defaults("vllm")["chunked_prefill_off"]["v1_honoured_from"]
    return (f"--no-enable-chunked-prefill (vLLM {acc.version}'s V1 engine turns chunked prefill "
            f"back on for a generative model, as every V1 release before {since} did: sized and "
            "scheduled in chunks)")


def whole_budget_refusal(tokens: int, length: int) -> str:
    """vLLM's start-up refusal of a token budget below max_model_len with chunked prefill off
    (SchedulerConfig.verify_max_model_len), in its words."""
    return str(engine_defaults("vllm")["chunked_prefill_off"]["refusal"]).format(
        tokens=tokens, length=length)


def v0_whole_reason(dep: Deployment, s: EngineSettings, acc: VLLMAccounting,
                    max_model_len: int) -> str:
    """Why V0 runs this launch's prompts whole, as a clause after "whole on its V0 engine":
    "with --no-enable-chunked-prefill", "up to 32K tokens of context", else the exemption
    past them."""
    if s.no_chunked_prefill:
        return "with --no-enable-chunked-prefill"
    if max_model_len <= V0_CHUNKED_ABOVE:
        return "up to 32K tokens of context"
    return "past 32K tokens of context too, chunked prefill left off " + \
        v0_exemption(dep, s, acc.version)
