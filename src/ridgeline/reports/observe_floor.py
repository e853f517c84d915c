"""`ridgeline observe`'s floor check: decode's floor at the observed batch on the deployment
described, a measured latency under it (the server runs something lighter than described), the
lighter weight formats whose floor the measurement clears, and a bench latency so far under it
that its unit is the likelier fault."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.floors import decode_floor
from ridgeline.observation import Observation
from ridgeline.reports.observe_latency import ObservedLatency

# a bench latency under this fraction of the floor is no deployment's but a unit's: seconds
# written under an _ms name read 1,000× small, and no weight format or GPU count described
# wrongly is a hundred times off (bf16 against fp4 on 8× the GPUs is 32×)
UNIT_GAP = 0.01
# a token rate past this many times what the GPUs described compute at their peak is no
# server's, refused: a real prefill reaches under 1× (its MFU), so even GPUs miscounted or
# weights lighter than described (fp4 for bf16 is 4×) stay under it, and only pages of two
# servers, or a counter reset read as a restart, pass it. Between 1× and this, cautioned.
RATE_OVER_PEAK = 10.0
# lighter formats a server that outruns the described floor may run, heaviest first
LIGHTER_WEIGHTS = {"llama.cpp": ("q8_0", "q6_k", "q5_k_m", "q4_k_m"),
                   "other": ("fp8", "awq-int4")}


def peak_tok_s(dep: Deployment) -> float:
    """Tokens a second the deployment's GPUs compute at their dense peak, 2 FLOP a weight
    each token multiplies against, attention aside: Llama-3.1-8B on one H100, 989.4 TFLOP/s
    ÷ (2 × 7.505e9) = 65,917 tok/s, prefill's roofline at any batch."""
    return dep.dense_peak_flops_per_s * dep.num_gpus / (2 * dep.matmul_params_per_token)


def server_peak_tok_s(obs: Observation, dep: Deployment) -> float:
    """peak_tok_s of every GPU the source's engines run on: the deployment described (one
    engine's tensor-parallel group) once for each engine the scrapes show (vLLM's
    --data-parallel-size 4 at TP1: 4 × 65,917 = 263,668 tok/s for Llama-3.1-8B on H100s),
    or once where the engines are DP-attention ranks sharing it
    (Observation.engines_share_gpus)."""
    return peak_tok_s(dep) * (1 if obs.engines_share_gpus else obs.engines)


def server_computed_tok_s(obs: Observation) -> float:
    """computed_tok_s of every engine together (each engine's mean × the engines: 9,200 on
    each of 4 is 36,800)."""
    return computed_tok_s(obs) * obs.engines


def server_gpus(obs: Observation, dep: Deployment) -> str:
    """The GPUs server_peak_tok_s counts, in words: '1 x h100-sxm'; '4 engines of 1 x
    h100-sxm'; '8 x h100-sxm, shared by its 4 DP-attention ranks'."""
    if obs.engines == 1:
        return dep.gpus_label
    if obs.engines_share_gpus:
        return f"{dep.gpus_label}, shared by its {obs.engines} DP-attention ranks"
    return f"{obs.engines} engines of {dep.gpus_label}"


def computed_tok_s(obs: Observation) -> float:
    """Tokens a second the source says the server computed: its prompt tokens less the prefix
    cache's share, and its generated ones (8,000 prompt, 10 % cached, and 2,000 generated:
    9,200)."""
    prompt = (obs.prompt_tok_s or 0.0) * (1 - (obs.cached_prompt_share or 0.0))
    return prompt + (obs.generation_tok_s or 0.0)


def refuse_rate_past_peak(obs: Observation, dep: Deployment) -> None:
    """Refuse token rates no server could compute: server_computed_tok_s past RATE_OVER_PEAK
    × server_peak_tok_s, the server's engines together against every GPU they run on. Pages
    of two servers read as one run gave Llama-3.1-8B on one H100 778,400 prompt (10 %
    cached) and 194,600 generation tok/s: 895,160, 13.6× its 65,917. SGLang's DP-attention
    ranks share the GPUs described, so each rank's mean against all of them had let 4 ranks
    pass at up to 40× (their sum against the GPUs' peak)."""
    computed, ceiling = server_computed_tok_s(obs), server_peak_tok_s(obs, dep)
    if ceiling <= 0 or computed <= RATE_OVER_PEAK * ceiling:
        return
    cached, k = obs.cached_prompt_share, obs.engines
    raise InputError(
        f"{obs.source} reads {computed:,.0f} tokens a second computed"
        + (f" by its {k} engines together" if k > 1 else "")
        + f" ({(obs.prompt_tok_s or 0.0) * k:,.0f} prompt"
        + (f", {cached:.0%} of them cached," if cached else "")
        + f" and {(obs.generation_tok_s or 0.0) * k:,.0f} generated), "
        f"{computed / ceiling:,.1f}× the {ceiling:,.0f} {dep.model.name} computes on "
        f"{server_gpus(obs, dep)} at their peak: the scrapes are not one server's run (pages "
        "of two servers, a counter reset read as a restart), or it runs on far more GPUs than "
        "described (--num-gpus)")


