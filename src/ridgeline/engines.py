"""Engine profiles: how close each engine gets to the roofline, and what it pays per step.

A profile is four physically meaningful numbers — the fraction of rated memory bandwidth
its weight and KV streams reach, the fraction of dense peak its matmuls reach, a fixed
cost per forward pass and a fixed cost per layer — plus, where the data support it, a cost
per weight matmul launched (the serving engines: a DeepSeek layer runs ten, a Llama layer four), a
bandwidth multiplier per accelerator group and, for llama.cpp, an absolute bandwidth ceiling
(its matrix-vector kernels reach about 1.1 TB/s of an H100 PCIe's 2 and 0.8 of an RTX 4090's
1), for llama.cpp on Metal, the operations unpacking a K-quant weight costs, and for
llama.cpp's MoE prompts, the tile width its expert matmuls waste on thin experts.
``scripts/fit_profiles.py`` fits them to ``validation/measurements.csv``;
``data/profiles.json`` records the rows each came from. Engines without measurements carry a stated prior.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from typing import Any

from ridgeline.catalog import nearest_spelling, normalise
from ridgeline.datafiles import engine_defaults, load_data
from ridgeline.errors import InputError, shorten, shorten_path
from ridgeline.hardware import FORMS, VENDORS, Accelerator, catalog
from ridgeline.records import Fields
from ridgeline.userfiles import json_loads, read_text

ENGINES = ("vllm", "sglang", "trtllm", "llama.cpp-cuda", "llama.cpp-metal", "llama.cpp-vulkan",
           "llama.cpp-rocm", "torch-eager", "torch-cudagraph")
_ALIASES = {"tensorrt-llm": "trtllm", "trt-llm": "trtllm", "llama.cpp": "llama.cpp-cuda",
            "llamacpp": "llama.cpp-cuda", "mlx": "llama.cpp-metal"}


def accelerator_group(acc: Accelerator) -> str:
    """apple | nvidia-datacenter | nvidia-workstation | nvidia-geforce | nvidia-soc |
    amd-instinct | amd-radeon | amd-soc | intel-gaudi | intel-arc | …

    GeForce cards get their own group: their tensor cores run FP16 matmuls with FP32
    accumulation at half rate (the catalog records that rate), while llama.cpp's cuBLAS
    path accumulates in FP16 at full rate.
    """
    return _group(acc.vendor, acc.form, acc.family, acc.id)


@lru_cache(maxsize=1024)  # a fit asks it of each step's card under every trial profile
def _group(vendor: str, form: str, family: str, ident: str) -> str:
    """accelerator_group's rule, on the record fields it reads."""
    if vendor == "measured":
        return "measured"
    if vendor == "apple" or ident.startswith("apple-"):
        return "apple"
    if vendor == "nvidia":
        return {"datacenter": "nvidia-datacenter", "consumer": "nvidia-geforce",
                "soc": "nvidia-soc"}.get(form, "nvidia-workstation")
    if vendor == "amd":  # Instinct's CDNA matrix cores (MFMA) apart from the rest:
        # RDNA's WMMA, or none (Vega 20, sold as the Radeon VII and as the MI50 and MI60);
        # an APU (Strix Halo's Radeon 8060S) apart from the discrete Radeons: its GPU shares
        # LPDDR5X with the CPU and reaches about half the share of its peak they do on
        # llama.cpp's prompts (0.16 against 0.29–0.42, rocm.csv)
        if family.startswith("cdna"):
            return "amd-instinct"
        return "amd-soc" if form == "soc" else "amd-radeon"
    if vendor == "intel":
        return "intel-gaudi" if form == "datacenter" else "intel-arc"
    return vendor or "other"


def bandwidth_group(acc: Accelerator) -> str:
    """The group whose bandwidth multiplier (decode's share of rated bandwidth) a card takes:
    its accelerator_group, but Vega 20 (gcn5: the Radeon VII, MI50 and MI60) with CDNA's
    amd-instinct. A decode step runs matrix-vector kernels, tuned by wave size, not by matrix
    core: llama.cpp gives GCN and CDNA ("GCN/CDNA, wave size is 64", ggml-cuda/common.cuh) one
    table, MMVQ_PARAMETERS_GCN, and RDNA (wave size 32) another (get_device_table_id in
    ggml-cuda/mmvq.cu). Its prompts' compute group stays amd-radeon: it has no matrix cores,
    and reaches more of its vector peak than CDNA does of MFMA's (0.22–0.28 against 0.10–0.17 on
    llama.cpp's prompts, rocm.csv)."""
    if acc.vendor == "amd" and acc.family == "gcn5":
        return "amd-instinct"
    return accelerator_group(acc)


