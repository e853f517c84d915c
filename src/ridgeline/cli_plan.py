"""CLI: plan — the cheapest deployment that meets an SLO for a load."""

from __future__ import annotations

import argparse
from typing import Any

from ridgeline.cli import (
    _model,
    _output,
    data_parallel_flags,
    max_model_len_option,
    refuse_data_parallel,
)
from ridgeline.cli_engine import hybrid_manager_flags
from ridgeline.cli_load import load_model, load_profile
from ridgeline.cli_offload import NotSearched
from ridgeline.cli_types import (
    _count,
    _how_many,
    _kv_name,
    _name_list,
    _not_empty,
    _percentile,
    _positive_float,
    _typed,
    _weight_name,
)
from ridgeline.context_length import served_positions
from ridgeline.errors import InputError, shorten, shorten_path
from ridgeline.sim.workload import MAX_RATE
from ridgeline.units import COUNT_EXAMPLES

PLAN_ENGINES = ("vllm", "sglang", "trtllm")  # the CUDA-graph serving engines plan sizes for
MAX_WORKERS = 256  # processes plan may start on this machine (--executor ray: the cluster's)
# --max-cost-per-hour-usd's bound: past any deployment priced (64 GPUs at the most a GPU-hour
# may cost, hardware.MAX_PRICE_USD, are $64,000/h), so a typed 1e300 or inf is refused
MAX_CEILING_USD_H = 10_000_000.0
# plan pins no layout (no --tensor-parallel-size either): it searches a MoE's data-parallel
# attention layouts beside tensor parallelism
DATA_PARALLEL_REFUSED = ("it searches a MoE's data-parallel attention layouts itself, as it "
                         "searches tensor parallelism, and pins none (--no-dp leaves them out); "
                         "check one layout with `ridgeline simulate`, which takes the flag")


