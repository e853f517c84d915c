"""`ridgeline moe MODEL [--gpu G] [--engine E] [--batch N]`: what routing saves, and what it
does not, on the checkpoint as --engine serves it (none: the card's default, as roofline's;
the checkpoint as stored where that is vLLM)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ridgeline.dense_ridge import engine_ridge_step
from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.explain import Step, q, step
from ridgeline.moe import article_tokens_per_expert, expected_experts_touched, routed_fraction
from ridgeline.quantization import ROUTED
from ridgeline.raw_fit import FitCheck, device_fit
from ridgeline.render import table
from ridgeline.reports.expectation import weights_fit_dict
from ridgeline.roofline import (
    expert_intensity,
    expert_ridge_batch,
    first_whole_batch,
    ridge_point,
    ridge_step,
)
from ridgeline.step_work import weight_bytes_read
from ridgeline.units import GB

TABLE_BATCHES = (1, 8, 32, 128, 512, 2048)  # the table's ladder where no batch is asked
EXPLAIN_BATCH = 32  # … and the batch its --explain works through (the article's)


@dataclass(frozen=True)
class MoERow:
    batch: int
    experts_touched: float
    article_tokens_per_expert: float  # tokens per expert, B·k/E
    intensity_flop_per_byte: float
    weight_bytes_read: float


@dataclass(frozen=True)
class MoEReport:
    model: str
    accelerator: str
    num_experts: int
    experts_per_token: int
    shared_experts: int
    routed_fraction: float
    ridge: float
    article_batch_to_ridge: float
    better_batch_to_ridge: float
    weight_bytes_total: float
    expert_bytes: float
    expert_bytes_per_weight: float
    rows: tuple[MoERow, ...]
    batches: tuple[int, ...]  # the table's batches: those asked (--batch), else the ladder
    steps: tuple[Step, ...]
    fit: str = ""  # where the weights overflow the card: the DOES NOT FIT line
    # the article's batch at its 2-byte (bf16) experts, where these are stored narrower
    article_bf16_batch_to_ridge: float | None = None
    article_bf16_ridge: float = 0.0  # the 16-bit ridge that batch is reckoned against
    num_gpus: int = 1  # the deployment's: the table's weights read are all its GPUs' together
    # the deployment as --json names it, every answer's keys (reports.roofline's
    # served_identity: the engine None on vLLM's card where --engine was not given, the
    # checkpoint as stored)
    identity: tuple[tuple[str, Any], ...] = ()
    weights_check: FitCheck | None = None  # the weights against the GPUs' memory
    copies: str = ""  # the GPUs' weights beyond weight_bytes_total (TP copies), in words

    @property
    def gpu_weight_bytes(self) -> float:
        """The weights the GPUs hold together, TP copies included (the fit line's)."""
        return self.weights_check.weight_bytes if self.weights_check else self.weight_bytes_total

    @property
    def article_intensity_per_batch(self) -> float:
        """The article's rule's factor: intensity over all experts ≈ B × this (2 × k/E ÷ bytes
        per expert weight; gpt-oss-120b's 0.53 B mxfp4 experts: 0.118)."""
        return 2 * self.routed_fraction / self.expert_bytes_per_weight

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in vars(self).items()
                if k not in ("rows", "steps", "fit", "identity", "weights_check", "copies")}
        data["ridge_flop_per_byte"] = data.pop("ridge")
        data["article_bf16_ridge_flop_per_byte"] = data.pop("article_bf16_ridge")
        data["rows"] = [dict(vars(r)) for r in self.rows]
        # whether the weights alone load, and by how much they miss (roofline's keys)
        data.update(weights_fit_dict(self.weights_check))
        data["article_intensity_per_batch"] = self.article_intensity_per_batch
        return {**dict(self.identity), **data}

    def text_lines(self) -> list[str]:
        lines = [
            *([self.fit] if self.fit else []),
            f"{self.model}: {self.experts_per_token} of {self.num_experts} routed experts per "
            f"token (k/E = {self.routed_fraction:.4f}), {self.shared_experts} shared",
            f"  the article's rule: intensity over all experts ≈ B × k/E × 2 ÷ "
            f"{self.expert_bytes_per_weight:.2f} B per expert weight = B × "
            f"{self.article_intensity_per_batch:.3f}"
            f"; reaching the {self.accelerator} ridge ({self.ridge:,.0f}) needs a batch near "
            f"{first_whole_batch(self.article_batch_to_ridge):,}",  # roofline's MoE row's
            *([f"  (the article reckons at 2-byte experts on the 16-bit ridge, here "
               f"{self.article_bf16_ridge:,.0f}: B × {self.routed_fraction:.3f}, a batch near "
               f"{first_whole_batch(self.article_bf16_batch_to_ridge):,}; `--weights bf16` "
               "shows that reckoning)"]
              if self.article_bf16_batch_to_ridge is not None else []),
            f"  with the experts a batch really touches, E·(1 − (1 − k/E)^B): batch "
            f"{self.better_batch_to_ridge:,.0f}",
            "",
        ]
        rows = [[f"{r.batch:,}", f"{r.experts_touched:,.1f}",
                 three_figures(r.article_tokens_per_expert),
                 f"{r.intensity_flop_per_byte:,.1f}", f"{r.weight_bytes_read / GB:,.1f} GB"]
                for r in self.rows]
        # the table's intensity is over the experts a batch reads, not all of them: the
        # headline's B × k/E counts every expert as read
        lines += table(rows, ["batch", "experts touched", "B·k/E", "FLOP/byte of experts read",
                              "weights read per step" + (f", all {self.num_gpus} GPUs"
                                                         if self.num_gpus > 1 else "")])
        lines += [
            "",
            f"MoE cuts traffic, not capacity: all {self.weight_bytes_total / GB:,.1f} GB of "
            f"weights stay in memory ({self.expert_bytes / GB:,.1f} GB of it experts"
            + (f"; {self.gpu_weight_bytes / GB:,.1f} GB on the GPUs with the {self.copies}"
               if self.copies else "")
            + "), because the router can send the next token to any expert.",
        ]
        return lines