@lru_cache(maxsize=1)
def accelerator_groups() -> tuple[str, ...]:
    """Every group accelerator_group can answer, sorted: its rule on each catalog card's
    family and id under every vendor and form a record may give (hardware.VENDORS, FORMS, or
    none), so a --gpu-file card's group is among them: "amd-instinct" … "other"."""
    return tuple(sorted({_group(vendor, form, acc.family, acc.id)
                         for acc in catalog().values()
                         for vendor in (*VENDORS, "") for form in (*FORMS, "")}))


@dataclass(frozen=True)
class EngineProfile:
    engine: str
    bandwidth_efficiency: float  # share of rated bandwidth the streams reach
    compute_efficiency: float  # share of dense peak the matmuls reach
    step_overhead_s: float  # per forward pass: scheduling, launches, sampling
    layer_overhead_s: float  # per layer per forward pass: kernel launches, syncs
    group_bandwidth: Mapping[str, float] = field(default_factory=dict, hash=False)
    group_compute: Mapping[str, float] = field(default_factory=dict, hash=False)
    band_low: float = 0.8  # expectation × band_low .. × band_high: p10/p90 of fit residuals
    band_high: float = 1.25
    fitted_rows: int = 0
    source: str = "prior"
    fitted_ids: tuple[str, ...] = ()  # the measurement rows the coefficients came from
    dequant_compute: float = 1.0  # compute efficiency multiplier when weights are dequantized
    # per layer of a step that carries prompt tokens (None: layer_overhead_s). Engines capture
    # CUDA graphs for decode-only steps; a prefill runs its kernels launched one by one.
    prefill_layer_overhead_s: float | None = None
    # fitted rows per accelerator group (engines.accelerator_group): where the fit has data
    fitted_groups: Mapping[str, int] = field(default_factory=dict, hash=False)
    # the prefill/TTFT rows among them (0: compute_efficiency held at its prior, unfitted;
    # None: a profile written before this was recorded)
    compute_rows: int | None = None
    # the most bytes per second the streams reach on any card, however fast its memory
    # (None: no ceiling). A matrix-vector kernel keeps a bounded number of bytes in flight,
    # so by Little's law its rate stops growing with the card's rated bandwidth.
    bandwidth_cap_bytes_per_s: float | None = None
    # vector operations a step spends per K-quant weight it multiplies, unpacking it (0: not
    # priced). Where matmuls run on the GPU's vector ALUs (Apple's GPUs have no matrix
    # units), a weight matmul takes at least weights × this ÷ the fp16 peak.
    kquant_ops_per_weight: float = 0.0
    # per weight matmul a forward pass launches (launches.deployment_matmuls), beside the per-layer
    # cost: each kernel runs its own ramp and tail, and waits on the one before it, so at
    # batch 1 a DeepSeek layer's ten matmuls cost more than a Llama layer's four (0: not priced)
    matmul_overhead_s: float = 0.0
    # the token columns a prompt step's expert matmul computes per tile (0: not priced): an
    # expert given fewer of a step's tokens wastes the rest of its tiles, as llama.cpp's
    # mul_mat_id over MMQ tiles does; matrix-vector steps (MATVEC_TOKENS or fewer) are apart
    expert_tile_tokens: float = 0.0
    # per routed-expert (MoE) layer a forward pass runs, beside the cost per layer (0: not
    # priced). llama.cpp's graph runs a routed FFN as many more nodes than a dense one (the
    # router's matmul, its softmax or sigmoid, the top-k, the gathered weights and their
    # normalisation, three mul_mat_id, the weighted sum: llm_graph_context::build_moe_ffn),
    # each a kernel that waits on the one before it, where a dense FFN runs four or five
    moe_layer_overhead_s: float = 0.0
    # the fields a calibration held at its prior's value rather than fitted, its rows unable
    # to pin them (calibrate_held; a profile written before 2026-12-06 held the compute share
    # near it, pulled by its rows: compute_at_prior); its source words this record.
    # (): nothing held (a fit with no prior holds nothing at one, bar a cost per weight
    # matmul it is given); None: not recorded (a profile written before)
    held: tuple[str, ...] | None = None
    # per accelerator group, the largest decode batch the fit priced its rows at (prefill and
    # TTFT rows apart; Prediction.batch: a serving throughput naming no batch at its pool's
    # largest), and the fit's own error on the group's rows near it, at half that batch or more
    # (Prediction.optimism, their median: + where it promised more than was measured), only
    # where MIN_EDGE_ROWS rows are there. {}: not recorded (a profile written before)
    fitted_max_batch: Mapping[str, int] = field(default_factory=dict, hash=False)
    max_batch_optimism: Mapping[str, float] = field(default_factory=dict, hash=False)

    @property
    def compute_fitted(self) -> bool:
        """Whether any compute-bound row (a prefill, a TTFT) set compute_efficiency."""
        return self.compute_rows != 0

    def calibration_caution(self, acc: Accelerator) -> str:
        """What to say where the fit saw fewer than MIN_GROUP_ROWS rows on this class of card,
        or "": the expectation then carries other cards' efficiencies (llama.cpp's ROCm rows
        are Radeon cards; an Instinct's matrix cores run its kernels another way)."""
        group = accelerator_group(acc)
        here = self.fitted_groups.get(group, 0)
        if here >= MIN_GROUP_ROWS or (self.fitted_rows and not self.fitted_groups):
            return ""  # (a profile written before its groups were recorded: unknown)
        if here and here == self.fitted_rows:  # a calibration on these cards alone: nothing
            return ""  # of other cards' in it (calibrate says what few rows are worth)
        seen = ", ".join(f"{g} {n}" for g, n in sorted(self.fitted_groups.items()))
        rows = "no rows" if here == 0 else \
            f"only {here} row{'' if here == 1 else 's'} (fewer than {MIN_GROUP_ROWS})"
        return (f"the {self.engine} profile saw {rows} on {group} cards "
                f"({'its rows: ' + seen if seen else 'it was fitted on none'}): the "
                "expectation leans on other cards' efficiencies; calibrate on this one "
                "(`ridgeline calibrate`)")

    def batch_range_caution(self, acc: Accelerator, batch: int) -> str:
        """What to say where a decode step of ``batch`` sequences is priced past the largest
        batch the fit saw on this card's group (fitted_max_batch), or "" (also where
        calibration_caution already says the group's rows are too few), "likely optimistic"
        where max_batch_optimism records the fit's rows near it at OPTIMISTIC_AT_EDGE or more.
        The bundled vllm profile's Instinct rows stop at batch 16: batch 32 on an MI300X gets
        the caution, batch 16 does not."""
        group = accelerator_group(acc)
        largest = self.fitted_max_batch.get(group)
        if largest is None or batch <= largest or self.calibration_caution(acc):
            return ""
        optimism = self.max_batch_optimism.get(group, 0.0)
        edge = (f"; at batch {largest:,} it already priced them {optimism:+.1%} faster than "
                "measured, so read this as likely optimistic"
                if optimism >= OPTIMISTIC_AT_EDGE else "")
        fitted = "batch 1 alone" if largest == 1 else f"batches up to {largest:,}"
        return (f"the {self.engine} profile was fitted on {group} cards at decode {fitted}, "
                f"and this prices the {acc.id} at batch {batch:,}, past that "
                f"range{edge} (a measurement at this batch, `ridgeline calibrate`, settles it)")

    def band_on(self, acc: Accelerator) -> tuple[float, float]:
        """The measured ÷ predicted rates an expectation on ``acc`` is banded by: the fit's
        (band_low .. band_high), widened UNSEEN_GROUP_BAND times each way where the fit saw
        too few rows on the card's group (calibration_caution), its efficiencies then another
        group's. The bundled llama.cpp-vulkan profile's 0.71 .. 1.35 on an RTX 4090 (no GeForce
        row) reads 0.24 .. 4.05."""
        if not self.calibration_caution(acc):
            return self.band_low, self.band_high
        return self.band_low / UNSEEN_GROUP_BAND, self.band_high * UNSEEN_GROUP_BAND

    def band_s(self, time_s: float) -> tuple[float, float]:
        """A predicted time's band: measured ÷ predicted rates ran band_low..band_high in the
        fit, so the time runs time ÷ band_high .. time ÷ band_low."""
        return time_s / self.band_high, time_s / self.band_low

    def overhead_s(self, layers: int, prefill: bool, matmuls: int = 0,
                   moe_layers: int = 0) -> float:
        """Fixed cost of one forward pass: per step, plus per layer (prefill steps' own rate),
        plus per weight matmul launched, plus per routed-expert layer."""
        return self.step_overhead_s + self.per_layer_s(prefill) * layers \
            + self.matmul_overhead_s * matmuls + self.moe_layer_overhead_s * moe_layers

    def per_layer_s(self, prefill: bool) -> float:
        """The cost per layer of a step: a step with prompt tokens at its own rate if fitted."""
        if prefill and self.prefill_layer_overhead_s is not None:
            return self.prefill_layer_overhead_s
        return self.layer_overhead_s

    def without_cuda_graphs(self) -> EngineProfile:
        """The engine with CUDA graphs off (vLLM --enforce-eager, SGLang --disable-cuda-graph):
        every step, decode included, pays the per-layer cost of the ungraphed prefill steps."""
        if self.prefill_layer_overhead_s is None:
            raise InputError(f"{self.engine} has no fitted cost of a step without CUDA graphs "
                             "(--enforce-eager is a serving engine's switch)")
        return replace(self, layer_overhead_s=self.prefill_layer_overhead_s,
                       source=f"{self.source}; without CUDA graphs: every layer at a prefill "
                       "step's per-layer cost")

    def group_bandwidth_share(self, group: str) -> float:
        """The bandwidth share on an accelerator group: the base efficiency × the group's
        multiplier where fitted (1 elsewhere), at most all of it (0.39 × 1.77: 0.69)."""
        return min(1.0, self.bandwidth_efficiency * self.group_bandwidth.get(group, 1.0))

    def bandwidth_for(self, acc: Accelerator) -> float:
        """Bandwidth efficiency on this accelerator (group multiplier where fitted), combined
        with the engine's absolute ceiling as two rates in series: 1/share + rated/ceiling."""
        share = self.group_bandwidth_share(self.bandwidth_stand_in(acc))
        return self.share_under_ceiling(share, acc.memory_bandwidth_bytes_per_s)

    def share_under_ceiling(self, share: float, rated_bytes_per_s: float) -> float:
        """``share`` of a card's rated bandwidth in series with the engine's ceiling, as a
        share of that card's rated: 1 ÷ (1/share + rated/ceiling); ``share`` where there is
        no ceiling. llama.cpp-cuda's 1.0 on a 768 GB/s RTX A6000, under its 3.67 TB/s
        ceiling: 1 ÷ (1 + 0.209) = 0.827."""
        cap = self.bandwidth_cap_bytes_per_s
        return share if cap is None else 1.0 / (1.0 / share + rated_bytes_per_s / cap)

    def compute_for(self, acc: Accelerator) -> float:
        """Compute efficiency on this accelerator (group multiplier where fitted)."""
        return min(1.0, self.compute_efficiency
                   * self.group_compute.get(self.stand_in_group(acc), 1.0))

    def stand_in_group(self, acc: Accelerator) -> str:
        """The group whose efficiencies this card takes: its own where the fit saw it (as a
        multiplier, or as the base every multiplier is relative to), else the same vendor's
        group with the most fitted rows (an RTX PRO workstation card under a profile fitted
        on H100s and MI300Xs takes the H100s' share, not the MI300Xs'), else its own."""
        return self._stand_in(accelerator_group(acc))

    def bandwidth_stand_in(self, acc: Accelerator) -> str:
        """stand_in_group's rule on the card's bandwidth_group: the group whose bandwidth
        multiplier prices its decode (a Radeon VII: amd-instinct's, where the fit saw it)."""
        return self._stand_in(bandwidth_group(acc))

    def group_stand_in(self, group: str) -> str:
        """The group whose multipliers a card of ``group`` takes (stand_in_group's rule on a
        group's name): the bundled vllm profile's amd-radeon cards take amd-instinct's."""
        return self._stand_in(group)

    def _stand_in(self, group: str) -> str:
        """stand_in_group's rule on a group."""
        if group in self.group_bandwidth or group in self.group_compute \
                or self.fitted_groups.get(group, 0) >= MIN_GROUP_ROWS:
            return group
        vendor = group.split("-")[0] + "-"
        kin = [(rows, g) for g, rows in self.fitted_groups.items()
               if g.startswith(vendor) and rows >= MIN_GROUP_ROWS]
        return max(kin)[1] if kin else group

    def compute_story(self, acc: Accelerator) -> str:
        """Where compute_for's share comes from, for --explain."""
        return _share_story(self.compute_efficiency, self.group_compute,
                            accelerator_group(acc), self.stand_in_group(acc))

    def bandwidth_story(self, acc: Accelerator) -> str:
        """Where bandwidth_for's share comes from: the share, and the ceiling in series."""
        share = _share_story(self.bandwidth_efficiency, self.group_bandwidth,
                             bandwidth_group(acc), self.bandwidth_stand_in(acc))
        cap = self.bandwidth_cap_bytes_per_s
        if cap is None:
            return share
        return (f"{share}, in series with the engine's {cap / 1e12:.3g} TB/s ceiling: "
                f"1 ÷ (1 ÷ that + {acc.memory_bandwidth_bytes_per_s / 1e12:.3g} TB/s rated ÷ "
                f"{cap / 1e12:.3g} TB/s)")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["group_bandwidth"] = dict(self.group_bandwidth)
        data["group_compute"] = dict(self.group_compute)
        data["fitted_ids"] = list(self.fitted_ids)
        data["fitted_groups"] = dict(self.fitted_groups)
        data["fitted_max_batch"] = dict(self.fitted_max_batch)
        data["max_batch_optimism"] = dict(self.max_batch_optimism)
        if self.held is None:  # not recorded: absent, as in a profile written before
            del data["held"]
        else:
            data["held"] = list(self.held)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], origin: str = "profile") -> EngineProfile:
        """A profile from its JSON form; each field checked, by name, against the range a
        fitted profile can have."""
        if not isinstance(data, Mapping):
            raise InputError(f"{origin}: not an engine profile (a JSON object of its fields)")
        # its fields, and the rows' coverage calibrate writes beside them (cli_data)
        known = [f.name for f in fields(cls)] + ["coverage"]
        unknown = next((k for k in data if k not in known), None)
        if unknown is not None:  # a misspelt field read as absent would run at its default
            close = difflib.get_close_matches(str(unknown), known, n=1)
            raise InputError(f"{origin}: {shorten(repr(unknown))} is no field of an engine "
                             "profile" + (f" (did you mean {close[0]!r}?)" if close else ""))
        f = Fields(data, origin)
        try:
            return cls(
                engine=f.text("engine"),
                bandwidth_efficiency=f.number("bandwidth_efficiency", MIN_SHARE, 1),
                compute_efficiency=f.number("compute_efficiency", MIN_SHARE, 1),
                step_overhead_s=f.number("step_overhead_s", 0, MAX_OVERHEAD_S),
                layer_overhead_s=f.number("layer_overhead_s", 0, MAX_OVERHEAD_S),
                group_bandwidth=_per_group(f, "group_bandwidth", MIN_SHARE,
                                           MAX_MULTIPLIER),
                group_compute=_per_group(f, "group_compute", MIN_SHARE, MAX_MULTIPLIER),
                band_low=f.number("band_low", MIN_SHARE, 1, default=0.8),
                band_high=f.number("band_high", 1, MAX_MULTIPLIER, default=1.25),
                fitted_rows=int(f.number("fitted_rows", 0, 1e9, default=0)),
                source=str(data.get("source", origin)),
                fitted_ids=f.texts("fitted_ids"),
                dequant_compute=f.number("dequant_compute", MIN_SHARE, MAX_MULTIPLIER,
                                         default=1.0),
                fitted_groups={k: int(v) for k, v in _per_group(f, "fitted_groups", 0,
                                                                  1e9).items()},
                prefill_layer_overhead_s=f.optional("prefill_layer_overhead_s", 0,
                                                    MAX_OVERHEAD_S),
                compute_rows=None if (rows := f.optional("compute_rows", 0, 1e9)) is None
                else int(rows),
                bandwidth_cap_bytes_per_s=f.optional("bandwidth_cap_bytes_per_s", 0,
                                                     MAX_BANDWIDTH_BYTES_PER_S, open_low=True),
                kquant_ops_per_weight=f.number("kquant_ops_per_weight", 0, MAX_OPS_PER_WEIGHT,
                                               default=0.0),
                matmul_overhead_s=f.number("matmul_overhead_s", 0, MAX_OVERHEAD_S, default=0.0),
                expert_tile_tokens=f.number("expert_tile_tokens", 0, MAX_TILE_TOKENS,
                                            default=0.0),
                moe_layer_overhead_s=f.number("moe_layer_overhead_s", 0, MAX_OVERHEAD_S,
                                              default=0.0),
                held=None if data.get("held") is None else _held_fields(f.texts("held"),
                                                                        origin),
                fitted_max_batch={k: int(v) for k, v in _per_group(f, "fitted_max_batch", 1,
                                                                     1e9).items()},
                max_batch_optimism=_per_group(f, "max_batch_optimism", -1, 1e9),
            )
        except (TypeError, ValueError) as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(f"{origin}: not an engine profile ({exc})") from None