def cmd_plan(args: argparse.Namespace) -> Any:
    from ridgeline.engine_platforms import (
        below_engine_floor,
        engine_floor_problem,
        engine_platform_problem,
    )
    from ridgeline.hardware import MAX_PRICE_USD, resolve_accelerator
    from ridgeline.plan import DEFAULT_GPUS, LEFT_OUT_LEVER, plan
    from ridgeline.plan_constraints import PlanConstraints
    from ridgeline.replica_sizing import DEFAULT_CONTEXT
    from ridgeline.reports.plan import PlanReport
    from ridgeline.serving_load import Load, Slo

    refuse_data_parallel(args, "plan", DATA_PARALLEL_REFUSED)
    records = _gpu_file_records(args)  # each --gpu-file's record id: its path
    gpus = _named_cards(args.gpus, records) if args.gpus \
        else [] if records else [  # a record alone: plan on it; the defaults otherwise
            g for g in DEFAULT_GPUS  # the defaults the engine runs on (TRT-LLM: no AMD)
            if not engine_platform_problem(args.engine, resolve_accelerator(g))]
    ids = [resolve_accelerator(g).id for g in gpus]
    if len(set(ids)) < len(ids):
        raise InputError("an accelerator is named twice in --gpus")
    gpus += [r for r in records if r not in ids]  # a record --gpus names keeps its place
    cards = [resolve_accelerator(g) for g in gpus]
    ids = [acc.id for acc in cards]
    problems = [engine_platform_problem(args.engine, acc) for acc in cards]
    for acc, problem in zip(cards, problems):  # plan sizes serving engines: none runs on Metal
        if not problem:
            continue
        if below_engine_floor(args.engine, acc):
            if not all(problems):
                continue  # a card among others the engine's floor refuses: left out, said so
            # every card refused (a V100 and a T4 under TensorRT-LLM): the first, its ways
            # out in plan's words, not a search of 0 configurations that 'meets no SLO'
            raise InputError(engine_floor_problem(args.engine, acc, LEFT_OUT_LEVER))
        if problem.partition("; try --engine ")[2].split(" ")[0] in PLAN_ENGINES:
            raise InputError(problem)  # another engine plan sizes (vLLM on an MI300X)
        raise InputError(problem.split("; try")[0] + ": plan sizes vLLM, SGLang and "
                         "TensorRT-LLM deployments")
    prices: dict[str, float] = {}
    for item in args.price or []:
        name, _, value = item.partition("=")
        try:
            price = float(value)
        except ValueError:
            raise InputError(f"--price takes GPU=USD_PER_HOUR, got {item!r}") from None
        if not 0 < price <= MAX_PRICE_USD:
            raise InputError(f"a price is USD per GPU-hour, above 0 and at most "
                             f"{MAX_PRICE_USD:,.0f}, got {shorten(item)!r}")
        card = resolve_accelerator(name.strip()).id
        if card not in ids:
            raise InputError(f"--price {shorten(item)}: {card} is not among the searched GPUs "
                             f"({', '.join(ids)})")
        if card in prices:
            raise InputError(f"--price names {card} twice ({prices[card]:g} and {price:g}): "
                             "give one")
        prices[card] = price
    for record_id, path in records.items():  # a user's card: priced by its file or --price
        if record_id not in prices and resolve_accelerator(record_id).price_per_hour_usd is None:
            raise InputError(f"--gpu-file {shorten_path(path)}: {record_id} has no price, and "
                             "plan ranks deployments by price: add \"price_per_hour_usd\" "
                             f"(USD per GPU-hour) to the record, or give --price "
                             f"{record_id}=USD")
    # the model loads (a --fetch download) once the cards it is planned on are read
    model = load_model(args)
    given = [flag for flag, value in (("--input-len", args.input_len),
                                      ("--output-len", args.output_len)) if value is not None]
    if args.trace and given:
        raise InputError(f"--trace replays its own lengths; drop {', '.join(given)}")
    load = Load.from_trace(args.trace, args.seed) if args.trace \
        else Load(args.rate, args.input_len or "1000", args.output_len or "250", args.seed)
    slo = Slo(args.slo_ttft_ms / 1e3, args.slo_tpot_ms / 1e3, args.percentile,
              None if args.slo_itl_ms is None else args.slo_itl_ms / 1e3)
    if args.engine_version is not None:  # a bad version is named before the search
        from ridgeline.engine_versions import check_engine_version

        check_engine_version(args.engine, args.engine_version)
    constraints = PlanConstraints.parse(  # the hybrid manager's switches read as fit reads them
        args.weights, args.kv_dtype, args.min_context, args.max_model_len,
        args.max_cost_per_hour_usd, args.disable_hybrid_kv_cache_manager,
        args.vllm_allow_chunked_local_attn_with_hybrid_kv_cache)
    result = plan(model, load, slo, gpus, args.max_gpus, prices, workers=args.workers,
                  executor=args.executor, engine_version=args.engine_version,
                  engine=args.engine, profile=load_profile(args),
                  data_parallel=not args.no_dp, constraints=constraints)
    from ridgeline.catalog import hub_id, model_entries

    # the launch serves the repo named (an instruct variant), else the catalog entry's
    entry = next((e for e in model_entries() if e.id == model.name), None)
    named = hub_id(args.model)
    hf = args.model if entry is None else named if named in entry.hf_ids else entry.hf_id
    if hf.lower().endswith(".json"):  # an engine loads a folder (config and weights), or an id
        from pathlib import Path

        hf = str(Path(hf).parent)
    win = result.winner  # its launch's --max-model-len, else the model's context
    max_len = win.max_model_len if win and win.max_model_len else \
        args.max_model_len or served_positions(model, args.engine) or DEFAULT_CONTEXT
    return PlanReport(model, hf, result, max_len, load.refused_share(max_len),
                      args.model, bool(args.fetch), args.profile or "")