def moe_report(dep: Deployment, batches: list[int] | None = None) -> MoEReport:
    """Routing's arithmetic, its table at each of ``batches`` (None: the ladder
    TABLE_BATCHES, its --explain at the article's batch of 32)."""
    spec = dep.model
    if spec.moe is None:
        raise InputError(f"{spec.name} is a dense model: it has no experts to route")
    moe = spec.moe
    bpw = dep.bytes_per_weight_split[1]  # the experts' own format
    peak = dep.peak_at(dep.expert_compute_dtype)  # the engine's, as the step prices it
    ridge = ridge_point(peak, dep.accelerator.memory_bandwidth_bytes_per_s)
    article_batch = dep.expert_ridge_batch
    better = _batch_reaching(ridge, dep)
    rows = tuple(
        MoERow(b, expected_experts_touched(moe.num_experts, moe.experts_per_token, b),
               article_tokens_per_expert(b, moe.experts_per_token, moe.num_experts),
               expert_intensity(b, spec, bpw), weight_bytes_read(dep, b))
        for b in (sorted(set(batches)) if batches else TABLE_BATCHES)
    )
    explained = batches or [EXPLAIN_BATCH]
    steps = (
        engine_ridge_step(dep, dep.expert_compute_dtype),
        step("routed fraction", "experts per token ÷ routed experts",
             q("k/E", routed_fraction(moe.experts_per_token, moe.num_experts)),
             q("experts per token", moe.experts_per_token, "", "num_experts_per_tok"),
             q("routed experts", moe.num_experts, "", "config.json")),
        step("article's batch to the ridge", "⌈(ridge × bytes per expert weight ÷ 2) ÷ (k/E)⌉: "
             "the first whole batch at or past it, roofline's MoE row's",
             q("batch", first_whole_batch(article_batch)), q("ridge", ridge, "FLOP/byte"),
             q("bytes per expert weight", bpw, "B"), q("k/E", moe.routed_fraction)),
        *(step("experts touched by the batch" + (f" of {b:,}" if len(explained) > 1 else ""),
               "E × (1 − (1 − k/E)^B)",
               q("experts", expected_experts_touched(moe.num_experts, moe.experts_per_token, b)),
               q("E", moe.num_experts), q("k/E", moe.routed_fraction),
               q("B", b, "", "--batch" if batches else "the article's batch")) for b in explained),
        *(st for r in rows for st in _row_steps(dep, r, r.batch not in explained)),
    )
    fits = device_fit(dep)
    sixteen = dep.accelerator.first_supported(("bf16", "fp16"))
    copies = _copies_words(dep)
    overflow = "" if fits.fits else (
        f"{fits.headline()} (the weights alone, on {dep.num_gpus} x {dep.accelerator.id}"
        + (f": {dep.weight_bytes / GB:,.1f} GB as stored + {copies}" if copies else "")
        + "): the figures below are arithmetic only")
    report = MoEReport(spec.name, dep.accelerator.id, moe.num_experts, moe.experts_per_token,
                       moe.num_shared_experts, moe.routed_fraction, ridge, article_batch, better,
                       dep.weight_bytes, dep.expert_bytes, bpw, rows,
                       tuple(r.batch for r in rows), steps, overflow,
                       None if bpw == 2.0 else expert_ridge_batch(
                           dep.accelerator, sixteen, 2.0, moe.routed_fraction),
                       ridge_point(dep.accelerator.peak(sixteen),
                                   dep.accelerator.memory_bandwidth_bytes_per_s), dep.num_gpus,
                       weights_check=fits, copies=copies)
    return replace(report, steps=(() if fits.fits else (fits.shortfall_step(),)) + steps
                   + _header_steps(dep, report, sixteen))


