"""The report as a reader sees it: a real analysis of a real MLflow store, opened in headless Chromium at
1,400 pixels wide (as tests/test_mlflow_ui.py does: Debian's ``chromium`` driven by Playwright; skipped,
saying why, without them).

Every table fits the page (the fits table was 1,427 pixels wide and lost its last columns) and the run
ids are links to the MLflow UI, with the command that serves a local store beside them. A screenshot of the
page is left in the test's folder for a person to look at. (How open intervals read: test_answers.py; the
figures' measure and legend: test_figures.py.)
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from synthetic_tables import lattice_table, write_store
from test_mlflow_ui import CHROMIUM, browser_missing

from analysis.pipeline import analyse
from analysis.plugin import Request
from scaling.tracking.uri import ui_command

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    reason = browser_missing()
    if reason:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("report")
    uri = f"sqlite:///{folder}/mlflow.db"
    table = lattice_table(rng=np.random.default_rng(0), Ts=(16, 256, math.inf), Ns=(8, 16), sweep="smoke")
    write_store(uri, table, folder / "artifacts")
    result = analyse(Request(experiment="smoke", tracking_uri=uri, out=folder / "out", bootstrap=20))
    return result, folder


def test_the_report_fits_a_1400_pixel_page_with_open_intervals_and_linked_runs(report):
    from playwright.sync_api import sync_playwright

    result, folder = report
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto((result.out / "report.html").as_uri())
            page.screenshot(path=str(folder / "report-1400.png"), full_page=True)
            widths = page.evaluate(
                "() => [...document.querySelectorAll('table')].map("
                "t => [t.scrollWidth, t.parentElement.clientWidth])"
            )
            assert widths and all(table <= room for table, room in widths), widths
            assert page.evaluate("() => document.documentElement.scrollWidth") <= 1400
            fits = page.locator("h2:has-text('Scaling-law fits') + p + div table")
            assert fits.count() == 1
            links = page.locator("a[href*='/#/experiments/']")
            assert links.count() == result.table["run_id"].nunique() + 1  # every cell, and this analysis
            first = links.first.get_attribute("href")
            assert first.startswith("http://127.0.0.1:5000/#/experiments/"), first
            served = page.locator("code", has_text=ui_command(result.tracking_uri))  # the printed command
            assert served.count() == 1 and served.inner_text() == ui_command(result.tracking_uri)
        finally:
            browser.close()
