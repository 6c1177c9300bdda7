"""The training kind (``job: train``, the default): train a cell's model, evaluate it with its baselines.

Seed 001's experiment: the cell's model is trained on its task (a pool of T tasks, or fresh tasks) for
``train.steps`` steps with checkpoints every ``train.checkpoint_every`` steps, then scored at every
context length n against the baselines (papers.context_scaling.train,
papers.context_scaling.evaluate). A resumed cell (after a crash, or a retried trial) continues from
its checkpoint and ends with the same numbers as one that never stopped; the losses a blinking store missed
ride in the checkpoint until they are logged. Small cells of one shape train as a pack (``run_pack``: one
stacked model, papers.context_scaling.stacked), each resumed, checkpointed and finished as ``run``
does one cell alone. Planning and analysis load this kind without torch: the functions that run a trial
import the training code (and with it torch) when they run.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from papers.context_scaling.architectures import model_facts
from scaling.budget.cost import CellCost, training_cost
from scaling.config import check, format_T
from scaling.kinds import Kind
from scaling.trial.timeline import Timeline

if TYPE_CHECKING:
    from papers.context_scaling.train import CellTrainer

# the steps a trial replayed from CUDA graphs (a pack's: its stacked steps), where it captures them
GRAPH_REPLAYS = "trial/graph_replays"


def label(cell) -> str:
    """'gpt2 T=65536 N=40 seed=0'."""
    return f"{cell.model.label} T={format_T(cell.T)} N={cell.N} seed={cell.seed}"


def resume(trainer: CellTrainer, store, log) -> None:
    """Load the cell's checkpoint into ``trainer``, if there is one, and log what the last run could not:
    the step it resumed from and the losses a blinking store missed (they ride in the checkpoint). A
    damaged checkpoint (scaling.trial.checkpoints) is named in the run's ``checkpoint_damaged`` tag; the cell
    continues from the last good one, or from scratch. A checkpoint written when the run held more of its
    losses than it holds now (a tracking store restored from an older backup:
    scaling.trial.checkpoints.behind) is deleted and the cell trained again from step 0, said in the run's
    ``redone`` tag."""
    from scaling.trial.checkpoints import behind  # defers torch (the checkpoints' format) to the trial

    state = store.load(trainer.cell.key)
    problems = store.problems.get(trainer.cell.key)
    if problems:
        fallback = f"resumed from step {state['step']}" if state is not None else "trained from scratch"
        log.note("checkpoint_damaged", f"{'; '.join(problems)}; discarded, {fallback}")
    if state is None:
        return
    why = behind(state.get("logged_through"), log.last_loss_step)
    if why:  # a history with a hole if it went on: trained again from step 0 (the same losses, once)
        log.note("redone", f"trained again from step 0: {why}")
        store.delete(trainer.cell.key)
        return
    trainer.load_state_dict(state)
    log.log_metrics("trial/resumed_from", [(trainer.step, trainer.step)])
    log.log_losses(state.get("unlogged_losses", []))


def checkpoint(trainer: CellTrainer, store, log, losses: list) -> None:
    """Log a segment's losses (buffered while the store blinks) and checkpoint the trainer with them."""
    log.log_losses(losses)
    state = {**trainer.state_dict(), "unlogged_losses": log.pending, "logged_through": log.last_loss_step}
    store.save(trainer.cell.key, state)


def finish(trainer: CellTrainer, log, timeline: Timeline):
    """Evaluate, and log weights, the rest of the loss history, curves, the final err/zero, the trial's
    seconds by phase (this cell's evaluation its own) and status=complete."""
    import torch

    began = timeline.clock()
    with timeline.phase("evaluate"):
        curves = trainer.evaluate()
    timings = timeline.metrics(evaluate=timeline.clock() - began)
    with tempfile.TemporaryDirectory() as tmp:
        weights = Path(tmp) / "model.pt"
        torch.save(trainer.model.state_dict(), weights)
        log.finish(trainer.cell, curves, weights, summary=final_err_zero(curves), timings=timings)
    return curves


def final_err_zero(curves) -> dict[str, float]:
    """{"err/zero": the model's error over the zero predictor's on the same prompts at the largest n} (the
    analysis' measure, a column of the MLflow UI's lattice view); {} without the zero predictor."""
    model, zero = (curves[curves["predictor"] == name].set_index("n")["err"] for name in ("model", "zero"))
    both = model.index.intersection(zero.index)
    if not len(both) or not zero[both.max()] > 0:
        return {}
    return {"err/zero": float(f"{model[both.max()] / zero[both.max()]:.4g}")}  # 4 digits: a column shows them