def _copies_words(dep: Deployment) -> str:
    """The weights the GPUs hold beyond the checkpoint's, as `kv`'s budget line says them, or
    "" under 0.05 GB (moe takes no data parallelism): DeepSeek-V3 on 8 H100s at TP8 holds
    673.2 GB as stored and 8.0 GB of what every tensor-parallel rank keeps whole, 681.1 GB
    against the memory."""
    if dep.tp_copies_bytes < 0.05e9:  # shown as 0.1 GB or more
        return ""
    return f"{dep.tp_copies_bytes / GB:,.1f} GB of copies every tensor-parallel rank keeps whole"


def _header_steps(dep: Deployment, r: MoEReport, sixteen: str) -> tuple[Step, ...]:
    """The header's and footer's figures: the article's factor, its 16-bit reckoning, the
    batch the touched experts reach the ridge at, and the weights that stay in memory."""
    moe = dep.model.moe
    assert moe is not None  # moe_report refuses a dense model first
    out = [step("article's intensity per token of batch", "2 × k/E ÷ bytes per expert weight "
                "(the article's rule: intensity over all experts ≈ B × this)",
                q("factor", r.article_intensity_per_batch, "FLOP/byte per token"),
                q("k/E", r.routed_fraction), q("bytes per expert weight",
                                               r.expert_bytes_per_weight, "B"))]
    if r.article_bf16_batch_to_ridge is not None:
        out += [replace(ridge_step(dep.accelerator, sixteen), label="16-bit ridge point"),
                step("article's batch to the 16-bit ridge", "⌈(16-bit ridge × 2 B ÷ 2) ÷ "
                     "(k/E)⌉: the article's reckoning at 2-byte experts",
                     q("batch", first_whole_batch(r.article_bf16_batch_to_ridge)),
                     q("16-bit ridge", r.article_bf16_ridge, "FLOP/byte"),
                     q("bytes per expert weight", 2.0, "B", "the article's bf16"),
                     q("k/E", r.routed_fraction))]
    if r.better_batch_to_ridge != float("inf"):
        b = r.better_batch_to_ridge
        out.append(step("batch to the ridge with the experts touched", "the smallest whole B "
                        "with 2 × B × k ÷ (E × (1 − (1 − k/E)^B) × bytes per expert weight) ≥ "
                        "ridge (bisection; the intensity rises with B)", q("batch", b),
                        q("ridge", r.ridge, "FLOP/byte"), q("k", moe.experts_per_token),
                        q("E", moe.num_experts),
                        q("bytes per expert weight", r.expert_bytes_per_weight, "B"),
                        q("intensity at that batch", expert_intensity(b, dep.model,  # type: ignore[arg-type]
                                                                      r.expert_bytes_per_weight),
                          "FLOP/byte")))
    routed = [c for c in dep.bytes_by_category if c in ROUTED]
    out += [step("weights in memory", "Σ every category's bytes (all stay: the router can "
                 "send the next token to any expert)",
                 q("weights", r.weight_bytes_total / GB, "GB"),
                 *(q(c, v / GB, "GB") for c, v in dep.bytes_by_category.items() if v)),
            step("of which routed experts", "Σ the routed experts' categories",
                 q("experts", r.expert_bytes / GB, "GB"),
                 *(q(c, dep.bytes_by_category[c] / GB, "GB") for c in routed))]
    return tuple(out)


