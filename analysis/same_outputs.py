"""Whether two analysis output folders hold the same results, file by file: a change's before/after check.

``python -m analysis.same_outputs BEFORE AFTER`` compares every file under two folders written by
``python -m analysis ... --out DIR`` (a ``--paper`` folder's sub-folders too) and prints one line per file,
``same`` or ``differs`` and how; it exits 1 when any file differs or is in one folder only, 0 when all are
the same, 2 when a folder is missing. Each kind of file is compared as what it holds, ignoring only what
legitimately differs between two runs of the same code on the same store:

- ``*.parquet`` (the table) as data: the same columns in the same order, types, index and values (NaN
  equals NaN); the file's writer metadata and the frame's attrs (the read's bookkeeping: curves downloaded,
  run ids) are not compared;
- ``*.csv`` (fits, verdicts, claims) and any other text, byte for byte; a csv that differs is read to say
  which columns and rows;
- ``*.png`` by their pixels (size, channels, values), not their bytes: a PNG's text chunks (matplotlib's
  version) and compression are ignored;
- ``*.svg`` as text without matplotlib's ``<dc:date>`` and with the ids it draws at random (a salted hash
  per id unless ``svg.hashsalt`` is set: clip paths ``p…``, markers ``m…``, hatches ``h…``, collections'
  paths ``C…_…_…``, images) renamed in order of first use, so the same drawing reads the same;
- ``*.html`` (the report) as text with MLflow run ids (32 hex digits), dates and times (ISO), timings
  (``12.3 s``, ``1m07s``) and absolute paths each replaced by a placeholder, and each embedded figure
  (a base64 ``data:`` PNG or SVG, an inline ``<svg>``) replaced by a digest of its content compared as
  above.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import re
import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd

SVG_DATE = re.compile(r"<dc:date>[^<]*</dc:date>")
# the ids matplotlib's SVG writer draws (backend_svg._make_id: a type, then 10 hex digits of a salted hash)
SVG_RANDOM_ID = re.compile(r"\b(?:C[0-9a-f]+_[0-9a-f]+_|image|[hmp])[0-9a-f]{10}\b")
RUN_ID = re.compile(r"\b[0-9a-f]{32}\b")
DATE_TIME = re.compile(r"\b\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)?\b")
TIMING = re.compile(r"\b(?:\d+h)?(?:\d+m)?\d+(?:\.\d+)?(?:s|ms)\b|\b\d+(?:\.\d+)? (?:s|ms|min)\b")
ABSOLUTE_PATH = re.compile(r"(?<![\w.~-])/[\w.+-]+(?:/[\w.+-]+)+/?")
DATA_URI = re.compile(r"data:image/(png|svg\+xml);base64,([A-Za-z0-9+/=]+)")
INLINE_SVG = re.compile(r"<svg\b.*?</svg>", re.S)


def first_difference(a: str, b: str, context: int = 50) -> str:
    """Where two texts first differ: the line and a little of each side around it."""
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    line = a.count("\n", 0, at) + 1
    start = max(0, at - context // 2)
    return f"line {line}: {a[start : at + context]!r} vs {b[start : at + context]!r}"


def same_cells(x: pd.Series, y: pd.Series) -> np.ndarray:
    """Elementwise: equal values, or both missing."""
    u, v = x.to_numpy(dtype=object), y.to_numpy(dtype=object)
    return np.array([(p is q) or bool(pd.isna(p) and pd.isna(q)) or bool(p == q) for p, q in zip(u, v)], bool)


def frame_difference(a: pd.DataFrame, b: pd.DataFrame) -> str:
    """How two tables differ as data (columns, rows, types, index, values), or "" when they do not."""
    if list(a.columns) != list(b.columns):
        gone, new = [c for c in a.columns if c not in b.columns], [c for c in b.columns if c not in a.columns]
        return f"columns {gone} only before, {new} only after" if gone or new else "columns in another order"
    if len(a) != len(b):
        return f"{len(a)} rows vs {len(b)}"
    types = [f"{c} ({a[c].dtype} vs {b[c].dtype})" for c in a.columns if a[c].dtype != b[c].dtype]
    if types:
        return "column types: " + ", ".join(types)
    if not a.index.equals(b.index):
        return "another index"
    changed = []
    for c in a.columns:
        if a[c].equals(b[c]):
            continue
        same = same_cells(a[c], b[c])
        if not same.all():
            row = int(np.flatnonzero(~same)[0])
            changed.append(
                f"{c} at {int((~same).sum())} rows (row {row}: {a[c].iloc[row]!r} vs {b[c].iloc[row]!r})"
            )
    return f"{len(changed)} of {len(a.columns)} columns: " + "; ".join(changed) if changed else ""


def parquet_difference(a: Path, b: Path) -> str:
    return frame_difference(pd.read_parquet(a), pd.read_parquet(b))


def csv_difference(a: Path, b: Path) -> str:
    """ "" for the same bytes; else which columns and rows differ (or that only the text does)."""
    if a.read_bytes() == b.read_bytes():
        return ""
    how = frame_difference(pd.read_csv(a), pd.read_csv(b))
    return how or "the same data written differently: " + first_difference(a.read_text(), b.read_text())


def pixels(data: bytes) -> np.ndarray:
    """A PNG's pixels, (height, width, channels)."""
    return matplotlib.image.imread(io.BytesIO(data), format="png")


