"""The command line: parse, call the library, render. Bad input exits 2 with one line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from ridgeline import __version__
from ridgeline.errors import InputError
from ridgeline.render import render
from ridgeline.units import parse_count, parse_count_list, require_positive

Handler = Callable[[argparse.Namespace], Any]


def _typed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """Wrap a parser so argparse shows our one-line message."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def _positive_count(what: str) -> Callable[[str], int]:
    return _typed(lambda t: int(require_positive(parse_count(t, what), what)))


def _positive_float(what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise InputError(f"{what} must be a number, got {text!r}") from None
        return float(require_positive(value, what))

    return _typed(parse)


def _count_list(what: str) -> Callable[[str], list[int]]:
    return _typed(lambda t: parse_count_list(t, what))


# -- shared option groups ---------------------------------------------------------------
def _output(p: argparse.ArgumentParser, plot: bool = False) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--explain", action="store_true",
                   help="show each formula with its inputs and their sources")
    if plot:
        p.add_argument("--plot", metavar="FILE",
                       help="also draw it: .png/.svg (needs ridgeline[plot]) or .html")


def _model(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL",
                   help="catalog alias (llama-3.1-70b), HF id, or path to a config.json")
    p.add_argument("--fetch", action="store_true",
                   help="download MODEL's config.json from the Hugging Face Hub")


def _gpu(p: argparse.ArgumentParser, required: bool = True) -> None:
    g = p.add_argument_group("accelerator")
    g.add_argument("--gpu", required=False, metavar="NAME",
                   help="catalog id or name (h100, 'NVIDIA H100 80GB HBM3')" +
                   ("" if required else "; optional"))
    g.add_argument("--gpu-file", metavar="FILE", help="an accelerator record in JSON")
    g.add_argument("--peak-tflops", type=_positive_float("peak TFLOP/s"),
                   help="custom accelerator: dense peak TFLOP/s (with --bandwidth-gbs)")
    g.add_argument("--bandwidth-gbs", type=_positive_float("bandwidth GB/s"),
                   help="custom accelerator: memory bandwidth in GB/s")
    g.add_argument("--gpu-memory-gib", type=_positive_float("GPU memory GiB"),
                   help="custom accelerator: memory in GiB (default 80)")
    g.add_argument("--num-gpus", "--tensor-parallel-size", dest="num_gpus", default=1,
                   type=_positive_count("number of GPUs"),
                   help="accelerators in one tensor-parallel group (default 1)")
    p.set_defaults(gpu_required=required)


def _engine(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", default="vllm",
                   help="engine whose calibrated profile gives the expectation (default vllm): "
                   "vllm, sglang, trtllm, llama.cpp-cuda, llama.cpp-metal, …")
    p.add_argument("--profile", metavar="FILE", help="profiles from `ridgeline calibrate`")


def _formats(p: argparse.ArgumentParser) -> None:
    p.add_argument("--weights", metavar="FMT",
                   help="weight format (bf16, fp8, awq-int4, nvfp4, mxfp4, q4_k_m, …); "
                   "default: as the checkpoint stores them")
    p.add_argument("--kv-dtype", "--kv-cache-dtype", dest="kv_dtype", metavar="D",
                   help="KV-cache dtype (bf16, fp8, …); default: the model's dtype")


# -- resolution helpers --------------------------------------------------------------
def load_model(args: argparse.Namespace) -> Any:
    from ridgeline.catalog import resolve_model

    if getattr(args, "fetch", False):
        from ridgeline.hub import fetch_config
        from ridgeline.model import ModelSpec

        return ModelSpec.from_hf_config(fetch_config(args.model), name=args.model)
    return resolve_model(args.model)


def load_accelerator(args: argparse.Namespace) -> Any:
    from ridgeline.hardware import custom_accelerator, load_accelerator_file, resolve_accelerator

    if args.gpu_file:
        return load_accelerator_file(args.gpu_file)
    if args.peak_tflops or args.bandwidth_gbs:
        if not (args.peak_tflops and args.bandwidth_gbs):
            raise InputError("a custom accelerator needs both --peak-tflops and --bandwidth-gbs")
        return custom_accelerator(args.gpu or "custom", args.peak_tflops, args.bandwidth_gbs,
                                  args.gpu_memory_gib or 80.0)
    if not args.gpu:
        if args.gpu_required:
            raise InputError("name an accelerator with --gpu (see `ridgeline hardware`)")
        return None
    return resolve_accelerator(args.gpu)


