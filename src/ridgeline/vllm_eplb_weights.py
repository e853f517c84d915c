"""Which MoE expert weights vLLM runs --enable-eplb with (engines.json
vllm.eplb.quantization_support, each fact with its source).

EPLB moves whole experts between ranks, so the MoE quantization method must say it can
rearrange its weights and their scales: vLLM's FusedMoE refuses the others, in v0.9.2 from
each method's apply ('EPLB not supported for `AWQMoEMethod` yet.'), later as it is built
(supports_eplb False). v0.9.2 took only fp8 experts (Fp8MoEMethod, DeepSeek-V3's), not even
bf16 ones; bf16 came in a release after it not pinned here; AWQ and GPTQ experts no release
read takes; gpt-oss's mxfp4 experts were refused from their first release, v0.10.1, and taken
in a later one not pinned. A release between one known to refuse and one known to take is
taken, and a method the table does not list (modelopt, compressed-tensors, bitsandbytes, a
GGUF's types) is not checked: only what is known is refused.

The experts' method is found as the engines name it (engine_quantization.engine_methods): a
checkpoint served as stored by the method its quant_method names, a format ridgeline sizes
as a what-if by the vLLM method that reads it, bf16 and fp16 experts by none
('unquantized'). DeepSeek-V3 (fp8-block, quant_method fp8) is 'fp8'; Qwen3-30B-A3B with
--weights awq-int4 is 'awq', which no release read runs --enable-eplb with.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ridgeline.deployment import Deployment
from ridgeline.engine_quantization import UNQUANTIZED, checkpoint_engine_method, engine_methods
from ridgeline.engine_versions import release_reached
from ridgeline.quantization import EXPERTS
from ridgeline.vllm_memory import parse_version, vllm_data

EVERY_RELEASE = "newest"  # refused_through: every release read, through the newest modelled


@dataclass(frozen=True)
class EPLBMethodSupport:
    """One MoE quantization method's EPLB support: the --quantization names that reach it,
    vLLM's class, the first release that takes it (None: none read does) and the newest known
    to refuse it (None: none known; EVERY_RELEASE: every one read)."""

    method: str
    names: tuple[str, ...]
    moe_class: str
    since: str | None
    refused_through: str | None
    source: str

    def refused_at(self, version: str) -> bool:
        """Whether vLLM ``version`` is known to refuse --enable-eplb with these experts."""
        if self.since is not None and release_reached(version, self.since):
            return False
        if self.refused_through == EVERY_RELEASE:
            return True
        # a fourth part is a patch of the release it extends (v0.10.1.1 of v0.10.1: fixes,
        # no new MoE method support), refused as that release is
        return self.refused_through is not None \
            and parse_version(version)[:3] <= parse_version(self.refused_through)[:3]


@lru_cache(maxsize=1)
def eplb_method_support() -> dict[str, EPLBMethodSupport]:
    """engines.json vllm.eplb.quantization_support, by every --quantization name it lists."""
    rows = vllm_data()["eplb"]["quantization_support"]["methods"]
    table = {}
    for row in rows:
        entry = EPLBMethodSupport(row["method"], tuple(row.get("quantization", [row["method"]])),
                                  row["moe_class"], row["from"], row["refused_through"],
                                  row["source"])
        table.update(dict.fromkeys(entry.names, entry))
    return table


def experts_method(dep: Deployment) -> str:
    """vLLM's --quantization method for ``dep``'s routed experts: 'unquantized' for bf16/fp16
    ones, the checkpoint's own method where it is served as stored, else the first vLLM method
    that reads the experts' format ('awq-int4' → 'awq'); "" for a format no method reads."""
    fmt = dep.weights.format_of(EXPERTS).id
    if fmt in UNQUANTIZED:
        return "unquantized"
    if dep.weights.label == "as stored":
        own = checkpoint_engine_method(dep.model, "vllm")
        if own is not None and fmt in own.reads:
            return own.method
    return next((m.method for m in engine_methods().values()
                 if "vllm" in m.engines and fmt in m.reads), "")


def newest_vllm() -> str:
    """The vLLM release a run without --engine-version is priced as (default_version)."""
    return str(vllm_data()["default_version"])


def eplb_weights_problem(dep: Deployment, version: str | None) -> str:
    """Why vLLM ``version`` (None: the newest modelled) refuses --enable-eplb with ``dep``'s
    expert weights, or "": their method and the release that takes it, where one does."""
    if dep.engine != "vllm" or dep.model.moe is None:
        return ""
    entry = eplb_method_support().get(experts_method(dep))
    release = version or newest_vllm()
    if entry is None or not entry.refused_at(release):
        return ""
    fmt = dep.weights.format_of(EXPERTS).id
    if entry.since is not None:
        later = f"vLLM v{entry.since} takes it"
    elif entry.refused_through not in (None, EVERY_RELEASE):
        later = f"a release after v{entry.refused_through} takes it"
    else:
        later = "no vLLM release modelled takes it"
    return (f"--enable-eplb: vLLM {release} refuses it for {dep.model.name}'s {fmt} experts "
            f"(their MoE method, {entry.method}'s {entry.moe_class}, does not support EPLB: "
            f"vLLM raises NotImplementedError); {later}")
