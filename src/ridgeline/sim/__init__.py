"""The engine, simulated: continuous batching with paged KV, chunked prefill, preemption,
prefix caching and speculative decoding, step by step through step_cost.

The package runs as plain Python, or compiled in place by ``scripts/compile_simulator.py``
(mypyc, optional, ~3.5× faster); ``build()`` says which. A compiled build records the hash
of each source it was built from, and importing warns if a source has changed since.
"""

from __future__ import annotations

import json
import warnings
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

_HERE = Path(__file__).parent


def build() -> str:
    """'compiled' when the simulator's modules are extension modules, else 'python'."""
    from ridgeline.sim import simulator

    return "compiled" if simulator.__file__.endswith(tuple(EXTENSION_SUFFIXES)) else "python"


def stale_modules() -> list[str]:
    """Compiled modules whose source changed after they were built (an editable install)."""
    try:
        stamp = json.loads((_HERE / "native.json").read_text())
    except (OSError, ValueError):
        return []
    import hashlib  # only for a compiled build: its import (OpenSSL's) costs every command ~3 ms

    return sorted(m for m, digest in stamp.items()
                  if (src := _HERE / f"{m}.py").exists()
                  and hashlib.sha256(src.read_bytes()).hexdigest() != digest)


if stale := stale_modules():
    warnings.warn(f"the compiled simulator is older than its source ({', '.join(stale)}.py): "
                  "rebuild with scripts/compile_simulator.py, or remove it with --clean",
                  stacklevel=2)