def _held_fields(names: tuple[str, ...], origin: str) -> tuple[str, ...]:
    """A profile file's ``held``: each entry one of EngineProfile's fields."""
    known = {f.name for f in fields(EngineProfile)}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise InputError(f"{origin}: 'held' names {unknown[0]!r}, which is no field of an "
                         "engine profile")
    return names


# Groups a profile written before 2026-12-01 may name: one group then for each vendor's
# datacenter and client cards alike (a multiplier fitted on it applies to both halves).
_SPLIT_GROUPS = {"amd": ("amd-instinct", "amd-radeon", "amd-soc"),
                 "intel": ("intel-gaudi", "intel-arc")}


def _per_group(f: Fields, key: str, low: float, high: float,
               open_low: bool = False) -> dict[str, float]:
    """A profile file's per-group figures (``key``: group_bandwidth, fitted_groups, …) under
    today's group names, each a group accelerator_group can answer: one no card falls in
    ("nvidia-foo") would be kept and never read, the profile running at 1× there unsaid."""
    out: dict[str, float] = {}
    for name, value in f.numbers(key, low, high, open_low).items():
        if name not in _SPLIT_GROUPS and name not in accelerator_groups():
            close = difflib.get_close_matches(name, accelerator_groups(), n=1)
            raise InputError(f"{f.origin}: {key} names {shorten(repr(name))}, which is no "
                             "accelerator group" + (f" (did you mean {close[0]!r}?)" if close
                                                    else "")
                             + f"; the groups: {', '.join(accelerator_groups())}")
        for group in _SPLIT_GROUPS.get(name, (name,)):
            out.setdefault(group, value)
    return out