@dataclass(frozen=True)
class ObservedFloor(ObservedLatency):
    """The latency check, with the floor no step can beat and what a measurement under it means."""

    @cached_property
    def floor_itl_ms(self) -> float | None:
        """decode's floor for one micro-batch at the context on the deployment described (no
        engine overhead, every byte at the card's rated bandwidth): no step can be faster. A
        batch under one sequence (a bench's Little's law at a low rate) runs steps of one,
        where a latency is measured to set against them (the time a rate implies over such a
        batch is the gauge's sampling noise). Where a drafter serves, a token's floor is the
        step's over the tokens a step keeps a request (floor_tokens_per_step: a verify step
        reads no fewer bytes than a decode), whether or not its drafts are priced."""
        b = self.batch
        if b is None or not self.fits:
            return None
        if b < 0.5 and not self.obs.latency_ms.get("itl", {}).get("mean"):
            return None
        try:
            # under PP a micro-batch's trip, as decode_floor prices the batch
            floor = decode_floor(self.deployment, max(1, round(b)), self.context)
        except InputError:
            return None
        return floor.step_time_s * 1e3 / self.floor_tokens_per_step

    @property
    def floor_tokens_per_step(self) -> float:
        """The tokens a step keeps a request, which a token's floor divides the step's by: the
        priced verify step's; else the source's (over all decode steps where it counts them,
        else its acceptance length: Observation.spec_tokens_per_decode_step), where a
        drafter's drafts go unpriced (the flags give no draft length), since the measured time
        is still a token's of a drafting server (vLLM's histogram divided by it, SGLang's per
        token); else, with the drafter's flags but no acceptance read, its drafts + 1, the
        most a verify step keeps; 1 without a drafter. A drafting server's 6 ms a token at
        2.5 tokens a step is no breach of a 10.8 ms step's floor (4.3 ms a token)."""
        if self.spec_step is not None:
            return self.tokens_per_step
        if self.obs.spec_tokens_per_decode_step:
            return self.obs.spec_tokens_per_decode_step
        drafter = self.engine_settings.drafter
        if drafter is not None and drafter.tokens > 0:
            return float(drafter.tokens + 1)
        return 1.0

    @property
    def rate_over_peak(self) -> float | None:
        """server_computed_tok_s ÷ server_peak_tok_s where past 1 (and under RATE_OVER_PEAK,
        refused before
        a report is made): the deployment described cannot compute the tokens the source
        counts, so the server runs more GPUs or lighter weights than described, or the scrapes
        are not one server's run (a counter reset read as a restart: 443,800 tok/s for
        Llama-3.1-8B on one H100, 6.7×). None where under it."""
        ceiling = server_peak_tok_s(self.obs, self.deployment)
        share = server_computed_tok_s(self.obs) / ceiling if ceiling > 0 else 0.0
        return share if share > 1 else None

    @property
    def below_floor(self) -> bool:
        """The latency measured is under the floor, by any margin (the floor already reads
        every byte at the card's rated bandwidth with no overhead, so nothing real rounds
        under it): the server does not run what is described (a lighter weight format, more
        GPUs, a shorter context)."""
        measured, floor = self.measured_itl_ms, self.floor_itl_ms
        return bool(measured and floor and measured < floor)

    @property
    def unit_suspect(self) -> bool:
        """A bench's mean ITL under UNIT_GAP of the floor: its *_itl_ms and *_tpot_ms values
        are likelier seconds than a deployment a hundred times faster than described
        (0.028 "ms" against a 4.5 ms floor: 28 ms, written in seconds)."""
        measured, floor = self.measured_itl_ms, self.floor_itl_ms
        return bool(self.obs.kind == "bench" and measured and floor
                    and measured < UNIT_GAP * floor)

    @cached_property
    def lighter_weights(self) -> list[tuple[str, float]]:
        """(format, its floor in ms) for the heaviest lighter formats whose floor the
        measured latency clears, first the heaviest; empty where none does or the floor is
        not broken."""
        if not self.below_floor or self.unit_suspect or self.deployment.offload is not None:
            return []
        d, b = self.deployment, max(1, round(self.batch or 1))
        measured = self.measured_itl_ms or 0.0
        llamacpp = d.engine.startswith("llama.cpp")
        out = []
        for name in LIGHTER_WEIGHTS["llama.cpp" if llamacpp else "other"]:
            try:
                lighter = Deployment.laid_out(
                    d.model, d.accelerator, name, d.kv.id, d.num_gpus,
                    1 if llamacpp else d.pipeline_parallel_size, d.engine, d.expert_parallel,
                    d.flash_attention,
                    split_mode="tensor" if llamacpp and d.tensor_parallel_size > 1 else None
                ).with_state_settings(d.state_engine_version, d.mamba_ssm_dtype)  # as ``d``'s
                floor = decode_floor(lighter, b, self.context)
            except InputError:
                continue
            ms = floor.step_time_s * 1e3 / self.floor_tokens_per_step  # as floor_itl_ms
            if ms <= measured:
                out.append((name, ms))
        return out[:2]
