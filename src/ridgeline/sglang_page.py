"""The page SGLang keeps a model's cache in, release by release: the page a model's own
set-up forces (DeepSeek NSA's 64: sglang_nsa.py; DeepSeek-V3's trtllm_mla on a data-centre
Blackwell from 0.5.3.post2: 64 unless 32 or 64 is asked), else --page-size, else 1
(engines.json sglang.page_size and sglang.trtllm_mla)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ridgeline.hardware import blackwell_generation
from ridgeline.sglang_memory import sglang_data, sglang_release
from ridgeline.sglang_nsa import nsa_page_size

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment


def trtllm_mla_data() -> dict[str, Any]:
    data: dict[str, Any] = sglang_data()["trtllm_mla"]
    return data


def runs_trtllm_mla(dep: Deployment, version: str | None) -> bool:
    """Whether SGLang ``version`` (None: the newest checked) picks trtllm_mla for ``dep`` where
    no attention backend is given: a DeepseekV3ForCausalLM without DeepSeek Sparse Attention
    on a B200, GB200 or B300 (compute capability 10), from 0.5.3.post2; not before, not on
    an H100 or an RTX PRO 6000 (12.0)."""
    rule = trtllm_mla_data()
    release = sglang_release(version or str(sglang_data()["newest_checked"]))
    return dep.model.architecture in rule["architectures"] \
        and blackwell_generation(dep.accelerator) == "sm100" \
        and nsa_page_size(dep) is None and release >= sglang_release(str(rule["from"]))


def sglang_page_size(dep: Deployment, version: str | None, asked: int | None) -> tuple[int, str]:
    """The tokens per page SGLang ``version`` keeps ``dep``'s cache in with --page-size
    ``asked`` (None: not given), and why where the model's set-up chose it ("" where it is
    the one asked or SGLang's default 1). DeepSeek-V3 on a B200 under 0.5.23: (64, 'SGLang
    0.5.23 runs …trtllm_mla…'); with --page-size 32: (32, ''); under 0.5.3: (1, '')."""
    default = int(sglang_data()["page_size"])
    nsa = nsa_page_size(dep)
    if nsa is not None:
        return nsa, ("" if asked == nsa else
                     f"SGLang pages {dep.model.name}, a DeepSeek Sparse Attention model, in "
                     f"{nsa}-token pages whatever --page-size says ('Setting page size to "
                     f"{nsa} for DeepSeek NSA')" + (f", not the {asked} asked" if asked else ""))
    if not runs_trtllm_mla(dep, version):
        return asked or default, ""
    rule = trtllm_mla_data()
    if asked is not None and asked in rule["pages_kept"]:
        return asked, ""
    page = int(rule["page_size"])
    release = version or str(sglang_data()["newest_checked"])
    return page, (f"SGLang {release} runs {dep.model.name} on {dep.accelerator.id} on "
                  f"trtllm_mla, its default attention backend there for "
                  f"{dep.model.architecture} from v{rule['from']}, which keeps a page of "
                  f"{' or '.join(str(p) for p in rule['pages_kept'])} tokens and sets "
                  f"{asked or default} to {page}"
                  + (", not the one asked" if asked else
                     " (another --attention-backend is not modelled)"))