def _share_story(base: float, groups: Mapping[str, float], group: str,
                 stand_in: str) -> str:
    """A profile's share on a card of ``group``: its base, times its group's fitted multiplier
    if any (``stand_in``: the group it borrows, where its own was not fitted)."""
    borrowed = "" if stand_in == group else \
        f", {stand_in}'s (no {group} rows fitted; the same vendor's best-covered group)"
    if stand_in not in groups:
        return f"{base:.4g}, no multiplier fitted for {stand_in}{borrowed}"
    return f"{base:.4g} × {groups[stand_in]:.4g} for {stand_in}{borrowed} (at most 1)"


MIN_GROUP_ROWS = 8  # a group gets its own multiplier only with this many rows
# How many times wider each way an expectation's band reads where the profile saw fewer than
# MIN_GROUP_ROWS rows on the card's group: such rows held out miss by 2-12x, not the fit's
# p10/p90 (docs/accuracy.md: llama.cpp-vulkan's 5 rows held out by source, median 115 %;
# an MI300X's prompts 12x and a Radeon 8060S's 4-5x with no like card to learn from).
UNSEEN_GROUP_BAND = 3.0
MAX_OVERHEAD_S = 10.0  # a fixed cost per step or layer past this is not an engine's
MAX_MULTIPLIER = 100.0  # a group's efficiency multiplier, a band's upper edge
# the least share of a rated figure a profile's efficiency, multiplier or band edge may be:
# under 1 % is a broken profile, not a slow engine (1e-300 printed a 300-digit step time)
MIN_SHARE = 1 / MAX_MULTIPLIER
# The fit's error at a group's largest fitted batch past which batch_range_caution calls a
# prediction beyond it likely optimistic: within it, the rows there read about as well as the
# fit's others (the serving fit's band: measured ÷ predicted 0.82–1.12).
OPTIMISTIC_AT_EDGE = 0.10
# The rows near a group's largest fitted batch (within one doubling of it) its error there needs:
# three, so that no one row sets their median (one TensorRT-LLM static batch of 1,280 on four
# A100s read +237 %, where the serving fit's other rows at 1,024-2,048 read -11 % to +21 %)
MIN_EDGE_ROWS = 3
MAX_BANDWIDTH_BYTES_PER_S = 1e15  # a ceiling past a petabyte per second is no ceiling
MAX_OPS_PER_WEIGHT = 1000.0  # unpacking a weight costs tens of operations, not thousands
MAX_TILE_TOKENS = 4096.0  # a matmul kernel's tile is tens to hundreds of columns wide
# llama.cpp runs batches of up to 8 through its matrix-vector kernels (MMVQ_MAX_BATCH_SIZE
# in ggml-cuda/mmvq.cuh): decode rows that small show its bandwidth ceiling
MATVEC_TOKENS = 8


