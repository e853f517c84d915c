"""Each engine's launch command for a planned replica, in its own flags (engines.json cli):
the memory share the plan sized its pool at, data-parallel attention and expert parallelism,
and for a replica over several nodes one command a node, or the Ray launch a release before
it needs. TensorRT-LLM's trtllm-serve command, and the YAML beside it, are trtllm_command's.
"""

from __future__ import annotations

from typing import Any

from ridgeline.candidate import Candidate
from ridgeline.datafiles import engine_defaults
from ridgeline.engine_scheduling import vllm_executor_async_from
from ridgeline.hardware import device_memory_bytes, resolve_accelerator
from ridgeline.model import ModelSpec
from ridgeline.parallel import node_size
from ridgeline.reports.trtllm_command import mpi_launch_note, trtllm_launch
from ridgeline.sglang_memory import (
    SGLangVisionCut,
    sglang_flag_fraction,
    sglang_gpu_mem_bytes,
    sglang_memory_defaults,
    sglang_prefill_case,
    sglang_vision_cut,
)
from ridgeline.vllm_extensible import launch_fraction
from ridgeline.vllm_memory import parse_version, vllm_accounting, vllm_data


def command_line(engine: str, model_id: str, c: Candidate, max_len: int,
                 version: str | None = None, node: int | None = None,
                 model: ModelSpec | None = None, connector: str = "") -> str:
    """The launch command for a candidate, in the engine's own flags (engines.json), with the
    memory share ``version`` (default: the newest modelled) sized it at, beside the KV
    ``connector`` a split's pool adds (which can turn vLLM 0.34's extensible KV cache off);
    for a replica over several nodes, the one ``node`` (0, the head, serving; 1, …) runs
    (``node_commands``)."""
    if engine == "trtllm":  # its PyTorch backend's command; its YAML: trtllm_launch
        return trtllm_launch(model_id, c, max_len, model).command
    f = engine_defaults(engine)["cli"]
    # vLLM makes each device the runtime lists a rank: an MI250's two GCDs, TP2 a board
    # (SGLang's --tp-size is every GPU of a data-parallel replica: engine_tp)
    parts = [launch_words(f, version), model_id, f["tp"], str(c.engine_tp(engine))]
    if c.pp > 1:
        parts += [f["pp"], str(c.pp)]
    if c.data_parallel > 1:  # vLLM's ranks of --tensor-parallel-size; SGLang's switch too
        parts += [f["dp"], str(c.data_parallel)]
        parts += [f["dp_attention"]] if "dp_attention" in f else []
    if c.expert_parallel:  # vLLM's is a switch (EP = TP × DP); SGLang's takes the size
        gpus = c.tp * c.data_parallel
        parts += [f["ep"]] if engine == "vllm" else ep_flags(f, gpus, version)
    if c.max_num_seqs:
        parts += [f["max_num_seqs"], str(c.max_num_seqs)]
    if c.max_num_batched_tokens:
        parts += [f["max_num_batched_tokens"], str(c.max_num_batched_tokens)]
    if engine == "vllm":  # the version's own default, so the plan's pool is the one used:
        # 1.0 where v0.34+ sizes it after warm-up on the card (vllm_extensible.py), not
        # beside a split's NixlConnector, which keeps that off
        fraction = launch_fraction(vllm_accounting(version),
                                   resolve_accelerator(c.accelerator).vendor, connector)
    else:  # SGLang's own rule for this card, written out so the plan's pool is the one used
        # (read off nvidia-smi's memory, and cut for ``model``'s vision tower where SGLang does)
        acc = resolve_accelerator(c.accelerator)
        memory, _ = sglang_gpu_mem_bytes(acc, device_memory_bytes(acc))
        prefill = sglang_prefill_case(model, acc, version) if model else None
        rule = sglang_memory_defaults(memory, c.tp * c.data_parallel, c.pp,
                                      c.max_num_batched_tokens, version, c.data_parallel,
                                      prefill=prefill)
        cut = sglang_vision_cut(model, version) if model else SGLangVisionCut()
        fraction = sglang_flag_fraction(rule, cut)
    parts += [f["memory"], str(fraction)]
    if not _before(version, f.get("launch_before", {}).get("max_len_since")):
        parts += [f["max_len"], str(max_len)]
    # a family whose fp8 runs another way (a Gaudi's through INC, its calibration file named
    # by QUANT_CONFIG: engines.json cli.families)
    own = f.get("families", {}).get(resolve_accelerator(c.accelerator).family, {})
    fp8 = c.kv == "fp8" or c.weights == "fp8"
    if c.kv == "fp8":
        parts += [f["kv_dtype"], own.get("kv_fp8", kv_fp8_word(f, version))]
    if c.weights == "fp8":
        parts += [f["quantization"], own.get("weights_fp8", "fp8")]
    if fp8 and "env" in own:
        parts.insert(0, own["env"])
    if engine == "vllm":  # the hybrid KV-cache manager as the plan sized the pool with it
        env, switches = hybrid_manager_words(c.disable_hybrid_kv_cache_manager,
                                             c.allow_chunked_local_attn_hybrid)
        parts = [*env, *parts, *switches]
    many = f.get("multi_node", {})
    if node is not None:
        parts += [many["nnodes"], str(c.replica_nodes), many["node_rank"], str(node),
                  many["head"], many["head_address"]]
        if node and "worker" in many:
            parts.append(many["worker"])
    elif c.replica_nodes > 1 and "ray" in many:  # a release before the launch per node
        parts.append(many["ray"])
    return " ".join(parts)