def _named_cards(names: str, records: dict[str, str]) -> list[str]:
    """--gpus's cards, each a catalog card or a --gpu-file record's id (registered first, so
    `--gpus h100,lab-h100 --gpu-file lab.json` orders the record beside the catalog's card);
    a name that is neither refused in a line naming the records beside the catalog's."""
    from ridgeline.hardware import resolve_accelerator

    cards = [g.strip() for g in names.split(",") if g.strip()]
    for name in cards:
        try:
            resolve_accelerator(name)
        except InputError as unknown:
            mine = (f"; the --gpu-file records: {', '.join(records)}" if records else
                    "; a card of your own: --gpu-file FILE")
            raise InputError(f"--gpus: {unknown}{mine}") from None
    return cards


def _gpu_file_records(args: argparse.Namespace) -> dict[str, str]:
    """Each --gpu-file's card record registered by its id, as page, validate and calibrate
    register theirs (one record per file, read as `fit --gpu-file` reads it): {id: path}."""
    if not args.gpu_file:
        return {}
    from ridgeline.cli_data import _register_gpu_files

    return _register_gpu_files(args, "plan would search one card twice")[0]


def register(sub: Any) -> None:
    from ridgeline.engine_versions import release_text

    p = sub.add_parser("plan", help="the cheapest deployment that meets an SLO for a load",
                       epilog="Exit status: 0 with a deployment to run: the winner (the "
                       "cheapest that holds in simulation without a measured caution), the "
                       "cheapest unverified one where none without it holds, or "
                       "cards that meet the SLO without a price (--price), or split prefill and "
                       "decode pools that held in simulation where no single pool does; 1 "
                       "where no "
                       "deployment within the limits meets the SLO (the report, or --json, "
                       "is still printed, with the closest miss); 2 for bad input.")
    _model(p)
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--rate", "--request-rate", type=_positive_float("request rate", most=MAX_RATE),
                      help="requests/s, with --input-len and --output-len (Poisson arrivals, "
                      "as vllm bench serve's --request-rate)")
    load.add_argument("--trace", metavar="FILE", type=_not_empty("trace path"),
                      help="a recorded load (CSV/JSONL as in simulate, Azure layout too; dates "
                      "without an offset are UTC): its rate and lengths, replayed round-robin "
                      "across replicas; its arrivals must span at least 1 s")
    p.add_argument("--input-len", type=_not_empty("--input-len"),
                   help="prompt tokens, as in simulate (1000 by default here; "
                   "512, lognormal:median,sigma, …)")
    p.add_argument("--output-len", type=_not_empty("--output-len"),
                   help="output tokens, as --input-len (250 by default here)")
    p.add_argument("--cpu-offload-gb", action=NotSearched, help=argparse.SUPPRESS)
    p.add_argument("--slo-ttft-ms", type=_positive_float("TTFT SLO"), required=True,
                   metavar="MS", help="time to first token the --percentile request may take")
    p.add_argument("--slo-tpot-ms", type=_positive_float("TPOT SLO"), required=True,
                   metavar="MS", help="time per output token at the same percentile")
    p.add_argument("--slo-itl-ms", type=_positive_float("ITL SLO"), metavar="MS",
                   help="inter-token latency at the same percentile, over the streamed "
                   "chunks of the requests a check's TTFT and TPOT are read on (past the "
                   "warm-up, before the drain), as simulate's ITL row (optional; a chunked "
                   "prefill's stall shows here before it moves the TPOT)")
    p.add_argument("--percentile", type=_typed(_percentile), default=90.0,
                   help="the SLO's percentile, in percent (default 90: p90)")
    p.add_argument("--gpus", type=_name_list(str.strip),  # read after --gpu-file's records
                   help="candidate accelerators, comma-separated "
                   "(default h100-sxm,h200-sxm,b200,mi300x,l40s); a card, or a format of one, "
                   "the engine's release refuses (vLLM from 0.20 on a V100, its fp8 cache on a "
                   "T4 from 0.24) is left out, a 'left out:' line (--json left_out) saying why; "
                   "--gpu-file records' ids too")
    # every other command's spelling, read as --gpus; --help shows the one
    p.add_argument("--gpu", dest="gpus", type=_name_list(str.strip),
                   help=argparse.SUPPRESS)
    p.add_argument("--gpu-file", action="append", metavar="FILE",
                   type=_not_empty("accelerator file path"),
                   help="your own card record (as `fit --gpu-file` reads it), searched beside "
                   "--gpus's cards; repeatable; priced by its price_per_hour_usd or --price")
    p.add_argument("--max-gpus", type=_how_many("max GPUs"), default=64,
                   help="GPUs in all replicas together (default 64)")
    p.add_argument("--max-cost-per-hour-usd", "--max-usd-per-hour", dest="max_cost_per_hour_usd",
                   metavar="USD", type=_positive_float("--max-cost-per-hour-usd",
                                                       most=MAX_CEILING_USD_H),
                   help="most a deployment may cost an hour, all GPUs: dearer ones dropped "
                   "(the Pareto frontier keeps them; none left: the cheapest, exit 1)")
    p.add_argument("--weights", metavar="FMT[,FMT]", type=_name_list(_weight_name),
                   help="the weight formats allowed, comma-separated, as decode spells them "
                   "(bf16, fp8; auto: a quantized checkpoint as stored); default: every one "
                   "plan searches")
    p.add_argument("--kv-dtype", "--kv-cache-dtype", dest="kv_dtype", metavar="D[,D]",
                   type=_name_list(_kv_name),
                   help="the KV-cache dtypes allowed, comma-separated (bf16, fp8); default: "
                   "every one plan searches")
    p.add_argument("--min-context", metavar="TOKENS", type=_how_many("--min-context"),
                   help="the shortest --max-model-len a launch may start with: every "
                   "deployment serves prompts and outputs this long (default: as the load "
                   "needs)")
    max_model_len_option(p, "the max_model_len every launch starts with (vLLM's --max-model-len, "
                         "SGLang's --context-length, TensorRT-LLM's --max_seq_len), each pool "
                         "sized as `fit --max-model-len` sizes it (default: the model's context, "
                         "or the longest its pool starts with)",
                         cells=False)
    p.add_argument("--price", action="append", metavar="GPU=USD",
                   help="price per GPU-hour, repeatable (default: the catalog's)")
    p.add_argument("--workers", type=_how_many("workers", MAX_WORKERS), default=2,
                   help="processes evaluating candidates (default 2)")
    p.add_argument("--executor", choices=["process", "ray"], default="process",
                   help="local processes (default) or a Ray cluster (RAY_ADDRESS; extra ray)")
    p.add_argument("--seed", type=_count("seed", COUNT_EXAMPLES), default=0,
                   help="the synthetic load's draw (default 0)")
    p.add_argument("--engine", choices=PLAN_ENGINES, default="vllm",
                   help="the serving engine whose memory rules size each replica's pool "
                   "(default vllm)")
    p.add_argument("--engine-version", metavar="V", type=release_text,
                   help="that engine's version whose memory accounting and start-up floors "
                   "size the pools, and whose defaults the launch line carries (vLLM, SGLang, "
                   "TensorRT-LLM 1.0 to 1.2; default: newest; the launch line names the "
                   "release it was sized for)")
    p.add_argument("--profile", metavar="FILE", type=_not_empty("profile path"),
                   help="the engine's profile from `ridgeline calibrate` (default: the bundled "
                   "one) that times each candidate's steps")
    p.add_argument("--no-dp", "--no-data-parallel", dest="no_dp", action="store_true",
                   help="search no data-parallel attention layouts: by default a MoE's are "
                   "searched beside tensor parallelism on vLLM (--data-parallel-size N "
                   "--enable-expert-parallel) and SGLang (--dp-size N --enable-dp-attention, "
                   "--ep-size), each rank its own requests' cache, within one node")
    data_parallel_flags(p, expert_parallel=False,
                        refused="plan searches the layouts itself (--no-dp: none); refused here")
    hybrid_manager_flags(p)  # fit's: every vLLM pool sized and launched with them
    _output(p, plot=True)
    p.set_defaults(handler=cmd_plan)
