"""The commands `ridgeline plan` prints beside its answer: the winner's launch command (over
several nodes, one a node: launch_commands.py's), the YAML its trtllm-serve command names or
why there is no command (trtllm_command.py's), the `ridgeline simulate` command that reruns
a candidate's check, and a split's launch command for each pool at its own knobs.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from ridgeline.candidate import Candidate
from ridgeline.datafiles import engine_defaults
from ridgeline.model import ModelSpec
from ridgeline.plan import PlanResult
from ridgeline.reports.launch_commands import command_line, node_commands
from ridgeline.reports.trtllm_command import TrtllmLaunch, trtllm_launch
from ridgeline.serving_load import Load, Slo


def _exact(x: float) -> str:
    """A number as short as prints it back exactly (so a command line reruns the same run)."""
    short = f"{x:.12g}"
    return short if float(short) == x else repr(x)


def check_line(model_arg: str, load: Load, slo: Slo, engine: str, engine_version: str | None,
               c: Candidate, max_len: int, fetched: bool = False, profile_file: str = "") -> str:
    """The `ridgeline simulate` command that reruns a candidate's check (one replica's share
    of the load, the same requests and seed, its steady window, its pipeline lanes), or ""
    where simulate cannot (a trace dealt to several replicas or cut short, split pools, an
    unchecked candidate)."""
    if not c.verified or c.sim_window_s is None or c.disaggregated:
        return ""
    if load.trace and (c.replicas > 1 or c.sim_requests != len(load.trace)):
        return ""
    low, high = c.sim_window_s
    parts = [model_arg, *(["--fetch"] if fetched else []), "--gpu", c.accelerator,
             "--num-gpus", str(c.tp * (c.data_parallel if engine == "sglang" else 1)),
             *(["--pipeline-parallel-size", str(c.pp)] if c.pp > 1 else [])]
    if c.data_parallel > 1:  # in the engine's words: SGLang's --tp-size is every GPU
        parts += ["--dp-size", str(c.data_parallel), "--enable-dp-attention"] \
            if engine == "sglang" else ["--data-parallel-size", str(c.data_parallel)]
    if c.weights != "as stored":
        parts += ["--weights", c.weights]
    parts += ["--kv-dtype", c.kv, "--engine", engine]
    if profile_file:
        parts += ["--profile", profile_file]
    if engine_version:
        parts += ["--engine-version", engine_version]
    if c.expert_parallel:
        parts.append("--enable-expert-parallel")
    if c.max_num_seqs:
        parts += ["--max-num-seqs", str(c.max_num_seqs)]
    if c.max_num_batched_tokens:
        parts += ["--max-num-batched-tokens", str(c.max_num_batched_tokens)]
    if c.enable_chunked_prefill:  # TensorRT-LLM's, as the launch's YAML sets it
        parts.append("--enable_chunked_prefill")
    parts += ["--max-model-len", str(max_len)]
    parts += ["--trace", load.trace_path] if load.trace else [
        "--rate", _exact(load.rate_req_s / c.replicas), "--num-requests", str(c.sim_requests),
        "--input-len", load.input_len, "--output-len", load.output_len, "--seed", str(load.seed)]
    parts += ["--window", f"{_exact(max(low, 0.0))},{_exact(high)}",
              "--slo-ttft-ms", _exact(slo.ttft_s * 1e3), "--slo-tpot-ms", _exact(slo.tpot_s * 1e3),
              "--percentile", _exact(slo.percentile)]
    return "ridgeline simulate " + " ".join(shlex.quote(p) for p in parts)


@dataclass(frozen=True)
class PlanCommands:
    """The commands for a plan's answer: ``model_id`` launched at ``max_len`` (where the
    winner's pool does not start shorter), and a check rerun as ``model_arg`` names the model,
    from the Hub where ``fetched``, its steps timed by ``profile_file`` where given."""
    model: ModelSpec
    model_id: str
    result: PlanResult
    max_len: int
    model_arg: str = ""
    fetched: bool = False
    profile_file: str = ""

    def commands(self) -> dict[str, str]:
        """The winner's launch command by engine (over several nodes, the head's: node 0's
        of ``node_commands``); {} where none reproduces it (``trtllm_launch``)."""
        win = self.result.winner
        assert win is not None
        engine = self.result.engine
        if engine == "trtllm":
            command = self.trtllm_launch().command
            return {engine: command} if command else {}
        nodes = self.node_commands()
        return {engine: nodes[engine][0] if nodes else command_line(
            engine, self.model_id, win, win.max_model_len or self.max_len,
            self.result.engine_version, model=self.model)}

    def trtllm_launch(self) -> TrtllmLaunch:
        """The winner's trtllm-serve command and its YAML, or why there is none."""
        win = self.result.winner
        assert win is not None
        return trtllm_launch(self.model_id, win, win.max_model_len or self.max_len, self.model)

    def node_commands(self) -> dict[str, list[str]]:
        """For a winner whose replica spans several nodes, its launch command on each node by
        engine, node 0 first; {} otherwise."""
        win = self.result.winner
        assert win is not None
        engine = self.result.engine
        nodes = node_commands(engine, self.model_id, win, win.max_model_len or self.max_len,
                              self.result.engine_version, self.model)
        return {engine: nodes} if nodes else {}

    def config_lines(self) -> list[str]:
        """The YAML the winner's trtllm-serve command names, to write beside it."""
        if self.result.engine != "trtllm":
            return []
        launch = self.trtllm_launch()
        return [f"  in {launch.config_name}:", *(f"    {line}" for line in
                                                  launch.config_text.splitlines())] \
            if launch.config else []

    def no_command(self) -> str:
        """Why the winner gets no launch command: "no trtllm-serve command: ..."."""
        launch = engine_defaults(self.result.engine).get("cli", {}).get("launch", "launch")
        return f"no {launch} command: {self.trtllm_launch().note}"

    def command_note(self) -> str:
        """What the winner's command needs beside it (trtllm-serve's FP8 checkpoint), or ""."""
        if self.result.engine != "trtllm":
            return ""
        launch = self.trtllm_launch()
        return launch.note if launch.command else ""

    def trtllm_dict(self) -> dict[str, Any]:
        """TensorRT-LLM's command's YAML ({name: text}) and why there is no command, where
        the winner runs on it; nothing for another engine."""
        if self.result.engine != "trtllm" or self.result.winner is None:
            return {}
        launch = self.trtllm_launch()
        return {"config_files": {launch.config_name: launch.config_text}
                if launch.config else None, "command_note": launch.note or None}

    def pool_commands(self, c: Candidate) -> dict[str, str]:
        """An xPyD split's launch command for a replica of each pool, "prefill" and "decode",
        each at the knobs its check held with (``Candidate.pool``); {} for a single pool or
        where the engine has no command for it. The KV connector that hands each prompt's
        cache from pool to pool is the engines' own configuration, not written here."""
        if not c.disaggregated:
            return {}
        r = self.result
        out = {}
        for name, pool in (("prefill", c.pool(True)), ("decode", c.pool(False))):
            command = command_line(r.engine, self.model_id, pool, c.max_model_len or self.max_len,
                                   r.engine_version, model=self.model)
            if command:
                out[name] = command
        return out

    def pool_trtllm(self, c: Candidate) -> TrtllmLaunch | None:
        """The trtllm-serve launch of an xPyD split's pools where it names a YAML or needs a
        note (an fp8 KV cache's kv_cache_config, an FP8 checkpoint), else None: the two
        pools differ in their flags only (their knobs), so both name the same file."""
        if not c.disaggregated or self.result.engine != "trtllm":
            return None
        launch = trtllm_launch(self.model_id, c.pool(False), c.max_model_len or self.max_len,
                               self.model)
        return launch if launch.command and (launch.config or launch.note) else None

    def pool_launch(self, c: Candidate) -> tuple[dict[str, str], list[str]]:
        """A split's pool commands (``pool_commands``) and the lines to print under them:
        the YAML file its trtllm-serve commands name and what their MODEL must be, which the
        commands do not reproduce the pools without."""
        launch = self.pool_trtllm(c)
        extra = [] if launch is None else [
            *([f"in {launch.config_name}:", *(f"  {line}" for line in
                                              launch.config_text.splitlines())]
              if launch.config else []),
            *([launch.note] if launch.note else [])]
        return self.pool_commands(c), extra

    def check_command(self, c: Candidate) -> str:
        """The simulate command that reruns ``c``'s check, or ""."""
        r = self.result
        return check_line(self.model_arg or self.model_id, r.load, r.slo, r.engine,
                          r.engine_version, c, c.max_model_len or self.max_len, self.fetched,
                          self.profile_file)