def png_difference(a: Path, b: Path) -> str:
    x, y = pixels(a.read_bytes()), pixels(b.read_bytes())
    if x.shape != y.shape:
        return f"image of {x.shape[1]} x {x.shape[0]} (x {x.shape[2:]}) vs {y.shape[1]} x {y.shape[0]}"
    changed = np.any(x != y, axis=-1) if x.ndim == 3 else x != y
    if not changed.any():
        return ""
    rows, cols = np.flatnonzero(changed.any(axis=1)), np.flatnonzero(changed.any(axis=0))
    return (
        f"{int(changed.sum())} of {changed.size} pixels, within x {cols[0]}..{cols[-1]},"
        f" y {rows[0]}..{rows[-1]}"
    )


def canonical_svg(text: str) -> str:
    """The SVG without its date, matplotlib's random ids renamed in order of first use."""
    names: dict[str, str] = {}
    text = SVG_DATE.sub("<dc:date/>", text)
    return SVG_RANDOM_ID.sub(lambda m: names.setdefault(m.group(0), f"id{len(names)}"), text)


def svg_difference(a: Path, b: Path) -> str:
    x, y = canonical_svg(a.read_text()), canonical_svg(b.read_text())
    return "" if x == y else first_difference(x, y)


def figure_digest(kind: str, data: bytes) -> str:
    """A short digest of an embedded figure's content, compared as the figure files are."""
    content = pixels(data).tobytes() if kind == "png" else canonical_svg(data.decode()).encode()
    return f"[{kind} figure {hashlib.sha256(content).hexdigest()[:16]}]"


def canonical_report(text: str) -> str:
    """The report without what differs between two runs: figures as digests of their content, run ids,
    dates, timings and absolute paths as placeholders."""
    text = DATA_URI.sub(lambda m: figure_digest(m.group(1).split("+")[0], base64.b64decode(m.group(2))), text)
    text = INLINE_SVG.sub(lambda m: figure_digest("svg", m.group(0).encode()), text)
    for pattern, placeholder in (
        (RUN_ID, "<run id>"),
        (DATE_TIME, "<date>"),
        (TIMING, "<timing>"),
        (ABSOLUTE_PATH, "<path>"),
    ):
        text = pattern.sub(placeholder, text)
    return text


def html_difference(a: Path, b: Path) -> str:
    x, y = canonical_report(a.read_text()), canonical_report(b.read_text())
    return "" if x == y else first_difference(x, y)


def bytes_difference(a: Path, b: Path) -> str:
    x, y = a.read_bytes(), b.read_bytes()
    if x == y:
        return ""
    try:
        return first_difference(x.decode(), y.decode())
    except UnicodeDecodeError:
        return f"{len(x)} bytes vs {len(y)}, other bytes"


BY_SUFFIX = {
    ".parquet": parquet_difference,
    ".csv": csv_difference,
    ".png": png_difference,
    ".svg": svg_difference,
    ".html": html_difference,
}


def file_difference(a: Path, b: Path) -> str:
    """How file ``b`` differs from file ``a``, each compared as what its kind holds; "" if it does not."""
    return BY_SUFFIX.get(a.suffix.lower(), bytes_difference)(a, b)


def folder_differences(before: Path, after: Path) -> list[tuple[str, str]]:
    """(file, how it differs: "" when the same) for every file under either folder, in path order."""
    files = {
        p.relative_to(root).as_posix() for root in (before, after) for p in root.rglob("*") if p.is_file()
    }
    out = []
    for name in sorted(files):
        a, b = before / name, after / name
        if not a.is_file() or not b.is_file():
            out.append((name, f"only in {'after' if b.is_file() else 'before'}"))
        else:
            out.append((name, file_difference(a, b)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m analysis.same_outputs",
        description="Whether two analysis output folders (python -m analysis ... --out DIR) hold the same"
        " results: one line per file, exit 1 if any differs.",
    )
    parser.add_argument("before", type=Path, help="the analysis' output folder before the change")
    parser.add_argument("after", type=Path, help="the same analysis' output folder after it")
    args = parser.parse_args(argv)
    for folder in (args.before, args.after):
        if not folder.is_dir():
            print(f"error: {folder}: no such folder (give two analysis output folders)", file=sys.stderr)
            return 2
    differences = folder_differences(args.before, args.after)
    for name, how in differences:
        print(f"same     {name}" if not how else f"differs  {name}: {how}")
    differ = sum(bool(how) for _, how in differences)
    print(f"{len(differences) - differ} of {len(differences)} files the same; {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
