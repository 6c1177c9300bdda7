"""Self-contained HTML reports (figures inlined as PNG), the same page for every kind (its plug-in fills in
the verdict section and any further sections, analysis/plugin.py), and the pieces a comparison reuses.

A sweep's report, top to bottom: the one-line answer and the kind's verdicts (the training kind: the rule
and the verdict table, an adaptive sweep's path), notes on the figures, the figures, the kind's further
sections (the training kind: the scaling-law fits with their intervals at full precision), the cells not
complete with their errors, the MLflow run of every cell, the sweep's settings.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from scaling.judge.power_law import EXPONENT_BOUNDS, PARAMS
from scaling.judge.verdicts import Rule
from scaling.tracking.uri import TRAINING_VIEW, ui_command

from .verdicts import display_table, rule_text

LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves a local store by default
EXPONENTS = ("alpha", "beta")
# a fit interval's end further than this factor from its estimate is one the data do not bound (a
# coefficient of 1e7 where the estimate is 0.2 comes with an exponent the data leave free)
UNPINNED = 1e3

STYLE = """body{font-family:system-ui,sans-serif;max-width:1300px;margin:2em auto;padding:0 1em;color:#222}
table.data{border-collapse:collapse;font-size:12px}table.data td,table.data th{padding:2px 7px;
border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}figure{margin:1em 0}img{max-width:100%}
.wide{overflow-x:auto}pre{background:#f6f6f6;padding:1em;overflow:auto;font-size:12px}
.answer{font-size:1.1em;background:#eef5ff;padding:.6em 1em;border-left:4px solid #36c}
table.data td.text{text-align:left;white-space:normal}table.wrap td{white-space:normal}"""
VERDICT_COLUMNS = [
    "sweep",
    "question",
    "model",
    "predictor",
    "T",
    "n",
    "x_min",
    "x_max",
    "n_points",
    "n_seeds",
    "drop",
    "drop_lo",
    "drop_hi",
    "trend_p",
    "verdict",
    "note",
]


def full(value) -> str:
    """A number at full precision (shortest repr that round-trips), numpy scalars included."""
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return "inf" if math.isinf(value) else ("" if math.isnan(value) else repr(value))
    if isinstance(value, np.integer):
        return str(int(value))
    return str(value)


def short(value) -> str:
    """A number to 4 significant digits (inf spelled out), anything else as text."""
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return "inf" if math.isinf(value) else ("" if math.isnan(value) else f"{value:.4g}")
    return full(value)


def table_html(frame: pd.DataFrame | None, empty: str, precise: bool = False, wrap: bool = False) -> str:
    """A data table (numbers to 4 significant digits, or at full ``precise``ion); with ``wrap`` its cells
    wrap at their spaces to fit the page (keep a unit together with non-breaking spaces)."""
    if frame is None or frame.empty:
        return f"<p>{html.escape(empty)}</p>"
    fmt = full if precise else short
    shown = frame.apply(lambda col: col.map(fmt) if col.dtype == object else col)  # numpy scalars in objects
    classes = "data wrap" if wrap else "data"
    return (
        '<div class="wide">'
        + shown.to_html(index=False, float_format=fmt, border=0, classes=classes, na_rep="")
        + "</div>"
    )


def image_html(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<figure><img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}"></figure>'


def verdict_html(verdicts: pd.DataFrame | None, rule: Rule | None = None) -> str:
    """The rule once, then a table per question: the trained models first, then each baseline once."""
    if verdicts is None or verdicts.empty:
        return table_html(None, "no verdicts")
    parts = [f"<p><b>How verdicts are made.</b> {html.escape(rule_text(rule or Rule()))}</p>"]
    for question, title in (
        ("context", "Context scaling (error against n at fixed T)"),
        ("task", "Task scaling (error against T at fixed n = N)"),
    ):
        rows = verdicts[verdicts["question"] == question]
        if len(rows):
            parts.append(
                f"<h3>{title}</h3>" + table_html(display_table(rows).drop(columns="question"), "no groups")
            )
    return "".join(parts)


def interval_text(value: float, lo: float, hi: float, param: str = "") -> str:
    """'value [lo, hi]', an end the data leave open written as such: a coefficient's (E, A, B) upper end
    over UNPINNED times its value as inf (its lower end under 1/UNPINNED of it as 0), an exponent's at its
    fit's bound (scaling.judge.power_law.EXPONENT_BOUNDS) as inf: 'B 0.23 [0.23, inf)' (fits.csv keeps the
    numbers)."""
    if not isinstance(value, (int, float)) or math.isnan(value):
        return ""
    text = f"{value:.4g}"
    if math.isnan(lo):
        return text
    exponent = param in EXPONENTS
    top = hi >= EXPONENT_BOUNDS[1] * (1 - 1e-6) if exponent else hi > UNPINNED * max(abs(value), 1e-300)
    bottom = not exponent and 0 < value and lo < value / UNPINNED
    left = "[0" if bottom else f"[{lo:.4g}"
    # no break inside the interval: the fits table wraps between a value and its interval only
    return f"{text} {left},\u00a0\u221e)" if top else f"{text} {left},\u00a0{hi:.4g}]"


def fits_html(fits: pd.DataFrame | None) -> str:
    """The fitted rows with each parameter as value [interval], and the rows that could not be fitted
    summed up by form and reason (one line each)."""
    if fits is None or fits.empty:
        return "<p>no fits (no trained model in the table)</p>"
    fitted = fits[fits["converged"].astype(bool)]
    keys = [
        c
        for c in ("form", "fit_on", "sweep", "model", "T", "n")
        if c in fits and fits[c].nunique(dropna=False) > 1 or c in ("form", "fit_on", "model")
    ]
    keys += [c for c in fits.columns if "." in c and fits[c].nunique() > 1]
    shown = fitted[keys].copy()
    for c in ("T", "n"):
        if c in shown:
            shown[c] = shown[c].map(lambda v: "" if pd.isna(v) else ("inf" if math.isinf(v) else f"{v:g}"))
    for p in PARAMS:
        values = [
            interval_text(v, lo, hi, p) for v, lo, hi in zip(fitted[p], fitted[f"{p}_lo"], fitted[f"{p}_hi"])
        ]
        if any(values):
            shown[p] = values
    shown["points"], shown["seeds"], shown["note"] = fitted["n_points"], fitted["n_seeds"], fitted["note"]
    level = f"{fits['level'].iloc[0]:.0%}" if "level" in fits else ""
    head = (
        f"<p>err = E + A n<sup>-alpha</sup> (context), E + B T<sup>-beta</sup> (task; T = inf pins E), "
        f"and their sum (joint), fitted to the trained models' mean error per seed; with 2 seeds or more "
        f"each parameter is the mean of the seeds' own fits (E, A, B: the geometric mean) with its {level} "
        f"Student t interval over them. fit_on says which points: the lattice "
        f"(n = N: trained and tested at the same length) or, where the lattice has too few values of N, each "
        f"cell's own curve over n. An interval end the data do not pin is written 0 or \u221e: a "
        f"coefficient's more than {UNPINNED:g} times away from its estimate, an exponent's at the fit's "
        f"bound of {EXPONENT_BOUNDS[1]:g} (an exponent's 0 is a flat curve). Full precision in fits.csv.</p>"
    )
    failed = fits[~fits["converged"].astype(bool)]
    lines = [
        f"<li>{html.escape(form)} ({len(rows)} group{'s' * (len(rows) > 1)}): {html.escape(reason)}</li>"
        for (form, reason), rows in failed.groupby(["form", failed["note"].fillna("")], sort=False)
    ]
    missing = f"<p>Not fitted:</p><ul>{''.join(lines)}</ul>" if lines else ""
    return head + table_html(shown, "no fitted group", wrap=True) + missing


def ui_address(result) -> str:
    """The MLflow UI's address for the result's runs: ``result.ui_url`` (--ui-url), else the tracking URI
    when it is a server, else where ``mlflow ui`` serves a local store by default."""
    if getattr(result, "ui_url", ""):
        return result.ui_url.rstrip("/")
    uri = result.tracking_uri
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else LOCAL_UI


def run_address(result, run_id: str) -> str:
    """The page of a run in the MLflow UI, in its model-training view (without ``workflowType`` a fresh
    browser opens it as GenAI: no params, metrics or charts)."""
    exp = result.table.attrs.get("experiment_id", "")
    return (
        f"{ui_address(result)}/#/experiments/{exp}/runs/{run_id}?{TRAINING_VIEW}"
        if exp
        else f"{ui_address(result)}/#/runs/{run_id}?{TRAINING_VIEW}"
    )


def run_link(result, run_id: str | None) -> str:
    """A run id, linked to its page in the MLflow UI (``ui_address``; a local store's UI is there once
    ``mlflow ui`` serves it, which the report's MLflow section says)."""
    if not run_id:
        return "-"
    return f'<a href="{html.escape(run_address(result, run_id))}"><code>{html.escape(run_id)}</code></a>'


def runs_html(result) -> str:
    """The MLflow run of every complete cell (name and id; a link when a server URL is known)."""
    runs = result.table.attrs.get("runs", {})
    rows = [
        f"<tr><td>{html.escape(str(name))}</td><td>{run_link(result, run_id)}</td></tr>"
        for run_id, name in sorted(runs.items(), key=lambda kv: kv[1] or "")
    ]
    command = None if result.ui_url else ui_command(result.tracking_uri)  # None for a tracking server
    serve = f" (serve this store there with <code>{html.escape(command)}</code>)" if command else ""
    head = (
        f"<p>Tracking store: <code>{html.escape(result.tracking_uri)}</code>; this analysis is the run "
        f"{run_link(result, result.run_id)}. Run ids link to the MLflow UI at "
        f"{html.escape(ui_address(result))}{serve}.</p>"
    )
    return head + (
        '<table class="data"><tr><th>cell run</th><th>run id</th></tr>' + "".join(rows) + "</table>"
        if rows
        else "<p>no runs</p>"
    )


def answer_text(answer: str) -> str:
    """The one-line answer laid out for reading: each question on its own line, each unit below it,
    indented."""
    text = answer.replace(" | ", "\n  ").replace(". Task scaling:", ".\nTask scaling:")
    return text.replace("Context scaling: ", "Context scaling:\n  ").replace(
        "Task scaling: ", "Task scaling:\n  "
    )


def answer_html(answer: str) -> str:
    """``answer_text`` as HTML."""
    return html.escape(answer_text(answer)).replace("\n  ", "<br>&nbsp;&nbsp;").replace("\n", "<br>")


def _page(title: str, body: str) -> str:
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>{body}</body></html>"
    )


def waves_html(waves: list[dict]) -> str:
    """An adaptive sweep's path: one row per wave (the answers before it, the cells it ran and why)."""
    if not waves:
        return ""
    rows = []
    for w in waves:
        why = "<br>".join(html.escape(r) for r in w.get("reasons", [])[:4])
        more = len(w.get("reasons", [])) - 4
        why += f"<br>... and {more} more" if more > 0 else ""
        why = why or html.escape(f"stops: {w.get('stop', '')}")
        rows.append(
            f"<tr><td>{w['wave']}</td><td>{w['complete']}</td><td>{w['spent']:.0%}</td><td>{w['settled']}</td>"
            f'<td>{w["open"]}</td><td>{len(w["cells"])}</td><td class="text">{why}</td></tr>'
        )
    budget = waves[-1].get("budget", float("nan"))
    return (
        f"<h2>Adaptive path</h2><p>Run with <code>--adaptive</code> (budget {budget:.0%} of the lattice's"
        f" estimated compute): each wave's cells were chosen from the answers before it"
        f" (scaling.adaptive). Per wave: cells complete and compute spent before it, answers settled and"
        f" open then, the cells it ran and why.</p>"
        '<table class="data"><tr><th>wave</th><th>cells before</th><th>compute before</th><th>settled</th>'
        "<th>open</th><th>cells</th><th>why</th></tr>" + "".join(rows) + "</table>"
    )


def sweep_sections(result, figures: bool = True) -> str:
    """A sweep's report below its title: the answer, the kind's verdict section (its plug-in's
    ``verdict_html``), the notes and figures (``figures``), the kind's further sections, the cells not
    complete, the MLflow runs and the sweep's settings."""
    plugin = result.plugin
    figs = "".join(image_html(p) for p in result.files if p.suffix == ".png") if figures else ""
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in result.notes)
    extra = "".join(f"<h2>{html.escape(title)}</h2>{body}\n" for title, body in plugin.sections(result))
    settings = (
        yaml.safe_dump(result.document, sort_keys=False)
        if result.document
        else "(analysed by experiment name)"
    )
    return f"""<p class="answer">{answer_html(result.answer())}</p>
<p>{result.table["cell_key"].nunique()} complete cells; {len(result.missing)} not complete.</p>
<h2>Verdicts</h2>{plugin.verdict_html(result)}
{f"<h2>Figures</h2><ul>{notes}</ul>{figs}" if figures else ""}
{extra}<h2>Cells not complete</h2>{table_html(result.missing, "every cell is complete")}
<h2>MLflow runs</h2>{runs_html(result)}
<h2>Sweep settings</h2><pre>{html.escape(settings)}</pre>"""


def write_report(result, path: Path) -> Path:
    """Write ``report.html`` for an AnalysisResult (analysis/plugin.py); returns its path."""
    title = result.title
    path.write_text(_page(title, f"<h1>Sweep {html.escape(title)}</h1>" + sweep_sections(result)))
    return path
