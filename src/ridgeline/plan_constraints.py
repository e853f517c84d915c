"""What a plan's deployments must keep, as a product states it: the weight formats and KV
dtypes it allows (`plan --weights fp8,bf16 --kv-dtype bf16`: a team that forbids an fp8
cache for quality) and the context every launch must serve (`--min-context 131072`: a
promised 128k window), or the one length every launch starts with (`--max-model-len 8192`,
the engine's limit as `vllm serve --max-model-len` takes it, each pool sized there as `fit
--max-model-len 8192` sizes it), and the most a deployment may cost an hour, all its GPUs
together (`--max-cost-per-hour-usd 20`), and vLLM's hybrid KV-cache manager switches every
launch runs with (`--disable-hybrid-kv-cache-manager`, its negation, and
VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE), each pool sized with them as `fit` sizes
it (``launch_settings``). The search sizes only what they admit
(``PlanConstraints.admits``); none given, it searches every format and launch length, as
before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings
from ridgeline.model import ModelSpec
from ridgeline.precision import is_stored_format, kv_dtype, weight_format
from ridgeline.serving_load import Load, Slo

STORED = "as stored"  # plan's weights choice for a quantized checkpoint (candidate.weight_choices)
SIXTEEN_BIT = {"fp16": "bf16"}  # one 16-bit choice: bf16 is fp16 where a card lacks bf16


def _weights_id(name: str) -> str:
    """A --weights spelling as plan's choices name it: "FP8" fp8, "bfloat16" bf16, "auto"
    (or "stored") the checkpoint as stored."""
    if is_stored_format(name) or name.strip().lower() == STORED:
        return STORED
    fmt = weight_format(name).id
    return SIXTEEN_BIT.get(fmt, fmt)


def _kv_id(name: str) -> str:
    """A --kv-dtype spelling as plan's choices name it: "fp8_e4m3" fp8, "auto" bf16."""
    dtype = kv_dtype(name).id
    return SIXTEEN_BIT.get(dtype, dtype)


