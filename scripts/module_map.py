#!/usr/bin/env python3
"""The module map in docs/architecture.md, from the code (a check, not a test).

    python scripts/module_map.py           # rewrites docs/architecture.md
    python scripts/module_map.py --check   # exit 1 where the file is stale

Each module of src/ridgeline sits in one layer (LAYERS, in the order data flows: a layer
reads the ones above it); its line is the first paragraph of its docstring. The map also
lists every import that runs against that flow (a module reading one of a later layer), so
a new one is seen in review rather than found later. A module no layer names stops the
script: place it, then run it again.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "ridgeline"
OUT = ROOT / "docs" / "architecture.md"

# (layer, what it is, its modules): a name ending in "*" takes every module it starts
LAYERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Inputs", "reading what the user and the package hand in, and the one error type",
     ("errors", "units", "engine_names", "datafiles", "userfiles", "records", "record_views",
      "yaml_subset", "flag_json")),
    ("Hardware and models", "accelerators, configs read into ModelSpec, weight formats",
     ("hardware", "model_types", "config_fields", "layouts", "config_reader", "model",
      "params", "modelopt_algos", "exclusion_patterns", "quantization",
      "compressed_tensors_schemes", "checkpoint_kv",
      "modelopt_sidecar",
      "precision",
      "ds_mla_cache", "vision_tower",
      "kvcache", "gguf_*", "catalog", "hub", "context_length", "served_model",
      "tensor_parallel", "engine_platforms", "engine_quantization", "mxfp4_matmul")),
    ("Formulas", "the article's divisions: ridge points, cache bytes, routing, statistics",
     ("explain", "roofline", "moe", "expert_ranks", "attention_span", "sparse_attention",
      "attention_memory", "amdahl",
      "evalstats*", "prefix")),
    ("Deployment", "a model on cards under an engine: the one object every question is asked of",
     ("engines", "llamacpp_tensor", "llamacpp_split", "llamacpp_overrides", "llamacpp_rope",
      "deployment", "dense_ridge", "stages", "parallel")),
    ("Engine rules", "what each engine does, release by release, as data and small rules",
     ("engine_versions", "engine_choices", "engine_windows", "kvgroups", "kvpool", "vllm_memory",
      "vllm_graphs",
      "graph_batches", "vllm_hybrid", "vllm_compilation", "vllm_eplb", "vllm_eplb_weights",
      "lora_shapes", "vllm_lora",
      "vllm_mm_limits", "vllm_mla_block", "vllm_mla_cache", "vllm_extensible", "vllm_attention_block",
      "vllm_mxfp4", "vllm_cache_dtype", "vllm_rope", "vllm_metric_releases",
      "vllm_v0_chunking", "sglang_memory", "sglang_mm_reserve", "sglang_nsa", "sglang_page", "sglang_hybrid",
      "sglang_lora", "sglang_eplb",
      "lora_slots",
      "trtllm_memory",
      "trtllm_transceiver", "trtllm_api_fields", "engine_spec",
      "sizing_flags", "vllm_gpu_floors", "release_features", "quantization_gates")),
    ("Step cost", "a deployment and a batch to a step's time: the one model every figure uses",
     ("data_parallel", "decode_context", "launches", "offload", "cpu_offload*", "lora_step",
      "lora_collectives", "cost", "llamacpp_batching", "step_work", "floors", "raw_fit")),
    ("Engine memory", "what each engine leaves for the KV cache, the capacity it holds, and the "
     "engine's limits the simulator and the speculative step read from it",
     ("vllm_pool", "sglang_pool", "llamacpp_memory", "llamacpp_pool", "llamacpp_fit",
      "drafter_memory", "draft_model_memory", "vllm_mrv2_drafter", "sglang_drafter",
      "load_peak", "memory", "monotone", "capacity", "engine_runs",
      "llamacpp_fit_run", "floor_release",
      "engine_scheduling",
      "chunked_prefill", "sim.config", "sim.timer", "spec_decode", "step_share")),
    ("Calibration and validation", "measurement rows, predictions through step_cost, fits",
     ("measurements", "past_roofline", "metric_divisions", "predict", "unit_slips", "scoring",
      "outlier_rows", "nelder_mead", "calibrate*",
      "track_record")),
    ("Simulator", "continuous batching, step by step through step_cost", ("sim.*",)),
    ("Planner", "the cheapest deployment that meets an SLO: search, size, simulate, check",
     ("serving_load", "search_space", "pool_blocking", "replica_sizing", "candidate", "split_runs",
      "disaggregated", "plan_checks", "plan_cautions", "plan_constraints", "plan_precision",
      "host_pricing", "measured_slowdown",
      "closest_miss", "side_by_side", "plan")),
    ("Observe and measure", "a live engine's readings; a real GPU's timings",
     ("prometheus", "engine_metrics", "engine_pool", "observation", "observe*",
      "device_probes", "torch_model", "measure", "measure_plan")),
    ("Edges", "answers as text, --json and --explain; the command line; pictures",
     ("render", "reports.*", "plots", "page", "launch_flags", "llamacpp_launch", "cli*", "__init__",
      "__main__")),
)


def modules() -> dict[str, Path]:
    """Every module, dotted from the package ("sim.blocks"), to its file."""
    return {".".join(p.relative_to(SRC).with_suffix("").parts): p
            for p in sorted(SRC.rglob("*.py"))}


def layer_of(name: str) -> int | None:
    """The index of the layer that names ``name``, or None."""
    for i, (_, _, members) in enumerate(LAYERS):
        for m in members:
            if m == name or (m.endswith("*") and name.startswith(m[:-1])
                             and name != "sim" and name != "reports"):
                return i
    return None


def summary(path: Path) -> str:
    """The docstring's first paragraph, on one line."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def imports(path: Path, name: str) -> set[str]:
    """The ridgeline modules ``name`` imports, at the top or inside a function (not those
    under ``if TYPE_CHECKING:``, for annotations only)."""
    found: set[str] = set()
    package = name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(block.test)
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:  # an annotation's import runs nothing
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 1:  # "from .x import y" inside ridgeline.<package>
                base = ".".join(part for part in ("ridgeline", package, base) if part)
            if not base.startswith("ridgeline"):
                continue
            stem = base.removeprefix("ridgeline").strip(".")
            for alias in node.names:  # "from ridgeline.sim import config": the module
                found.add(f"{stem}.{alias.name}".strip(".") if stem in ("", "sim", "reports")
                          else stem)
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("ridgeline.") for a in node.names
                      if a.name.startswith("ridgeline.")}
    return found