def run(cell, trial) -> dict[str, Any]:
    """Train from the last checkpoint to the end, evaluate, log; the final report for Tune."""
    from papers.context_scaling.train import CellTrainer  # defers torch to the trial

    trainer = CellTrainer(cell, trial.device)
    resume(trainer, trial.store, trial.log)
    every = cell.train.checkpoint_every
    steps = cell.train.steps
    start = trainer.step / steps  # where this run starts: the progress view counts only what it trains
    while not trainer.done_training:
        losses: list = []

        def on_loss(step: int, loss: float) -> None:
            losses.append((step, loss))
            trial.progress(
                {"step": step, "progress": step / steps, "start": start, "loss": loss}, force=False
            )

        with trial.timeline.steps():
            trainer.train_until((trainer.step // every + 1) * every, on_loss)
        with trial.timeline.phase("checkpoint"):
            checkpoint(trainer, trial.store, trial.log, losses)
        trial.progress(
            {
                "step": trainer.step,
                "progress": trainer.step / steps,
                "start": start,
                "loss": losses[-1][1] if losses else float("nan"),
            }
        )
    if trainer.graph is not None:
        trial.log.log_metrics(GRAPH_REPLAYS, [(trainer.step, trainer.graph.replays)])
    curves = finish(trainer, trial.log, trial.timeline)
    model_curve = curves[curves["predictor"] == "model"]
    return {
        "step": trainer.step,
        "progress": 1.0,
        "finished": 1,
        "err_last": float(model_curve["err"].iloc[-1]),
    }


def run_pack(members: list, pack) -> list[Callable[[], Any]]:
    """Train a pack's (cell, log) members as one stacked model from their checkpoints to their last step;
    each member's finish (evaluate, log), which the trial calls one by one. ``pack``: the device, the
    members' checkpoint store and the progress report (scaling.trial.run.PackContext)."""
    from papers.context_scaling.train import CellTrainer  # defers torch to the trial

    trainers = [CellTrainer(cell, pack.device) for cell, _ in members]
    for trainer, (_, log) in zip(trainers, members):
        resume(trainer, pack.store, log)
    train_stacked(trainers, [log for _, log in members], pack)
    return [
        functools.partial(finish, trainer, log, pack.timeline) for trainer, (_, log) in zip(trainers, members)
    ]


def train_stacked(trainers: list[CellTrainer], logs: list, pack) -> None:
    """Train the trainers stacked (papers.context_scaling.stacked.PackTrainer) to their last steps,
    checkpointing and logging each one's losses as ``run`` does one cell alone; progress over all their
    steps. At most ``pack.limit`` members are stacked at once (the device's memory); a pack that runs out of
    memory splits, and the runs of the members it held say so (``pack_split``)."""

    def on_split(indices: list[int], text: str) -> None:
        for i in indices:
            logs[i].note("pack_split", text)

    from papers.context_scaling.stacked import PackTrainer  # defers torch to the trial

    stacked = PackTrainer(trainers, pack.limit, pack.guard, on_split)
    losses: list[list] = [[] for _ in trainers]
    steps = sum(t.cell.train.steps for t in trainers)
    start = sum(t.step for t in trainers) / steps  # the members' checkpoints: trained before this run
    while not stacked.done_training:
        active, stop = stacked.next_segment()
        behind = [t.step for t in trainers if t not in active]  # members that wait out this segment
        behind_done, behind_min = sum(behind), min(behind, default=steps)  # no member behind: the step itself

        def on_loss(i: int, step: int, loss: float) -> None:
            losses[i].append((step, loss))
            done = behind_done + step * len(active)
            progress = {"step": min(step, behind_min), "progress": done / steps, "start": start}
            pack.progress({**progress, "loss": float("nan")}, force=False)

        with pack.timeline.steps():
            stacked.train_until(active, stop, on_loss)
        for trainer in active:
            i = trainers.index(trainer)
            if trainer.step % trainer.cell.train.checkpoint_every == 0 or trainer.done_training:
                with pack.timeline.phase("checkpoint"):
                    checkpoint(trainer, pack.store, logs[i], losses[i])
                losses[i] = []
        pack.progress(
            {
                "step": min(t.step for t in trainers),
                "progress": sum(t.step for t in trainers) / steps,
                "start": start,
                "loss": float("nan"),
            }
        )
    if trainers[0].graphs:
        for trainer, log in zip(trainers, logs):
            log.log_metrics(GRAPH_REPLAYS, [(trainer.step, stacked.replayed)])


def check_cell(cell) -> None:
    """``train.lengths`` (the loss at given context lengths alone: App. A's MLP zero-padded to the largest,
    its transformers trained at 1, 11, ..., 91) trains the models a pack can mask: MLPs and transformers
    (a transformer with lengths trains alone: ``packable``)."""
    check(
        not cell.train.lengths or cell.model.arch in ("mlp", "gpt2", "sgpt"),
        "train.lengths",
        f"only mlp, gpt2 and sgpt cells train at given context lengths, not {cell.model.arch}",
    )


def cost(cell) -> CellCost:
    """Training FLOPs, seconds and peak memory of the cell from its model's facts and the cost table."""
    return training_cost(cell)


def packable(cell) -> bool:
    """Whether the cell's model can train stacked with others (papers.context_scaling.stacked): a
    transformer trained at given lengths trains alone (the stacked transformers take the prefix loss)."""
    if cell.train.lengths and cell.model.arch != "mlp":
        return False
    return model_facts(cell.model.arch).packable(cell.model)


TRAIN = Kind(
    name="train",
    run=run,
    label=label,
    analysis="papers.context_scaling.analysis.plugin:TRAINING",
    check=check_cell,
    cost=cost,
    packable=packable,
    run_pack=run_pack,
    shown=("err/zero",),
)
