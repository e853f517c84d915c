"""vLLM's --cpu-offload-gb as a lever of fit (and of simulate's refusal): where the GiB asked
leave no KV pool, the fewest whole GiB more that leave one."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_cli

ARGV = ("fit", "llama-3.1-70b", "--gpu", "h100", "--max-model-len", "2000", "--json")


def _fit(capsys: pytest.CaptureFixture[str], gib: int) -> dict:
    code, out, err = run_cli(capsys, *ARGV, "--cpu-offload-gb", str(gib))
    assert code == 0, err
    return json.loads(out)


def test_too_little_cpu_offload_names_the_least_that_runs(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B bf16 on one H100 with 60 GiB of its weights on the host overruns the
    pool: the levers name the GiB that leaves one, which holds what the lever says, and one
    GiB fewer holds none. With a pool, no such lever."""
    short = _fit(capsys, 60)
    assert short["conversations"] == 0
    (lever,) = [x for x in short["levers"] if x["name"].startswith("--cpu-offload-gb ")]
    match = re.match(r"--cpu-offload-gb (\d+) ", lever["name"])
    assert match is not None
    gib = int(match.group(1))
    assert gib > 60 and _fit(capsys, gib - 1)["conversations"] == 0
    enough = _fit(capsys, gib)
    assert enough["conversations"] == lever["conversations"] > 0
    assert not any(x["name"].startswith("--cpu-offload-gb") for x in enough["levers"])
