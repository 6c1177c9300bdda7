"""analysis.same_outputs, the before/after check of a change: two analyses of one real (throwaway SQLite)
MLflow store, each logged as its own analysis run and reading the store from its own path, are the same
file by file, although their SVGs' dates and ids, their reports' run ids and the store's path differ; a
changed verdict, pixel, fit or report number is found and named, and exits 1."""

import math
import re
import shutil

import numpy as np
import pandas as pd
import pytest
from synthetic_tables import lattice_table, write_store

from analysis.__main__ import main as analysis_main
from analysis.same_outputs import canonical_report, canonical_svg
from analysis.same_outputs import main as same_main


@pytest.fixture(scope="module")
def two_analyses(tmp_path_factory):
    """(before, after): the output folders of two analyses of the same store, the second read from a copy
    of the store's database at another path (its artifacts where they were)."""
    tmp = tmp_path_factory.mktemp("same")
    table = lattice_table(
        rng=np.random.default_rng(0), Ts=(100, 1e5, math.inf), Ns=(5, 10, 20), seeds=(0, 1, 2)
    )
    write_store(f"sqlite:///{tmp}/mlflow.db", table, tmp / "a")
    (tmp / "copy").mkdir()
    shutil.copy(tmp / "mlflow.db", tmp / "copy" / "mlflow.db")
    outs = []
    for name, db in (("before", tmp / "mlflow.db"), ("after", tmp / "copy" / "mlflow.db")):
        args = ["--experiment", "s", "--tracking-uri", f"sqlite:///{db}", "--out", str(tmp / name)]
        assert analysis_main([*args, "--bootstrap", "20"]) == 0
        outs.append(tmp / name)
    return tuple(outs)


def changed_copy(folder, tmp_path):
    copy = tmp_path / "changed"
    shutil.copytree(folder, copy)
    return copy


def test_two_analyses_of_one_store_are_the_same_file_by_file(two_analyses, capsys):
    before, after = two_analyses
    names = sorted(p.name for p in before.iterdir())
    assert {"table.parquet", "fits.csv", "verdicts.csv", "report.html"} <= set(names)
    assert any(n.endswith(".png") for n in names) and any(n.endswith(".svg") for n in names)
    # what legitimately differs between the runs does differ: the check below has something to ignore
    svg = next(n for n in names if n.endswith(".svg"))
    assert (before / svg).read_text() != (after / svg).read_text()
    reports = [(folder / "report.html").read_text() for folder in two_analyses]
    ran = [
        re.search(r"this analysis is the run <a href=\"[^\"]*\"><code>(\w+)</code>", r).group(1)
        for r in reports
    ]
    assert ran[0] != ran[1] and "/copy/mlflow.db" in reports[1] and "/copy/" not in reports[0]
    capsys.readouterr()
    assert same_main([str(before), str(after)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:-1] == [f"same     {n}" for n in names]
    assert lines[-1] == f"{len(names)} of {len(names)} files the same; 0 differ"


def test_a_changed_verdict_is_found(two_analyses, tmp_path, capsys):
    before, after = two_analyses
    changed = changed_copy(after, tmp_path)
    verdicts = pd.read_csv(after / "verdicts.csv")
    row = int(np.flatnonzero(verdicts["verdict"] == "context-scales")[0])
    verdicts.loc[row, "verdict"] = "inconclusive"
    verdicts.to_csv(changed / "verdicts.csv", index=False)
    capsys.readouterr()
    assert same_main([str(before), str(changed)]) == 1
    out = capsys.readouterr().out
    assert (
        f"differs  verdicts.csv: 1 of {len(verdicts.columns)} columns: verdict at 1 rows"
        f" (row {row}: 'context-scales' vs 'inconclusive')" in out
    )
    assert "same     fits.csv" in out and out.strip().endswith("1 differ")


def test_a_changed_pixel_fit_report_or_file_is_found(two_analyses, tmp_path, capsys):
    import matplotlib.pyplot as plt

    before, after = two_analyses
    changed = changed_copy(after, tmp_path)
    png = next(p for p in changed.iterdir() if p.suffix == ".png")
    image = plt.imread(png)
    image[10, 20, 0] = 1 - image[10, 20, 0]
    plt.imsave(png, image)
    fits = pd.read_csv(after / "fits.csv")
    fits.loc[0, "alpha"] = fits.loc[0, "alpha"] + 1e-12 if fits["alpha"].notna()[0] else 0.5
    fits.to_csv(changed / "fits.csv", index=False)
    report = (after / "report.html").read_text()
    (changed / "report.html").write_text(report.replace("<h2>Verdicts", "<h2>Verdict", 1))
    (changed / "table.parquet").unlink()
    (changed / "extra.txt").write_text("")
    capsys.readouterr()
    assert same_main([str(before), str(changed)]) == 1
    out = capsys.readouterr().out
    assert f"differs  {png.name}: 1 of " in out and "within x 20..20, y 10..10" in out
    assert "differs  fits.csv: 1 of " in out and "alpha at 1 rows (row 0:" in out
    assert "differs  report.html: line " in out and "<h2>Verdicts</h2>" in out and "<h2>Verdict</h2>" in out
    assert "differs  table.parquet: only in before" in out and "differs  extra.txt: only in after" in out


def test_a_changed_table_is_compared_as_data(two_analyses, tmp_path, capsys):
    before, after = two_analyses
    changed = changed_copy(after, tmp_path)
    table = pd.read_parquet(after / "table.parquet")
    table.attrs = {}  # the read's bookkeeping is no data: same
    table.to_parquet(changed / "table.parquet")
    capsys.readouterr()
    assert same_main([str(before), str(changed)]) == 0
    table.loc[3, "err"] = np.nextafter(table.loc[3, "err"], 1.0)
    table.to_parquet(changed / "table.parquet")
    assert same_main([str(before), str(changed)]) == 1
    assert "differs  table.parquet: 1 of " in capsys.readouterr().out


def test_only_run_ids_dates_timings_paths_and_svg_ids_are_ignored():
    page = "<p>run <code>{}</code> on {} in {} at <code>sqlite:///{}/mlflow.db</code>: drop 30%</p>"
    one = page.format("a" * 32, "2026-11-28T00:17:03.512551", "12.5 s", "/work/one")
    two = page.format("b" * 32, "2026-12-01", "1m07s", "/tmp/pytest-3/two")
    assert canonical_report(one) == canonical_report(two)
    assert canonical_report(one) != canonical_report(one.replace("30%", "31%"))
    assert canonical_report("err/zero 0.42 -&gt; 0.27; 16 seeds") == "err/zero 0.42 -&gt; 0.27; 16 seeds"
    svg = '<dc:date>{}</dc:date><path id="{}"/><use xlink:href="#{}" x="1"/><g clip-path="url(#{})"/>'
    a = svg.format("2026-11-28T00:17", "m0123456789", "m0123456789", "pabcdef0123")
    b = svg.format("2026-11-29T10:00", "m9876543210", "m9876543210", "p3210fedcba")
    assert canonical_svg(a) == canonical_svg(b)
    assert canonical_svg(a) != canonical_svg(b.replace('x="1"', 'x="2"'))


def test_a_missing_folder_exits_2(tmp_path, capsys):
    assert same_main([str(tmp_path), str(tmp_path / "nowhere")]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"error: {tmp_path / 'nowhere'}: no such folder (give two analysis output folders)"
    )
