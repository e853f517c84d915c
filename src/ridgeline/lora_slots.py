"""Which engine's LoRA rules size a deployment's adapter slots: vLLM's --enable-lora
(vllm_lora.py) or SGLang's (sglang_lora.py). The pool, the step, fit's breakdown and the CLI
ask here, so each reads the same engine's rule; a settings record of one engine under the
other is refused in one line."""

from __future__ import annotations

from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.lora_shapes import LoRAModule
from ridgeline.sglang_lora import (
    SGLangLoRASettings,
    sglang_lora_modules,
    sglang_lora_problem,
    sglang_lora_step_caution,
)
from ridgeline.stages import Stage
from ridgeline.vllm_lora import LoRASettings, lora_modules, lora_problem, lora_step_caution

AnyLoRA = LoRASettings | SGLangLoRASettings


def engine_lora_problem(dep: Deployment, lora: AnyLoRA, version: str | None) -> str:
    """Why ``dep``'s engine does not take ``lora`` as sized here, or ""."""
    if isinstance(lora, SGLangLoRASettings):
        if dep.engine != "sglang":
            return (f"--lora-paths, --max-loras-per-batch and --lora-target-modules are "
                    f"SGLang's; {dep.engine} has no such settings (vLLM's are --max-loras "
                    "and --max-lora-rank)")
        return sglang_lora_problem(dep, lora, version)
    if dep.engine == "sglang":  # fit --engine vllm,sglang: one engine's flags for both
        return ("--enable-lora read as vLLM's (--max-loras, --max-lora-rank) meets sglang: "
                "fit SGLang's LoRA with --engine sglang alone (--max-loras-per-batch, "
                "--lora-paths, --lora-target-modules)")
    return lora_problem(dep, lora, version)


def check_engine_lora(dep: Deployment, lora: AnyLoRA, version: str | None) -> None:
    """An InputError carrying ``engine_lora_problem`` where there is one."""
    problem = engine_lora_problem(dep, lora, version)
    if problem:
        raise InputError(problem)


def engine_lora_modules(dep: Deployment, lora: AnyLoRA, stage: Stage | None = None
                        ) -> tuple[LoRAModule, ...]:
    """The adapted modules on one GPU of ``dep`` (of a pipeline ``stage``), by its engine's
    rule."""
    if isinstance(lora, SGLangLoRASettings):
        return sglang_lora_modules(dep, lora)
    return lora_modules(dep, lora, stage)


def step_caution(lora: AnyLoRA) -> str:
    """The line decode, prefill and simulate print for the engine's LoRA step."""
    if isinstance(lora, SGLangLoRASettings):
        return sglang_lora_step_caution(lora)
    return lora_step_caution(lora)