def has_alu_matmuls(engine: str) -> bool:
    """Whether an engine's matmuls run on the GPU's vector ALUs, so that unpacking a K-quant
    weight competes with multiplying it: llama.cpp's Metal build (Apple's GPUs through M4
    have no matrix units; the catalog's fp16 peak is their ALUs')."""
    return engine == "llama.cpp-metal"


def has_matvec_ceiling(engine: str) -> bool:
    """Whether an engine's decode runs its own matrix-vector kernels, whose bounded bytes in
    flight cap the bandwidth they reach (llama.cpp's builds: ggml's MMVQ and GEMV kernels,
    used at every batch its decode rows have). The serving engines' GEMM libraries choose a
    kernel per shape; fitted on all their rows they show no ceiling, and a fold left with
    only their single-sequence rows must not invent one for their large batches."""
    return engine.startswith("llama.cpp")


def has_fused_projections(engine: str) -> bool:
    """Whether launches.py's matmul counts describe an engine's kernels: the serving engines
    fuse Q, K and V into one matmul and gate and up into another, as vLLM's model files do
    (SGLang and TensorRT-LLM alike). llama.cpp's graphs run each projection apart."""
    return engine in ("vllm", "sglang", "trtllm")


def prices_moe_layers(engine: str) -> bool:
    """Whether a routed-expert layer costs an engine more than a dense one beside its bytes:
    llama.cpp's graph runs its routing as nodes of their own (EngineProfile.
    moe_layer_overhead_s); the serving engines' cost per weight matmul counts the router and
    the grouped expert kernels (launches.py)."""
    return engine.startswith("llama.cpp")


