"""On-disk cache and process pool for the expensive per-prompt baselines (Lasso, XGBoost, trees, NN student).

A baseline's predictions depend only on the prompts it is given and its own settings, and a sweep's
evaluation prompts depend only on (task, seed, N, eval.prompts, eval.shift), never on T or the model.
So predictions are cached under a key hashed from the baseline's name, options and task config and the
exact bytes of the prompts (a content digest, which subsumes the evaluation seed, N, prompt count and
shift): a sweep computes each baseline once, not once per cell. Files are written atomically (a temporary
file in the same folder, then ``os.replace``), so concurrent trials never read a half-written file.

The folder is ``$SCALING_BASELINE_CACHE`` (default ``~/.cache/icl-scaling/baselines``); the process count
is ``$SCALING_BASELINE_JOBS`` (default: all cores) unless a baseline's ``n_jobs`` option says otherwise.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from papers.context_scaling.tasks import Prompts


def cache_dir() -> Path:
    return Path(os.environ.get("SCALING_BASELINE_CACHE", "~/.cache/icl-scaling/baselines")).expanduser()


def default_jobs() -> int:
    return int(os.environ.get("SCALING_BASELINE_JOBS", "-1"))


def prompts_digest(prompts: Prompts) -> str:
    """sha256 of the prompts' shapes and float64 bytes (xs, ys and every meta, in name order)."""
    digest = hashlib.sha256()
    tensors = [prompts.xs, prompts.ys] + [prompts.meta[k] for k in sorted(prompts.meta)]
    for tensor in tensors:
        array = np.ascontiguousarray(tensor.detach().cpu().double().numpy())
        digest.update(repr(array.shape).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def cache_key(spec: dict[str, Any], prompts: Prompts) -> str:
    blob = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{blob}/{prompts_digest(prompts)}".encode()).hexdigest()[:32]


def write_atomically(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            np.save(file, array)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


class CachedPredictor:
    """A predictor whose (B, N+1) outputs are cached on disk by ``cache_key(spec, prompts)``.

    With ``by_position``, ``compute(prompts, positions)`` fits only the columns asked for (NaN elsewhere)
    and ``predictor(prompts, positions=[...])`` asks for them: a per-prefix fit costs one fit per column,
    and an evaluation reads a few. A file of every column serves any request; a file of some columns has
    them in its key, so it serves only the same request.

    ``hits`` and ``misses`` count lookups in this process (misses are computations).
    """

    def __init__(self, compute: Callable[..., torch.Tensor], spec: dict[str, Any], by_position: bool = False):
        self.compute, self.spec, self.by_position = compute, spec, by_position
        self.hits = self.misses = 0

    def path(self, prompts: Prompts, positions: list[int] | None = None) -> Path:
        spec = self.spec if positions is None else {**self.spec, "positions": sorted(set(positions))}
        return cache_dir() / f"{self.spec['baseline']}-{cache_key(spec, prompts)}.npy"

    def __call__(self, prompts: Prompts, positions: list[int] | None = None) -> torch.Tensor:
        if not self.by_position or set(range(1, prompts.ys.shape[1])) <= set(positions or ()):
            positions = None  # every column: the file of every column, which serves any request
        paths = [self.path(prompts)] + ([self.path(prompts, positions)] if positions is not None else [])
        for path in paths:
            if path.exists():
                self.hits += 1
                return torch.from_numpy(np.load(path)).to(device=prompts.ys.device, dtype=prompts.ys.dtype)
        self.misses += 1
        pred = self.compute(prompts) if positions is None else self.compute(prompts, positions)  # (B, N+1)
        write_atomically(paths[-1], pred.detach().cpu().double().numpy())
        return pred.to(device=prompts.ys.device, dtype=prompts.ys.dtype)


def map_prompts(function: Callable[..., np.ndarray], prompts: Prompts, n_jobs: int, **kwargs) -> torch.Tensor:
    """``function(xs_b, ys_b, **kwargs) -> (N+1,)`` for every prompt b, over a loky process pool: (B, N+1)."""
    from joblib import Parallel, delayed

    xs = prompts.xs.detach().cpu().double().numpy()
    ys = prompts.ys.detach().cpu().double().numpy()
    rows = Parallel(n_jobs=n_jobs, backend="loky")(
        delayed(function)(xs[b], ys[b], **kwargs) for b in range(len(xs))
    )
    return torch.from_numpy(np.stack(rows)).to(device=prompts.ys.device, dtype=prompts.ys.dtype)
