"""The launch flags that change how an engine sizes its memory beyond the pool's fraction:
SGLang's --max-mamba-cache-size and --mamba-ssm-dtype (a hybrid's state pool,
sglang_hybrid.py), and the largest CUDA-graph batch, vLLM's --max-cudagraph-capture-size (its
graphs' memory, vllm_graphs.cuda_graph_bytes) and SGLang's --cuda-graph-max-bs (its default
reserve, sglang_memory.sglang_memory_defaults; --cuda-graph-bs's largest where listed). Each
refused, in one line, where the engine, its release or the model has no use for it; the
releases are engines.json's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.sglang_hybrid import sglang_ssm_dtypes
from ridgeline.sglang_memory import sglang_data, sglang_release
from ridgeline.vllm_hybrid import has_state
from ridgeline.vllm_memory import parse_version, vllm_data

if TYPE_CHECKING:
    from ridgeline.memory import EngineSettings


def check_sizing_flags(dep: Deployment, s: EngineSettings) -> None:
    """Refuse a sizing flag ``dep``'s engine, its release (``s.engine_version``) or its model
    has no use for."""
    engine = dep.engine
    for flag, given in (("--max-mamba-cache-size", s.max_mamba_cache_size),
                        ("--mamba-ssm-dtype", s.mamba_ssm_dtype)):
        if given is not None:
            _check_state_flag(dep, s, flag)
    if s.mamba_ssm_dtype is not None:
        choices = sglang_ssm_dtypes(s.engine_version)
        if s.mamba_ssm_dtype not in choices:
            raise InputError(f"SGLang {s.engine_version}'s --mamba-ssm-dtype takes "
                             f"{' or '.join(choices)} (float16 from 0.5.9)")
    if engine != "vllm" and (s.cudagraph_mode is not None or s.torch_compile is not None
                             or (s.cudagraph_capture_sizes is not None and engine != "sglang")):
        raise InputError(f"the compilation config (--compilation-config, "
                         f"--cudagraph-capture-sizes) is vLLM's; {engine} has no such setting"
                         + (" (SGLang lists its sizes with --cuda-graph-bs)"
                            if s.cudagraph_capture_sizes is not None else ""))
    if s.max_cudagraph_capture_size is None:
        return
    if engine == "vllm":
        rule = vllm_data()["max_cudagraph_capture_size"]
        version = s.engine_version
        if version is not None and parse_version(version) < parse_version(rule["from"]):
            raise InputError(f"--max-cudagraph-capture-size came in vLLM v{rule['from']} "
                             f"(PR #26016); vLLM {version} has none (its --cuda-graph-sizes N "
                             "captures 1, 2, 4, 8, 16, … N)")
    elif engine == "sglang":
        since = str(sglang_data()["cuda_graph_max_bs_flag"]["since"])
        if s.engine_version is not None \
                and sglang_release(s.engine_version) < sglang_release(since):
            raise InputError(f"--cuda-graph-max-bs came in SGLang {since}; SGLang "
                             f"{s.engine_version} has none")
    else:
        raise InputError(f"--max-cudagraph-capture-size is vLLM's (SGLang's --cuda-graph-max-bs); "
                         f"{engine} has no such setting")


def _check_state_flag(dep: Deployment, s: EngineSettings, flag: str) -> None:
    """SGLang's state-pool flags: SGLang only, a model with recurrent-state layers, and a
    release whose state pool ridgeline models (0.5.3.post2 on; the flags came in 0.5.2)."""
    if dep.engine != "sglang":
        raise InputError(f"{flag} is SGLang's; {dep.engine} has no such setting"
                         + (" (vLLM keeps a hybrid's states in its KV pool's blocks)"
                            if dep.engine == "vllm" and flag.startswith("--max") else ""))
    if not has_state(dep.model):
        raise InputError(f"{flag} sizes SGLang's state pool for a hybrid with Mamba or linear-"
                         f"attention layers; {dep.model.name} has none")
    pool = sglang_data()["mamba_pool"]
    if s.engine_version is not None \
            and sglang_release(s.engine_version) < sglang_release(str(pool["from"])):
        raise InputError(f"{flag} came in SGLang 0.5.2, but ridgeline models SGLang's state "
                         f"pool from {pool['from']}; SGLang {s.engine_version} is older")
