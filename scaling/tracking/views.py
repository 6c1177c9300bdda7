"""How MLflow's UI shows a sweep, set through MLflow's own means (docs/mlflow-ui.md): the lattice view and
the links to it, and the note on a sweep's parent run that links its analysis report.

- The lattice view is a shared view state, what the runs page's Share button saves: an experiment tag
  ``mlflow.sharedViewState.<key>`` holding the page's state as JSON, opened by a link's
  ``viewStateShareKey=<key>``. Ours filters the runs table to the cells (no parent run to expand: the cells
  are its rows), sorts them by name, widens the name column to the longest name, and shows the sweep's
  grid axes (model.name, T, N, seed and any other) and its cells' final measure (err/zero) as columns.
  MLflow 3.17.2 reads its shared views from ``mlflow.sharedViewState.`` tags and takes the state's
  selectedColumns, columnOrder, columnWidths (a width only for a column of columnOrder) and search facets
  (its runs page's experiment-page UI state); which rows are expanded it does not take from a shared view
  (runsExpanded is left out of what it loads), hence the filter.
- Whether the UI shows an experiment as GenAI or model training follows the sidebar's switch alone (the
  URL's ``workflowType``, else the browser's last choice): the links carry ``workflowType``, a page
  opened from inside the UI does not, and the switch is one click (docs/mlflow-ui.md).
- A sweep's parent run's description (``mlflow.note.content``, markdown, shown on its Overview tab) links
  the report of its latest analysis, an artifact of the analysis run: one click from the parent run.
"""

from __future__ import annotations

import json
from typing import Iterable

SHARED_VIEW_TAG = "mlflow.sharedViewState."  # MLflow's shared-view tags: prefix + the link's share key
LATTICE = "lattice"  # the share key of the lattice view
RUN_NAME_COLUMN = "attributes.`Run Name`"  # the runs table's name column, as MLflow's view state names it
DESCRIPTION_TAG = "mlflow.note.content"  # a run's description (markdown) in MLflow's UI


def lattice_view(params: Iterable[str], metrics: Iterable[str], names: Iterable[str]) -> dict:
    """The runs page's state that shows a sweep as its lattice: the cells, by name, with ``params`` and
    ``metrics`` as columns and the name column as wide as the longest of ``names`` (within 160-480 px)."""
    longest = max((len(name) for name in names), default=20)
    return {
        "searchFilter": "tags.kind = 'cell'",
        "orderByKey": "tags.`mlflow.runName`",
        "orderByAsc": True,
        "selectedColumns": [f"params.`{p}`" for p in params] + [f"metrics.`{m}`" for m in metrics],
        # MLflow applies a width only to a column of columnOrder (it keeps the others' order)
        "columnOrder": [RUN_NAME_COLUMN],
        "columnWidths": {RUN_NAME_COLUMN: min(max(160, 7 * longest + 50), 480)},
    }


def view_tag(params: Iterable[str], metrics: Iterable[str], names: Iterable[str]) -> tuple[str, str]:
    """The experiment tag (key, value) of the lattice view."""
    return SHARED_VIEW_TAG + LATTICE, json.dumps(lattice_view(params, metrics, names))


def report_note(experiment_id: str, run_id: str, run_name: str) -> str:
    """The parent run's description: a link to the report of the analysis run ``run_id``, and to that run."""
    run = f"#/experiments/{experiment_id}/runs/{run_id}"
    return (
        f"**Analysis report: [report.html]({run}/artifacts/report.html)** "
        f"(the latest analysis, run [{run_name}]({run}); its figures, table and fits beside it)"
    )