def _row_steps(dep: Deployment, r: MoERow, touched_too: bool) -> tuple[Step, ...]:
    """A table row's columns, each its division: the experts the batch touches (where the
    step above has not), the article's tokens per expert, the intensity over the experts read
    and the weights a step reads (gpt-oss-120b at batch 32: 81.7 of 128 touched)."""
    moe = dep.model.moe
    assert moe is not None  # moe_report refuses a dense model first
    b, bpw = r.batch, dep.bytes_per_weight_split[1]
    share = r.experts_touched / moe.num_experts
    return (
        *((step(f"batch {b:,}: experts touched", "E × (1 − (1 − k/E)^B)",
                q("experts", r.experts_touched), q("E", moe.num_experts),
                q("k/E", moe.routed_fraction), q("B", b)),) if touched_too else ()),
        step(f"batch {b:,}: B·k/E", "batch × experts per token ÷ routed experts (the "
             "article's tokens per expert)", q("B·k/E", r.article_tokens_per_expert),
             q("B", b), q("k", moe.experts_per_token), q("E", moe.num_experts)),
        step(f"batch {b:,}: FLOP/byte of experts read", "2 × B × k ÷ (experts touched × bytes "
             "per expert weight)", q("intensity", r.intensity_flop_per_byte, "FLOP/byte"),
             q("B", b), q("k", moe.experts_per_token), q("experts touched", r.experts_touched),
             q("bytes per expert weight", bpw, "B")),
        step(f"batch {b:,}: weights read per step", "dense weights + routed experts × share "
             "touched + the copies every tensor-parallel rank keeps whole",
             q("weights read", r.weight_bytes_read / GB, "GB"),
             q("dense weights", dep.non_expert_bytes_read / GB, "GB",
               "every weight but the routed experts and the input embedding (a lookup of a "
               "few rows), at their bytes each: attention, any shared experts, routers, norms, "
               "the LM head"),
             q("routed experts", dep.expert_bytes / GB, "GB"),
             q("share touched", share, "", "experts touched ÷ E"),
             q("TP copies", dep.tp_copies_bytes / GB, "GB")),
    )


def _batch_reaching(ridge: float, dep: Deployment) -> float:
    """Smallest whole batch whose expert intensity reaches the ridge (bisection; it rises with
    B), as roofline's first whole batch at or past the ridge: gpt-oss-120b on an H100 crosses
    at B = 2,510.4, so 2,511 (2,510 reads 295.29 FLOP/byte, under the ridge's 295.34)."""
    lo, hi = 1.0, 1e9
    bpw = dep.bytes_per_weight_split[1]
    if expert_intensity(int(hi), dep.model, bpw) < ridge:
        return float("inf")
    for _ in range(100):
        mid = (lo + hi) / 2
        if expert_intensity(mid, dep.model, bpw) >= ridge:  # type: ignore[arg-type]
            hi = mid
        else:
            lo = mid
    whole = max(1, math.floor(hi))  # the bisection's edge may sit a hair past a whole batch
    while expert_intensity(whole, dep.model, bpw) < ridge:
        whole += 1
    return float(whole)


def three_figures(x: float) -> str:
    """B·k/E to three figures, whole past 100: batch 1 of Qwen3.6's 8 of 256 is 0.0312 tokens
    an expert (two decimals read 0.03), Kimi-K2's 8 of 384 0.0208 (not 0.02, the same as
    Qwen3-Next's 10 of 512, 0.0195); batch 100,000 of Mixtral's 2 of 8 is 25,000 (not
    25,000.00)."""
    if x <= 0:
        return "0"
    return f"{x:,.{max(0, 2 - math.floor(math.log10(x)))}f}"