def has_tiled_experts(engine: str) -> bool:
    """Whether a prompt step is priced with each expert's tokens padded to a matmul tile of a
    fixed width (llama.cpp's mul_mat_id over its MMQ kernels). The serving engines' fused MoE
    kernels pad each expert too (vLLM's and SGLang's moe_align_block_size, to BLOCK_SIZE_M of
    16-128), but a tile fitted for them with validation/moe_prefill.csv came out at 40 tokens
    on every row, at 1,700-1,900 in some held-out folds, and alone changed the error almost
    nothing, so none is priced for them: what those rows show is priced for vLLM as a slowdown
    of its experts' prompt arithmetic instead (moe_prompt_expert_slowdown)."""
    return engine.startswith("llama.cpp")


@lru_cache(maxsize=64)
def moe_prompt_expert_slowdown(engine: str) -> float:
    """How many times its priced arithmetic the routed experts' matmuls take on a step that
    carries prompt tokens (engines.json's moe_prompt_expert_slowdown, fitted by
    scripts/fit_moe_prompt_slowdown.py, its source there; 1 for an engine without one).
    vLLM's fused MoE kernels reach a fraction of the compute share its dense GEMMs do: 4.9,
    so where the serving profile prices matmuls at 0.561 of peak its experts' prompt
    arithmetic runs at 0.11. A decode-only step's experts are priced as before (their
    weights' bytes, not their arithmetic, bound them)."""
    rule = engine_defaults(engine).get("moe_prompt_expert_slowdown")
    return float(rule["value"]) if rule else 1.0


