"""One cell inside a Ray Tune trial: resume from its checkpoint, train, evaluate, log, report.

Checkpoints are keyed by the cell (``<storage>/checkpoints/<cell key>/state.pt``), not by the Tune trial,
so they outlive any one driver: a rerun after a crash, or a sweep edited to add cells (a new Tune
experiment, never ``Tuner.restore``, which unpickles and cannot add cells), continues each cell from its
own last checkpoint. Tune's retries after a worker dies restart this function, which resumes the same way.
Storage is any URI ``pyarrow.fs`` understands: a local or network path, ``s3://``, ``gs://``.
"""
from __future__ import annotations

import io
import tempfile
import traceback
from pathlib import Path
from typing import Any

import torch
from pyarrow import fs as pafs

from .cells import Cell
from .kinds.temperature import run_job
from .tracking import CellLog
from .science.train import CellTrainer, resolve_device


class CheckpointStore:
    """Per-cell checkpoints on a local path or object store, written atomically (temp file, then move)."""

    def __init__(self, uri: str):
        if "://" not in uri:
            uri = str(Path(uri).resolve())
        self.fs, self.root = pafs.FileSystem.from_uri(uri)

    def _path(self, key: str) -> str:
        return f"{self.root}/checkpoints/{key}/state.pt"

    def save(self, key: str, state: dict) -> None:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        path = self._path(key)
        self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with self.fs.open_output_stream(path + ".tmp") as out:
            out.write(buffer.getvalue())
        self.fs.move(path + ".tmp", path)

    def load(self, key: str) -> dict | None:
        path = self._path(key)
        if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        with self.fs.open_input_stream(path) as stream:
            return torch.load(io.BytesIO(stream.read()), map_location="cpu", weights_only=True)

    def step(self, key: str) -> int | None:
        """The step of the cell's checkpoint, or None (for --dry-run)."""
        state = self.load(key)
        return None if state is None else int(state["step"])

    def delete(self, key: str) -> None:
        path = self._path(key).rsplit("/", 1)[0]
        if self.fs.get_file_info(path).type != pafs.FileType.NotFound:
            self.fs.delete_dir(path)


def trial_device(config: dict[str, Any], cell: Cell) -> torch.device:
    """The cell's device: CUDA only where the trial was given a GPU."""
    if cell.train.device != "auto":
        return torch.device(cell.train.device)
    return resolve_device("auto") if config["resources"].get("gpu", 0) > 0 else torch.device("cpu")


def cap_gpu_memory(device: torch.device, gpu: float) -> None:
    """Hold a trial given a fraction of a GPU to that fraction of the GPU's memory (whole GPUs: no cap)."""
    if device.type == "cuda" and 0 < gpu < 1:
        torch.cuda.set_per_process_memory_fraction(gpu, device)


def finish_trained(trainer: CellTrainer, cell: Cell, log: CellLog):
    """Evaluate, and log weights, the rest of the loss history, curves and status=complete (CellLog.finish)."""
    curves = trainer.evaluate()
    with tempfile.TemporaryDirectory() as tmp:
        weights = Path(tmp) / "model.pt"
        torch.save(trainer.model.state_dict(), weights)
        log.finish(cell, curves, weights)
    return curves


def run_cell(config: dict[str, Any], report=None) -> dict[str, Any]:
    """Train, evaluate and log one cell; ``report`` receives progress dicts (tune.report in a trial)."""
    cell = Cell.from_dict(config["cell"])
    torch.set_num_threads(max(1, int(config["resources"].get("cpu", 1))))
    device = trial_device(config, cell)
    cap_gpu_memory(device, float(config["resources"].get("gpu", 0)))
    store = CheckpointStore(config["storage"])
    log = CellLog.open(config["tracking_uri"], config["experiment_id"], cell, config["sweep"],
                       config.get("parent_run_id"))
    if cell.job != "train":
        return run_temperature_job(cell, device, log, report, config["tracking_uri"])
    try:
        trainer = CellTrainer(cell, device)
        state = store.load(cell.key)
        if state is not None:
            trainer.load_state_dict(state)
            log.log_metrics("trial/resumed_from", [(trainer.step, trainer.step)])
            log.log_losses(state.get("unlogged_losses", []))     # losses a blinking store missed
        every, losses = cell.train.checkpoint_every, []
        while not trainer.done_training:
            trainer.train_until((trainer.step // every + 1) * every, lambda s, v: losses.append((s, v)))
            log.log_losses(losses)
            store.save(cell.key, {**trainer.state_dict(), "unlogged_losses": log.pending})
            if report:
                report({"step": trainer.step, "progress": trainer.step / cell.train.steps,
                        "loss": losses[-1][1] if losses else float("nan")})
            losses = []
        curves = finish_trained(trainer, cell, log)
    except Exception:
        log.fail(traceback.format_exc())
        raise
    model_curve = curves[curves["predictor"] == "model"]
    final = {"step": trainer.step, "progress": 1.0, "finished": 1,
             "err_last": float(model_curve["err"].iloc[-1])}
    if report:
        report(final)
    return final


def run_temperature_job(cell: Cell, device: torch.device, log: CellLog, report=None,
                        tracking_uri: str | None = None) -> dict[str, Any]:
    """A cell whose job is not training (scaling.kinds.temperature): run it, log its curves and summary."""
    try:
        result = run_job(cell, device, report, tracking_uri)
        with tempfile.TemporaryDirectory() as tmp:
            weights = None
            if result.weights is not None:
                weights = Path(tmp) / "model.pt"
                torch.save(result.weights, weights)
            log.finish(cell, result.curves, weights, result.summary)
    except Exception:
        log.fail(traceback.format_exc())
        raise
    final = {"step": 0, "progress": 1.0, "finished": 1, **result.summary}
    if report:
        report(final)
    return final


def tune_trainable(config: dict[str, Any]) -> None:
    """The Ray Tune function trainable: one trial = one cell, or a pack of cells (``members``, scaling.packing)."""
    from ray import tune

    from .packing import run_pack

    cell_config = config["cell_config"]
    (run_pack if "members" in cell_config else run_cell)(cell_config, report=tune.report)
