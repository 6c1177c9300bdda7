"""What a user sees: a real tiny sweep's output in a log file, then its runs in the MLflow UI in a browser.

The sweep runs as ``python -m scaling.sweep`` with its output going to a file (what CI, ``nohup`` and Ray
Jobs see): one line per trial started or done, no Ray or Tune banner, a closing summary and the commands
to run next; then again as a ``--set`` variant (fewer training steps), and the plain sweep is analysed.
Then the MLflow UI, started by the printed command, serves its store on loopback and headless Chromium
(Debian's ``chromium`` package, driven by Playwright's Python package with the system browser's path:
Playwright's own browser download is not used) follows the printed link: the experiment opens on its
lattice (scaling.tracking.views), a row per cell of both variants, each with a name of its own and its T,
N, model, seed and final err/zero; the filters of docs/mlflow-ui.md return the cells they name; the
analysis report is one click from the sweep's parent run; and a cell's ``eval/err`` chart is drawn. The
browser part skips, saying why, where Chromium or Playwright is missing (``apt-get install chromium``;
``pip install -e '.[ui]'``).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable

import pytest
import yaml
from conftest import TINY_SWEEP
from mlflow.tracking import MlflowClient

from scaling.tracking.uri import UI_ENV

pytestmark = [pytest.mark.e2e]

CHROMIUM = next(
    (
        p
        for p in (
            os.environ.get("SCALING_CHROMIUM"),
            shutil.which("chromium"),
            shutil.which("chromium-browser"),
        )
        if p
    ),
    None,
)
CELLS = {"mlp T=16 N=4 seed=0", "mlp T=inf N=4 seed=0", "gpt2 T=16 N=4 seed=0", "gpt2 T=inf N=4 seed=0"}
VARIANT = "train.steps=20"  # the second run's --set: its cells are named with it
VARIANT_CELLS = {f"{name} {VARIANT}" for name in CELLS}


def browser_missing() -> str | None:
    if CHROMIUM is None:
        return "no Chromium on this machine (Debian: apt-get install chromium; or set SCALING_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install -e '.[ui]')"
    return None


class Sweep:
    def __init__(self, root: Path, uri: str, stdout: str, stderr: str, returncode: int, analysis: str = ""):
        self.root, self.uri, self.stdout, self.stderr, self.returncode = root, uri, stdout, stderr, returncode
        self.analysis = analysis  # what the analysis printed


@pytest.fixture(scope="module")
def ui_sweep(tmp_path_factory) -> Sweep:
    """The tiny sweep ``ui`` (2 models x T in {16, inf}: 4 cells), run by the CLI with stdout to a file."""
    root = tmp_path_factory.mktemp("ui")
    doc = {**TINY_SWEEP, "name": "ui", "grid": {"model": ["mlp", "gpt2"], "T": [16, "inf"], "seed": [0]}}
    # the GPT-2's n_layer given to the MLP too, which never reads it: its cells log no model.n_layer, so
    # the filter on it below finds the GPT-2 cells alone
    doc["models"] = {**doc["models"], "mlp": {**doc["models"]["mlp"], "n_layer": 1}}
    (root / "ui.yaml").write_text(yaml.safe_dump(doc))
    uri = f"sqlite:///{root}/store.db"  # not the default ./mlflow.db: the next commands name it
    sweep = [sys.executable, "-m", "scaling.sweep", "ui.yaml", "--tracking-uri", uri, "--storage", "runs"]
    with open(root / "out.log", "w") as out, open(root / "err.log", "w") as err:
        done = subprocess.run([*sweep, "--num-cpus", "2"], cwd=root, stdout=out, stderr=err, timeout=600)
    variant = subprocess.run(
        [*sweep, "--num-cpus", "2", "--set", VARIANT], cwd=root, capture_output=True, text=True, timeout=600
    )
    assert variant.returncode == 0, variant.stdout + variant.stderr
    analysis = [sys.executable, "-m", "analysis", "ui.yaml", "--tracking-uri", uri, "--bootstrap", "20"]
    analysed = subprocess.run(analysis, cwd=root, capture_output=True, text=True, timeout=600)
    assert analysed.returncode == 0, analysed.stdout + analysed.stderr
    out, err = (root / "out.log").read_text(), (root / "err.log").read_text()
    return Sweep(root, uri, out, err, done.returncode, analysed.stdout)


def test_sweep_output_to_a_file_is_one_line_per_change_then_a_summary(ui_sweep):
    text, lines = ui_sweep.stdout, ui_sweep.stdout.splitlines()
    assert ui_sweep.returncode == 0, text + ui_sweep.stderr
    for banner in (
        "Configuration for experiment",
        "TensorBoard",
        "tensorboard",
        "View detailed results",
        "Token authentication",
        "Trial status",
    ):
        assert banner not in text + ui_sweep.stderr, banner
    trials = int(
        re.search(r"^\[ui\] 4 of 4 cells to run \(0 already complete\) as (\d+) trials?", text, re.M)[1]
    )
    changes = [line for line in lines if re.match(r"\[ui\] (started|done) ", line)]
    assert len(changes) == 2 * trials, text  # each trial: started, done; nothing else while running
    assert (
        changes[-1].startswith("[ui] done ")
        and "4/4 cells done (100%), 0 running, 0 pending, 0 failed" in changes[-1]
    )
    assert re.search(r"^\[ui\] 4 cells trained.*, 0 failed; 4/4 cells complete; took \d+", text, re.M), text
    assert f"[ui] runs: MLflow experiment 'ui' in {ui_sweep.uri}" in lines
    nxt = lines[lines.index("next:") + 1 :]
    assert nxt[0] == f"  python -m analysis ui.yaml --tracking-uri {ui_sweep.uri}"
    assert nxt[1] == f"  {UI_ENV} mlflow ui --workers 1 --backend-store-uri {ui_sweep.uri}"  # served below
    assert re.fullmatch(
        r"  open http://127.0.0.1:5000/#/experiments/\d+/runs\?workflowType=machine_learning"
        r"&viewStateShareKey=lattice",
        nxt[2],
    )
    assert len(lines) == 1 + 2 * trials + 3 + 3  # header, changes, summary + runs + next:, commands


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(ui_sweep):
    """The MLflow UI as the sweep's ``next:`` lines say to start it (one worker, MLflow's GenAI job runner
    off), on a free loopback port instead of 5000."""
    lines = ui_sweep.stdout.splitlines()
    printed = next(line for line in lines[lines.index("next:") + 1 :] if " mlflow ui " in line)
    setting, mlflow, *args = shlex.split(printed)
    name, value = setting.split("=", 1)
    assert mlflow == "mlflow" and args[0] == "ui", printed
    port = free_port()
    log = open(ui_sweep.root / "server.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", *args, "--host", "127.0.0.1", "--port", str(port)],
        cwd=ui_sweep.root,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, name: value},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"the MLflow UI did not start:\n{(ui_sweep.root / 'server.log').read_text()[-3000:]}"
                )
            time.sleep(1)
        yield base
    finally:
        os.killpg(server.pid, 15)  # the server and the workers it started
        server.wait(timeout=30)
        log.close()


def run_links(page) -> set[str]:
    return set(page.locator("a[href*='/runs/']").all_inner_texts())


def cell_links(page) -> set[str]:
    """The cells' names among the runs' links (the UI keeps a matching cell's parent run above it)."""
    return {name for name in run_links(page) if not name.startswith(("sweep ", "analysis "))}


def searched(url: str) -> str | None:
    """The filter the runs view last searched, as its URL holds it (``#/experiments/1/runs?searchFilter=``)"""
    query = urllib.parse.urlsplit(url.split("#", 1)[-1]).query
    return urllib.parse.parse_qs(query).get("searchFilter", [None])[0]


def search_for(page, search, query: str) -> None:
    """Types a filter and presses Enter as a user does, and again where the view did not search it (the URL
    says what it searched). In CI (2 busy cores) an Enter once left the table on the previous filter's cells
    for 60 s; the search box's Enter handler searches the text of its last render, and on an open
    suggestion list Enter picks the suggestion instead."""
    for _ in range(5):
        search.fill(query)
        search.press("Enter")
        if until(page, lambda: searched(page.url) == query, 5):
            return
    raise AssertionError(f"the runs view did not search {query!r} after 5 Enters; it shows {page.url}")


def until(page, ok: Callable[[], bool], seconds: float) -> bool:
    """Whether ``ok()`` holds within so many seconds, asked every 250 ms while the page runs."""
    deadline = time.monotonic() + seconds
    while not ok() and time.monotonic() < deadline:
        page.wait_for_timeout(250)
    return ok()


def shows(page, cells: set[str], seconds: float) -> bool:
    """Whether the runs table shows these cells, and no other, within so many seconds."""
    return until(page, lambda: cell_links(page) == cells, seconds)


def table_rows(page) -> dict[str, dict[str, str]]:
    """The runs table as shown: each run's name -> {column id: text} (ag-grid draws a row's pinned and
    scrolling parts as two elements of one row-id)."""
    rows = page.evaluate(
        """() => {
        const out = {};
        for (const row of document.querySelectorAll("div[role='row'][row-id]")) {
            const cells = out[row.getAttribute('row-id')] ||= {};
            for (const cell of row.querySelectorAll('[col-id]'))
                cells[cell.getAttribute('col-id')] = cell.innerText;
        }
        return out;
    }"""
    )
    named = {}
    for cells in rows.values():
        link = cells.get("attributes.`Run Name`", "").split("\n")[-1].strip()
        if link:
            named[link] = cells
    return named


@pytest.fixture(scope="module")  # module-scoped, and named first: set up before the module's sweep
def browser():
    """Skips, in one line naming what to install, before the sweep and the server start."""
    reason = browser_missing()
    if reason:
        pytest.skip(reason)


def test_mlflow_ui_in_chromium_opens_the_runs_table_filters_and_draws_a_cell(
    browser, ui_sweep, mlflow_server
):
    from playwright.sync_api import expect, sync_playwright

    link = next(
        line.split("open ", 1)[1] for line in ui_sweep.stdout.splitlines() if line.startswith("  open ")
    )
    link = link.replace("http://127.0.0.1:5000", mlflow_server)
    with sync_playwright() as p:
        # --no-sandbox: Chromium's sandbox refuses to run as root (containers, CI)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})  # a fresh profile
            page.set_default_timeout(60_000)
            page.goto(link)
            # the runs table, not MLflow 3's GenAI overview, on the sweep's lattice: a row per cell of both
            # variants, no parent run to expand, each cell with a name of its own and its settings and
            # final err/zero as columns
            page.get_by_role("link", name="gpt2 T=inf N=4 seed=0", exact=True).wait_for()
            assert "/runs" in page.url and "/overview" not in page.url
            assert page.get_by_text("Evaluation runs").count() == 0  # the GenAI sidebar's entry
            close = page.get_by_role("button", name="Close", exact=True)  # the assistant a local UI opens
            if close.count():
                close.first.click()
            columns = [*(f"params.`{c}`" for c in ("model.name", "T", "N", "seed")), "metrics.`err/zero`"]

            def drawn() -> bool:  # the grid draws the columns the closed panel uncovers
                rows = table_rows(page)
                return set(rows) == CELLS | VARIANT_CELLS and all(
                    c in r for r in rows.values() for c in columns
                )

            until(page, drawn, 60)
            rows = table_rows(page)
            page.screenshot(path=str(ui_sweep.root / "lattice.png"))  # for a person to look at
            assert set(rows) == CELLS | VARIANT_CELLS  # 8 distinct names, no parent run among them
            for name, cells in rows.items():
                model, T, N, seed = re.fullmatch(r"(\w+) T=(\w+) N=(\d+) seed=(\d+).*", name).groups()
                shown = {c: cells.get(f"params.`{c}`") for c in ("model.name", "T", "N", "seed")}
                assert shown == {"model.name": model, "T": T, "N": N, "seed": seed}, (name, cells)
                assert 0 < float(cells["metrics.`err/zero`"]) < 2, (name, cells)

            # the filters of docs/mlflow-ui.md, typed as a user types them
            search = page.locator("input[placeholder*='metrics.rmse']")
            plain = " and params.`train.steps` = '30'"  # the sweep as written, not its variant
            gpt2 = {"gpt2 T=16 N=4 seed=0", "gpt2 T=inf N=4 seed=0"}
            for query, expected in (
                ("params.T = '16'" + plain, {"mlp T=16 N=4 seed=0", "gpt2 T=16 N=4 seed=0"}),
                ("params.T = 'inf'" + plain, {"mlp T=inf N=4 seed=0", "gpt2 T=inf N=4 seed=0"}),
                ("params.`model.name` = 'gpt2' and params.N = '4'" + plain, gpt2),
                # the MLP cells (n_layer: 1 in their cell.yaml) log no n_layer: it does not apply to them
                ("params.`model.n_layer` = '1'" + plain, gpt2),
                ("tags.status = 'complete'", CELLS | VARIANT_CELLS),
            ):
                search_for(page, search, query)
                if not shows(page, expected, 30):  # searched, table stale (CI): reload the view at the URL
                    page.reload()
                    shows(page, expected, 60)
                assert cell_links(page) == expected, (query, page.url)

            # the analysis report, one click from the sweep's parent run (its description links it)
            store = MlflowClient(ui_sweep.uri)
            experiment = store.get_experiment_by_name("ui").experiment_id
            (parent,) = store.search_runs(
                [experiment], "tags.kind = 'sweep' and attributes.run_name = 'sweep ui'"
            )
            page.goto(f"{mlflow_server}/#/experiments/{experiment}/runs/{parent.info.run_id}")
            report = page.get_by_role("link", name="report.html")
            href = report.get_attribute("href")  # the UI opens a description's links in a new tab
            assert re.fullmatch(r"#/experiments/\d+/runs/\w+/artifacts/report\.html", href), href
            with page.context.expect_page() as opened:
                report.click()
            shown = opened.value
            expect(shown.frame_locator("iframe").get_by_text("Sweep ui")).to_be_visible(timeout=60_000)
            shown.screenshot(path=str(ui_sweep.root / "report.png"))  # the artifact viewer shows the report
            shown.close()

            # the analysis run's link as the analysis printed it, in a fresh browser (no choice of view
            # kept): the run in the model-training view (params, metrics, charts), not as GenAI
            printed = ui_sweep.analysis.strip().splitlines()[-1].split("open ", 1)[1]
            assert "/runs/" in printed and printed.endswith("?workflowType=machine_learning"), printed
            fresh = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            fresh.goto(printed.replace("http://127.0.0.1:5000", mlflow_server))
            fresh.get_by_role("tab", name="Model metrics").wait_for(timeout=60_000)
            assert fresh.get_by_text("Evaluation runs").count() == 0  # the GenAI sidebar's entry
            fresh.context.close()
            page.goto(link)
            page.get_by_role("link", name="gpt2 T=inf N=4 seed=0", exact=True).wait_for()

            # a cell's eval/err chart: one curve with a point per context length n = 1..4
            page.get_by_role("link", name="gpt2 T=inf N=4 seed=0", exact=True).click()
            page.get_by_role("tab", name="Model metrics").click()
            page.get_by_placeholder("Search metric charts").fill("eval/err")
            plots = page.locator(".js-plotly-plot")
            expect(plots).to_have_count(1)
            expect(plots.first.locator(".scatterlayer .point")).to_have_count(4)
        finally:
            browser.close()
