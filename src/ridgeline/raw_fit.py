"""Whether the weights and a batch's KV cache fit the GPUs' memory, before any engine's
overheads: arithmetic only, the check the floors, ``predict`` and the reports print beside a
time (the engine-aware verdict is ``memory``'s).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ridgeline.cost import served_footprint
from ridgeline.deployment import Deployment
from ridgeline.explain import Step, q, step
from ridgeline.hardware import device_memory_basis, device_memory_bytes
from ridgeline.offload import gpu_attention_share, gpu_weight_bytes
from ridgeline.units import GB, plural


def raw_fit(dep: Deployment, batch: int, context: int) -> FitCheck:
    """Whether ``batch`` sequences of ``context`` tokens and the weights fit the GPUs' memory
    (no engine overheads): arithmetic only, so a batch of a billion costs nothing to ask. The
    recurrent states at the dtypes the engine keeps them in, as the step reads them and its
    pool holds them (cost.served_footprint: SGLang's SSM state in fp32)."""
    footprint = served_footprint(dep, context)
    return batch_fit(dep, batch, footprint.stored_bytes(dep.kv_replication))


def batch_fit(dep: Deployment, sequences: int, per_sequence_bytes: float) -> FitCheck:
    """Whether ``sequences`` caches of ``per_sequence_bytes`` each fit beside the weights
    (device_fit). With data-parallel attention each rank holds its own sequences in its own
    GPUs' memory, so the batch fits where the busiest rank's ⌈B ÷ N⌉ do beside its 1/N of
    the weights in its 1/N of the memory (the ranks hold equal weights), as fit's pools
    count them: DeepSeek-V3 on 8 H200s holds 168 conversations of 32K in raw memory, so 169
    do not fit (22 on one rank), though 169 fit in all eight GPUs' memory pooled."""
    ranks = dep.data_parallel_size
    if ranks == 1:
        return device_fit(dep, sequences * per_sequence_bytes)
    busiest = dep.rank_sequences(sequences)
    every = device_fit(dep, busiest * per_sequence_bytes * ranks)  # each rank as loaded
    return replace(every, weight_bytes=every.weight_bytes / ranks,
                   kv_bytes=every.kv_bytes / ranks,
                   capacity_bytes=every.capacity_bytes / ranks,
                   rank=RankShare(ranks, busiest, sequences, dep.rank_gpus))


def as_served(fit: FitCheck, batch: int, context: int, vision_bytes: float,
              drafter_weight_bytes: float = 0.0,
              drafter_kv_bytes_per_token: float = 0.0) -> FitCheck:
    """``fit`` of ``batch`` sequences of ``context`` tokens as an engine serves them: the
    vision tower it loads (``vision_bytes``, noted and not counted, as device_fit notes it:
    none under --language-model-only, memory.loaded_vision_bytes), and a drafter's weights
    and cache on one data-parallel rank's GPUs (every GPU without data parallelism:
    drafter_memory.drafter_rank_bytes) counted beside the target's, as fit's pool holds
    them: DeepSeek-V3's MTP layer on 8 H200s, 8 × 1.53 GiB of weights and one more layer's
    latent a token (61 → 62). Under data-parallel attention, for the busiest rank's
    sequences, as batch_fit counts its figures."""
    sequences = fit.rank.sequences if fit.rank else batch
    cache = drafter_kv_bytes_per_token * sequences * context
    return replace(fit, weight_bytes=fit.weight_bytes + drafter_weight_bytes,
                   kv_bytes=fit.kv_bytes + cache, vision_bytes=vision_bytes,
                   drafter_bytes=drafter_weight_bytes + cache)


def device_fit(dep: Deployment, kv_stored: float = 0.0) -> FitCheck:
    """The weights and KV cache the GPUs hold against the memory an engine finds on them
    (hardware.device_memory_bytes, the runtime's total that fit sizes its pool from, not the
    nameplate: DeepSeek-V3 as stored on 8 x H100 keeps 79.29 GiB of weights a GPU, under 80
    GiB but over the 79.18 the runtime reports); partial offload keeps the host's layers,
    and their share of the cache, out of it. With no cache, whether the weights load."""
    tower = 0.0 if dep.engine.startswith("llama.cpp") else dep.model.vision_tower_bytes
    return FitCheck(gpu_weight_bytes(dep), kv_stored * gpu_attention_share(dep),
                    device_memory_bytes(dep.accelerator) * dep.num_gpus, tower,
                    dep.kv_replication, capacity_basis=device_memory_basis(dep.accelerator))


@dataclass(frozen=True)
class RankShare:
    """The data-parallel rank a fit check is of: the busiest, its share of the batch."""

    ranks: int
    sequences: int  # the busiest rank's: ⌈batch ÷ ranks⌉
    batch: int
    gpus: int  # one rank's

    def label(self, aside: bool = True) -> str:
        """' on the busiest of 8 data-parallel ranks (22 of the 169 sequences on its 1 GPU)',
        or, not an ``aside``, with a comma for the parentheses."""
        share = (f"{self.sequences:,} of the {self.batch:,} {plural(self.batch, 'sequence')} "
                 f"on its {self.gpus} {plural(self.gpus, 'GPU')}")
        return (f" on the busiest of {self.ranks} data-parallel ranks"
                + (f" ({share})" if aside else f", {share}"))


@dataclass(frozen=True)
class FitCheck:
    weight_bytes: float
    kv_bytes: float
    capacity_bytes: float
    vision_bytes: float = 0.0  # a multimodal checkpoint's tower: engines load it, not counted
    kv_replication: float = 1.0  # the cache's copies over TP ranks, counted in kv_bytes
    # data-parallel attention: the figures are the busiest rank's (batch_fit)
    rank: RankShare | None = None
    # a drafter's weights and cache (as_served), counted in weight_bytes and kv_bytes
    drafter_bytes: float = 0.0
    # where capacity_bytes came from (hardware.device_memory_basis)
    capacity_basis: str = "the runtime's total"

    @property
    def needed_bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.capacity_bytes

    @property
    def does_not_fit(self) -> str:
        """Why the weights and cache do not fit, as decode's JSON gives it (its
        expected_none_reason), or "" where they fit: Llama-3.1-70B fp8 on one H100, batch 32 at
        2,000 tokens: "does not fit: 72.7 GB of weights + 21.0 GB of KV cache = 93.6 GB >
        85.0 GB of memory, short by 8.6 GB"."""
        return "" if self.fits else "does not fit: " + self.headline().removeprefix(
            "DOES NOT FIT: ")

    @property
    def kv_room_bytes(self) -> float:
        """What the GPUs' memory leaves for the KV cache beside the weights on them."""
        return self.capacity_bytes - self.weight_bytes

    @property
    def shortfall_bytes(self) -> float:
        return max(0.0, self.needed_bytes - self.capacity_bytes)

    def explain_step(self) -> Step:
        """The headline's sum as a step: weights and KV cache against the raw capacity (the
        busiest rank's, under data-parallel attention)."""
        where = self.rank.label(aside=False).strip() if self.rank else ""
        return step("memory check", "weights + KV cache, "
                    + ("at most the capacity: it fits" if self.fits else
                       "more than the capacity: it does not fit"),
                    q("weights and KV cache", self.needed_bytes / GB, "GB"),
                    q("weights", self.weight_bytes / GB, "GB", where),
                    q("KV cache", self.kv_bytes / GB, "GB",
                      f"×{self.kv_replication:g}: copied over the tensor-parallel ranks"
                      if self.kv_replication > 1 else ""),
                    q("capacity", self.capacity_bytes / GB, "GB",
                      "raw: the GPUs' memory, before engine overheads"),
                    *((q("of them the drafter's", self.drafter_bytes / GB, "GB",
                         "its weights and cache, which the engine holds beside the model's"),)
                      if self.drafter_bytes else ()))

    def shortfall_step(self) -> Step:
        """The headline's "short by": what the weights and cache need past the capacity (roofline
        and moe: the weights alone, Llama-3.1-70B bf16 on one H100: 141.1 − 85.0 = 56.1 GB)."""
        return step("short by", "weights" + (" + KV cache" if self.kv_bytes else "")
                    + " − capacity: the memory missing",
                    q("shortfall", self.shortfall_bytes / GB, "GB"),
                    q("weights", self.weight_bytes / GB, "GB"),
                    *((q("KV cache", self.kv_bytes / GB, "GB"),) if self.kv_bytes else ()),
                    q("capacity", self.capacity_bytes / GB, "GB",
                      f"the memory an engine finds on the GPUs ({self.capacity_basis})"))

    @property
    def _drafter_note(self) -> str:
        return (f"the drafter's {self.drafter_bytes / GB:,.1f} GB of weights and cache "
                "included" if self.drafter_bytes else "")

    def headline(self) -> str:
        if self.fits:
            where = self.rank.label(aside=False) if self.rank else ""
            return (f"fits: {self.needed_bytes / GB:,.1f} GB of weights and KV cache in "
                    f"{self.capacity_bytes / GB:,.1f} GB{where} (raw capacity, before engine "
                    "overheads"
                    + (f"; {self._drafter_note}" if self.drafter_bytes else "")
                    + (f"; a serving engine also loads the {self.vision_bytes / GB:.2f} GB "
                       "vision tower" if self.vision_bytes else "") + ")")
        copies = (f" (×{self.kv_replication:g}: copied over the tensor-parallel ranks)"
                  if self.kv_replication > 1 and round(self.kv_bytes / GB, 1) > 0 else "")
        # (no copies to note on a cache that prints as none: roofline's weights alone)
        where = self.rank.label() if self.rank else ""
        # no cache sized (roofline's weights alone): no KV term, and no sum of one
        sizing = (f" + {self.kv_bytes / GB:,.1f} GB of KV cache{copies} = "
                  f"{self.needed_bytes / GB:,.1f} GB" if self.kv_bytes else "")
        return (f"DOES NOT FIT: {self.weight_bytes / GB:,.1f} GB of weights{sizing} "
                f"> {self.capacity_bytes / GB:,.1f} GB of memory{where}, short by "
                f"{self.shortfall_bytes / GB:,.1f} GB"
                + (f" ({self._drafter_note})" if self.drafter_bytes else "")
                + (f"; a serving engine also loads the {self.vision_bytes / GB:.2f} GB vision "
                   "tower, short by that much more" if self.vision_bytes else ""))