def load_deployment(args: argparse.Namespace, model: Any = None) -> Any:
    from ridgeline.deployment import Deployment

    acc = load_accelerator(args)
    if acc is None:
        return None
    return Deployment.build(model or load_model(args), acc, getattr(args, "weights", None),
                            getattr(args, "kv_dtype", None), args.num_gpus)


# -- handlers ----------------------------------------------------------------------------
def cmd_hardware(args: argparse.Namespace) -> Any:
    from ridgeline.hardware import load_accelerator_file, resolve_accelerator
    from ridgeline.reports.hardware import hardware_list, hardware_record

    if args.gpu_file:
        return hardware_record(load_accelerator_file(args.gpu_file))
    if args.name:
        return hardware_record(resolve_accelerator(args.name))
    return hardware_list()


def cmd_model(args: argparse.Namespace) -> Any:
    from ridgeline.reports.model import model_report

    return model_report(load_model(args))


def cmd_roofline(args: argparse.Namespace) -> Any:
    from ridgeline.precision import kv_dtype, weight_format
    from ridgeline.reports.roofline import roofline_report

    acc = load_accelerator(args)
    dep = load_deployment(args) if args.model else None
    dtype = args.compute_dtype or (dep.compute_dtype if dep else "bf16")
    bpw = weight_format(args.weights).bytes_per_weight if args.weights and not dep else 2.0
    kvb = kv_dtype(args.kv_dtype).bytes_per_element if args.kv_dtype and not dep else 2.0
    return roofline_report(acc, dtype, args.batch, args.prompt_len, dep, bpw, kvb, args.intensity)


def cmd_moe(args: argparse.Namespace) -> Any:
    from ridgeline.reports.moe import moe_report

    if not args.gpu and not args.gpu_file and not args.peak_tflops:
        args.gpu = "h100-sxm"  # the article's card
    return moe_report(load_deployment(args), args.batch)


def cmd_kv(args: argparse.Namespace) -> Any:
    from ridgeline.kvcache import kv_replication
    from ridgeline.precision import kv_dtype
    from ridgeline.reports.kv import kv_report
    from ridgeline.units import GIB

    model = load_model(args)
    kv = kv_dtype(args.kv_dtype or model.dtype)
    budget, label, replication = None, "", 1.0
    if args.memory_gib is not None:
        budget, label = args.memory_gib * GIB, f"{args.memory_gib:g} GiB given"
    else:
        dep = load_deployment(args, model)
        if dep is not None:
            budget = dep.memory_bytes - dep.weight_bytes
            label = (f"{dep.num_gpus} x {dep.accelerator.id} ({dep.memory_bytes / 1e9:,.1f} GB) "
                     f"− {dep.weight_bytes / 1e9:,.1f} GB of weights ({dep.weights.label})")
            replication = kv_replication(model, dep.num_gpus)
    return kv_report(model, args.context, kv, budget, label, replication)


def load_profile(args: argparse.Namespace) -> Any:
    from ridgeline.engines import load_profile_file, profile_for

    profiles = load_profile_file(args.profile) if getattr(args, "profile", None) else None
    return profile_for(args.engine, profiles)


