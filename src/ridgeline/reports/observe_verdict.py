"""`ridgeline observe`'s verdict: its checks together — the pool (observe_pool), the step's
predicted and measured latency (observe_latency), decode's floor (observe_floor), the wall and
its lever (observe_wall), each built on the one before — and whether the metrics name the
model described."""

from __future__ import annotations

from dataclasses import dataclass

from ridgeline.catalog import model_entry, normalise
from ridgeline.errors import InputError
from ridgeline.reports.observe_wall import ObservedWall


@dataclass(frozen=True)
class ObserveVerdict(ObservedWall):
    """The figures and the wall, from the observation and the deployment described:
    ObserveReport (reports/observe.py) adds the worked steps and renders them."""

    @property
    def model_caution(self) -> str | None:
        """A caution when the metrics' model_name label names another model than --model."""
        model = self.deployment.model
        try:
            entry = model_entry(model.name)
        except InputError:  # a config.json: no catalog names to compare
            return None
        others = [m for m in self.obs.model_names if not same_model(m, (entry.id, entry.hf_id))]
        if not others:
            return None
        return (f"the engine labels its metrics model_name={others[0]!r}, not --model "
                f"{entry.id} ({entry.hf_id}): the figures below are for {entry.id}")


def same_model(label: str, names: tuple[str, ...]) -> bool:
    """Loosely: the label's last path part and one of ``names`` (a catalog id, a Hugging Face
    id) contain each other between hyphens, case aside — 'Llama-3.1-8B-Instruct-FP8' is
    llama-3.1-8b, 'Llama-3.1-405B' is not."""
    mine = f"-{normalise(label.rstrip('/').rsplit('/', 1)[-1])}-"
    for name in names:
        theirs = f"-{normalise(name.rsplit('/', 1)[-1])}-"
        if mine in theirs or theirs in mine:
            return True
    return False