@dataclass(frozen=True)
class PlanConstraints:
    """The formats, launch length and price a plan's deployments must keep: ``weights`` and
    ``kv_dtypes`` the allowed ones as plan names them (() any), ``min_context`` the shortest
    --max-model-len a launch may start with (0 any), ``max_model_len`` the one it starts
    with (0: the planner's own, ``replica_sizing.launch_length``), ``max_cost_per_hour_usd``
    the most a deployment's GPUs may cost an hour together (None: no ceiling);
    ``disable_hybrid_kv_cache_manager`` and ``allow_chunked_local_attn_hybrid`` vLLM's
    hybrid KV-cache manager switches, in EngineSettings' names (None: vLLM's default)."""

    weights: tuple[str, ...] = ()
    kv_dtypes: tuple[str, ...] = ()
    min_context: int = 0
    max_model_len: int = 0
    max_cost_per_hour_usd: float | None = None
    disable_hybrid_kv_cache_manager: bool | None = None
    allow_chunked_local_attn_hybrid: bool | None = None

    @classmethod
    def parse(cls, weights: str | None, kv_dtypes: str | None,
              min_context: int | None, max_model_len: int | None = None,
              max_cost_per_hour_usd: float | None = None,
              disable_hybrid_kv_cache_manager: bool | None = None,
              allow_chunked_local_attn_hybrid: bool | None = None) -> PlanConstraints:
        """From the flags as typed (comma lists, decode's spellings): "fp8,BF16", "FP8"."""
        def names(text: str | None, read: Any) -> tuple[str, ...]:
            parts = [p.strip() for p in (text or "").split(",") if p.strip()]
            return tuple(dict.fromkeys(read(p) for p in parts))

        return cls(names(weights, _weights_id), names(kv_dtypes, _kv_id), min_context or 0,
                   max_model_len or 0, max_cost_per_hour_usd, disable_hybrid_kv_cache_manager,
                   allow_chunked_local_attn_hybrid)

    @property
    def launch_settings(self) -> EngineSettings:
        """The engine settings every launch runs with beside the knobs the search tries
        (max_num_seqs, max_num_batched_tokens, the version): the hybrid KV-cache manager
        switches, as `fit` reads them (cli_load.engine_settings); none given, the engine's
        defaults, EngineSettings()."""
        return EngineSettings(
            disable_hybrid_kv_cache_manager=self.disable_hybrid_kv_cache_manager,
            allow_chunked_local_attn_hybrid=self.allow_chunked_local_attn_hybrid)

    def switch_problem(self, model: ModelSpec, engine: str, version: str | None) -> str:
        """Why ``engine`` at ``version`` will not start ``model`` with the hybrid KV-cache
        manager switches given, or "" (as `fit` refuses them): they are vLLM's; the flag
        before vLLM 0.9.1; the manager off for a recurrent hybrid, whose cache types do not
        unify (vllm_hybrid.manager_problem)."""
        switched = (self.disable_hybrid_kv_cache_manager, self.allow_chunked_local_attn_hybrid)
        if switched == (None, None):
            return ""
        if engine != "vllm":
            flag = ("--vllm-allow-chunked-local-attn-with-hybrid-kv-cache"
                    if self.disable_hybrid_kv_cache_manager is None else
                    f"--{'' if self.disable_hybrid_kv_cache_manager else 'no-'}disable-"
                    "hybrid-kv-cache-manager")
            return f"{flag} is vLLM's; {engine} has no such setting"
        from ridgeline.vllm_hybrid import manager_problem
        from ridgeline.vllm_memory import vllm_accounting

        return manager_problem(model, vllm_accounting(version).version, *switched)

    def switch_caution(self, model: ModelSpec, engine: str, version: str | None) -> str:
        """What to say where --vllm-allow-chunked-local-attn-with-hybrid-kv-cache changes
        nothing (a model without chunked attention, a release that does not read it), as
        `fit` says it (vllm_hybrid.chunked_env_caution), or ""."""
        if engine != "vllm" or self.allow_chunked_local_attn_hybrid is None:
            return ""
        from ridgeline.vllm_hybrid import chunked_env_caution
        from ridgeline.vllm_memory import vllm_accounting

        return chunked_env_caution(model, vllm_accounting(version).version,
                                   self.allow_chunked_local_attn_hybrid)

    def for_model(self, model: ModelSpec, engine: str | None = None) -> PlanConstraints:
        """The constraints with a quantized checkpoint's own formats (gpt-oss-120b's mxfp4),
        and the name ``engine``'s --quantization gives them where it loads the checkpoint as
        stored (DeepSeek-V3's fp8-block as fp8: engine_quantization.names_stored_checkpoint),
        named as plan names serving it: as stored."""
        from ridgeline.engine_quantization import names_stored_checkpoint

        stored = {_weights_id(fmt) for _, fmt in model.stored_formats}
        if not stored:
            return self
        return replace(self, weights=tuple(dict.fromkeys(
            STORED if w in stored or (w != STORED and names_stored_checkpoint(w, model, engine))
            else w for w in self.weights)))

    def admits_formats(self, weights: str, kv: str) -> bool:
        """Whether a candidate of ``weights`` and ``kv`` (plan's names, a card's fp16 for bf16
        included) is allowed."""
        return (not self.weights or SIXTEEN_BIT.get(weights, weights) in self.weights) and (
            not self.kv_dtypes or SIXTEEN_BIT.get(kv, kv) in self.kv_dtypes)

    def admits(self, weights: str, kv: str, max_model_len: int) -> bool:
        """``admits_formats``, and a launch at ``max_model_len`` (0: the model's context,
        unset) no shorter than ``min_context`` and, where --max-model-len fixed it, at it."""
        return self.admits_formats(weights, kv) and (
            not self.min_context or not max_model_len or max_model_len >= self.min_context
        ) and (not self.max_model_len or not max_model_len
               or max_model_len == self.max_model_len)

    def within_price(self, cost_per_hour_usd: float | None) -> bool:
        """Whether a deployment costing ``cost_per_hour_usd`` (all its GPUs; None: no price)
        is within --max-cost-per-hour-usd; an unpriced one is not judged (kept)."""
        return (self.max_cost_per_hour_usd is None or cost_per_hour_usd is None
                or cost_per_hour_usd <= self.max_cost_per_hour_usd)

    def length_refusal(self, load: Load, slo: Slo) -> str:
        """Why --max-model-len refuses more of ``load`` than ``slo``'s percentile spares (a
        refused request is a miss), naming the request and the length, or "": 10,000-token
        prompts with 250-token answers at --max-model-len 8,192 are each 10,250 tokens, all
        refused."""
        limit = self.max_model_len
        if not limit:
            return ""
        refused = load.refused_share(limit)
        spare = (100 - slo.percentile) / 100
        if refused <= spare:
            return ""
        longest = load.longest_request()
        if refused >= 1.0 and longest == load.shortest_request():
            return (f"each request of this load is {longest:,} tokens (input + output), "
                    f"longer than --max-model-len {limit:,}: the engine refuses it; give "
                    f"--max-model-len {longest:,} or more, or a shorter load")
        return (f"{refused:.1%} of this load's requests are longer than --max-model-len "
                f"{limit:,} (the longest {longest:,} tokens, input + output): the engine "
                f"refuses them, more than a p{slo.percentile:.10g} SLO lets miss "
                f"({100 - slo.percentile:.10g} %); give a longer --max-model-len")

    def check(self, searched_weights: Sequence[str], searched_kv: Sequence[str],
              context: int, model_name: str) -> None:
        """Refuse (InputError) a format plan does not search for this model, or a
        --min-context past its context: Llama-3.1-8B's plan searches bf16 and fp8 weights,
        so --weights int4 is refused, naming them."""
        weights = {SIXTEEN_BIT.get(w, w) for w in searched_weights}
        kvs = {SIXTEEN_BIT.get(k, k) for k in searched_kv}
        for flag, asked, searched in (("--weights", self.weights, weights),
                                      ("--kv-dtype", self.kv_dtypes, kvs)):
            missing = [a for a in asked if a not in searched]
            if missing:
                # each as the flag takes it: "as stored" is --weights auto
                typed = " or ".join(sorted("auto" if s == STORED else s for s in searched))
                raise InputError(f"plan {flag} {','.join(missing)}: plan searches "
                                 f"{', '.join(sorted(searched))} for {model_name}; give "
                                 f"{flag} {typed} (or leave it out), or size {missing[0]} "
                                 f"with `ridgeline fit {flag} {missing[0]}`")
        if context and self.min_context > context:
            raise InputError(f"--min-context {self.min_context:,} is past {model_name}'s "
                             f"{context:,}-token context")
        if context and self.max_model_len > context:  # as fit and the engines refuse it
            raise InputError(f"--max-model-len {self.max_model_len:,} is past {model_name}'s "
                             f"{context:,}-token context")
        if self.max_model_len and self.min_context > self.max_model_len:
            raise InputError(f"--max-model-len {self.max_model_len:,} is shorter than "
                             f"--min-context {self.min_context:,}: give one of them")

    def to_dict(self) -> dict[str, Any]:
        """As --json echoes them: null where not given."""
        return {"weights": list(self.weights) or None, "kv_dtypes": list(self.kv_dtypes) or None,
                "min_max_model_len": self.min_context or None,
                "max_model_len": self.max_model_len or None,
                "max_cost_per_hour_usd": self.max_cost_per_hour_usd,
                "disable_hybrid_kv_cache_manager": self.disable_hybrid_kv_cache_manager,
                "vllm_allow_chunked_local_attn_with_hybrid_kv_cache":
                    self.allow_chunked_local_attn_hybrid}


NO_CONSTRAINTS = PlanConstraints()  # every format and launch length
