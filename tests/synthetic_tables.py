"""Synthetic tidy tables of the project's shape (one row per cell, predictor and n) for the
analysis tests: errors drawn from a known law with multiplicative noise, per seed."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from scaling.tracking.store_template import seed_sqlite_store
from scaling.tracking.table import TABLE_COLUMNS


def saturating_law(E: float, A: float = 0.0, alpha: float = 0.0, B: float = 0.0, beta: float = 0.0):
    """err(n, T) = E + A n^-alpha + B T^-beta (T = inf gives no task term)."""

    def law(n: float, T: float) -> float:
        task = 0.0 if math.isinf(T) else B * T**-beta
        return E + A * n**-alpha + task

    return law


def synthetic_table(
    law: Callable[[float, float], float],
    *,
    ns: Iterable[int],
    Ts: Iterable[float],
    seeds: Iterable[int],
    rng: np.random.Generator,
    noise: float = 0.05,
    seed_noise: float = 0.0,
    model: str = "m",
    predictor: str = "model",
    sweep: str = "s",
) -> pd.DataFrame:
    """One cell per (T, N = n, seed), evaluated at n = N (the diagonal), with
    err = law(n, T) * exp(seed_noise * u_seed + noise * eps), u and eps standard normal."""
    rows = []
    for seed in seeds:
        u = rng.normal()
        for T in Ts:
            for n in ns:
                err = law(n, T) * math.exp(seed_noise * u + noise * rng.normal())
                key = f"{model}-T{T}-N{n}-s{seed}"
                rows.append(
                    dict(
                        sweep=sweep,
                        cell_key=key,
                        run_id=f"run-{key}",
                        model=model,
                        T=float(T),
                        N=int(n),
                        seed=int(seed),
                        predictor=predictor,
                        n=int(n),
                        err=err,
                        err_lo=0.9 * err,
                        err_hi=1.1 * err,
                        prompts=256,
                    )
                )
    return pd.DataFrame(rows)


FAMILY_FLOOR = {"linear": 0.02, "sparse_linear": 0.05, "relu_net": 0.2, "decision_tree": 0.3}


def lattice_table(
    *,
    models: Iterable[str] = ("gpt2", "mlp"),
    Ts: Iterable[float] = (100, 1e5, 1e6, math.inf),
    Ns: Iterable[int] = (5, 10, 20),
    seeds: Iterable[int] = (0, 1),
    families: Iterable[str] = ("linear",),
    baselines: Iterable[str] = ("zero", "least_squares", "ridge"),
    levels: Iterable[str] = (),
    all_n: bool = True,
    rng: np.random.Generator,
    sweep: str = "s",
) -> pd.DataFrame:
    """A table shaped like scaling.tracking.table.load_table's: a cell per (family, model, T, N, seed), each
    evaluated at n = 1..N (``all_n``) or at n = N only, for the trained model, the baselines and the
    split rows ``<predictor>|<level>`` (level e.g. 'noise_std=0.1', error scaled by the level's value);
    ``param.*`` columns as the cells log them. The first model context-scales, the others do not."""
    rows = []
    for family in families:
        for k, model in enumerate(models):
            for T in Ts:
                for N in Ns:
                    for seed in seeds:
                        key = f"{family}-{model}-T{T}-N{N}-s{seed}"
                        cell = dict(
                            sweep=sweep,
                            cell_key=key,
                            run_id=f"run-{key}",
                            model=model,
                            T=float(T),
                            N=int(N),
                            seed=int(seed),
                            prompts=64,
                            **{
                                "param.task.family": family,
                                "param.model.name": model,
                                "param.T": str(T if not math.isinf(T) else "inf"),
                                "param.N": str(N),
                                "param.seed": str(seed),
                            },
                        )
                        law = saturating_law(
                            FAMILY_FLOOR.get(family, 0.1), 1.0, 0.8 if k == 0 else 0.0, 2.0, 0.3
                        )
                        for n in range(1, N + 1) if all_n else [N]:
                            errs = {"model": law(n, T) * math.exp(0.05 * rng.normal())}
                            errs.update({b: (1.0 if b == "zero" else 0.9 / n) for b in baselines})
                            for name, err in list(errs.items()):
                                for level in levels:
                                    errs[f"{name}|{level}"] = err * float(level.split("=")[1]) * 4
                            for predictor, err in errs.items():
                                rows.append(
                                    dict(
                                        cell,
                                        predictor=predictor,
                                        n=n,
                                        err=err,
                                        err_lo=0.9 * err,
                                        err_hi=1.1 * err,
                                    )
                                )
    cols = TABLE_COLUMNS
    table = pd.DataFrame(rows)
    return table[cols + sorted(c for c in table.columns if c not in cols)]


def write_store(uri: str, table: pd.DataFrame, tmp: Path, failed: dict[str, str] | None = None) -> str:
    """Log a lattice table's cells into a real MLflow store as the sweep driver does (experiment =
    the sweep, a parent run, a child run per cell with tags, params and curves.parquet), plus a
    failed run per ``failed`` entry (name -> error text). Returns the experiment id."""

    from mlflow.entities import Param
    from mlflow.tracking import MlflowClient

    seed_sqlite_store(uri)  # as a sweep starts its store: a copy, not MLflow's ~2.6 s of migrations
    client = MlflowClient(tracking_uri=uri)
    sweep = table["sweep"].iloc[0]
    exp = client.create_experiment(sweep, artifact_location=(Path(tmp) / "artifacts").as_uri())
    parent = client.create_run(
        exp, run_name=f"sweep {sweep}", tags={"kind": "sweep", "sweep": sweep}
    ).info.run_id
    for key, cell in table.groupby("cell_key", sort=False):
        first = cell.iloc[0]
        tags = {
            "kind": "cell",
            "status": "complete",
            "cell_key": key,
            "sweep": sweep,
            "mlflow.parentRunId": parent,
        }
        run = client.create_run(
            exp,
            run_name=f"{first['model']} T={first['param.T']} N={first['N']} seed={first['seed']}",
            tags=tags,
        ).info.run_id
        params = {c[len("param.") :]: str(first[c]) for c in cell.columns if c.startswith("param.")}
        client.log_batch(run, params=[Param(k, v) for k, v in params.items()])
        folder = Path(tmp) / "curves" / key
        folder.mkdir(parents=True)
        cell[["predictor", "n", "err", "err_lo", "err_hi", "prompts"]].to_parquet(
            folder / "curves.parquet", index=False
        )
        client.log_artifact(run, str(folder / "curves.parquet"))
    for name, error in (failed or {}).items():
        client.create_run(
            exp,
            run_name=name,
            tags={
                "kind": "cell",
                "status": "failed",
                "cell_key": name,
                "sweep": sweep,
                "error": error,
                "mlflow.parentRunId": parent,
            },
        )
    return exp