def hybrid_manager_words(disable: bool | None, allow_chunked: bool | None
                         ) -> tuple[list[str], list[str]]:
    """vLLM's hybrid KV-cache manager as a launch asks for it: the environment variable
    before the command (``allow_chunked``: VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0)
    and the flag after it (``disable``: --disable-hybrid-kv-cache-manager, or
    --no-disable-hybrid-kv-cache-manager), each where given; ([], []) where neither is."""
    env = [] if allow_chunked is None else [
        f"{dict(vllm_data()['chunked_local_hybrid'])['env']}={int(allow_chunked)}"]
    flag = [] if disable is None else [
        f"--{'' if disable else 'no-'}disable-hybrid-kv-cache-manager"]
    return env, flag


def _before(version: str | None, release: str | None) -> bool:
    """Whether ``version`` is named and comes before ``release`` (vLLM's order, which both
    engines' x.y.z share; a .postN is read as its base release)."""
    return bool(version and release) and parse_version(str(version)) < parse_version(str(release))


def launch_words(cli: dict[str, Any], version: str | None) -> str:
    """How ``version`` starts the server (engines.json cli.launch_before): 'vllm serve' from
    vLLM 0.5.2, before it 'python -m vllm.entrypoints.openai.api_server --model'."""
    before = cli.get("launch_before", {})
    return str(before["launch"] if _before(version, before.get("before")) else cli["launch"])


def kv_fp8_word(cli: dict[str, Any], version: str | None) -> str:
    """--kv-cache-dtype's fp8 value at ``version`` (engines.json cli.kv_fp8_before):
    vLLM's 'fp8' from 0.4.1, 'fp8_e5m2' before it; SGLang's 'fp8_e4m3' from 0.4.2."""
    before = cli.get("kv_fp8_before", {})
    return str(before["value"] if _before(version, before.get("before")) else cli["kv_fp8"])


def family_fp8_note(engine: str, c: Candidate) -> str:
    """What the launch line of ``c`` needs beside it where its card's family runs fp8 another
    way (engines.json cli.families: a Gaudi's INC calibration file, QUANT_CONFIG), or ""."""
    cli = engine_defaults(engine).get("cli", {})
    own = cli.get("families", {}).get(resolve_accelerator(c.accelerator).family, {})
    return str(own.get("note", "")) if "fp8" in (c.kv, c.weights) else ""


def ep_flags(cli: dict[str, Any], tp: int, version: str | None) -> list[str]:
    """SGLang's expert parallelism over its ``tp`` GPUs: --ep-size N from 0.5; before it,
    --enable-ep-moe, the switch its models read to run EPMoE (--ep-size alone kept the
    experts tensor-parallel), which later releases still take as ep_size = tp_size
    (engines.json cli.ep_switch)."""
    switch = cli.get("ep_switch")
    if switch and version and parse_version(version) < parse_version(switch["before"]):
        return [switch["flag"]]
    return [cli["ep"], str(tp)]


def launches_per_node(engine: str, version: str | None) -> bool:
    """Whether ``engine`` at ``version`` (default: the newest modelled) starts a replica over
    several nodes with one command a node (engines.json cli.multi_node): vLLM from 0.12 (PR
    #23691's --nnodes, --node-rank, --master-addr), before it on a Ray cluster only; SGLang
    with --dist-init-addr."""
    many = engine_defaults(engine).get("cli", {}).get("multi_node")
    if many is None:
        return False
    return not (version and "since" in many
                and parse_version(version) < parse_version(many["since"]))


def node_commands(engine: str, model_id: str, c: Candidate, max_len: int,
                  version: str | None = None, model: ModelSpec | None = None) -> list[str]:
    """One launch command a node for a replica over several (``Candidate.replica_nodes``):
    the engine's multi-node flags (engines.json cli.multi_node; vLLM's multiprocessing launch
    across nodes, SGLang's --dist-init-addr), the head first; [] for a replica on one node, or
    an engine (a release) whose multi-node launch is not one command a node."""
    if c.replica_nodes < 2 or not launches_per_node(engine, version):
        return []
    return [command_line(engine, model_id, c, max_len, version, node, model)
            for node in range(c.replica_nodes)]


def multi_node_note(engine: str, c: Candidate, version: str | None = None) -> str:
    """How a replica over several nodes is launched, for the line above its commands: "each
    replica spans 2 nodes of 8 a100-sxm-80gb: …"; "" for a replica on one node."""
    nodes = c.replica_nodes
    if nodes < 2:
        return ""
    node = node_size(resolve_accelerator(c.accelerator))
    many = engine_defaults(engine).get("cli", {}).get("multi_node")
    text = (f"each replica spans {nodes} nodes of {node} {c.accelerator}, a multi-node launch")
    if many is None:  # trtllm-serve: one MPI world over the nodes
        return text + (f": {mpi_launch_note()}" if engine == "trtllm" else "")
    if not launches_per_node(engine, version):
        return (text + f": vLLM {version} predates its launch of one command a node "
                f"({many['nnodes']}, {many['node_rank']}: v{many['since']}, PR #23691), so "
                f"start a Ray cluster over the {nodes} nodes and run this command on node 0")
    address = many["head_address"]
    text += (f": one command on each node, node 0 first; {address} is node 0's address on the "
             "network between them")
    if "ray" in many:  # vLLM: the multiprocessing launch across nodes, or Ray
        text += (f"; or, on a Ray cluster over the {nodes} nodes, node 0's command alone, "
                 f"without {many['nnodes']}, {many['node_rank']} and {many['head']}, with "
                 f"{many['ray']}")
        until = vllm_executor_async_from(version, "ray") if engine == "vllm" and version else ""
        if until:
            text += (f" (vLLM {version}'s Ray executor has no async scheduling, which the "
                     f"figures here assume, before {until})")
    return text
