"""Files `observe` does not read, said for what they are: a log wrapped in JSON (Docker's
json-file driver, a JSON logging formatter), an HTTP error body saved in place of a metrics
page, another engine's server log. Each is refused in one line that names the file's kind
and what to give instead, where the readers would refuse it for the wrong reason (no
benchmark keys, no Prometheus samples)."""

from __future__ import annotations

import re
from typing import Any

from ridgeline.errors import InputError, shorten
from ridgeline.userfiles import json_loads

# the benchmark results from_bench reads: a JSON object with any of these is left to it
_BENCH_KEYS = ("output_throughput", "time_to_first_token", "request_throughput")
# the fields a JSON logging formatter puts a record's text under (python-json-logger:
# "message"; structlog and others: "msg", "event")
_MESSAGE_KEYS = ("message", "msg", "event")
# SGLang's scheduler log: "Decode batch. #running-req: 120, #token: …", "Prefill batch.
# #new-seq: 2, …" (python/sglang/srt/managers/scheduler_metrics_mixin.py; "," after "batch"
# in older releases)
_SGLANG_LOG = re.compile(r"(?:Decode|Prefill) batch[.,]? +#(?:running-req|new-seq)")
# llama-server's log (tools/server/server.cpp): a slot's lines ("slot print_timing: id  0 |
# task 0 |", "slot launch_slot_: …") and the server loop's ("srv  update_slots: …")
_LLAMA_LOG = re.compile(r"^(?:slot|srv) +\w+: ", re.MULTILINE)


def refuse_foreign(text: str, source: str) -> None:
    """Refuse ``text`` where it is a kind of file observe does not read and the readers would
    misname it: a JSON-wrapped log, an HTTP error body, an SGLang or llama-server log. Returns
    where it is none of these (the readers then say what they find)."""
    record = _first_json_object(text, source)
    if record is not None and not any(key in record for key in _BENCH_KEYS):
        _refuse_json(record, text, source)
    if _SGLANG_LOG.search(text):
        raise InputError(f"{source} is an SGLang server log ('Decode batch' lines): observe "
                         "does not read SGLang's log; save its /metrics instead (SGLang started "
                         "with --enable-metrics), two scrapes some seconds apart")
    if _LLAMA_LOG.search(text):
        raise InputError(f"{source} is a llama-server log (slot and srv lines): observe does "
                         "not read llama-server's log; save its /metrics instead (llama-server "
                         "started with --metrics), two scrapes some seconds apart")


def _first_json_object(text: str, source: str) -> dict[str, Any] | None:
    """The file's JSON object: the whole file's, else its first line's (JSON lines); None
    where neither is an object; an InputError naming ``source`` where it is nested too
    deeply to read (userfiles.json_loads)."""
    for chunk in (text, next((ln for ln in text.splitlines() if ln.strip()), "")):
        try:
            data = json_loads(chunk, source)
        except InputError:
            raise
        except ValueError:
            continue
        return data if isinstance(data, dict) else None
    return None


def _refuse_json(record: dict[str, Any], text: str, source: str) -> None:
    """A JSON object that is a log record or an HTTP error body, refused naming which."""
    if isinstance(record.get("log"), str):  # Docker's json-file driver: {"log", "stream", "time"}
        raise InputError(f"{source} is a Docker json-file log (the server's output inside each "
                         "line's 'log' field): give the plain log (`docker logs CONTAINER > "
                         "FILE`) or the engine's /metrics")
    data = record.get("data")
    if record.get("status") in ("success", "error") and isinstance(data, dict) \
            and "resultType" in data:  # a Prometheus server's /api/v1/query answer
        raise InputError(f"{source} is a Prometheus server's query answer (its HTTP API's "
                         f"'{data['resultType']}' result), not the engine's own page: save the "
                         "engine's /metrics (curl http://HOST:PORT/metrics), or point observe "
                         "at that URL")
    error = record.get("error")
    if isinstance(error, dict) or "detail" in record or record.get("object") == "error":
        body = error if isinstance(error, dict) else record
        code = body.get("code")
        message = str(body.get("message") or record.get("detail") or "")
        said = f"{code} {message!r}" if code is not None else repr(message)
        if "--metrics" in message:  # llama-server without --metrics: 501
            raise InputError(f"{source} is llama-server's HTTP error body ({shorten(said)}): "
                             "its /metrics is off; start llama-server with --metrics and save "
                             "/metrics again")
        raise InputError(f"{source} is an HTTP error body ({shorten(said)}), not a metrics "
                         "page or a benchmark result: the URL saved answered an error; "
                         "vLLM and llama-server serve /metrics, SGLang with --enable-metrics, "
                         "TensorRT-LLM's trtllm-serve /prometheus/metrics")
    key = next((k for k in _MESSAGE_KEYS if isinstance(record.get(k), str)), None)
    if key is not None and "Avg prompt throughput:" in text:
        raise InputError(f"{source} is a JSON-lines log (vLLM's stats lines inside each line's "
                         f"'{key}' field): observe reads vLLM's plain-text log, each line "
                         "with its time stamp; give the log as vLLM's default formatter writes it "
                         "(without a JSON VLLM_LOGGING_CONFIG_PATH), or its /metrics")
    if key is not None:
        raise InputError(f"{source} is a JSON-lines log (each line's '{key}' field), not a "
                         "benchmark result: give vLLM's plain-text log, or the engine's /metrics")
