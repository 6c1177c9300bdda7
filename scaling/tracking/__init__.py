"""The MLflow contract: this package alone speaks MLflow (the sweeps, the trials and analysis alike).

This module holds the run layout below, the statuses and TrackingError, and imports none of its modules
(they import it): uri.py (which store a URI names, and checks that it exists), retry.py (backoff),
tracker.py (Tracker: the driver's and analysis' side), cell_log.py (CellLog: a trial's cell run), names.py
(metric names), store_template.py (new SQLite stores start as a copy of an empty one), adaptive_waves.py
(the adaptive driver's wave records on the sweep's parent run) and analysis_runs.py (analysis's outputs as a
run).

One experiment per sweep (named by the sweep), one parent run per sweep (tag ``kind=sweep``) and one
child run per cell (tag ``kind=cell``), found again by its ``cell_key`` tag so a resumed or retried
cell reuses its run instead of creating another. A cell run carries:

- run name: the cell's label, given by its experiment kind (``<model> T=<T> N=<N> seed=<seed>`` for
  training); tags ``cell_key``, ``sweep``, ``kind``, ``status`` (``running`` -> ``complete`` only once
  everything below is logged; ``failed`` with ``error``);
- params: the settings that apply to the cell's kind, model and task (scaling.cells.Cell.params:
  ``task.d``, ``model.n_layer`` for a GPT-2 but not for an MLP, ``T``, ``N``, ``seed``, ``job``, ...);
- metrics: ``train/loss`` (step = training step) and one metric per curve of ``curves.parquet``, named
  by the kind (``Kind.metric_key``): training logs ``eval/err`` (the model; step = context length n)
  and ``baseline/<name>``; the temperature kinds (scaling.kinds.temperature) log ``temperature/<name>``
  (e.g. ``temperature/tau_1.5``: MLflow names allow no ``=``; step = the curves' ``step`` column, else
  n) and their summary (``tau_best``, ``tau_heuristic``, ``tau_opt``) as metrics and tags;
- artifacts: ``cell.yaml``, ``curves.parquet`` (one row per predictor and n: err, err_lo, err_hi,
  prompts), ``model.pt`` (final weights; temperature jobs log it only for a model they trained) and, for
  the temperature scans, ``units.parquet`` (a score per question or prompt, which the analysis
  resamples: scaling.kinds.temperature.JobResult.units; cells logged before it have none).

Every call retries with exponential backoff, so a tracking server that blinks neither kills a trial nor
loses metrics. Training losses are buffered and flushed at checkpoints (at most every LOSS_FLUSH_SECONDS),
skipping steps already logged; a flush that fails keeps its points (the trial stores them in its
checkpoint) and tries again at the next checkpoint, and the final flush before ``finish`` must succeed,
or the cell fails and Tune retries it.
"""

from __future__ import annotations

import os

# Ending a run on a server makes MLflow write "View run ... at: <tracking URI>/#/..." to stdout, with the
# URI's credentials and outside any logger (so log redaction never sees it); a trial's stdout reaches the
# driver's terminal through Ray. The project prints its own, redacted, links: MLflow's are turned off in
# every process that imports this package, any of its modules (drivers and trials alike).
os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"

STATUS_COMPLETE, STATUS_RUNNING, STATUS_FAILED = "complete", "running", "failed"


class TrackingError(RuntimeError):
    """The tracking store cannot be used (unreachable, or holds something it should not)."""
