"""The public API is what __init__ re-exports; a change to it is deliberate."""

from __future__ import annotations

import ridgeline


def test_public_names_are_pinned() -> None:
    assert sorted(ridgeline.__all__) == [
        "Accelerator", "Deployment", "InputError", "ModelSpec", "__version__", "decode_floor",
        "prefill_floor", "resolve_accelerator", "resolve_model",
    ]
    for name in ridgeline.__all__:
        assert hasattr(ridgeline, name)
