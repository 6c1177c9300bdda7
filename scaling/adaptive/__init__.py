"""Adaptive sweeps (``python -m scaling.sweep FILE --adaptive``): run a first wave of a sweep's lattice, judge
it with the project's own verdicts and fits, then run the cells that most narrow the answers still open per
unit of estimated cost, wave after wave, until every answer is settled or the budget is spent.

- scaling/planning/adaptive_settings.py (beside the planner, below this package): the sweep file's
  ``adaptive:`` section (pure; checked by the planner);
- policy.py: answers from the complete cells and the next wave (no Ray, no MLflow);
- small_samples.py: the policy's arithmetic of few seeds (large-sample factor, pooled spread, seeds needed);
- replay.py: the policy replayed on a store holding the whole lattice, against random subsets.
The waves themselves are the sweep driver's (scaling/sweep/waves.py: ordinary Tune trials, the answers printed
and logged on the sweep's parent run), which uses this package; nothing here uses the driver.
"""
