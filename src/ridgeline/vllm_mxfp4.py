"""How vLLM lays out MXFP4 experts, release by release: the MoE kernel a card gets (Marlin,
Hopper's Triton kernels, FlashInfer's) and the bytes its padding and swizzling add to the
checkpoint's, which vLLM's pool counts among the weights (vllm_pool.py)."""

from __future__ import annotations

from ridgeline.deployment import Deployment
from ridgeline.hardware import Accelerator, blackwell_generation
from ridgeline.quantization import EXPERTS
from ridgeline.stages import Stage
from ridgeline.vllm_memory import parse_version, vllm_data

# vLLM rounds MXFP4 expert dimensions up to what its MoE kernel needs (vllm/model_executor/
# layers/fused_moe/oracle/mxfp4.py, mxfp4_round_up_hidden_size_and_intermediate_size): Marlin,
# the path on GPUs without an FP4 kernel (Ampere, Ada; the SM12x Blackwells from v0.13, whose
# Triton path needs capability below 11), to hidden × 256 and intermediate per rank × 128;
# FlashInfer's TRT-LLM kernels, first choice on data-center Blackwell (SM100), both × 256.
# ROCm (its Triton kernels, or AITER's CK on gfx950), both × 256: the same function's
# `current_platform.is_rocm()` branch, read in fused_moe/oracle/mxfp4.py and on main by
# 2026-08-05 (PR #50597's diff keeps it, adding a SiTU case gpt-oss does not take), so in
# v0.29.0 (tagged after 2026-08-31, engines.json's Model Runner V2 note) at the latest, and
# still in the open PR #55104 (2026-09) that would relax it for AITER's W4A4 backend. The
# layout adds no bytes on CDNA3: _swizzle_mxfp4 (quantization/utils/mxfp4_utils.py) keeps
# values and scales strided there (gfx950 swizzles its scales, not counted here). Before that
# the rule moved: #22421 (v0.10.1) rounded hidden × 256 on ROCm in fused_moe/layer.py; #28024
# (Nov 2025) rounded intermediate by get_padding_alignment(), × 128 on gfx942 and × 256 on
# gfx950; #34285 (Feb 2026) took hidden × 128 on gfx942 too; which release took × 256 back is
# not pinned, so ROCm's padding before v0.29 stays not known (mxfp4_kernel gives None).
# (hidden, intermediate) multiples:
MXFP4_ROUNDING = {"marlin": (256, 128), "flashinfer": (256, 256), "rocm": (256, 256)}
SM12X_MARLIN_FROM = (0, 13)
ROCM_ROUNDING_FROM = (0, 29)
# The Triton kernels Hopper uses round intermediate per rank × 64 and swizzle the weights and
# the e8m0 scales (quantization/utils/mxfp4_utils.py _swizzle_mxfp4, triton_kernels
# HopperMXScaleLayout: the scale copy's rows padded to 256); biases become fp32. Until v0.25
# the loaded scales stayed registered beside the swizzled copy (v0.25 deletes them); v0.17 to
# v0.21's bundled kernels also padded both stored dims of the values to 64.
HOPPER_SCALES_FREED_FROM = (0, 25)
# Hopper took Marlin until vLLM bundled OpenAI's triton_kernels: gpt-oss came in v0.10.1, where
# Triton needed triton_kernels installed by hand (PR #27370: "have to install triton_kernels
# manually"; #27523: as a dependency it "caused SM90 to default to Triton instead of Marlin"),
# and PR #28788 vendored it into vllm/third_party after v0.11.1 was tagged, so v0.12.0 is the
# first release whose wheel and image pick Triton. Logged: v0.10.1 on an H100 PCIe, Marlin,
# "Model loading took 65.9651 GiB" (vLLM #23278); v0.14.1 on an H100, "Using Triton backend",
# 64.38 GiB (#33155). VLLM_MXFP4_USE_MARLIN=1 (or --moe-backend marlin) still forces Marlin.
HOPPER_TRITON_FROM = (0, 12)
HOPPER_VALUE_PAD = ((0, 17), (0, 22))


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def mxfp4_kernel(acc: Accelerator, version: tuple[int, ...]) -> str | None:
    """The MXFP4 MoE path vLLM ``version`` takes on ``acc``: marlin, triton-hopper,
    flashinfer, rocm (an AMD card, from v0.29: ROCM_ROUNDING_FROM), or None where it is not
    known (ROCm before v0.29, SM12x before v0.13); Hopper's is Marlin before v0.12
    (HOPPER_TRITON_FROM)."""
    if acc.vendor == "amd":
        return "rocm" if version >= ROCM_ROUNDING_FROM else None
    if acc.family in ("ampere", "ada"):
        return "marlin"
    if acc.family == "hopper":
        return "triton-hopper" if version >= HOPPER_TRITON_FROM else "marlin"
    if acc.family != "blackwell":
        return None
    if blackwell_generation(acc) == "sm100":
        return "flashinfer"
    return "marlin" if version >= SM12X_MARLIN_FROM else None


