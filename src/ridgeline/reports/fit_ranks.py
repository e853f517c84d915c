"""`ridgeline fit` with data-parallel attention: each rank sizes its own pool and holds its
own requests' cache, so the deployment holds one rank's conversations and tokens × the ranks,
and runs each rank's seats × the ranks (data_parallel.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ridgeline.capacity import engine_seat_limit
from ridgeline.deployment import Deployment
from ridgeline.explain import Step, q, step
from ridgeline.memory import KVPool

if TYPE_CHECKING:
    from ridgeline.reports.fit import FitReport


def rank_steps(dep: Deployment, conversations: int) -> tuple[Step, ...]:
    """How the ranks' pools add up, or nothing without data parallelism."""
    ranks = dep.data_parallel_size
    if ranks == 1:
        return ()
    return (step("conversations, every rank", "one rank's conversations × the data-parallel "
                 "ranks (each keeps only its own requests' cache)",
                 q("conversations", conversations), q("one rank's", conversations // ranks),
                 q("ranks", ranks, "", "--data-parallel-size (SGLang --dp-size)")),)


def pool_ranks_note(dep: Deployment, pool: KVPool, context: int) -> str:
    """' on each data-parallel rank (its own log's figure), a pool of its own: 3,678,720
    tokens in all over the 8', or ""."""
    ranks = dep.data_parallel_size
    if ranks == 1:
        return ""
    return (f" on each data-parallel rank (its own log's figure), a pool of its own: "
            f"{pool.logged_tokens(context) * ranks:,} tokens in all over the {ranks}")


def each_rank_note(dep: Deployment) -> str:
    """' on each of the 4 data-parallel ranks' after one pool's figure (its state slots,
    their bytes), or ""."""
    ranks = dep.data_parallel_size
    return f" on each of the {ranks} data-parallel ranks" if ranks > 1 else ""


def seats_ranks_note(dep: Deployment) -> str:
    """' × 8 ranks' after a rank's seat limit, or ""."""
    ranks = dep.data_parallel_size
    return f" × {ranks} ranks" if ranks > 1 else ""


def ranks_dict(r: FitReport) -> dict[str, Any]:
    """The JSON's data-parallel figures (every rank's), None without data parallelism."""
    d, p = r.deployment, r.pool
    if d.data_parallel_size == 1:
        return {"data_parallel": None}
    return {"data_parallel": {
        "data_parallel_size": d.data_parallel_size, "gpus_per_rank": d.rank_gpus,
        "expert_parallel": d.expert_parallel, "expert_ranks": d.expert_ranks,
        "tokens_all_ranks": p.logged_tokens(r.context) * d.data_parallel_size,
        "conversations_per_rank": r.conversations // d.data_parallel_size,
        "max_num_seqs_all_ranks": engine_seat_limit(p, d)}}