# 'llama.cpp' unqualified: the build a card's vendor runs (else the CUDA build)
LLAMACPP_BUILDS = {"apple": "llama.cpp-metal", "amd": "llama.cpp-rocm",
                   "intel": "llama.cpp-vulkan"}


def names_plain_llamacpp(name: str) -> bool:
    """Whether an engine name (or any entry of a comma-separated list) is 'llama.cpp' with no
    build named."""
    return any(normalise(part.strip()) in ("llama.cpp", "llamacpp") for part in name.split(","))


def llamacpp_build(name: str, vendor: str) -> str:
    """'llama.cpp' or 'llamacpp' as the build for ``vendor`` (Metal on a Mac, ROCm on AMD);
    any other engine name, a comma-separated list's entries too, as given."""
    return ",".join(LLAMACPP_BUILDS.get(vendor, "llama.cpp-cuda")
                    if names_plain_llamacpp(part) else part.strip() for part in name.split(","))


@lru_cache(maxsize=256)  # a fit names each row's engine under every trial profile
def engine_id(name: str) -> str:
    """The engine ``name`` spells ('TensorRT-LLM': trtllm); an unknown one is refused naming
    the nearest spelling ('sglng': did you mean 'sglang'?)."""
    key = normalise(name)
    key = _ALIASES.get(key, key)
    if key not in ENGINES:
        near = nearest_spelling(key, [*ENGINES, *_ALIASES])  # 'sglng': 0.91 alike to sglang
        raise InputError(f"unknown engine {name!r}"
                         + (f" (did you mean {near!r}?)" if near else "")
                         + f"; known: {', '.join(ENGINES)}")
    return key


