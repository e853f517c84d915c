"""`ridgeline roofline --gpu G [--batch N]`: the ridge, and where each part of a step sits."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ridgeline.context_length import served_context_caution
from ridgeline.cost import Seq, attention_rates, batch_shape, sparse_decode_read, state_work
from ridgeline.dense_ridge import dense_ridge_steps, engine_ridge_step
from ridgeline.deployment import Deployment
from ridgeline.explain import Step, q, step
from ridgeline.hardware import CUSTOM_SOURCE, Accelerator
from ridgeline.layouts import LINEAR, MAMBA
from ridgeline.moe import article_tokens_per_expert, expected_experts_touched
from ridgeline.raw_fit import FitCheck, device_fit
from ridgeline.render import table
from ridgeline.reports.expectation import weights_fit_dict
from ridgeline.reports.identity import card_identity_json, identity_json
from ridgeline.roofline import (
    RIDGE_BATCH_DIGITS,
    OperatingPoint,
    arithmetic_share,
    batch_for_intensity,
    decode_attention_intensity,
    expert_intensity,
    expert_ridge_batch,
    first_whole_batch,
    operating_point,
    ridge_point,
    ridge_step,
    weight_intensity,
)
from ridgeline.side_by_side import NotRun, not_run_dict
from ridgeline.sparse_attention import sparse_topk
from ridgeline.units import fmt_share, plural

ARTICLE_GQA_GROUP = 8  # "eight of them, on the models in this series"

GIVEN_POINT = "the intensity you gave"  # --intensity's row: a point at the FLOP/byte given


@dataclass(frozen=True)
class RooflineReport:
    accelerator: Accelerator
    compute_dtype: str
    batch: int
    prompt_len: int
    model: str | None
    points: tuple[OperatingPoint, ...]
    steps: tuple[Step, ...]
    fit: str = ""  # where --model's weights overflow the card: the DOES NOT FIT line
    caution: str = ""  # --model with a prompt past its trained context
    num_gpus: int = 1  # --model's deployment: the fit line counts them all; the ridge is each's
    intensity_per_token: float = 0.0  # 2 FLOP ÷ bytes per weight: the notes' "batch × N"
    # the ridges the notes quote where attention's, or the experts', matmuls run at another dtype
    attention_ridge: float | None = None
    expert_ridge: float | None = None
    # llama.cpp's layer split (-sm layer, its default over several GPUs): each GPU runs its
    # own layers in turn, not a tensor-parallel share of every layer
    layer_split: bool = False
    # --model's deployment: the peak its engine runs compute_dtype at, the step's price's
    # (Deployment.peak_at), and why where it is not the catalog's; 0: the catalog's
    engine_peak_flops_per_s: float = 0.0
    peak_note: str = ""
    # --model's deployment as --json names it, every answer's keys (reports.identity; the
    # engine None where none was named: the checkpoint as stored); (): the card alone's
    identity: tuple[tuple[str, Any], ...] = ()
    weights_check: FitCheck | None = None  # --model's weights against the GPUs' memory
    # where the dense weights' matmuls run at a blend of dtypes (fp8 projections beside a
    # bf16 one), the blend's label, its ridge (which their rows use, and the header's is not)
    # and their rows' name ("dense weight matrices" on a MoE)
    dense_blend: tuple[str, float, str] | None = None

    @property
    def peak_flops_per_s(self) -> float:
        """The header's peak: the deployment's engine's (llama.cpp's CUDA build on a GeForce
        card: fp16 accumulate's), else the catalog's at compute_dtype."""
        return self.engine_peak_flops_per_s or self.accelerator.peak(self.compute_dtype)

    @property
    def ridge(self) -> float:
        return ridge_point(self.peak_flops_per_s, self.accelerator.memory_bandwidth_bytes_per_s)

    @property
    def llamacpp_ridge(self) -> float | None:
        """The ridge llama.cpp's CUDA build meets on a 16-bit step: it multiplies fp16 with
        fp16 accumulation, which a GeForce card runs at twice the rate its spec sheet
        quotes with fp32 accumulation (Deployment.peak_at). None where the card has no such
        rate, the dtype is not 16-bit, or a --model's deployment already names its engine's
        peak in the header."""
        a = self.accelerator
        fast = a.fp16_accumulate_flops
        if fast is None or a.resolve_dtype(self.compute_dtype) not in ("fp16", "bf16") \
                or self.model is not None:
            return None
        return ridge_point(fast, a.memory_bandwidth_bytes_per_s)

    def to_dict(self) -> dict[str, Any]:
        a = self.accelerator
        return {
            **(dict(self.identity) if self.identity
               else card_identity_json(a, self.num_gpus)),
            "price_per_gpu_hour_usd": a.price_per_hour_usd,
            "compute_dtype": a.resolve_dtype(self.compute_dtype),
            "peak_flops_per_s": self.peak_flops_per_s,
            "memory_bandwidth_bytes_per_s": a.memory_bandwidth_bytes_per_s,
            "ridge_flop_per_byte": self.ridge,
            "llama_cpp_cuda_ridge_flop_per_byte": self.llamacpp_ridge, "batch": self.batch,
            "prompt_len": self.prompt_len,
            "points": [{**{("intensity_flop_per_byte" if k == "intensity" else k): v
                           for k, v in vars(p).items()},
                        "first_whole_batch_to_ridge": None if p.batch_to_ridge is None
                        else first_whole_batch(p.batch_to_ridge)} for p in self.points],
            # whether --model's weights alone load, and by how much they miss (null: no model)
            **weights_fit_dict(self.weights_check),
            "intensity_per_token_flop_per_byte": self.intensity_per_token,
            "attention_ridge_flop_per_byte": self.attention_ridge,
            "expert_ridge_flop_per_byte": self.expert_ridge,
            # the dense weights' blended ridge where their matmuls mix dtypes, else null
            "dense_ridge_flop_per_byte": None if self.dense_blend is None
            else self.dense_blend[1],
            "cautions": [self.caution] if self.caution else [],
        }

    def text_lines(self) -> list[str]:
        a = self.accelerator
        dtype = a.resolve_dtype(self.compute_dtype)
        lines = [*([self.fit] if self.fit else []),
            (f"{self.num_gpus} x {a.id}, each " if self.num_gpus > 1 else f"{a.id}: ")
            + f"{self.peak_flops_per_s / 1e12:,.1f} TFLOP/s "
            # a custom card's one peak is the flag's, which custom_accelerator reads as bf16
            + (f"(dense, --peak-tflops as given, read as {dtype}) ÷ "
               if a.sources == (CUSTOM_SOURCE,) else f"({dtype}, dense) ÷ ")
            + f"{a.bandwidth_tb_s:.3g} TB/s = ridge at {self.ridge:,.0f} FLOP/byte"
            + ("" if self.num_gpus == 1 else
               " (llama.cpp's layer split: each GPU runs its own layers in turn, at its own "
               "peak and bandwidth: the same ridge)" if self.layer_split else
               " (tensor parallelism adds peak and bandwidth alike: the same ridge)"),
            *([f"  {self.peak_note}"] if self.peak_note else []),
            *([] if self.dense_blend is None else [
                f"  that ridge is {dtype}'s alone; the {self.dense_blend[2]}' matmuls run at "
                f"{self.dense_blend[0]}, whose ridge, {self.dense_blend[1]:,.0f} FLOP/byte, their "
                "rows below use (as `utilization` and `prefill` quote it)"]),
            *([] if (fast := self.llamacpp_ridge) is None else [
                f"  llama.cpp's CUDA build multiplies fp16 with fp16 accumulation, "
                f"{fast * a.memory_bandwidth_bytes_per_s / 1e12:,.1f} TFLOP/s here: its "
                f"ridge is at {fast:,.0f} FLOP/byte"]),
            f"batch {self.batch:,}" + (f", model {self.model}" if self.model else "")
            + f", prompt {self.prompt_len:,} {plural(self.prompt_len, 'token')}", "",
        ]
        # a part whose matmuls run at another dtype (attention at the cache's) is a share of
        # that dtype's peak, said so
        rows = [[p.name, tenths(p.intensity), tenths(p.attainable_flops_per_s / 1e12),
                 share_text(p.fraction_of_peak) + (f" of {p.dtype}" if p.dtype and p.dtype != dtype
                                                else ""),
                 "-" if p.batch_to_ridge is None else whole_batch(p.batch_to_ridge)]
                for p in self.points]
        lines += table(rows, ["part of the step", "FLOP/byte", "TFLOP/s", "of peak",
                              "batch to ridge"])
        notes = [f"  {p.name}: {p.note}" for p in self.points if p.note]
        return lines + (["", *notes] if notes else []) + (
            [f"caution: {self.caution}"] if self.caution else [])


@dataclass(frozen=True)
class RooflineComparison:
    """The same question on several accelerators: their ridges side by side."""

    reports: tuple[RooflineReport, ...]
    not_run: tuple[NotRun, ...] = ()  # the cards named that cannot run it, and why

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(replace(st, label=f"{r.accelerator.id}: {st.label}")
                     for r in self.reports for st in r.steps)

    def to_dict(self) -> dict[str, Any]:
        return {"accelerators": [r.to_dict() for r in self.reports],
                **not_run_dict(self.not_run, "accelerator")}

    def text_lines(self) -> list[str]:
        first = self.reports[0]
        # --intensity: each card's point at it, as one card's table gives it its own row
        given = [next((p for p in r.points if p.name == GIVEN_POINT), None)
                 for r in self.reports]
        at = next((p.intensity for p in given if p is not None), None)
        rows = []
        for r, point in zip(self.reports, given):
            a, weights = r.accelerator, r.points[0]
            dtype = a.resolve_dtype(r.compute_dtype)
            rows.append([a.id, f"{r.peak_flops_per_s / 1e12:,.1f} {dtype}", f"{a.bandwidth_tb_s:.3g}",
                         f"{r.ridge:,.0f}", share_text(weights.fraction_of_peak),
                         "-" if weights.batch_to_ridge is None
                         else whole_batch(weights.batch_to_ridge),
                         *([] if at is None else ["-" if point is None else
                           f"{tenths(point.attainable_flops_per_s / 1e12)} "
                           f"({share_text(point.fraction_of_peak)})"])])
        given_head = [] if at is None else [f"TFLOP/s at {figure(at)} FLOP/byte"]
        given_note = [] if at is None else [
            f"TFLOP/s at {figure(at)} FLOP/byte: what --intensity attains on each card, "
            "min(peak, intensity × bandwidth), and its share of the peak"]
        return [f"ridge = peak FLOP/s ÷ bandwidth; decode at batch {first.batch:,}"
                + (f", model {first.model}" if first.model else ""), "",
                *table(rows, ["accelerator", "TFLOP/s (dense)", "TB/s", "ridge FLOP/byte",
                              "of peak", "batch to ridge", *given_head]),
                *(e.line for e in self.not_run),
                "", "of peak: the weight matrices' share of the arithmetic at this batch; "
                "`--gpu NAME` alone for one card's every part of the step", *given_note,
                *(f"{r.accelerator.id}: the dense weights' matmuls run at {w.dtype}: their "
                  f"share and batch to ridge are at the blended {w.peak_flops_per_s / 1e12:,.1f} "
                  f"TFLOP/s, ridge {w.peak_flops_per_s / r.accelerator.memory_bandwidth_bytes_per_s:,.0f}"
                  for r in self.reports
                  if (w := r.points[0]).dtype != r.accelerator.resolve_dtype(r.compute_dtype)),
                *(f"{r.accelerator.id}: " + r.fit.replace("the points below are", "its row is")
                  for r in self.reports if r.fit)]


def intensity_per_token(bytes_per_weight: float) -> float:
    """FLOP per byte each token sharing a read of the weights adds: 2 FLOP ÷ bytes per weight
    (1.88 at DeepSeek-V3's 1.06-byte fp8 weights with their scales)."""
    return 2.0 / bytes_per_weight


def _times_tokens(what: str, bytes_per_weight: float) -> str:
    """How the weight intensity relates to the tokens sharing a read, at these bytes."""
    ratio = intensity_per_token(bytes_per_weight)
    if abs(ratio - 1.0) < 1e-9:
        return f"{what} itself, at 2-byte weights"
    # a hair off 2 bytes (a GGUF's bf16 with f32 norms, 2.0001) keeps the digits that show it:
    # "× 1" would not say why 4,000 prompt tokens read 3,999.9
    digits = 3 if f"{ratio:.3g}" != "1" else 5
    return f"{what} × {ratio:.{digits}g}, at {bytes_per_weight:.{digits}g}-byte weights"


def _attention_step(dep: Deployment, intensity: float, kv_bytes: float) -> Step:
    """The decode attention intensity of this model's attention, with its inputs."""
    att = dep.model.attention
    assert att is not None
    replicated = dep.kv_replication > 1
    copies = (q("KV replication", dep.kv_replication, "x",
                f"TP{dep.engine_tensor_parallel_size}{dep.dies_note}: each rank reads its copy "
                "of the cache for its share of the heads"),) if replicated else ()
    m = att.cached_latent
    if m:
        return step("decode attention intensity (MLA, absorbed)",
                    "heads × 2 × (2 × kv_lora_rank + qk_rope_head_dim) ÷ ((kv_lora_rank + "
                    "qk_rope_head_dim) × KV bytes per element"
                    + (" × KV replication)" if replicated else ")"),
                    q("intensity", intensity, "FLOP/byte"),
                    q("heads", att.num_heads, "", "num_attention_heads, config.json"),
                    q("kv_lora_rank", m.kv_lora_rank, "", "config.json"),
                    q("qk_rope_head_dim", m.qk_rope_head_dim, "", "config.json"),
                    q("KV bytes per element", kv_bytes, "B"), *copies)
    return step("decode attention intensity", "2 FLOP × GQA group ÷ "
                + ("(KV bytes per element × KV replication)" if replicated
                   else "KV bytes per element")
                + " (each K/V element serves the group's query heads)",
                q("intensity", intensity, "FLOP/byte"),
                q("GQA group", att.group_size, "",
                  "num_attention_heads ÷ num_key_value_heads, config.json"),
                q("KV bytes per element", kv_bytes, "B"), *copies)


def _sparse_attention(dep: Deployment, context: int) -> tuple[float, str, Step] | None:
    """A DeepSeek Sparse Attention model's decode attention after ``context`` cached tokens
    (--prompt-len), as the step cost prices it (cost.sparse_decode_read): the min(c + 1, k)
    latents its indexer picks and every key's indexer key, read for their FLOPs, each key's
    fp32 logit written and read back: an intensity that moves with the context (DeepSeek-V3.2
    at TP8, bf16 cache: 99.3 FLOP/byte at 65,536, where dense MLA's every latent gave 30.2 at
    any). None for any other model."""
    topk = sparse_topk(dep.model)
    if topk is None:
        return None
    flops, nbytes, latents, keys = sparse_decode_read(dep, context)
    intensity = flops / nbytes
    tp = dep.engine_tensor_parallel_size
    rank = f", per TP{tp} rank" if tp > 1 else ""
    note = (f"DeepSeek Sparse Attention after {context:,} cached tokens (--prompt-len): every "
            f"head reads the {latents:,} latents its indexer picks (index_topk {topk:,}), the "
            f"indexer scores {keys:,} keys at {dep.indexer_compute_dtype}; moves with the "
            "context, not the batch (each user's cache is private)"
            + (f"; at TP{tp}{dep.dies_note} each rank reads the whole latent and indexer keys "
               "for its share of the heads" if dep.kv_replication > 1 else ""))
    rates = attention_rates(dep)
    return intensity, note, step(
        "decode attention intensity (DeepSeek Sparse Attention)",
        "(FLOPs per latent × latents read + indexer FLOPs per key × keys scored) ÷ (latent "
        "bytes × latents read + (indexer key bytes + logit bytes) × keys scored), per "
        "attention layer"
        + rank + " (cost.attention_rates, the step cost's)",
        q("intensity", intensity, "FLOP/byte"),
        q("FLOPs per latent", rates.decode_flops_per_pair, "FLOP",
          "heads × 2 × (2 × kv_lora_rank + qk_rope_head_dim), absorbed MLA" + rank),
        q("latents read", latents, "", f"min({context:,} + 1, index_topk {topk:,})"),
        q("indexer FLOPs per key", rates.indexer_flops_per_pair, "FLOP",
          "2 × index_n_heads × index_head_dim, every rank the whole indexer"),
        q("keys scored", keys, "", f"the {context:,} cached and the new token's"),
        q("latent bytes", rates.kv_bytes_per_token, "B", "a token's latent, one rank's copy"),
        q("indexer key bytes", rates.indexer_bytes_per_token, "B",
          "index_head_dim fp8 + a float32 scale per 128"),
        q("logit bytes", rates.indexer_logit_bytes_per_pair, "B",
          "a key's float32 logit written by the indexer and read back by the top-k"),
        q("FLOPs", flops / 1e6, "MFLOP"), q("bytes", nbytes / 1e6, "MB"))


def _state_point(dep: Deployment, batch: int, acc: Accelerator,
                 compute_dtype: str) -> tuple[OperatingPoint, Step] | None:
    """A hybrid's recurrent layers on the roofline at a decode of ``batch``: each sequence's
    state read and written once a step, as decode counts it (cost.state_work, at the dtype
    the engine keeps it in; Nemotron-H-56B's 913 MB a sequence in vLLM, `kv`'s 870.3 MiB:
    1,825 MB of traffic), against 2 FLOP per state byte a token (cost.state_work: an fp32
    element's 8): 1 FLOP/byte whatever the batch, since each sequence's state is its own.
    None for a model without recurrent layers."""
    shape = batch_shape(dep, [Seq(1)] * batch)
    work = [state_work(dep, layer, shape) for layer in dep.model.layers
            if layer.mixer in (LINEAR, MAMBA)]
    if not work:
        return None
    flops, moved = sum(f for f, _ in work), sum(b for _, b in work)
    intensity = flops / moved
    tp = dep.tensor_parallel_size
    per_gpu = moved / shape.sequences  # state_work's share: one GPU's heads
    state = per_gpu / 2  # the traffic is the state read and written: twice the state
    share = f" ({state / 1e6:,.0f} MB on each GPU at TP{tp})" if tp > 1 else ""
    point = operating_point(
        "recurrent state (decode)", intensity, acc, acc.resolve_dtype(compute_dtype), None,
        f"{len(work)} recurrent layers: each sequence's state, {state * tp / 1e6:,.0f} MB"
        f"{share}, read and written every step: {per_gpu * tp / 1e6:,.0f} MB a sequence, the "
        "recurrent states' traffic decode counts; private to its sequence, so batching never "
        "moves it ('-')", dep.peak_at(compute_dtype))
    return point, step(
        "recurrent-state intensity", "2 FLOP × tokens × state ÷ (2 (read and written) × "
        "state × sequences): 2 FLOP per state byte a token (an fp32 element's 8, near the "
        "5-7 a recurrence's update and readout do per element)",
        q("intensity", intensity, "FLOP/byte"), q("tokens", shape.tokens, "", "one a sequence"),
        q("sequences", shape.sequences),
        q("state traffic per sequence", per_gpu / 1e6, "MB",
          f"{len(work)} recurrent layers' states read and written, at the dtypes "
          f"{dep.engine} keeps them in" + (f", one GPU's share at TP{tp}" if tp > 1 else "")))


def served_identity(dep: Deployment, engine_named: bool) -> tuple[tuple[str, Any], ...]:
    """roofline's, kv's and moe's --json names for --model's deployment (reports.identity):
    the engine None where --engine was not given and vLLM's card reads the checkpoint as
    stored, and no release, since none of them sizes an engine's pool. gpt-oss-20b on an
    H100: 'llama.cpp-cuda', 'mxfp4_moe' … under --engine llama.cpp (ridge batch 158), None,
    'as stored' … without."""
    return tuple(identity_json(dep, engine_named=engine_named, pool_sized=False).items())


def roofline_report(
    acc: Accelerator, compute_dtype: str, batch: int, prompt_len: int,
    dep: Deployment | None = None, bytes_per_weight: float = 2.0, kv_bytes: float = 2.0,
    intensity: float | None = None, expert_compute_dtype: str | None = None,
    num_gpus: int = 1, attention_dtype: str | None = None, weights_from: str = "",
    blend: bool = False,
) -> RooflineReport:
    """Operating points of a decode step at ``batch`` and of a prefill of ``prompt_len``; an
    MoE model's experts at ``expert_compute_dtype`` (default: ``compute_dtype``); without a
    deployment, ``num_gpus`` cards named in the header (each with the same ridge), decode
    attention at ``attention_dtype`` (the cache's; default: ``compute_dtype``), and
    ``weights_from`` saying where ``bytes_per_weight`` came from, in the weights' note.
    ``blend``: the dense weights' rows at the deployment's blended peak where their matmuls
    run at several dtypes (Deployment.dense_peak_flops_per_s), the header's ridge
    ``compute_dtype``'s. With ``dep``, every peak is the one its engine runs the dtype at, the step's price's
    (Deployment.peak_at: llama.cpp's CUDA build on an RTX 4090, fp16 at 330.4 TFLOP/s)."""

    def peak_of(dtype: str) -> float:
        return acc.peak(dtype) if dep is None else dep.peak_at(dtype)

    def point(name: str, intensity: float, dtype: str, to_ridge: float | None,
              note: str = "", peak: float | None = None) -> OperatingPoint:
        """operating_point at ``dtype``'s peak as ``dep``'s engine runs it, or at ``peak``."""
        if peak is None and dep is not None:
            return operating_point(name, intensity, acc, acc.resolve_dtype(dtype), to_ridge,
                                   note, dep.peak_at(dtype))
        return operating_point(name, intensity, acc, dtype, to_ridge, note, peak)

    def ridge_at(dtype: str) -> Step:
        return ridge_step(acc, dtype) if dep is None else engine_ridge_step(dep, dtype)

    ridge = ridge_point(peak_of(compute_dtype), acc.memory_bandwidth_bytes_per_s)
    blended = dep if blend and dep is not None and dep.dense_blended else None
    # the dense weights' ridge: compute_dtype's (as dep's engine runs it), or their blend
    dense_peak = None if blended is None else blended.dense_peak_flops_per_s
    dense_ridge = ridge if dense_peak is None \
        else ridge_point(dense_peak, acc.memory_bandwidth_bytes_per_s)
    dense_dtype = compute_dtype if blended is None else blended.dense_dtype_label
    expert_dtype = expert_compute_dtype or compute_dtype
    moe = dep.model.moe if dep is not None else None
    expert_bpw = bytes_per_weight
    if dep is not None:
        bytes_per_weight, expert_bpw = dep.bytes_per_weight_split
        kv_bytes = dep.kv.bytes_per_element
    to_ridge = batch_for_intensity(dense_ridge, bytes_per_weight)
    w = weight_intensity(batch, bytes_per_weight)
    per_token = intensity_per_token(bytes_per_weight)
    notes_steps = [step("intensity per token sharing a read", "2 FLOP ÷ bytes per weight (the "
                        "notes' \"the batch × N\", \"the prompt length × N\")",
                        q("per token", per_token, "FLOP/byte"),
                        q("bytes per weight", bytes_per_weight, "B"))]
    expert_ridge_at: float | None = None
    dense = "dense weight matrices" if moe else "weight matrices"
    blend_note = "" if dense_peak is None else (
        f"; their matmuls at {dense_dtype}, blended peak {dense_peak / 1e12:,.1f} TFLOP/s, "
        f"ridge {dense_ridge:,.0f}")
    points = [point(
        f"{dense} (decode)", w, dense_dtype, to_ridge,
        f"intensity = 2 FLOP × batch ÷ {bytes_per_weight:.2f} bytes per weight: "
        f"{_times_tokens('the batch', bytes_per_weight)}"
        + (f"; {weights_from}" if weights_from else "")
        + ("; attention and shared weights, every token reads them (the experts are their "
           "own rows)" if moe else "") + blend_note, dense_peak)]
    group = ARTICLE_GQA_GROUP
    if dep is None or dep.model.attention is None:
        att_i = 2.0 * group / kv_bytes
        att_note = f"GQA group {group} (the article's models); does not move with batch"
        att_step = step("decode attention intensity", "2 FLOP × GQA group ÷ KV bytes per element",
                        q("intensity", att_i, "FLOP/byte"),
                        q("GQA group", group, "", "the article's models"),
                        q("KV bytes per element", kv_bytes, "B"))
    elif (sparse := _sparse_attention(dep, prompt_len)) is not None:
        att_i, att_note, att_step = sparse
    else:
        att_i = decode_attention_intensity(dep.model, kv_bytes, dep.engine_tensor_parallel_size)
        att = dep.model.attention
        att_note = ("MLA: every head reads the one latent" if att.cached_latent
                    else f"GQA group {att.group_size}") + "; each user's cache is private, " \
            "so batching never moves it"
        if dep.kv_replication > 1:
            att_note += (f"; at TP{dep.engine_tensor_parallel_size}{dep.dies_note} each rank "
                         "reads "
                         + ("the whole latent" if att.cached_latent else "a copied KV head")
                         + f" for its share of the heads (÷ {dep.kv_replication:g})")
        att_step = _attention_step(dep, att_i, kv_bytes)
    att_dtype = (attention_dtype or compute_dtype) if dep is None else dep.attention_compute_dtype
    att_ridge = ridge_point(peak_of(att_dtype), acc.memory_bandwidth_bytes_per_s)
    if att_dtype != compute_dtype:  # QKᵀ and PV multiply the cache, at its rate
        att_note += f"; its matmuls at {att_dtype} (the cache's), ridge {att_ridge:,.0f}"
        notes_steps.append(replace(ridge_at(att_dtype),
                                   label=f"decode attention's ridge ({att_dtype})"))
    points.append(point(
        "decode attention", att_i, att_dtype, None,
        att_note + (" ('-': past the ridge at every batch)" if att_i >= att_ridge
                    else " ('-': no batch reaches the ridge)")))
    state = _state_point(dep, batch, acc, compute_dtype) if dep is not None else None
    if state is not None:
        points.append(state[0])
    prefill_i = weight_intensity(prompt_len, bytes_per_weight)
    points.append(point(
        "prefill" + (" (dense weights)" if moe else ""), prefill_i, dense_dtype,
        to_ridge, f"{_times_tokens('the prompt length', bytes_per_weight)}; 'batch to ridge' "
        "is in prompt tokens", dense_peak))
    blended_from = () if blended is None else ("the dense matmuls' blend",)
    steps = [ridge_at(compute_dtype),
             *(dense_ridge_steps(blended) if blended is not None else ()),
             step("weight-matrix intensity", "2 × batch ÷ bytes per weight",
                  q("intensity", w, "FLOP/byte"), q("batch", batch),
                  q("bytes per weight", bytes_per_weight, "B")),
             step("batch to reach the ridge", "⌈ridge × bytes per weight ÷ 2⌉: the first whole "
                  "batch at or past it", q("batch", first_whole_batch(to_ridge)),
                  q("ridge", dense_ridge, "FLOP/byte", *blended_from),
                  q("bytes per weight", bytes_per_weight, "B"),
                  q("ridge × bytes per weight ÷ 2", to_ridge, digits=RIDGE_BATCH_DIGITS)),
             step("share of the arithmetic in use", "min(1, intensity ÷ ridge)",
                  q("fraction", arithmetic_share(batch, bytes_per_weight, dense_ridge)),
                  q("intensity", w, "FLOP/byte", "the weight-matrix intensity above"),
                  q("ridge", dense_ridge, "FLOP/byte", *blended_from)),
             att_step,
             *([state[1]] if state is not None else []),
             step("prefill intensity", "2 × prompt tokens ÷ bytes per weight (every token of "
                  "the prompt shares one read of the weights)",
                  q("intensity", prefill_i, "FLOP/byte"), q("prompt tokens", prompt_len),
                  q("bytes per weight", bytes_per_weight, "B"))]
    if dep is not None and moe is not None:
        e_i = expert_intensity(batch, dep.model, expert_bpw)
        article = article_tokens_per_expert(batch, moe.experts_per_token, moe.num_experts)
        expert_ridge = expert_ridge_batch(acc, expert_dtype, expert_bpw, moe.routed_fraction,
                                          peak_of(expert_dtype))
        expert_ridge_at = ridge_point(peak_of(expert_dtype), acc.memory_bandwidth_bytes_per_s)
        points.append(point(
            "MoE expert layers", e_i, expert_dtype, expert_ridge,
            f"B × k tokens over the experts they touch (the article's B × k/E = {article:,.2f} "
            "tokens per expert counts every expert as read), at "
            f"{expert_bpw:.2f} bytes per weight; batch to ridge = ridge batch ÷ (k/E)"
            + (f"; their matmuls at {expert_dtype}, ridge {expert_ridge_at:,.0f}"
               if expert_dtype != compute_dtype else "")))
        if expert_dtype != compute_dtype:
            notes_steps.append(replace(ridge_at(expert_dtype),
                                       label=f"MoE experts' ridge ({expert_dtype})"))
        notes_steps.append(step(
            "MoE rows' batch to ridge", "⌈(ridge × bytes per expert weight ÷ 2) ÷ (k/E)⌉: "
            "the ridge batch ÷ (k/E), each expert seeing k/E of the batch",
            q("batch", first_whole_batch(expert_ridge)),
            q("ridge", expert_ridge_at, "FLOP/byte", f"the experts' matmuls at {expert_dtype}"),
            q("bytes per expert weight", expert_bpw, "B"), q("k/E", moe.routed_fraction),
            q("(ridge × bytes per expert weight ÷ 2) ÷ (k/E)", expert_ridge,
              digits=RIDGE_BATCH_DIGITS)))
        points.append(point(
            "MoE experts (prefill)", expert_intensity(prompt_len, dep.model, expert_bpw),
            expert_dtype, expert_ridge, "the prompt's tokens spread over the experts: each "
            "sees prompt × k/E"))
        touched = expected_experts_touched(moe.num_experts, moe.experts_per_token, batch)
        steps.append(step("expert intensity", "2 × B × k ÷ (experts touched × bytes per weight)",
                          q("intensity", e_i, "FLOP/byte"), q("B", batch, "tokens"),
                          q("k", moe.experts_per_token, "", "num_experts_per_tok"),
                          q("experts touched", touched, "", f"expected of {moe.num_experts} "
                            "when B tokens each route to k"),
                          q("bytes per expert weight", expert_bpw, "B")))
    if intensity is not None:
        points.append(point(GIVEN_POINT, intensity, compute_dtype, None))
    steps += [s for p in points for s in _point_steps(p, acc, intensity)]
    steps += notes_steps
    overflow = ""
    check = None if dep is None else device_fit(dep)
    if dep is not None and check is not None and not check.fits:
        overflow = (f"{check.headline()} (the weights alone, on {dep.num_gpus} x {acc.id}): "
                    "the points below are arithmetic only")
        steps.insert(0, check.shortfall_step())
    caution = served_context_caution(dep.model, prompt_len, dep.engine) \
        if dep is not None else ""
    return RooflineReport(acc, compute_dtype, batch, prompt_len,
                          dep.model.name if dep else None, tuple(points), tuple(steps), overflow,
                          caution, dep.num_gpus if dep else num_gpus, per_token,
                          att_ridge if att_dtype != compute_dtype else None,
                          expert_ridge_at if expert_dtype != compute_dtype else None,
                          dep is not None and dep.engine.startswith("llama.cpp")
                          and dep.pipeline_parallel_size > 1,
                          0.0 if dep is None else dep.peak_at(compute_dtype),
                          "" if dep is None else dep.peak_note_at(compute_dtype),
                          weights_check=check,
                          dense_blend=None if dense_peak is None
                          or round(dense_ridge) == round(ridge)
                          else (dense_dtype, dense_ridge, dense))


def _point_steps(p: OperatingPoint, acc: Accelerator, given: float | None
                 ) -> tuple[Step, Step]:
    """A table row's TFLOP/s and share of peak: the roofline at the row's intensity, under
    its matmuls' own peak (decode attention at 8 FLOP/byte on an H100: 8 × 3.35 TB/s = 26.8
    TFLOP/s, 2.7% of 989.4)."""
    source = "--intensity" if p.name == GIVEN_POINT and given is not None \
        else "the row's intensity above"
    peak = q(f"peak {p.dtype}", p.peak_flops_per_s / 1e12, "TFLOP/s")
    return (step(f"{p.name}: attainable FLOP/s", "min(peak, intensity × bandwidth)",
                 q("attainable", p.attainable_flops_per_s / 1e12, "TFLOP/s"),
                 q("intensity", p.intensity, "FLOP/byte", source), peak,
                 q("bandwidth", acc.memory_bandwidth_bytes_per_s / 1e12, "TB/s")),
            step(f"{p.name}: share of peak", "attainable ÷ peak",
                 q("of peak", p.fraction_of_peak * 100, "%"),
                 q("attainable", p.attainable_flops_per_s / 1e12, "TFLOP/s"), peak))


def figure(x: float) -> str:
    """A figure given on the command line as it reads, not in exponent form: --intensity
    100000 is 100,000 FLOP/byte (not 1e+05); 0.5 stays 0.5."""
    return f"{x:,.0f}" if abs(x) >= 1e4 else f"{x:,.4g}"


def tenths(x: float) -> str:
    """A table's FLOP/byte or TFLOP/s to one decimal, or two figures where one decimal would
    print a figure that is not zero as 0.0: --intensity 0.001 on an H100 attains 0.00335
    TFLOP/s, 0.0034."""
    return f"{x:.2g}" if 0 < abs(x) < 0.05 else f"{x:,.1f}"


def whole_batch(batch: float) -> str:
    return f"{first_whole_batch(batch):,}"


def share_text(fraction: float) -> str:
    """A share of peak to one decimal, with as many more as keep it off 0.0 % and 100.0 %
    where it is neither (fmt_share): an A100 at batch 153 keeps 99.99 % busy, short of the
    ridge 154 reaches; batch 1 against a ridge of 100,000 FLOP/byte is 0.001 %, not 0.0 %."""
    return fmt_share(fraction, 1)
