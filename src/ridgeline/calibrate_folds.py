"""`calibrate`'s held-out error: each row predicted by its engine's profile refitted without it.

The error a calibration scores on its own rows says how far the fit bends to them, and with
about as many rows as parameters it bends to all of them: four rows of Llama-3.1-8B under vLLM
on an H100 fit its TTFT to 0.0 %. Here an engine's fitted rows are dealt into k folds
(k = min(rows, MAX_FOLDS); row i of the file's order to fold i mod k), and each fold's rows are
predicted by the engine refitted, as `calibrate` fits it (calibrate.calibrate_engine), on every
other row: five such rows (tests/test_validate_honesty.py's) read 5.3 % TTFT error in sample,
29.8 % held out (the fold without it has no prompt row: the compute share stands at the
bundled profile's, as it does in any calibration of rows without one), and 14.0 % and 18.4 %
in output throughput. A fold whose remaining rows are
too few to fit is left unscored, and counted (four rows: none held out). Past
HELD_OUT_MAX_ROWS rows an engine is not held out here (lowbatch.csv's 54 rows are 15 refits
beside calibrate's 3 fits: they took it from 8 s to 29 s on a loaded machine, 5.5 s of CPU
time, 3.8 s since the fit's objective reads a row's figure alone, predict.predicted_value,
and prices each step's profile-free terms once, cost._step_plan; the same figures to the bit):
scripts/crossval.py holds the bundled data out by card and by source.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ridgeline.calibrate import calibrate_engine
from ridgeline.engines import EngineProfile
from ridgeline.errors import InputError
from ridgeline.measurements import Measurement
from ridgeline.predict import Prediction, predict
from ridgeline.units import plural

# the most rows an engine is held out on fold by fold: each fold is a fit of its own
HELD_OUT_MAX_ROWS = 40
MAX_FOLDS = 5


@dataclass(frozen=True)
class HeldOut:
    engine: str
    folds: int  # 0: not run (``reason`` says why)
    predictions: tuple[Prediction, ...]  # each by a fit that did not see its row
    unscored: tuple[str, ...]  # the rows of folds whose remaining rows were too few to fit
    reason: str = ""

    @property
    def shown(self) -> str:
        """One line: how the rows were held out, or why they were not."""
        if not self.folds:
            return f"{self.engine}: not held out: {self.reason}"
        n = len(self.predictions)
        if not n:
            return (f"{self.engine}: not held out: each of its {self.folds} folds leaves too "
                    "few rows to fit the profile's parameters")
        way = "each row apart" if self.folds == n + len(self.unscored) else \
            f"in {self.folds} folds"
        left = (f"; {len(self.unscored)} unscored, their fold leaving too few rows to fit"
                if self.unscored else "")
        return (f"{self.engine}: {n} {plural(n, 'row')} held out {way}, each refitted "
                f"without it{left}")


def held_out(rows: Sequence[Measurement], profiles: Mapping[str, EngineProfile],
             priors: Mapping[str, EngineProfile] | None = None,
             progress: Callable[[str], None] | None = None) -> tuple[HeldOut, ...]:
    """Each fitted engine's rows (its profile's fitted_ids among ``rows``) predicted fold by
    fold by the engine refitted on ``rows`` without the fold (module docstring)."""
    out = []
    for engine, profile in profiles.items():
        fitted = set(profile.fitted_ids)
        mine = [r for r in rows if r.id in fitted]
        if len(mine) > HELD_OUT_MAX_ROWS:
            out.append(HeldOut(engine, 0, (), (), f"{len(mine)} rows, over the "
                               f"{HELD_OUT_MAX_ROWS} refitted fold by fold here "
                               "(scripts/crossval.py holds out by card and by source)"))
            continue
        folds = min(len(mine), MAX_FOLDS)
        if progress is not None:
            progress(f"holding out {engine}'s {len(mine)} rows in {folds} folds")
        predictions: list[Prediction] = []
        unscored: list[str] = []
        for i in range(folds):
            fold = mine[i::folds]
            left = {r.id for r in fold}
            try:
                refit = calibrate_engine([r for r in rows if r.id not in left], engine,
                                         profiles, priors)
            except InputError:  # too few rows left for the fit's parameters
                unscored += [r.id for r in fold]
                continue
            predictions += [predict(r, {engine: refit}) for r in fold]
        out.append(HeldOut(engine, folds, tuple(predictions), tuple(unscored)))
    return tuple(out)