def render(mods: dict[str, Path]) -> str:
    placed = {name: layer_of(name) for name in mods}
    lines = ["# Architecture: the module map", "",
             "Generated by `python scripts/module_map.py` from each module's docstring; "
             "`--check` says when it is stale. Layers run in the order data flows (the "
             "picture in the brief's ARCHITECTURE.md): each reads the ones above it, and the "
             "edges read everything. Every figure is step_cost on some deployment and batch, "
             "a sequence of those (the simulator) or a search over them (the planner).", ""]
    for i, (title, what, _) in enumerate(LAYERS):
        lines += [f"## {i + 1}. {title}", "", f"{what[0].upper()}{what[1:]}.", ""]
        for name in sorted(n for n, at in placed.items() if at == i):
            lines.append(f"- `{name.replace('.', '/')}.py`: {summary(mods[name])}")
        lines.append("")
    against = []
    for name, path in mods.items():
        for used in sorted(imports(path, name)):
            here, there = placed[name], placed.get(used)
            if here is not None and there is not None and there > here:
                against.append(f"- `{name}` ({LAYERS[here][0]}) reads `{used}` "
                               f"({LAYERS[there][0]})")
    lines += ["## Imports against the flow", "",
              "A module that reads a later layer's (most are lazy imports inside a function, "
              "for a refusal or a caution worded in the later layer's terms). Each is known; "
              "a new one is a question for review.", ""]
    lines += against or ["- none"]
    return "\n".join(lines) + "\n"


def main() -> int:
    import argparse  # --help printed nothing and rewrote the file: every word is read now

    parser = argparse.ArgumentParser(description="The module map in docs/architecture.md, "
                                     "from the code: rewrite it, or check it is current.")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 where the file is stale, rewriting nothing")
    check = parser.parse_args().check
    mods = modules()
    loose = [n for n in mods if layer_of(n) is None]
    if loose:
        print(f"no layer names {', '.join(loose)}: add it to LAYERS", file=sys.stderr)
        return 1
    text = render(mods)
    if check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run python scripts/module_map.py",
                  file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(mods)} modules in {len(LAYERS)} layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
