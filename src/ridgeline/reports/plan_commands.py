"""The commands `ridgeline plan` prints beside its answer: the winner's launch command (over
several nodes, one a node: launch_commands.py's), the YAML its trtllm-serve command names or
why there is no command (trtllm_command.py's), the `ridgeline simulate` command that reruns
a candidate's check, and a split's launch command for each pool at its own knobs, with the
router in front of them (split_launch.py).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from ridgeline.candidate import Candidate
from ridgeline.datafiles import engine_defaults
from ridgeline.disaggregated import split_connector
from ridgeline.engine_names import engine_name
from ridgeline.engine_versions import sized_version, split_launch_problem
from ridgeline.hardware import resolve_accelerator
from ridgeline.model import ModelSpec
from ridgeline.plan import PlanResult
from ridgeline.reports.launch_commands import (
    command_line,
    family_fp8_note,
    hybrid_manager_words,
    node_commands,
)
from ridgeline.reports.split_launch import (
    host_note,
    pool_command,
    role_config,
    router_command,
    router_config,
)
from ridgeline.reports.trtllm_command import TrtllmLaunch, trtllm_launch, yaml_text
from ridgeline.serving_load import Load, Slo
from ridgeline.trtllm_memory import flash_mla_block


def _exact(x: float) -> str:
    """A number as short as prints it back exactly (so a command line reruns the same run)."""
    short = f"{x:.12g}"
    return short if float(short) == x else repr(x)


def check_line(model_arg: str, load: Load, slo: Slo, engine: str, engine_version: str | None,
               c: Candidate, max_len: int, fetched: bool = False, profile_file: str = "") -> str:
    """The `ridgeline simulate` command that reruns a candidate's check (one replica's share
    of the load, the same requests and seed, its steady window, its pipeline lanes; a trace
    replayed whole, every request counted, with no window), or "" where simulate cannot (a
    trace dealt to several replicas or cut short, split pools, an unchecked candidate)."""
    if not c.verified or c.disaggregated or (c.sim_window_s is None and not load.trace):
        return ""
    if load.trace and (c.replicas > 1 or c.sim_requests != len(load.trace)):
        return ""
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
    _, switches = hybrid_manager_words(c.disable_hybrid_kv_cache_manager, None)  # simulate's
    parts += switches
    if c.allow_chunked_local_attn_hybrid is not None:  # the launch's environment variable
        parts += ["--vllm-allow-chunked-local-attn-with-hybrid-kv-cache",
                  str(int(c.allow_chunked_local_attn_hybrid))]
    parts += ["--max-model-len", str(max_len)]
    parts += ["--trace", load.trace_path] if load.trace else [
        "--rate", _exact(load.share_rate(c.replicas)), "--num-requests", str(c.sim_requests),
        "--input-len", load.input_len, "--output-len", load.output_len, "--seed", str(load.seed)]
    if c.sim_window_s is not None:
        low, high = c.sim_window_s
        parts += ["--window", f"{_exact(max(low, 0.0))},{_exact(high)}"]
    parts += ["--slo-ttft-ms", _exact(slo.ttft_s * 1e3), "--slo-tpot-ms", _exact(slo.tpot_s * 1e3),
              "--percentile", _exact(slo.percentile),
              *([] if slo.itl_s is None else ["--slo-itl-ms", _exact(slo.itl_s * 1e3)])]
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

    def _single(self, c: Candidate | None) -> Candidate:
        """``c``, or where none is named the winner."""
        found = self.result.winner if c is None else c
        assert found is not None
        return found

    def commands(self, c: Candidate | None = None) -> dict[str, str]:
        """The winner's (or single pool ``c``'s) launch command by engine (over several
        nodes, the head's: node 0's of ``node_commands``); {} where none reproduces it
        (``trtllm_launch``)."""
        win = self._single(c)
        engine = self.result.engine
        if engine == "trtllm":
            command = self.trtllm_launch(win).command
            return {engine: command} if command else {}
        nodes = self.node_commands(win)
        return {engine: nodes[engine][0] if nodes else command_line(
            engine, self.model_id, win, win.max_model_len or self.max_len,
            self.result.engine_version, model=self.model)}

    def trtllm_launch(self, c: Candidate | None = None) -> TrtllmLaunch:
        """The winner's (or ``c``'s) trtllm-serve command and its YAML, or why there is
        none."""
        win = self._single(c)
        return trtllm_launch(self.model_id, win, win.max_model_len or self.max_len, self.model)

    def node_commands(self, c: Candidate | None = None) -> dict[str, list[str]]:
        """For a winner (or ``c``) whose replica spans several nodes, its launch command on
        each node by engine, node 0 first; {} otherwise."""
        win = self._single(c)
        engine = self.result.engine
        nodes = node_commands(engine, self.model_id, win, win.max_model_len or self.max_len,
                              self.result.engine_version, self.model)
        return {engine: nodes} if nodes else {}

    def config_lines(self, c: Candidate | None = None) -> list[str]:
        """The YAML the winner's (or ``c``'s) trtllm-serve command names, to write beside it."""
        if self.result.engine != "trtllm":
            return []
        launch = self.trtllm_launch(c)
        return [f"  in {launch.config_name}:", *(f"    {line}" for line in
                                                  launch.config_text.splitlines())] \
            if launch.config else []

    def no_command(self, c: Candidate | None = None) -> str:
        """Why the winner (or ``c``) gets no launch command: "no trtllm-serve command: ..."."""
        launch = engine_defaults(self.result.engine).get("cli", {}).get("launch", "launch")
        return f"no {launch} command: {self.trtllm_launch(c).note}"

    def release_note(self) -> str:
        """The release the launch lines were sized for, as the text says it beside them:
        'sized for vLLM 0.34, the newest release whose memory rules were read:
        --engine-version sizes another' (its gpu_memory_utilization default and pool are that
        release's; SGLang's 0.5.23), or 'sized for vLLM 0.19, as --engine-version named it'; ""
        for TensorRT-LLM, whose defaults here span releases (engine_versions.sized_version)."""
        sized = self.sized_for()
        if not sized:
            return ""
        return f"{sized}, " + (
            "as --engine-version named it" if self.result.engine_version else
            "the newest release whose memory rules were read: --engine-version sizes "
            "another")

    def sized_for(self) -> str:
        """'sized for vLLM 0.32': ``release_note``'s first words, as a split's pool commands
        say it under each split (the plan's first line says which release that is, and why);
        "" for TensorRT-LLM."""
        r = self.result
        sized = sized_version(r.engine, r.engine_version)
        return "" if sized is None else f"sized for {engine_name(r.engine)} {sized}"

    def command_note(self) -> str:
        """What the winner's command needs beside it (trtllm-serve's FP8 checkpoint, a
        Gaudi's INC calibration file: launch_commands.family_fp8_note), or ""."""
        if self.result.engine != "trtllm":
            win = self.result.winner
            return family_fp8_note(self.result.engine, win) if win is not None else ""
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
        each at the knobs its check held with (``Candidate.pool``) and with the engine's KV
        hand-off settings for its role (split_launch.pool_command: vLLM's NixlConnector,
        SGLang's --disaggregation-mode, TensorRT-LLM's cache_transceiver_config in the YAML
        it names); {} for a single pool, where the engine has no command for it, or where
        the named release cannot run them (``split_problem``)."""
        if not c.disaggregated or self.split_problem():
            return {}
        r = self.result
        out = {}
        vendor = resolve_accelerator(c.accelerator).vendor
        for name, pool in (("prefill", c.pool(True)), ("decode", c.pool(False))):
            count = pool.replicas
            if r.engine == "trtllm":
                command = self._pool_trtllm(c, name).command
            else:
                command = command_line(r.engine, self.model_id, pool,
                                       c.max_model_len or self.max_len, r.engine_version,
                                       model=self.model,
                                       connector=split_connector(r.engine, vendor))
            if command:
                out[name] = pool_command(r.engine, name, command, count, vendor)
        return out

    def split_problem(self) -> str:
        """Why the plan's --engine-version cannot run a split's launch (vLLM before the
        NixlConnector, SGLang before --disaggregation-mode: engine_versions.split_launch_problem),
        or ""; the one line printed, and given in --json, in place of its commands."""
        return split_launch_problem(self.result.engine, self.result.engine_version)

    def router_command(self, c: Candidate) -> str:
        """The router that ties a split's pools together (split_launch.router_command), or ""
        where the pools have no commands."""
        if not self.pool_commands(c):
            return ""
        return router_command(self.result.engine, c.prefill_replicas,
                              c.replicas - c.prefill_replicas,
                              resolve_accelerator(c.accelerator).vendor)

    def _pool_trtllm(self, c: Candidate, role: str) -> TrtllmLaunch:
        """trtllm-serve's launch of a split's ``role`` pool: its YAML with the role's
        cache_transceiver_config (its buffer the load's longest prompt), in the role's file."""
        max_len = c.max_model_len or self.max_len
        family = resolve_accelerator(c.accelerator).family  # FlashMLA's block on Hopper
        name, extra = role_config("trtllm", role,
                                  self.result.load.longest_prompt(max_len) or max_len,
                                  flash_mla_block(self.model, family))
        return trtllm_launch(self.model_id, c.pool(role == "prefill"), max_len, self.model,
                             extra, name)

    def pool_files(self, c: Candidate) -> dict[str, str]:
        """The files a split's commands name, {name: text}: TensorRT-LLM's YAML for each pool
        and the disaggregated server's disagg_config.yaml; {} for another engine."""
        if not c.disaggregated or self.result.engine != "trtllm" or not self.pool_commands(c):
            return {}
        files = {}
        for role in ("prefill", "decode"):
            launch = self._pool_trtllm(c, role)
            files[launch.config_name] = launch.config_text
        name, config = router_config("trtllm", c.prefill_replicas,
                                     c.replicas - c.prefill_replicas)
        files[name] = yaml_text(config)
        return files

    def pool_note(self, c: Candidate) -> str:
        """What the MODEL of a split's trtllm-serve commands must be (an FP8 checkpoint of a
        16-bit model), or ""."""
        if not c.disaggregated or self.result.engine != "trtllm":
            return ""
        return self._pool_trtllm(c, "decode").note

    def pool_launch(self, c: Candidate) -> tuple[dict[str, str], list[str]]:
        """A split's pool commands (``pool_commands``), then its "router", and the lines to
        print under them: the files they name (TensorRT-LLM's YAML), what their MODEL must
        be, what the host placeholders and the router are, and the release they were sized for
        (``sized_for``, as the single pool's launch line says it); for a release that cannot
        run them, no commands and the line that says so (``split_problem``)."""
        commands = self.pool_commands(c)
        if not commands:
            problem = self.split_problem() if c.disaggregated else ""
            return {}, [f"no launch: {problem}"] if problem else []
        router = self.router_command(c)
        sized = self.sized_for()
        notes = [self.pool_note(c), host_note(self.result.engine, c.prefill_replicas,
                                              c.replicas - c.prefill_replicas,
                                              resolve_accelerator(c.accelerator).vendor),
                 f"each pool's launch line {sized}" if sized else ""]
        extra = [*(line for name, text in self.pool_files(c).items()
                   for line in (f"in {name}:", *(f"  {t}" for t in text.splitlines()))),
                 *(note for note in notes if note)]
        return {**commands, **({"router": router} if router else {})}, extra

    def check_command(self, c: Candidate) -> str:
        """The simulate command that reruns ``c``'s check, or ""."""
        r = self.result
        return check_line(self.model_arg or self.model_id, r.load, r.slo, r.engine,
                          r.engine_version, c, c.max_model_len or self.max_len, self.fetched,
                          self.profile_file)
