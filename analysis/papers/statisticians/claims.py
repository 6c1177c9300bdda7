"""The claims of seed 003 (a report on Bai et al., "Transformers as Statisticians"), each checked against the
verdicts its construction sweep's analysis already makes (analysis/papers/statisticians/plugin.py).

- Sec. 3 (sweeps/stat_gd.yaml): the transformer built from eqs. 3.1-3.4 *is* in-context gradient descent:
  "reproduced" when no cell's prediction differs from explicit gradient descent by more than EXACT.
- Sec. 4 (sweeps/stat_selection.yaml): the selection transformer picks the better algorithm per noise level:
  at every noise level its mean error over n is comparable (analysis.claims.within: a factor COMPARABLE
  either way) to its best single ridge algorithm's, and to the ridge tuned for that level.
"""

from __future__ import annotations

from analysis.claims import COMPARABLE, NOT_REPRODUCED, NOT_RUN, REPRODUCED, Claim, Outcome, within

from .plugin import EXACT


def exact_gd(result) -> Outcome:
    rows = result.verdicts[result.verdicts["subject"] == "exactness"]
    if rows.empty:
        return Outcome(NOT_RUN, "no GD-transformer cells (no 'exactness' verdict)")
    row = rows.iloc[0]
    return Outcome(REPRODUCED if float(row["value"]) <= EXACT else NOT_REPRODUCED, str(row["verdict"]))


def per_level(against: str, what: str):
    """A check that, at every noise level, the selection's mean error is within COMPARABLE of ``against``'s
    (the verdict rows '<level> vs <against>', whose value is the selection's error / theirs - 1)."""

    def check(result) -> Outcome:
        v = result.verdicts
        rows = v[v["subject"].astype(str).str.endswith(f" vs {against}")]
        if rows.empty:
            return Outcome(NOT_RUN, f"no selection cells with {what}")
        ok = all(within(1 + float(value)) for value in rows["value"])
        return Outcome(REPRODUCED if ok else NOT_REPRODUCED, "; ".join(map(str, rows["verdict"])))

    return check


CLAIMS: list[Claim] = [
    Claim(
        "stat-gd",
        "Sec. 3",
        "a transformer of L + 1 ReLU-attention layers with the constructed weights does L steps of gradient "
        "descent on the prompt (its predictions equal explicit GD's)",
        exact_gd,
    ),
    Claim(
        "stat-selection",
        "Sec. 4",
        "the selection transformer picks the better ridge per noise level (its error comparable to its best "
        "single algorithm's at each level)",
        per_level("best single", "single algorithms"),
    ),
    Claim(
        "stat-selection",
        "Sec. 4",
        "the selection transformer does about as well as the ridge tuned for each noise level",
        per_level("ridge_per_level", "the per-level ridge"),
    ),
]

HOW = (
    f"The GD claim reads the largest |transformer - explicit GD| over the sweep's cells (equal: at most "
    f"{EXACT:g}). The selection claims read the selection transformer's mean error over n at each noise "
    f"level against the other predictor's on the same prompts; 'comparable' means within a factor of "
    f"{COMPARABLE:g} (the rows per level are the statisticians analysis's verdicts)."
)