def cmd_decode(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from ridgeline.engines import engine_id
    from ridgeline.reports.decode import decode_report

    dep = replace(load_deployment(args), engine=engine_id(args.engine))
    return decode_report(dep, args.batch, args.context, load_profile(args))


def cmd_prefill(args: argparse.Namespace) -> Any:
    from ridgeline.cost import Seq
    from ridgeline.floors import prefill_floor
    from ridgeline.reports.decode import Expectation, PrefillReport

    dep = load_deployment(args)
    expected = Expectation.of(dep, [Seq(args.prompt_len, 0)] * args.batch, load_profile(args))
    return PrefillReport(dep, prefill_floor(dep, args.prompt_len, args.batch), expected)


def cmd_utilization(args: argparse.Namespace) -> Any:
    from ridgeline.reports.decode import utilization_report

    acc = load_accelerator(args)
    dep = load_deployment(args) if args.model else None
    if dep is not None and args.context is None:
        raise InputError("--model needs --context to say how many conversations the KV holds")
    return utilization_report(acc, args.running, args.compute_dtype or "bf16", 2.0, dep,
                              args.context)


def engine_settings(args: argparse.Namespace) -> Any:
    from ridgeline.memory import EngineSettings

    return EngineSettings(
        gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size, enforce_eager=args.enforce_eager, usage=args.usage)


def cmd_fit(args: argparse.Namespace) -> Any:
    from ridgeline.deployment import Deployment
    from ridgeline.engines import engine_id
    from ridgeline.reports.fit import fit_report

    acc = load_accelerator(args)
    dep = Deployment.build(load_model(args), acc, args.weights, args.kv_dtype, args.num_gpus,
                           engine=engine_id(args.engine))
    return fit_report(dep, args.max_model_len, engine_settings(args), args.target_concurrency)


def cmd_simulate(args: argparse.Namespace) -> Any:
    import csv
    import json
    import math
    from dataclasses import replace

    from ridgeline.deployment import Deployment
    from ridgeline.engines import engine_id
    from ridgeline.reports.simulate import SimulateReport
    from ridgeline.sim.simulator import Simulator, sim_config
    from ridgeline.sim.workload import Workload, read_trace

    acc = load_accelerator(args)
    dep = Deployment.build(load_model(args), acc, args.weights, args.kv_dtype, args.num_gpus,
                           engine=engine_id(args.engine))
    config = sim_config(dep, engine_settings(args), not args.no_prefix_caching,
                        args.spec_tokens, args.spec_acceptance, args.spec_draft_cost)
    if config.num_blocks < 1:
        raise InputError(f"does not fit: {dep.model.name} leaves no KV pool on "
                         f"{dep.num_gpus} x {acc.id} (see `ridgeline fit`)")
    if args.trace:
        requests: Any = read_trace(args.trace)
        count, load = len(requests), f"trace {args.trace} ({len(requests):,} requests)"
    else:
        if args.rate is None and args.concurrency is None:
            raise InputError("give --rate R (requests/s), --concurrency C, or --trace FILE")
        rate = math.inf if args.rate is None else args.rate
        requests = Workload(args.num_requests, args.input_len, args.output_len, rate,
                            args.arrival, args.burstiness, args.prefix_groups, args.prefix_len,
                            args.seed)
        count = args.num_requests
        load = (f"{args.num_requests:,} requests, input {args.input_len}, output "
                f"{args.output_len}, " + (f"concurrency {args.concurrency}"
                                          if args.concurrency else
                                          f"{args.arrival} arrivals at {args.rate:g}/s"))
    sim = Simulator(dep, load_profile(args), config)
    slo_ttft = None if args.slo_ttft_ms is None else args.slo_ttft_ms / 1e3
    slo_tpot = None if args.slo_tpot_ms is None else args.slo_tpot_ms / 1e3
    result = sim.run(iter(requests), closed_loop=args.concurrency or 0,
                     keep_rows=bool(args.export), slo=(slo_ttft, slo_tpot))
    if args.export:
        rows = result.rec.rows
        header = ["id", "arrival_s", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s",
                  "e2e_s", "preemptions"]
        try:
            with open(args.export, "w", newline="", encoding="utf-8") as handle:
                if args.export.endswith(".json"):
                    json.dump([dict(zip(header, r)) for r in rows], handle)
                else:
                    writer = csv.writer(handle)
                    writer.writerow(header)
                    writer.writerows(rows)
        except OSError as exc:
            raise InputError(f"cannot write {args.export}: {exc}") from None
    return SimulateReport(replace(dep), config, result, count, load, slo_ttft, slo_tpot)


def _seconds(text: str) -> float:
    text = str(text).strip().lower()
    factor = 60.0 if text.endswith("m") else 1.0
    try:
        value = float(text.rstrip("sm")) * factor
    except ValueError:
        raise InputError(f"a duration looks like 60s, 2m or 0.5, got {text!r}") from None
    if value < 0:
        raise InputError(f"a duration cannot be negative, got {text!r}")
    return value


def cmd_observe(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from ridgeline.engines import engine_id
    from ridgeline.observe import read_source
    from ridgeline.reports.observe import observe_report

    args.fetch = False
    model = load_model(args)
    dep = replace(load_deployment(args, model), engine=engine_id(args.engine))
    obs = read_source(args.source, _seconds(args.duration), _seconds(args.interval) or 1.0)
    report = observe_report(obs, dep, load_profile(args), args.context)
    if args.emit_measurements:
        try:
            with open(args.emit_measurements, "w", encoding="utf-8", newline="") as handle:
                handle.write(report.measurement_rows(args.model))
        except OSError as exc:
            raise InputError(f"cannot write {args.emit_measurements}: {exc}") from None
    return report


def cmd_plan(args: argparse.Namespace) -> Any:
    from ridgeline.plan import DEFAULT_GPUS, Load, Slo, plan
    from ridgeline.reports.plan import PlanReport

    model = load_model(args)
    prices: dict[str, float] = {}
    for item in args.price or []:
        name, _, value = item.partition("=")
        try:
            prices[name.strip()] = float(value)
        except ValueError:
            raise InputError(f"--price takes GPU=USD_PER_HOUR, got {item!r}") from None
        if prices[name.strip()] <= 0:
            raise InputError(f"a price must be positive, got {item!r}")
    if not 0 < args.percentile < 100:
        raise InputError(f"percentile must be between 0 and 100, got {args.percentile}")
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus \
        else list(DEFAULT_GPUS)
    load = Load(args.rate, args.input_len, args.output_len, args.seed)
    slo = Slo(args.slo_ttft_ms / 1e3, args.slo_tpot_ms / 1e3, args.percentile)
    result = plan(model, load, slo, gpus, args.max_gpus, prices, workers=args.workers,
                  executor=args.executor)
    mean_in, mean_out = load.means()
    from ridgeline.catalog import model_entries

    hf = next((e.hf_id for e in model_entries() if e.id == model.name), args.model)
    return PlanReport(model, hf, result, int(4 * (mean_in + mean_out)) + 16,
                      plan_steps(result, mean_out))


def plan_steps(result: Any, mean_out: float) -> tuple[Any, ...]:
    from ridgeline.explain import q, step

    win = result.winner
    if win is None:
        return ()
    tok_s = result.load.rate * mean_out
    return (
        step("one replica's rate", "batch ÷ (output tokens × TPOT at that batch)",
             q("rate", win.replica_rate, "req/s"), q("batch", win.batch),
             q("output tokens (mean)", mean_out), q("TPOT", win.tpot_s * 1e3, "ms",
                                                     "step_cost, mixed decode + prefill step")),
        step("replicas", "ceil(rate ÷ one replica's rate), then simulated until the SLO holds",
             q("replicas", win.replicas), q("rate", result.load.rate, "req/s")),
        step("cost per million output tokens", "$/h ÷ (output tok/s × 3600) × 1e6",
             q("cost", win.cost_per_million_tokens(tok_s) or 0.0, "$/M tok"),
             q("$/h", win.cost_per_hour or 0.0, "", "GPUs × price per GPU-hour"),
             q("output tok/s", tok_s)),
    )


@dataclass(frozen=True)
class WroteFile:
    path: str
    what: str
    steps: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"wrote": self.path, "what": self.what}

    def text_lines(self) -> list[str]:
        if "\n" in self.what:
            return self.what.splitlines()
        return [f"wrote {self.path}: {self.what}"]


def cmd_page(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from ridgeline.page import DEFAULT_GPUS, page_data, page_html

    models = [args.model] if args.model else ["llama-3.1-70b", "llama-3.1-8b", "gpt-oss-120b"]
    gpus = [g.strip() for g in args.gpu.split(",")] if args.gpu else list(DEFAULT_GPUS)
    counts = [int(c) for c in args.counts.split(",")]
    weights = [w.strip() for w in args.weights.split(",")]
    kvs = [k.strip() for k in args.kv_dtypes.split(",")]
    data = page_data(models, gpus, counts, weights, kvs, args.engine)
    try:
        Path(args.output).write_text(page_html(data, "ridgeline: the roofline"), "utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {args.output}: {exc}") from None
    return WroteFile(args.output, f"{len(data['combos'])} deployments, batch and context "
                     "sliders; open it in any browser (offline)")


def _register_gpu_files(args: argparse.Namespace) -> None:
    from ridgeline.hardware import load_accelerator_file, register

    for path in args.gpu_file or []:
        register(load_accelerator_file(path))


def cmd_measure(args: argparse.Namespace) -> Any:
    from ridgeline.measure import accelerator_record, measure, write_record, write_rows

    result = measure(args.device, args.quick, args.model, args.dtype, args.gpu_id)
    gid = args.gpu_id or f"measured-{args.device}"
    write_rows(result.rows, args.output)
    record_path = str(args.output).rsplit(".", 1)[0] + ".accelerator.json"
    write_record(accelerator_record(result, gid, args.memory_gib * 2**30), record_path)
    rated = None
    if args.rated_gpu:
        from ridgeline.hardware import resolve_accelerator

        rated = resolve_accelerator(args.rated_gpu)
    lines = [f"{result.device_name} ({args.device})"]
    for p in result.probes:
        unit = "GB/s" if "bandwidth" in p.name else "TFLOP/s"
        value = p.value / 1e9 if unit == "GB/s" else p.value / 1e12
        line = f"  {p.name:<28} {value:>10,.2f} {unit}  ({p.detail})"
        if rated and unit == "GB/s":
            line += f"  rated {rated.memory_bandwidth_bytes_per_s / 1e9:,.0f} GB/s"
        lines.append(line)
    lines += [f"  skipped: {s}" for s in result.skipped]
    lines.append(f"wrote {len(result.rows)} rows to {args.output} and the measured device to "
                 f"{record_path}; next: ridgeline validate {args.output} --gpu-file "
                 f"{record_path}")
    return WroteFile(args.output, "\n".join(lines))


def cmd_validate(args: argparse.Namespace) -> Any:
    from ridgeline.calibrate import validate
    from ridgeline.engines import load_profile_file
    from ridgeline.measurements import read_measurements
    from ridgeline.reports.validation import ValidationReport

    _register_gpu_files(args)
    result = read_measurements(args.file)
    if not result.rows:
        raise InputError(f"{args.file}: no readable rows ({len(result.errors)} unreadable: "
                         + "; ".join(result.errors[:3]) + ")")
    profiles = load_profile_file(args.profile) if args.profile else None
    predictions = validate(result.rows, profiles)
    return ValidationReport(result.rows, tuple(predictions), result.errors, not args.summary)


def cmd_calibrate(args: argparse.Namespace) -> Any:
    import json
    from pathlib import Path

    from ridgeline.calibrate import error_stats, fit_profiles, validate
    from ridgeline.measurements import read_measurements
    from ridgeline.reports.validation import CalibrationReport

    _register_gpu_files(args)
    result = read_measurements(args.file)
    if not result.rows:
        raise InputError(f"{args.file}: no readable rows")
    profiles = fit_profiles(result.rows, args.engine)
    if not profiles:
        raise InputError(f"{args.file}: no throughput or latency rows to fit")
    data = {"_about": f"ridgeline profile fitted on {args.file}",
            "engines": {e: p.to_dict() for e, p in profiles.items()}}
    try:
        Path(args.output).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {args.output}: {exc}") from None

    def by_metric(preds: list[Any]) -> tuple[Any, ...]:
        return tuple(error_stats(preds, lambda p: p.metric))

    before = by_metric(validate(result.rows))
    after = by_metric(validate(result.rows, profiles))
    return CalibrationReport(profiles, before, after, args.output)


# -- the parser --------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"ridgeline: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ridgeline",
        description="LLM serving arithmetic from a config.json and a spec sheet.",
    )
    parser.add_argument("--version", action="version", version=f"ridgeline {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("hardware", help="the accelerator catalog, or one record with sources")
    p.add_argument("name", nargs="?", metavar="NAME")
    p.add_argument("--gpu-file", metavar="FILE", help="show a record from a JSON file")
    _output(p)
    p.set_defaults(handler=cmd_hardware)

    p = sub.add_parser("model", help="layers, attention geometry, experts, params, bytes")
    _model(p)
    _output(p)
    p.set_defaults(handler=cmd_model)

    p = sub.add_parser("roofline", help="ridge point and where each part of a step sits")
    _gpu(p)
    p.add_argument("--compute-dtype", choices=["fp32", "tf32", "bf16", "fp16", "fp8", "int8",
                                               "fp4"])
    p.add_argument("--batch", type=_positive_count("batch"), default=1)
    p.add_argument("--prompt-len", type=_positive_count("prompt length"), default=4000)
    p.add_argument("--intensity", type=_positive_float("intensity"),
                   help="also show the attainable FLOP/s at this many FLOP per byte")
    p.add_argument("--model", help="place this model's attention and experts on the roofline")
    p.add_argument("--fetch", action="store_true", help=argparse.SUPPRESS)
    _formats(p)
    _output(p)
    p.set_defaults(handler=cmd_roofline)

    p = sub.add_parser("moe", help="routed fraction, experts touched, bytes a step reads")
    _model(p)
    _gpu(p, required=False)
    _formats(p)
    p.add_argument("--batch", type=_positive_count("batch"), default=32)
    _output(p, plot=True)
    p.set_defaults(handler=cmd_moe)

    p = sub.add_parser("kv", help="KV-cache bytes by layer kind and conversations that fit")
    _model(p)
    p.add_argument("--context", type=_positive_count("context length"), required=True)
    p.add_argument("--memory-gib", type=_positive_float("memory GiB"),
                   help="a KV budget in GiB (instead of --gpu)")
    _gpu(p, required=False)
    _formats(p)
    _output(p, plot=True)
    p.set_defaults(handler=cmd_kv)

    p = sub.add_parser("decode", help="decode step floor: time, tok/s per user and in total")
    _model(p)
    _gpu(p)
    _formats(p)
    p.add_argument("--batch", type=_count_list("batch"), default=[1],
                   help="one batch or a list: 1,8,32,128,296")
    p.add_argument("--context", type=_count_list("context length"), default=[2000],
                   help="tokens already cached per sequence; one or a list (default 2000)")
    _engine(p)
    _output(p, plot=True)
    p.set_defaults(handler=cmd_decode)

    p = sub.add_parser("prefill", help="prefill floor (TTFT) of a prompt and its intensity")
    _model(p)
    _gpu(p)
    _formats(p)
    p.add_argument("--prompt-len", type=_positive_count("prompt length"), required=True)
    p.add_argument("--batch", type=_positive_count("batch"), default=1)
    _engine(p)
    _output(p)
    p.set_defaults(handler=cmd_prefill)

    p = sub.add_parser("utilization", help="the running batch an engine reports vs the ridge")
    _gpu(p)
    p.add_argument("--running", type=_positive_count("running requests"), required=True,
                   help="vllm:num_requests_running, or N in 'Running: N reqs'")
    p.add_argument("--compute-dtype", choices=["bf16", "fp16", "fp8", "int8", "fp4"])
    p.add_argument("--model", help="compare with the batch this model's KV budget allows")
    p.add_argument("--fetch", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--context", type=_positive_count("context length"))
    _formats(p)
    _output(p)
    p.set_defaults(handler=cmd_utilization)

    p = sub.add_parser("fit", help="the KV pool an engine leaves, and the capacity verdict")
    _model(p)
    _gpu(p)
    _formats(p)
    p.add_argument("--max-model-len", type=_positive_count("max model length"), required=True,
                   help="conversation length to size for (vLLM --max-model-len)")
    p.add_argument("--target-concurrency", type=_positive_count("target concurrency"),
                   help="conversations that must fit at once")
    p.add_argument("--engine", default="vllm", help="vllm (default), sglang, trtllm, llama.cpp-…")
    g = p.add_argument_group("engine settings (the engine's own names; default: its default)")
    g.add_argument("--gpu-memory-utilization", "--mem-fraction-static",
                   "--kv-cache-free-gpu-mem-fraction", dest="gpu_memory_utilization",
                   type=_positive_float("memory fraction"))
    g.add_argument("--max-num-seqs", "--max-running-requests", "--max-batch-size",
                   dest="max_num_seqs", type=_positive_count("max_num_seqs"))
    g.add_argument("--max-num-batched-tokens", "--chunked-prefill-size", "--max-num-tokens",
                   dest="max_num_batched_tokens", type=_positive_count("max_num_batched_tokens"))
    g.add_argument("--block-size", "--page-size", "--tokens-per-block", dest="block_size",
                   type=_positive_count("block size"))
    g.add_argument("--enforce-eager", action="store_true", help="vLLM: no CUDA graphs")
    g.add_argument("--usage", choices=["serve", "offline"], default="serve",
                   help="vLLM usage context: vllm serve (default) or the offline LLM class")
    _output(p, plot=True)
    p.set_defaults(handler=cmd_fit)

    p = sub.add_parser("simulate", help="continuous batching under a load: TTFT/TPOT, goodput")
    _model(p)
    _gpu(p)
    _formats(p)
    _engine(p)
    w = p.add_argument_group("workload")
    w.add_argument("--rate", type=_positive_float("request rate"), help="requests per second")
    w.add_argument("--concurrency", type=_positive_count("concurrency"),
                   help="closed loop: keep this many requests in flight")
    w.add_argument("--num-requests", type=_positive_count("number of requests"), default=1000)
    w.add_argument("--input-len", default="512",
                   help="512, uniform:a,b, normal:mean,sd, lognormal:median,sigma, zipf:s,max, "
                   "file:PATH")
    w.add_argument("--output-len", default="128", help="as --input-len")
    w.add_argument("--arrival", choices=["poisson", "gamma", "constant"], default="poisson")
    w.add_argument("--burstiness", type=_positive_float("burstiness"), default=1.0,
                   help="gamma arrivals: coefficient of variation of the gaps")
    w.add_argument("--prefix-groups", type=int, default=0,
                   help="requests share one of this many prompt prefixes")
    w.add_argument("--prefix-len", type=int, default=0, help="tokens of the shared prefix")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--trace", metavar="FILE",
                   help="replay CSV/JSONL (arrival_s, prompt_tokens, output_tokens; or Azure's "
                   "TIMESTAMP, ContextTokens, GeneratedTokens)")
    g = p.add_argument_group("engine settings (vLLM names)")
    g.add_argument("--gpu-memory-utilization", type=_positive_float("memory fraction"))
    g.add_argument("--max-model-len", type=_positive_count("max model length"))
    g.add_argument("--max-num-seqs", type=_positive_count("max_num_seqs"))
    g.add_argument("--max-num-batched-tokens", type=_positive_count("max_num_batched_tokens"))
    g.add_argument("--block-size", type=_positive_count("block size"))
    g.add_argument("--enforce-eager", action="store_true")
    g.add_argument("--usage", choices=["serve", "offline"], default="serve")
    g.add_argument("--no-prefix-caching", action="store_true")
    g.add_argument("--spec-tokens", type=int, default=0, help="speculative decoding: draft length")
    g.add_argument("--spec-acceptance", type=float, default=0.7,
                   help="chance each draft token is accepted (default 0.7)")
    g.add_argument("--spec-draft-cost", type=float, default=0.05,
                   help="one draft token's cost as a share of a decode step (default 0.05)")
    p.add_argument("--slo-ttft-ms", type=_positive_float("TTFT SLO"))
    p.add_argument("--slo-tpot-ms", type=_positive_float("TPOT SLO"))
    p.add_argument("--export", metavar="FILE", help="per-request CSV (or .json)")
    _output(p, plot=True)
    p.set_defaults(handler=cmd_simulate)

    p = sub.add_parser("observe", help="a live engine's batch on the roofline, and its wall")
    p.add_argument("source", metavar="SOURCE",
                   help="/metrics URL, saved metrics text, vLLM log, or bench result JSON")
    p.add_argument("--model", required=True)
    _gpu(p)
    _formats(p)
    _engine(p)
    p.add_argument("--duration", default="60s", help="polling window for a URL (60s)")
    p.add_argument("--interval", default="1s", help="time between scrapes (1s)")
    p.add_argument("--context", type=_positive_count("context"),
                   help="typical tokens per sequence (default: from the source, else 2000)")
    p.add_argument("--emit-measurements", metavar="FILE",
                   help="write what was observed as measurement rows for `calibrate`")
    _output(p)
    p.set_defaults(handler=cmd_observe)

    p = sub.add_parser("plan", help="the cheapest deployment that meets an SLO for a load")
    _model(p)
    p.add_argument("--rate", type=_positive_float("request rate"), required=True)
    p.add_argument("--input-len", default="1000", help="as in simulate (512, lognormal:…)")
    p.add_argument("--output-len", default="250")
    p.add_argument("--slo-ttft-ms", type=_positive_float("TTFT SLO"), required=True)
    p.add_argument("--slo-tpot-ms", type=_positive_float("TPOT SLO"), required=True)
    p.add_argument("--percentile", type=float, default=90.0)
    p.add_argument("--gpus", help="candidate accelerators, comma-separated "
                   "(default h100-sxm,h200-sxm,b200,mi300x,l40s)")
    p.add_argument("--max-gpus", type=_positive_count("max GPUs"), default=64)
    p.add_argument("--price", action="append", metavar="GPU=USD",
                   help="price per GPU-hour, repeatable (default: the catalog's)")
    p.add_argument("--workers", type=_positive_count("workers"), default=2)
    p.add_argument("--executor", choices=["process", "ray"], default="process",
                   help="local processes (default) or a Ray cluster (RAY_ADDRESS; extra ray)")
    p.add_argument("--seed", type=int, default=0)
    _output(p, plot=True)
    p.set_defaults(handler=cmd_plan)

    p = sub.add_parser("page", help="an interactive roofline page with batch/context sliders")
    p.add_argument("model", nargs="?", metavar="MODEL",
                   help="catalog model (default: llama-3.1-70b, llama-3.1-8b, gpt-oss-120b)")
    p.add_argument("--gpu", help="accelerators to offer, comma-separated")
    p.add_argument("--counts", default="1,2,4,8", help="accelerator counts to offer")
    p.add_argument("--weights", default="as stored,fp8,awq-int4", help="weight formats to offer")
    p.add_argument("--kv-dtypes", default="bf16,fp8", help="KV dtypes to offer")
    p.add_argument("--engine", default="vllm")
    p.add_argument("-o", "--output", default="roofline.html")
    _output(p)
    p.set_defaults(handler=cmd_page)

    p = sub.add_parser("measure", help="measure this device: bandwidth, matmuls, model steps")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps")
    p.add_argument("--quick", action="store_true", help="a small grid (minutes, not tens)")
    p.add_argument("--model", default="llama-3.2-1b",
                   help="catalog model or config.json, built with random weights")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--gpu-id", help="id for the measured device in the rows")
    p.add_argument("--memory-gib", type=_positive_float("memory GiB"), default=80.0,
                   help="device memory to record (default 80)")
    p.add_argument("--rated-gpu", help="catalog accelerator to compare the probes with")
    p.add_argument("-o", "--output", required=True, metavar="rows.csv")
    _output(p)
    p.set_defaults(handler=cmd_measure)

    p = sub.add_parser("validate", help="predict every row of a measurements CSV, with errors")
    p.add_argument("file", metavar="FILE", help="CSV in the format of validation/README.md")
    p.add_argument("--gpu-file", action="append", metavar="FILE",
                   help="accelerator records the rows refer to (e.g. from `measure`)")
    p.add_argument("--profile", metavar="FILE", help="engine profiles from `ridgeline calibrate`")
    p.add_argument("--summary", action="store_true", help="only the error tables")
    _output(p, plot=True)
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser("calibrate", help="fit engine profiles to your own measurements")
    p.add_argument("file", metavar="FILE", help="CSV in the format of validation/README.md")
    p.add_argument("--gpu-file", action="append", metavar="FILE",
                   help="accelerator records the rows refer to (e.g. from `measure`)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="profile JSON to write")
    p.add_argument("--engine", action="append", help="fit only this engine (repeatable)")
    _output(p)
    p.set_defaults(handler=cmd_calibrate)

    from ridgeline.companion_cli import add_companion_commands

    add_companion_commands(sub, _output, _typed)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        report = args.handler(args)
        if getattr(args, "plot", None):
            from ridgeline.plots import save
            from ridgeline.reports.charts import chart_for

            save(chart_for(report), args.plot)
        print(render(report, as_json=args.json, explain=args.explain))
    except (InputError, ValueError) as exc:
        print(f"ridgeline: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