@lru_cache(maxsize=1)
def bundled_profiles() -> dict[str, EngineProfile]:
    """Fitted profiles where measurements exist, priors elsewhere (data/profiles.json)."""
    data = load_data("profiles.json")
    return {e: EngineProfile.from_dict(p, f"profiles.json:{e}") for e, p in data["engines"].items()}


def bundled_twins(profile: EngineProfile) -> tuple[str, ...]:
    """The engines whose bundled profile is ``profile`` under their own names, sorted: the
    serving engines share one, so each names all three; a profile of the user's own
    calibration names none."""
    return tuple(sorted(e for e, p in bundled_profiles().items()
                        if replace(profile, engine=e) == p))


def profile_for(engine: str, profiles: Mapping[str, EngineProfile] | None = None) -> EngineProfile:
    table = profiles or bundled_profiles()
    key = engine_id(engine)
    if key in table:
        return table[key]
    base = bundled_profiles()
    if key in base:
        return base[key]
    raise InputError(f"no profile for engine {engine!r}")


def chosen_profile(engine: str, path: str | None = None) -> EngineProfile:
    """The profile one engine's prediction runs on: the user's file's (which must hold one
    for it: a file calibrated on other engines is not silently passed over), else the
    bundled one."""
    if path is None:
        return profile_for(engine)
    profiles = load_profile_file(path)
    key = engine_id(engine)
    if key not in profiles:
        raise InputError(f"{path} holds no profile for {key} (it has "
                         f"{', '.join(sorted(profiles))}): calibrate on {key} rows, or name "
                         "one of those with --engine")
    return profiles[key]


def load_profile_file(path: str) -> dict[str, EngineProfile]:
    """A user's calibrated profiles (``ridgeline calibrate -o``), keyed by engine."""
    try:
        data = json_loads(read_text(path, what="a profile JSON file"), shorten_path(path))
    except FileNotFoundError:
        raise InputError(f"no such profile file: {path}") from None
    except InputError:  # a folder, or past the size bound: said whole
        raise
    except (OSError, ValueError) as exc:  # JSON, UTF-8 and over-long numbers
        raise InputError(f"{path} is not a profile JSON file ({shorten(str(exc))})") from None
    engines = data.get("engines") if isinstance(data, dict) else None
    if not isinstance(engines, dict) or not engines:
        raise InputError(f"{path}: expected {{\"engines\": {{name: profile}}}}")
    def named(engine: str) -> str:  # the file named in an unknown engine's refusal
        try:
            return engine_id(engine)
        except InputError as exc:
            raise InputError(f"{path}: {exc}") from None

    profiles = {named(e): EngineProfile.from_dict(p, path) for e, p in engines.items()}
    for key, profile in profiles.items():  # SGLang's fit pasted under "vllm" ran as vLLM's
        if named(profile.engine) != key:
            raise InputError(f"{path}: the profile under {key!r} says \"engine\": "
                             f"{shorten(repr(profile.engine))}; which engine was it fitted on?")
    return profiles
