"""A candidate deployment of a plan: one configuration of replicas, as sized and checked."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, engine_devices, rented_gpus, resolve_accelerator
from ridgeline.memory import EngineSettings
from ridgeline.model import ModelSpec
from ridgeline.parallel import node_size
from ridgeline.quantization_gates import deployment_problem
from ridgeline.units import usd_per_million_tokens


@dataclass(frozen=True)
class Candidate:
    accelerator: str
    tp: int
    pp: int
    weights: str
    kv: str
    max_num_seqs: int | None
    batch: int  # per replica, analytic
    tpot_s: float  # analytic mean at that batch (its percentile meets the SLO)
    ttft_floor_s: float
    replica_rate_req_s: float  # requests/s one replica sustains within the TPOT SLO
    replicas: int
    price_per_gpu_hour: float | None
    calibrated: bool
    calibration_note: str
    band: tuple[float, float]
    verified: bool = False
    sim_ttft_s: float | None = None
    sim_tpot_s: float | None = None
    # … and the ITL at the SLO's percentile over the streamed chunks of that check's window
    # (SimResult.itl_s_at; an xPyD split's, its decode pool's)
    sim_itl_s: float | None = None
    disaggregated: str = ""  # "xPyD" when prefill and decode pools are split
    prefill_replicas: int = 0  # x of xPyD (replicas counts both pools)
    expert_parallel: bool = False  # MoE experts spread over the TP ranks
    analytic_replicas: int = 0  # simulated ones: the count the analytic sizing gave
    max_num_batched_tokens: int | None = None  # None: the engine's default
    # simulated ones: the check that held — its requests and arrival window (seconds)
    sim_requests: int = 0
    sim_first: int = 0  # of a trace, where in the replica's share the check began
    sim_window_s: tuple[float, float] | None = None
    # … and its prompts longer than the step budget of an engine that runs a context whole
    # (TensorRT-LLM without enable_chunked_prefill), which it chunked: 0 where the check
    # ends, since plan checks such a load again with enable_chunked_prefill on
    sim_over_budget: int = 0
    # TensorRT-LLM: the check ran with enable_chunked_prefill on, the load holding prompts
    # longer than max_num_tokens, and the launch's YAML turns it on (trtllm_command.py)
    enable_chunked_prefill: bool = False
    # the analytic rate's three limits, req/s: the TPOT SLO at the batch, the step's token
    # budget, the prompts' queue within the TTFT SLO (replica_sizing.size_replica); () where not sized
    rate_limits: tuple[float, ...] = ()
    # the launch's --max-model-len (replica_sizing.launch_length; 0: not set) and the share of
    # the load's requests longer than it, which the engine refuses
    max_model_len: int = 0
    refused_share: float = 0.0
    # data-parallel attention (data_parallel.py): ranks of ``tp`` GPUs each, every rank its
    # own requests and KV pool, a MoE's experts spread over all of them; 1: none
    data_parallel: int = 1
    # xPyD: each pool's (max_num_seqs, max_num_batched_tokens) as its check held, the prefill
    # pool's then the decode pool's (None: the engine's default); () where not simulated
    pool_knobs: tuple[tuple[int | None, int | None], ...] = ()
    # fit at the launch's --max-model-len (replica_sizing.pool_at_launch): the pool's tokens,
    # the conversations of that length it holds, the engine's seats; () where not sized so
    pool_at_launch: tuple[int, int, int] | tuple[()] = ()
    # vLLM's hybrid KV-cache manager switches its launch runs with, as `plan` was given them
    # (--disable-hybrid-kv-cache-manager or its negation, and
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE); None: vLLM's default
    disable_hybrid_kv_cache_manager: bool | None = None
    allow_chunked_local_attn_hybrid: bool | None = None

    def engine_settings(self, version: str | None = None) -> EngineSettings:
        """The settings its replica's pool is sized with, as `fit` takes them: its engine
        knobs (max_num_seqs, max_num_batched_tokens; None: the engine's default) at
        ``version``, and the hybrid KV-cache manager switches it launches with."""
        return EngineSettings(max_num_seqs=self.max_num_seqs,
                              max_num_batched_tokens=self.max_num_batched_tokens,
                              engine_version=version,
                              disable_hybrid_kv_cache_manager=self.disable_hybrid_kv_cache_manager,
                              allow_chunked_local_attn_hybrid=self.allow_chunked_local_attn_hybrid)

    @property
    def gpus(self) -> int:
        return self.replicas * self.replica_gpus

    @property
    def replica_gpus(self) -> int:
        """The GPUs of one replica: TP × PP, × the data-parallel ranks."""
        return self.tp * self.pp * self.data_parallel

    @property
    def replica_nodes(self) -> int:
        """Nodes one replica spans: ⌈TP × PP (× DP) ÷ GPUs a node⌉ (TP16 of H100s: 2; a
        replica on more than one needs a multi-node launch)."""
        return -(-self.replica_gpus // node_size(resolve_accelerator(self.accelerator)))

    @property
    def tp_crosses_nodes(self) -> bool:
        """Whether its tensor parallelism spans nodes: every all-reduce then crosses the
        network between them (priced so by parallel.all_reduce_time_s)."""
        return self.tp > node_size(resolve_accelerator(self.accelerator))

    @property
    def capacity_req_s(self) -> float:
        """Requests/s the deployment sustains within the SLO as the analytic sizing rates it:
        replicas × one replica's rate (``replica_rate_req_s``). Beyond the load's rate it is
        headroom, which ranks candidates of one price (``plan_checks.cheapest``)."""
        return self.replicas * self.replica_rate_req_s

    @property
    def rented_gpus(self) -> int:
        """The GPUs the deployment pays for: its ``gpus`` in whole rental units of the card
        (``hardware.rented_gpus``: 5 GB200s, rented as 72-GPU racks, pay for 72)."""
        return rented_gpus(resolve_accelerator(self.accelerator), self.gpus)

    @property
    def rental_gpus(self) -> int:
        """The card's rental unit in GPUs (1 where it rents alone; a GB200 rack: 72)."""
        return resolve_accelerator(self.accelerator).rental_gpus

    @property
    def cost_per_hour(self) -> float | None:
        """$/h: the GPUs it pays for (``rented_gpus``) × the price per GPU-hour; 15 MI300Xs at
        $1.85 = $27.75, 5 GB200s (one 72-GPU rack) at $4.54 = $326.88."""
        return None if self.price_per_gpu_hour is None \
            else self.rented_gpus * self.price_per_gpu_hour

    def cost_per_million_tokens(self, output_tok_s: float) -> float | None:
        return usd_per_million_tokens(self.cost_per_hour, output_tok_s)

    @property
    def label(self) -> str:
        return self.label_for("vllm")

    def engine_tp(self, engine: str) -> int:
        """The tensor-parallel size ``engine`` launches: TP × the devices it runs each card as
        (``engine_devices``; vLLM on 1 x MI250: 2); under data-parallel attention SGLang's
        --tp-size is every GPU of the replica, vLLM's a rank's."""
        ranks = self.data_parallel if engine == "sglang" else 1
        return self.tp * ranks * engine_devices(engine, resolve_accelerator(self.accelerator))

    def parallel_for(self, engine: str) -> str:
        """The ranks as ``engine`` launches them (``parallel_words``); data-parallel attention
        as ``data_parallel_words``."""
        if self.data_parallel > 1:
            return data_parallel_words(self.data_parallel, self.tp, self.expert_parallel)
        return parallel_words(self.tp, self.pp, engine_devices(
            engine, resolve_accelerator(self.accelerator)), self.expert_parallel)

    def label_knobs(self, engine: str) -> str:
        """The engine knobs it sets, in ``engine``'s names: "max_num_seqs 64"; "" for none."""
        seats_name, tokens_name = ENGINE_KNOB_NAMES.get(engine, ENGINE_KNOB_NAMES["vllm"])
        return ", ".join(f"{name} {value}" for name, value in (
            (seats_name, self.max_num_seqs), (tokens_name, self.max_num_batched_tokens)) if value)

    def pool(self, prefill: bool) -> Candidate:
        """One pool of an xPyD split (the prefill pool, or the decode pool) as a single-pool
        candidate: its replicas, launched at its own knobs (``pool_knobs``; the engine's
        defaults where none were chosen)."""
        seqs, budget = self.pool_knobs[0 if prefill else 1] if self.pool_knobs else (None, None)
        x = self.prefill_replicas
        return replace(self, replicas=x if prefill else self.replicas - x, disaggregated="",
                       prefill_replicas=0, pool_knobs=(), max_num_seqs=seqs,
                       max_num_batched_tokens=budget)

    def label_for(self, engine: str, weights_name: str = "") -> str:
        """The candidate in ``engine``'s own names for its seats and its step's tokens, its
        weights named ``weights_name`` where given (``stored_name``: "as stored (mxfp4)"), its
        ranks counted as the engine's command counts them (``parallel_for``)."""
        knobs = self.label_knobs(engine)
        seqs = f", {knobs}" if knobs else ""
        if self.disaggregated:
            knobs = "".join(f"; {name} pool {pool.label_knobs(engine)}"
                            for name, pool in (("prefill", self.pool(True)),
                                               ("decode", self.pool(False)))
                            if pool.label_knobs(engine))
            return (f"{self.disaggregated} pools of {self.tp} x {self.accelerator} "
                    f"({replace(self, pp=1, expert_parallel=False).parallel_for(engine)}, "
                    f"{weights_name or self.weights}, KV {self.kv}{knobs})")
        return (f"{self.replicas:,} replica{'s' if self.replicas > 1 else ''} of "
                f"{self.replica_gpus} x {self.accelerator} ({self.parallel_for(engine)}, "
                f"{weights_name or self.weights}, "
                f"KV {self.kv}{seqs})")


def parallel_words(tp: int, pp: int, devices: int = 1, expert_parallel: bool = False) -> str:
    """TP ``tp`` × PP ``pp`` of cards, in the ranks the engine launches: "TP4 × PP2 EP";
    "TP2 over 2 dies" where it runs each card as ``devices`` (vLLM on 1 x MI250, whose
    --tensor-parallel-size counts dies, not cards)."""
    split = f" × PP{pp}" if pp > 1 else ""
    split += " EP" if expert_parallel else ""
    dies = f" over {tp * pp * devices} dies" if devices > 1 else ""
    return f"TP{tp * devices}{split}{dies}"


def data_parallel_words(ranks: int, tp: int, expert_parallel: bool) -> str:
    """A MoE's data-parallel attention layout as ``data_parallel.layout_label`` words it:
    "attention DP8 × TP1, experts EP8"."""
    return (f"attention DP{ranks} × TP{tp}, experts {'EP' if expert_parallel else 'TP'}"
            f"{ranks * tp}")


# each engine's names for the seats and the step's token budget a candidate sets
ENGINE_KNOB_NAMES = {"vllm": ("max_num_seqs", "max_num_batched_tokens"),
                     "sglang": ("max_running_requests", "chunked_prefill_size"),
                     "trtllm": ("max_batch_size", "max_num_tokens")}


def replica_deployment(model: ModelSpec, acc: Accelerator, c_tp: int, pp: int, weights: str,
                kv: str, expert_parallel: bool = False, engine: str = "vllm",
                version: str | None = None, data_parallel_size: int = 1) -> Deployment:
    """One replica as the planner lays it out, or the engine's one-line refusal (InputError):
    the build's, and ``deployment_problem``'s at ``version`` (a pre-quantized bitsandbytes
    checkpoint at TP > 1, which vLLM and SGLang refuse); its recurrent states at the dtype
    ``version`` keeps them in (Deployment.with_state_settings)."""
    dep = replica_build(model, acc, c_tp, pp, weights, kv, expert_parallel, engine,
                        data_parallel_size).with_state_settings(version, None)
    problem = deployment_problem(dep, version)
    if problem:
        raise InputError(problem)
    return dep


@lru_cache(maxsize=1024)
def replica_build(model: ModelSpec, acc: Accelerator, c_tp: int, pp: int, weights: str,
                  kv: str, expert_parallel: bool = False, engine: str = "vllm",
                  data_parallel_size: int = 1) -> Deployment:
    """The replica as ``Deployment.build`` makes it ("as stored": the checkpoint's formats),
    before ``deployment_problem`` is asked; built once per layout (a plan's knobs and its
    rows' cautions ask for the same replica again, and a Deployment is not changed)."""
    w = None if weights == "as stored" else weights
    # a plan launches a 16-bit checkpoint in a smaller format with -q (its commands): quantized
    # on load, not a checkpoint stored so
    return replace(Deployment.laid_out(model, acc, w, kv, c_tp * pp, pp, engine,
                                       expert_parallel, data_parallel_size=data_parallel_size),
                   weights_stored=False)


def candidate_deployment(model: ModelSpec, c: Candidate, engine: str,
                         version: str | None = None) -> Deployment:
    """The deployment of one replica of ``c`` under ``engine`` at ``version``, as the search
    sized it (its recurrent states at the dtype ``version`` keeps). The search's
    ``replica_deployment`` admitted it at the plan's release, so ``deployment_problem`` is not
    asked again: a caution that reads no state rebuilds it without the release, which would
    ask the newest one's floors (vllm_gpu_floors: a V100 planned at 0.19)."""
    return replica_build(model, resolve_accelerator(c.accelerator), c.tp, c.pp, c.weights,
                         c.kv, c.expert_parallel, engine,
                         c.data_parallel).with_state_settings(version, None)


def kv_choices(model: ModelSpec, engine: str) -> tuple[str, ...]:
    """The KV dtypes a plan sizes ``model`` with under ``engine``: the cache the engine's
    default (auto) keeps, as fit sizes it, the checkpoint's where its quantization_config
    asks for one (ModelSpec.engine_kv_cache_dtypes: TensorRT-LLM's int8 for a ModelOpt
    kv_cache_quant_algo INT8), else bf16, and fp8 beside it, where the engine launches it:
    not beside a checkpoint's own cache, which vLLM's --kv-cache-dtype has no 16-bit value to
    turn off and TensorRT-LLM refuses to override (quantization_gates.kv_override_problem)."""
    checkpoint = dict(model.engine_kv_cache_dtypes).get(engine, "")
    return (checkpoint,) if checkpoint else ("bf16", "fp8")


def served_choice(choice: str, acc: Accelerator) -> str:
    """A plan's 16-bit choice as the card serves it: bf16 is fp16 on a card without bf16
    matmuls (T4, V100), which vLLM's --dtype auto picks there (CudaPlatform's
    supported_dtypes: float16 below compute capability 8.0); any other choice unchanged."""
    return "fp16" if choice == "bf16" and "bf16" not in acc.peak_flops else choice


def weight_choices(model: ModelSpec) -> list[str]:
    """The weight formats a plan serves: a quantized checkpoint as stored (it is the file the
    serve command names; re-quantizing it is another checkpoint), a bf16 one as is or at fp8."""
    return ["as stored"] if model.stored_formats else ["bf16", "fp8"]


def stored_name(model: ModelSpec) -> str:
    """The formats a quantized checkpoint stores its weights in, named: "mxfp4" for
    gpt-oss-120b (its MoE and MLP weights; the rest bf16), "" for a bf16 one."""
    return "+".join(sorted({fmt for _, fmt in model.stored_formats}))


def weights_format(model: ModelSpec, weights: str) -> str:
    """The format a --weights choice names, as --json gives it: a checkpoint's stored formats
    for "as stored" ("mxfp4" for gpt-oss-120b, "fp8+nvfp4-w4a16" for Qwen3.6-35B-A3B-NVFP4),
    else the choice ("fp8")."""
    return (stored_name(model) or weights) if weights == "as stored" else weights


def weights_name(model: ModelSpec, weights: str) -> str:
    """A candidate's weight format as its label shows it: "as stored (mxfp4)", "fp8"."""
    stored = stored_name(model) if weights == "as stored" else ""
    return f"{weights} ({stored})" if stored else weights


def candidate_label(model: ModelSpec, c: Candidate, engine: str) -> str:
    """A candidate's label under ``engine``, its weight format named as ``weights_name`` does."""
    return c.label_for(engine, weights_name(model, c.weights))


def weights_lightest_first(model: ModelSpec) -> list[str]:
    """weight_choices, the lightest first: fp8 before bf16. A card without fp8 matmul units
    (Ampere's A100 and A10) still runs fp8 weights, weight-only (W8A16: vLLM's FP8 Marlin
    kernels widen each weight to 16 bits inside the matmul), reading half the bytes; where an
    engine runs no fp8 on a card (TensorRT-LLM before Ada, any engine on Volta) the
    deployment is refused (``Deployment.build``) and the next format is the one to try."""
    return sorted(weight_choices(model), key=lambda w: w != "fp8")
