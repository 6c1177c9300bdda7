"""The sweep driver, ``python -m scaling.sweep sweeps/smoke.yaml``: a sweep file's cells run as Ray Tune
trials that log to MLflow.

1. Plan the sweep file (validated before anything starts).
2. Ask MLflow which cells are complete (tag ``status=complete`` under their ``cell_key``); only the rest
   run. A finished sweep trains nothing and says so; a sweep edited to add cells runs only the new ones.
3. Run each remaining cell as one Ray Tune trial with the cell's resources (fractional or whole GPUs,
   CPUs), or small cells of one shape as one trial of a batched ensemble (scaling.budget.packing), on a local
   Ray started here (the embedded default), an existing cluster (``--address auto``), or, on the head of a
   `ray up` cluster, that cluster (scaling.sweep.cluster: its Ray, MLflow server, storage and node types).
   Trials resume from their per-cell checkpoints, so rerunning the same command after a crash (Ctrl-C,
   SIGKILL of this driver, a lost node) continues where each cell stopped.
4. Show the progress (scaling.sweep.progress): one live view in a terminal, one line per change elsewhere (and
   a heartbeat while cells run), then a summary and the commands to run next.

Its modules, in the order a run meets them: ``__main__`` (the command line and its exit status),
``phases`` (``run_sweep``: plan the run, read the store, describe it for ``--dry-run`` or start it, train,
report), ``run`` (SweepRun, the state the phases fill in), ``dry_run`` (the ``--dry-run`` table),
``ray_start`` (Ray started or joined, every cell checked to fit a node) and ``tune_rounds`` (the pending
cells as trial specs, run as Tune experiments). This file imports none of them: a module of the driver
loads only what it needs (a ``--dry-run`` never imports Ray).
"""
