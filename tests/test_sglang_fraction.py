"""SGLang's default mem_fraction_static beyond the card rule: the memory figure it reads
(nvidia-smi's), its reserve for data-parallel attention, its cut for a vision tower, and the
--max-running-requests it keeps as given. Each expected figure is worked here from SGLang's
own formula (server_args.py _handle_gpu_memory_settings, adjust_mem_fraction_for_vlm)."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.catalog import load_data
from ridgeline.config_reader import spec_from_hf_config
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sglang_memory import (
    sglang_fraction,
    sglang_max_running_requests,
    sglang_memory_defaults,
    sglang_vision_cut,
)

H200_SMI_MIB = 143_771  # nvidia-smi's memory.total on an H200 (validation/h200 logs)
V059 = "0.5.9"  # the v0.5.3 rule restated below, before 0.5.10's prefill CUDA graphs joined it


def sglang(model: str, gpu: str = "h100", n: int = 1, dp: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), num_gpus=n,
                            engine="sglang", data_parallel_size=dp)


def reserve_v053_mib(chunk: int, graphs: int, tp: int, dp: int = 1) -> float:
    """SGLang v0.5.3-v0.5.9's reserve, restated: 512 + 1.5 × chunk + 2 × graph batch + 1,024 × TP ÷ 8,
    and under DP attention graph batch × dp × 3 (+ × 1.5 above a batch of 300)."""
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * graphs + 1024 * tp / 8
    if dp > 1:
        reserved += graphs * dp * 3 + (graphs * dp * 1.5 if graphs > 300 else 0)
    return max(reserved, 10 * 1024)  # cards above 60 GiB


def vlm_factor(layers: int, hidden: int) -> float:
    """adjust_mem_fraction_for_vlm, restated: 0.95 × clamp(1 − 0.1 × (L H² ÷ (24 × 1024²) − 1),
    0.8, 1.05)."""
    return 0.95 * min(max(1 - 0.1 * (layers * hidden**2 / (24 * 1024**2) - 1), 0.8), 1.05)


def test_dp_attention_on_eight_h200s_holds_back_its_graph_padding() -> None:
    """DeepSeek-V3 at DP8 on eight H200s: graph batch 512 (TP8's tier), so 512 × 8 × 4.5 MiB
    more, 33,280 MiB held and 0.769 of nvidia-smi's 143,771 MiB, not the 0.896 without the
    term; half the pool."""
    dep = sglang("deepseek-v3", "h200-sxm", 1, dp=8)  # ranks of one GPU: --tp-size 8
    pool = kv_pool(dep, EngineSettings(max_model_len=32000, engine_version=V059))
    reserved = reserve_v053_mib(8192, 512, 8, dp=8)
    expected = round((H200_SMI_MIB - reserved) / H200_SMI_MIB, 3)
    assert pool.reserved_fraction == expected == 0.769
    without = round((H200_SMI_MIB - reserve_v053_mib(8192, 512, 8)) / H200_SMI_MIB, 3)
    assert pool.pool_bytes == pytest.approx(
        pool.total_bytes * expected - pool.weight_bytes - pool.non_torch_bytes)
    rule = sglang_memory_defaults(H200_SMI_MIB * 2**20, tp=8, dp_size=8, version=V059)
    assert rule.dp_attention_mib == 512 * 8 * 4.5 and rule.mem_fraction_static == expected
    assert sglang_memory_defaults(H200_SMI_MIB * 2**20, tp=8,
                                  version=V059).mem_fraction_static == without


def test_dp_attention_reserve_follows_the_release() -> None:
    """PR #7054's era held 4 GiB more under DP attention; the TP table before it nothing."""
    card = H200_SMI_MIB * 2**20
    tier = sglang_memory_defaults(card, tp=8, version="0.5.2", dp_size=8)
    assert tier.reserved_mib == (12 + 8 / 2 + 4) * 1024 and tier.dp_attention_mib == 4096
    assert tier.mem_fraction_static == round(1 - (12 + 4 + 4) * 1024 / H200_SMI_MIB, 3)
    table = sglang_memory_defaults(card, tp=8, version="0.4.7", dp_size=8)
    assert table.mem_fraction_static == 0.81 and table.dp_attention_mib == 0
    # a graph batch of 300 or less pays the 3 MiB alone: TP2 on an H100 captures 256
    small = sglang_memory_defaults(81_559 * 2**20, tp=2, dp_size=2)
    assert small.dp_attention_mib == 256 * 2 * 3


def test_fit_explain_shows_the_reserve_the_pool_was_sized_with(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Under DP the pool's rule is SGLang's --tp-size (every GPU), not one rank's: --explain
    names its reserve, graph batch and ranks, and the caution no longer says it is left out."""
    from ridgeline.cli import main

    assert main(["fit", "deepseek-v3", "--gpu", "h200-sxm", "--num-gpus", "8", "--engine",
                 "sglang", "--dp-size", "8", "--enable-dp-attention", "--max-model-len", "32k",
                 "--explain", "--engine-version", V059]) == 0
    out = capsys.readouterr().out
    reserved = reserve_v053_mib(8192, 512, 8, dp=8)
    assert f"({H200_SMI_MIB:,} MiB − {reserved:,.0f} MiB reserved)" in out
    assert "CUDA graphs to batch 512 and 8 GPUs" in out
    assert f"{512 * 8 * 4.5:,.0f} MiB of it for data-parallel attention over 8 ranks" in out
    assert "nvidia-smi's memory.total (catalog)" in out
    assert "not modelled" not in out.split("caution: SGLang's --max-running-requests")[1] \
        .splitlines()[0]


def test_the_rule_reads_nvidia_smis_memory_where_the_catalog_has_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang's gpu_mem is nvidia-smi's memory.total: an H100 at TP4 gets 0.824 of 81,559 MiB
    (0.823 of the runtime's 81,080); an L40S its ECC-visible 46,068 MiB; a card the catalog
    has no such figure for keeps the runtime total, said in --explain."""
    from ridgeline.cli import main

    old = EngineSettings(engine_version=V059)
    h100 = kv_pool(sglang("llama-3.1-70b", n=4), old)
    assert h100.reserved_fraction == round(1 - reserve_v053_mib(8192, 512, 4) / 81_559, 3) \
        == 0.824
    l40s = kv_pool(sglang("llama-3.1-8b", "l40s"), old)
    assert l40s.reserved_fraction == round(1 - (512 + 1.5 * 4096 + 2 * 32 + 128) / 46_068, 3)
    rtx = sglang("llama-3.1-8b", "rtx-4090")
    pool = kv_pool(rtx, old)
    mib = pool.total_bytes / 2**20
    assert pool.reserved_fraction == round(1 - (512 + 1.5 * 2048 + 2 * 24 + 128) / mib, 3)
    assert main(["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "sglang",
                 "--max-model-len", "8k", "--explain"]) == 0
    assert "nvidia-smi's memory.total, which SGLang reads, is not in the catalog for this " \
        "card" in capsys.readouterr().out


def test_a_vision_tower_cuts_the_default_fraction() -> None:
    """Qwen3.5-35B-A3B is multimodal to SGLang; its vision_config names depth, not
    num_hidden_layers, so SGLang takes 24 layers of 1,152: × 0.925. A fraction given by the
    flag is kept as given (from 0.4.9)."""
    dep = sglang("qwen3.5-35b-a3b", n=2)
    pool = kv_pool(dep, EngineSettings(max_model_len=32768))
    card = round(1 - reserve_v053_mib(8192, 256, 2) / 81_559, 3)
    assert pool.reserved_fraction == pytest.approx(card * vlm_factor(24, 1152))
    assert vlm_factor(24, 1152) == pytest.approx(0.9248, abs=1e-4)
    given = kv_pool(dep, EngineSettings(max_model_len=32768, gpu_memory_utilization=0.8))
    assert given.reserved_fraction == 0.8


def test_gemma3_is_cut_only_with_enable_multimodal(capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang serves Gemma-3 text-only unless --enable-multimodal (mm_disabled_models), so no
    cut by default; with it its SigLIP (27 × 1,152) cuts 0.835 to 0.760, and one H100 at 8K
    holds 2 conversations, not 3."""
    from ridgeline.cli import main

    dep = sglang("gemma-3-27b")
    plain = kv_pool(dep, EngineSettings(max_model_len=8000, engine_version=V059))
    card = round(1 - reserve_v053_mib(8192, 256, 1) / 81_559, 3)
    assert plain.reserved_fraction == card
    multimodal = kv_pool(dep, EngineSettings(max_model_len=8000, enable_multimodal=True,
                                             engine_version=V059))
    assert multimodal.reserved_fraction == pytest.approx(card * vlm_factor(27, 1152))
    assert round(multimodal.reserved_fraction, 2) == 0.76
    assert main(["fit", "gemma-3-27b", "--gpu", "h100", "--engine", "sglang",
                 "--max-model-len", "8k", "--json", "--engine-version", V059]) == 0
    assert json.loads(capsys.readouterr().out)["conversations"] == 3
    assert main(["fit", "gemma-3-27b", "--gpu", "h100", "--engine", "sglang",
                 "--max-model-len", "8k", "--enable-multimodal", "--explain", "--engine-version",
                 V059]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fits, under the ridge: 2 conversations")
    assert "for the vision tower (adjust_mem_fraction_for_vlm)" in out
    assert main(["fit", "gemma-3-27b", "--gpu", "h100", "--engine", "sglang",
                 "--max-model-len", "8k", "--explain"]) == 0
    assert "text-only unless --enable-multimodal, so no cut" in capsys.readouterr().out
    assert main(["fit", "gemma-3-27b", "--gpu", "h100", "--engine", "vllm",
                 "--enable-multimodal"]) == 2


def test_older_releases_cut_a_multimodal_fraction_flat() -> None:
    """Before 0.4.9.post3 the cut was flat: 0.95 to 0.4.4.post3, then 0.90; before 0.4.9 the
    model runner cut a fraction the flag gave too. A model without a vision_config gets no
    cut from the ViT rule (Llama-4's config stripped to its text_config); with it, Llama-4's
    34-layer, 1,408-wide tower is cut by 0.95 × (1 − 0.1 × (2.678 − 1)) = 0.7906."""
    qwen = resolve_model("qwen3.5-35b-a3b")
    assert sglang_vision_cut(qwen, "0.4.4").factor == 0.95
    assert sglang_vision_cut(qwen, "0.4.4.post4").factor == 0.9
    old = sglang_vision_cut(qwen, "0.4.8")
    assert old.given_too and sglang_fraction(
        sglang_memory_defaults(81_559 * 2**20, version="0.4.8"), old, 0.8) == 0.8 * 0.9
    new = sglang_vision_cut(qwen, "0.4.9")
    assert new.factor == 0.9 and not new.given_too
    assert sglang_vision_cut(resolve_model("llama-3.1-8b")).factor == 1
    text_only = {k: v for k, v in load_data(
        "models/meta-llama--Llama-4-Scout-17B-16E-Instruct.json").items() if k != "vision_config"}
    stripped = sglang_vision_cut(spec_from_hf_config(text_only, "scout-text"),
                                 enable_multimodal=True)
    assert stripped.factor == 1 and "no vision_config" in stripped.note
    llama4 = sglang_vision_cut(resolve_model("llama-4-scout"), enable_multimodal=True)
    assert llama4.factor == pytest.approx(0.7906, abs=1e-4) and "34 × 1,408²" in llama4.note


def test_the_plan_writes_out_the_fraction_its_pool_was_sized_at() -> None:
    """The plan's command carries SGLang's default after the vision cut (it is then the
    flag's, which SGLang keeps as given); for 0.4.8, whose model runner cuts a given
    fraction too, the fraction before it."""
    from ridgeline.candidate import Candidate
    from ridgeline.reports.launch_commands import command_line

    qwen = resolve_model("qwen3.5-35b-a3b")
    c = Candidate("h100-sxm", 2, 1, "bf16", "bf16", None, 64, 0.02, 0.1, 5.0, 1, 2.99, False,
                  "", (1.0, 1.0))
    card = round(1 - reserve_v053_mib(8192, 256, 2) / 81_559, 3)
    line = command_line("sglang", "Qwen/Qwen3.5-35B-A3B", c, 4096, model=qwen)
    assert f"--mem-fraction-static {round(card * vlm_factor(24, 1152), 4)} " in line
    old = command_line("sglang", "Qwen/Qwen3.5-35B-A3B", c, 4096, "0.4.8", model=qwen)
    tier = round(1 - (9.5 + 2 / 2) * 1024 / 81_559, 3)  # PR #7054's reserve at TP2
    assert f"--mem-fraction-static {tier} " in old  # SGLang 0.4.8 cuts it × 0.9 itself


def test_a_given_max_running_requests_is_not_halved_with_the_tokens() -> None:
    """tp_worker caps only SGLang's default at half the tokens; a value given is used as
    given (its request pool is sized to it)."""
    assert sglang_max_running_requests(3000, 4096) == 3000 // 2
    assert sglang_max_running_requests(3000, 4096, given=2000) == 2000
    dep = sglang("llama-3.1-8b", "rtx-4090")
    pool = kv_pool(dep, EngineSettings(max_model_len=8000))
    asked = pool.tokens // 2 + 100
    given = kv_pool(dep, EngineSettings(max_model_len=8000, max_num_seqs=asked))
    assert given.max_num_seqs == asked > given.tokens // 2


def test_sglang_serves_llama4_text_only_without_loading_its_tower() -> None:
    """Without --enable-multimodal SGLang's Llama-4 builds no vision_model (mllama4.py
    has_vision), so its weights are the text model's alone; with it, the tower's 1.74 GB
    (871.9 M at 2 B) joins them, a quarter on each of four GPUs, and the fraction is cut."""
    dep = sglang("llama-4-scout", n=4)
    plain = kv_pool(dep, EngineSettings(max_model_len=32000))
    served = kv_pool(dep, EngineSettings(max_model_len=32000, enable_multimodal=True))
    tower = dep.model.vision_tower_bytes
    assert tower == 2 * dep.model.vision_params
    assert served.weight_bytes - plain.weight_bytes == pytest.approx(tower / 4)
    assert served.pool_bytes < plain.pool_bytes
    gemma = sglang("gemma-3-27b")  # Gemma-3's tower is counted either way
    assert kv_pool(gemma).weight_bytes == kv_pool(
        gemma, EngineSettings(enable_multimodal=True)).weight_bytes
