"""TensorRT-LLM's launch of a planned replica: the trtllm-serve command for its PyTorch
backend, the LLM API YAML it reads (--extra_llm_api_options) for a setting trtllm-serve has
no flag for, or the one line saying why no command reproduces the replica (engines.json
trtllm.cli, with its sources).

One H100 of Llama-3.1-8B at the defaults ridgeline sizes TensorRT-LLM's pool with::

    trtllm-serve meta-llama/Llama-3.1-8B --backend pytorch --tp_size 1 --max_batch_size 2048
    --max_num_tokens 8192 --max_seq_len 131072 --kv_cache_free_gpu_memory_fraction 0.9

An fp8 KV cache moves the fraction into the file: its kv_cache_config replaces the one the
flags build, fraction and all, so the file carries both. A load with prompts longer than
max_num_tokens, which plan checks with chunked prefill on, puts ``enable_chunked_prefill:
true`` in it (an LLM API option; trtllm-serve has no flag for it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ridgeline.candidate import Candidate
from ridgeline.datafiles import engine_defaults
from ridgeline.model import ModelSpec

ENGINE = "trtllm"


@dataclass(frozen=True)
class TrtllmLaunch:
    """The trtllm-serve command ("" where none reproduces the replica), the YAML file it
    names (its name and settings; none where every setting is a flag), and ``note``: what
    the command's MODEL must be (an fp8 checkpoint of a 16-bit model), or why there is no
    command, in one line ("" where neither)."""

    command: str = ""
    config_name: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def config_text(self) -> str:
        """The YAML file's text, block style, as trtllm-serve's yaml.safe_load reads it."""
        return yaml_text(self.config)


def yaml_text(settings: dict[str, Any]) -> str:
    """Settings as a block-style YAML file's text."""
    return "".join(_yaml_lines(settings, 0))


def _yaml_lines(settings: dict[str, Any], depth: int) -> list[str]:
    lines: list[str] = []
    for key, value in settings.items():
        if isinstance(value, dict):
            lines += [f"{'  ' * depth}{key}:\n", *_yaml_lines(value, depth + 1)]
        elif isinstance(value, list):  # a list of strings, each quoted (host:port)
            lines += [f"{'  ' * depth}{key}:\n",
                      *(f'{"  " * (depth + 1)}- "{item}"\n' for item in value)]
        else:  # a switch as YAML writes it (ridgeline's reader takes true, not True)
            text = str(value).lower() if isinstance(value, bool) else value
            lines.append(f"{'  ' * depth}{key}: {text}\n")
    return lines


def quantized_beforehand(c: Candidate, model: ModelSpec | None = None) -> bool:
    """Whether ``c`` runs fp8 weights of a 16-bit checkpoint, which trtllm-serve cannot
    make on load: it serves an FP8 checkpoint made beforehand (``weight_choices`` offers fp8
    only for a checkpoint stored unquantized)."""
    return c.weights == "fp8" and (model is None or not model.stored_formats)


def trtllm_launch(model_id: str, c: Candidate, max_len: int,
                  model: ModelSpec | None = None, extra: dict[str, Any] | None = None,
                  config_name: str = "") -> TrtllmLaunch:
    """trtllm-serve's command for ``c`` with the settings ridgeline priced: its backend, TP,
    PP and EP, seats (max_batch_size), step tokens (max_num_tokens), max_seq_len and the
    memory fraction (engines.json trtllm's defaults where the plan left them); an fp8 KV cache
    through the YAML, which then carries the fraction too (its kv_cache_config replaces the
    flags' whole), and enable_chunked_prefill there where the check ran with it (a load with
    prompts longer than max_num_tokens: plan_checks.verify). fp8 weights of a 16-bit
    ``model_id`` name an FP8 checkpoint of it in MODEL's place, which ``note`` says;
    data-parallel attention (enable_attention_dp, which ridgeline does not model for
    TensorRT-LLM: data_parallel.py) gets no command. ``extra``: settings a split's pool adds
    to the YAML (its cache_transceiver_config), in the file ``config_name``."""
    d = engine_defaults(ENGINE)
    cli = d["cli"]
    if c.data_parallel > 1:
        return TrtllmLaunch(note="its data-parallel attention is TensorRT-LLM's "
                            "enable_attention_dp, which ridgeline does not model")
    note = ""
    if quantized_beforehand(c, model):
        note = (f"{cli['quantized_checkpoint']}: an FP8 checkpoint of {model_id}, which it "
                f"was priced as; {cli['unquantized_weights']}")
        model_id = str(cli["quantized_checkpoint"])
    parts = [cli["launch"], model_id, cli["backend"], str(d["backend"]),
             cli["tp"], str(c.engine_tp(ENGINE))]
    if c.pp > 1:
        parts += [cli["pp"], str(c.pp)]
    if c.expert_parallel:  # every GPU of the TP group holds whole experts, a share of them
        parts += [cli["ep"], str(c.engine_tp(ENGINE))]
    parts += [cli["max_num_seqs"], str(c.max_num_seqs or d["max_batch_size"]),
              cli["max_num_batched_tokens"],
              str(c.max_num_batched_tokens or d["max_num_tokens"]),
              cli["max_len"], str(max_len)]
    fraction = float(d["kv_cache_free_gpu_mem_fraction"])
    config: dict[str, Any] = {}
    if c.kv == "fp8":
        config["kv_cache_config"] = {"dtype": "fp8", "free_gpu_memory_fraction": fraction}
    else:
        parts += [cli["memory"], str(fraction)]
    if c.enable_chunked_prefill:  # an LLM API option; the YAML key runs on every release, its
        # --enable_chunked_prefill flag only on newer trtllm-serve (commands/serve.py @ 00209af1)
        config["enable_chunked_prefill"] = True
    config.update(extra or {})
    if not config:
        return TrtllmLaunch(" ".join(parts), note=note)
    name = config_name or str(cli["config_file"])
    return TrtllmLaunch(" ".join([*parts, cli["config"], name]), name, config, note)


def mpi_launch_note() -> str:
    """How a trtllm-serve replica over several nodes starts (engines.json cli.mpi_launch)."""
    launcher = engine_defaults(ENGINE)["cli"]["mpi_launch"]
    return (f"one MPI world over them, a process a GPU (Slurm's srun --mpi=pmix, or mpirun), "
            f"each running {launcher} before this command, with MODEL a local copy of the "
            "checkpoint")
