"""Self-contained HTML reports (figures inlined as PNG): one sweep, or a comparison of two.

A sweep's report, top to bottom: the one-line answer and the verdict table, notes on the figures, the
figures, the scaling-law fits with their intervals at full precision, the cells not complete with their
errors, the MLflow run of every cell, the sweep's settings.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import pandas as pd
import yaml

from .compare import summary_line

STYLE = """body{font-family:system-ui,sans-serif;max-width:1300px;margin:2em auto;padding:0 1em;color:#222}
table.data{border-collapse:collapse;font-size:12px}table.data td,table.data th{padding:2px 7px;
border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}figure{margin:1em 0}img{max-width:100%}
.wide{overflow-x:auto}pre{background:#f6f6f6;padding:1em;overflow:auto;font-size:12px}
.answer{font-size:1.1em;background:#eef5ff;padding:.6em 1em;border-left:4px solid #36c}"""
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
    """A number at full precision (shortest repr that round-trips)."""
    if isinstance(value, float):
        return "inf" if math.isinf(value) else ("" if math.isnan(value) else repr(value))
    return str(value)


def table_html(frame: pd.DataFrame | None, empty: str, precise: bool = False) -> str:
    if frame is None or frame.empty:
        return f"<p>{html.escape(empty)}</p>"
    fmt = full if precise else (lambda v: f"{v:.4g}")
    return (
        '<div class="wide">'
        + frame.to_html(index=False, float_format=fmt, border=0, classes="data", na_rep="")
        + "</div>"
    )


def image_html(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<figure><img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}"></figure>'


def verdict_html(verdicts: pd.DataFrame | None) -> str:
    if verdicts is None or verdicts.empty:
        return table_html(None, "no verdicts")
    tasks = sorted(c for c in verdicts if c.startswith("task."))
    shown = [c for c in VERDICT_COLUMNS[:5] + tasks + VERDICT_COLUMNS[5:] if c in verdicts]
    trained = verdicts["predictor"] == "model"
    ordered = pd.concat([verdicts[trained], verdicts[~trained]])  # the trained models first
    return table_html(ordered[shown], "no verdicts")


def runs_html(result) -> str:
    """The MLflow run of every complete cell (name and id; a link when the store is a server)."""
    runs = result.table.attrs.get("runs", {})
    uri = result.tracking_uri
    rows = []
    for run_id, name in sorted(runs.items(), key=lambda kv: kv[1] or ""):
        link = html.escape(run_id)
        if uri.startswith("http"):
            link = f'<a href="{html.escape(uri.rstrip("/"))}/#/runs/{run_id}">{link}</a>'
        rows.append(f"<tr><td>{html.escape(str(name))}</td><td>{link}</td></tr>")
    head = (
        f"<p>Tracking store: <code>{html.escape(uri)}</code>;"
        f" analysis run: <code>{result.run_id or '-'}</code></p>"
    )
    return head + (
        '<table class="data"><tr><th>cell run</th><th>run id</th></tr>' + "".join(rows) + "</table>"
        if rows
        else "<p>no runs</p>"
    )


def _page(title: str, body: str) -> str:
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>{body}</body></html>"
    )


def sweep_sections(result, figures: bool = True) -> str:
    table = result.table
    figs = "".join(image_html(p) for p in result.files if p.suffix == ".png") if figures else ""
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in result.notes)
    settings = (
        yaml.safe_dump(result.document, sort_keys=False)
        if result.document
        else "(analysed by experiment name)"
    )
    return f"""<p class="answer">{html.escape(result.answer())}</p>
<p>{table["cell_key"].nunique()} complete cells; {len(result.missing)} not complete.</p>
<h2>Verdicts</h2>{verdict_html(result.verdicts)}
{f"<h2>Figures</h2><ul>{notes}</ul>{figs}" if figures else ""}
<h2>Scaling-law fits (intervals at full precision)</h2>{table_html(result.fits, "no fits", precise=True)}
<h2>Cells not complete</h2>{table_html(result.missing, "every cell is complete")}
<h2>MLflow runs</h2>{runs_html(result)}
<h2>Sweep settings</h2><pre>{html.escape(settings)}</pre>"""


def write_report(result, path: Path) -> Path:
    """Write ``report.html`` for an AnalysisResult; returns its path."""
    path.write_text(
        _page(result.experiment, f"<h1>Sweep {html.escape(result.experiment)}</h1>" + sweep_sections(result))
    )
    return path


def write_comparison(a, b, diffs: pd.DataFrame, side: pd.DataFrame, images: list[Path], path: Path) -> Path:
    """One report comparing sweeps A and B: overlaid curves, differences at matching points, fits side by
    side, then each sweep's own sections (verdicts, fits, missing cells, runs, settings)."""
    names = f"A = {a.experiment}, B = {b.experiment}"
    body = f"""<h1>{html.escape(a.experiment)} vs {html.escape(b.experiment)}</h1><p>{html.escape(names)}</p>
<p class="answer">A: {html.escape(a.answer())}<br>B: {html.escape(b.answer())}</p>
<p>{html.escape(summary_line(diffs))}</p>
<h2>Overlaid curves</h2>{"".join(image_html(p) for p in images if p.suffix == ".png")}
<h2>Differences at matching points (err_B - err_A)</h2>{table_html(diffs, "no matching points")}
<h2>Fits side by side</h2>{table_html(side, "no fit group in both sweeps", precise=True)}
<h2>A: {html.escape(a.experiment)}</h2>{sweep_sections(a, figures=False)}
<h2>B: {html.escape(b.experiment)}</h2>{sweep_sections(b, figures=False)}"""
    path.write_text(_page(f"{a.experiment} vs {b.experiment}", body))
    return path