def _hopper_expert_bytes(hidden: int, per_rank: int, version: tuple[int, ...]) -> float:
    """One expert's bytes on one rank after the Hopper Triton path loads it (gpt-oss at TP1,
    hidden and intermediate 2,880: 14,060,160 B before v0.25 against 13,236,480 in the
    checkpoint, +6.2 %; the llm-d H100 logs: 13.47 and 64.38 GiB for gpt-oss-20b and -120b)."""
    inter = _round_up(per_rank, 64)
    rows13, rows2, bytes13, bytes2 = 2 * inter, hidden, hidden // 2, inter // 2
    if HOPPER_VALUE_PAD[0] <= version < HOPPER_VALUE_PAD[1]:
        rows13, rows2 = _round_up(rows13, 64), _round_up(rows2, 64)
        bytes13, bytes2 = _round_up(bytes13, 64), _round_up(bytes2, 64)
    values = rows13 * bytes13 + rows2 * bytes2
    swizzled_scales = _round_up(2 * inter, 256) * (hidden // 32) \
        + _round_up(hidden, 256) * _round_up(inter // 32, 2)
    loaded_scales = 0 if version >= HOPPER_SCALES_FREED_FROM else 3 * hidden * inter // 32
    biases = (2 * inter + hidden) * 4
    return values + swizzled_scales + loaded_scales + biases


def mxfp4_padding_bytes(dep: Deployment, stage: Stage | None = None,
                        version: str | None = None) -> float:
    """Extra bytes per GPU vLLM ``version``'s MXFP4 experts take beyond the checkpoint's
    (gpt-oss-20b on an A100: Marlin pads hidden 2,880 → 3,072 and intermediate 2,880 →
    2,944, 9 % more experts, 0.85 GiB; vLLM logged 13.72 GiB of weights against 12.8 in the
    checkpoint). Zero for other formats, or where the kernel a card gets is not known. Of a
    pipeline ``stage``: its MoE layers' share."""
    moe = dep.model.moe
    if moe is None or dep.bytes_by_category.get(EXPERTS, 0) == 0:
        return 0.0
    if dep.weights.format_of(EXPERTS).id != "mxfp4":
        return 0.0
    if dep.model.quant_method == "compressed-tensors":
        # CompressedTensorsW4A4Mxfp4MoEMethod's create_weights keeps the checkpoint's shapes;
        # the padding below is vLLM's Mxfp4MoEMethod's (quant_method "mxfp4", gpt-oss)
        return 0.0
    wanted = parse_version(version or str(vllm_data()["default_version"]))
    kernel = mxfp4_kernel(dep.accelerator, wanted)
    if kernel is None:
        return 0.0
    hidden = dep.model.hidden_size
    slices = 1 if dep.expert_parallel else dep.expert_ranks  # EP keeps experts whole
    per_rank = moe.expert_intermediate_size / slices
    if kernel == "triton-hopper":
        # the checkpoint's: values 4 bits, a 1-byte scale per 32, bf16 biases
        stored = 3 * hidden * per_rank * (0.5 + 1 / 32) + (2 * per_rank + hidden) * 2
        growth = _hopper_expert_bytes(hidden, int(per_rank), wanted) / stored - 1
    else:
        hidden_multiple, inter_multiple = MXFP4_ROUNDING[kernel]
        padded = _round_up(hidden, hidden_multiple) * _round_up(int(per_rank), inter_multiple)
        growth = padded / (hidden * per_rank) - 1
    share = 1.0 if stage is None else stage.expert_share
    return dep.bytes_by_category[EXPERTS] * growth / dep.num_gpus * share
