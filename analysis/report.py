"""A self-contained HTML report of one sweep: figures (inlined), fits, verdicts, settings, missing cells."""
from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd
import yaml


def _table(frame: pd.DataFrame | None, empty: str) -> str:
    if frame is None or frame.empty:
        return f"<p>{html.escape(empty)}</p>"
    return frame.to_html(index=False, float_format=lambda v: f"{v:.6g}", border=0, classes="data")


def _image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<figure><img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}"></figure>'


STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table.data{border-collapse:collapse;font-size:13px}table.data td,table.data th{padding:3px 8px;
border-bottom:1px solid #ddd;text-align:right}figure{margin:1em 0}img{max-width:100%}
pre{background:#f6f6f6;padding:1em;overflow:auto;font-size:12px}"""


def write_report(result, document: dict, path: Path) -> Path:
    """Write ``report.html`` for an AnalysisResult; returns its path."""
    table = result.table
    cells = table["cell_key"].nunique()
    figures = "".join(_image(p) for p in result.files if p.suffix == ".png")
    settings = yaml.safe_dump(document, sort_keys=False) if document else "(analysed by experiment name)"
    body = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(result.experiment)}</title>
<style>{STYLE}</style></head><body>
<h1>Sweep {html.escape(result.experiment)}</h1>
<p>{cells} complete cells; {len(result.missing)} not complete.</p>
<h2>Verdicts</h2>{_table(result.verdicts, "no verdicts")}
<h2>Figures</h2>{figures}
<h2>Scaling-law fits</h2>{_table(result.fits, "no fits")}
<h2>Cells not complete</h2>{_table(result.missing, "every cell is complete")}
<h2>Sweep settings</h2><pre>{html.escape(settings)}</pre>
</body></html>"""
    path.write_text(body)
    return path
