"""The reproduction report of the three papers: every given sweep in the store, checked claim by claim.

``python -m analysis --paper sweeps/fig*.yaml sweeps/stat_*.yaml sweeps/temp_*.yaml --profile quick``
analyses each sweep file's experiment that has complete cells (as ``python -m analysis SWEEP`` does: its own
folder and report, its kind's plug-in), then writes one page, ``analysis_out/paper[-PROFILE]/report.html``
with ``claims.csv``: a section per paper (seed 001: Figs. 1-8, papers.context_scaling.analysis.claims; seed
003: the constructed transformers, papers.statisticians.analysis.claims; seed 004: Figs. 1-6 and 3,
papers.temperature.analysis.claims), for each of its parts (one sweep file each) the figure drawn from the
runs and each of the paper's claims with "reproduced", "not reproduced", "inconclusive" or "not run", its
numbers (the kind's own verdicts), the profile it ran at and the commands that produced it. A part whose sweep
file is not given, or whose experiment is not in the store, is "not run", with the reason and the commands
that would run it.

A sweep file may name its own profile, ``sweeps/fig1.yaml:repro``; the others take ``--profile``. A part
may be pinned to a profile (``Part.profile``: Fig. 3 on SmolLM2 is temp_llama_a/b.yaml at ``smollm``): it is
analysed at that profile whenever its file is given. Every
file is planned before anything is analysed: a file that is not one of the papers' sweeps, a profile it
does not have, or two files for the same part stop the command (exit 2) before anything is written.
"""

from __future__ import annotations

import html
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import pandas as pd
import yaml

from scaling.plugins import Point, names
from scaling.plugins import resolve as resolve_plugin
from scaling.redact import redact

from . import claims as claiming
from .pipeline import analyse, resolve
from .plugin import AnalysisError, Request
from .report import _page, image_html, table_html
from .sizes import TRAINED, estimated_cost, size_text

STATUS_COLOURS = {
    claiming.REPRODUCED: "#dff3df",
    claiming.NOT_REPRODUCED: "#fbe0e0",
    "inconclusive": "#fff3cd",
    claiming.NOT_RUN: "#eeeeee",
}
ROOT = Path(__file__).resolve().parents[1]
LEFT = "style='text-align:left'"  # the headings of the claims table's text columns


@dataclass(frozen=True)
class Part:
    """One part of a paper that one sweep file runs: its key (the sweep's name without the profile), the
    sweep file (from the repository root) and its heading; the sizes its rows name against the paper's
    (``sizes``, of analysis.sizes.SIZES: those its kind has) and what the paper states of a size where the
    file's own settings hold something else or cannot be planned here (``paper``: size -> text)."""

    key: str
    sweep: str
    title: str
    sizes: tuple[str, ...] = TRAINED
    paper: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    # a part that is its sweep file at this one profile (Fig. 3 on SmolLM2: temp_llama_b.yaml at smollm; its
    # key is that experiment's name), analysed whenever its file is given; None: the file at the report's
    profile: str | None = None
    figure: str = ""  # the stem of the figure the report shows for it ('': every figure its analysis drew)


@dataclass(frozen=True)
class Paper:
    seed: str
    title: str
    parts: tuple[Part, ...]
    claims: list[claiming.Claim]
    how: Callable[[Request], str]  # how its claims are judged, in words


POINT = Point(
    "papers",
    "paper of the reproduction report",
    "an analysis.paper.Paper",
    check=lambda obj: (
        "" if isinstance(obj, Paper) else f"a {type(obj).__name__}, not an analysis.paper.Paper"
    ),
)


def papers() -> tuple[Paper, ...]:
    """The papers of the reproduction report, each a plug-in (pyproject.toml's ``icl_scaling.papers``: the
    project's three seeds; a researcher's package registers its own the same way)."""
    return tuple(resolve_plugin(POINT, name).obj for name in names(POINT))


def parts() -> dict[str, tuple[Paper, Part]]:
    """Every paper's parts by key."""
    return {part.key: (paper, part) for paper in papers() for part in paper.parts}


@dataclass
class Figure:
    """One part of a paper as this report found it: the sweep file and profile it was given with (else its
    own file and the request's profile), its experiment, analysis (None when not run) and why not."""

    part: Part
    sweep: str = ""
    profile: str = ""
    experiment: str = ""
    result: object = None
    reason: str = "no sweep file given for it"

    @property
    def name(self) -> str:
        return self.part.key


def profiles_read(figures: dict[str, Figure], profile: str) -> str:
    """The profiles the report's numbers come from, for its title: " (quick profile)", or with the parts
    read at a profile of their own (``FILE:PROFILE``) named, " (quick profile; fig1 at repro)"."""
    own = [
        f"{f.name} at {f.profile}" for f in figures.values() if f.result is not None and f.profile != profile
    ]
    said = ([f"{profile} profile"] if profile else []) + own
    return f" ({'; '.join(said)})" if said else ""


def split_spec(spec: str, profile: str) -> tuple[str, str]:
    """(sweep file, profile) of ``FILE`` (the request's profile) or ``FILE:PROFILE``."""
    path, colon, own = spec.rpartition(":")
    if colon and not Path(spec).is_file() and Path(path).is_file():
        return path, own
    return spec, profile


def part_of(name: str, profile: str) -> tuple[Paper, Part] | None:
    """The paper and part of an experiment name (fig1-quick -> seed 001's fig1; temp-llama-b-smollm at
    profile smollm -> its own part), None when no paper's."""
    known = parts()
    pinned = known.get(name)
    if pinned and pinned[1].profile is not None and pinned[1].profile == profile:
        return pinned
    key = name[: -len(profile) - 1] if profile and name.endswith(f"-{profile}") else name
    # the part whose key the name is, or starts (fig1-a-variant is fig1's), the longest first
    within = sorted((k for k in known if key == k or key.startswith(f"{k}-")), key=len, reverse=True)
    return known[within[0]] if within else None


def declared_name(path: str) -> str | None:
    """The ``name`` a sweep file declares, None when it cannot be read (planning then says why)."""
    try:
        name = (yaml.safe_load(Path(path).read_text()) or {}).get("name")
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    return name if isinstance(name, str) else None


def refuse_other(path: str, name: str | None, profile: str = "") -> Part | None:
    """The part a sweep named ``name`` runs; AnalysisError when it is none of the papers'."""
    if name is None:
        return None
    found = part_of(name, profile)
    if found is None:
        known = ", ".join(
            dict.fromkeys(part.sweep for paper in papers() for part in paper.parts)
        )  # each once
        raise AnalysisError(
            f"{path}: the sweep {name!r} is not one of the papers' sweeps ({known});"
            " the reproduction report reads only those"
        )
    return found[1]


def analyse_figures(sweeps: list[str], request: Request) -> dict[str, Figure]:
    """Each sweep file's analysis (its profile, the request's store, bootstrap, logging and UI address; each
    in its own folder under the paper's), by part key; every file is planned and placed before any is
    analysed (AnalysisError, nothing written: a file no paper's part runs, two files for one part, a bad
    profile). A part not given keeps its own sweep file and the request's profile, to say how to run it."""
    figures = {
        key: Figure(part, part.sweep, own_profile(part, request.profile))
        for key, (_, part) in parts().items()
    }
    planned = []
    for spec in sweeps:
        path, profile = split_spec(spec, request.profile)
        side = replace(request, sweep=path, profile=profile, experiment=None, overrides=(), layout=None)
        refuse_other(path, declared_name(path))  # before its profile is looked for
        source = resolve(side)
        part = refuse_other(path, source.name, profile)
        if any(f.part == part for f, _, _ in planned):
            raise AnalysisError(f"{path}: a second sweep file for {part.key} ({part.title}); give one")
        planned.append((Figure(part, path, profile, source.name), side, source))
    planned += pinned_parts(planned, figures, request)
    for figure, side, source in planned:
        figures[figure.name] = figure
        try:
            figure.result = analyse(replace(side, out=paper_folder(request) / source.name), source)
        except AnalysisError as err:
            figure.reason = str(err)
    return figures


def own_profile(part: Part, profile: str) -> str:
    """The profile a part runs at: its own (a pinned part), else the request's where its file has it."""
    return part.profile if part.profile is not None else profile_of(part.sweep, profile)


def pinned_parts(planned: list, figures: dict[str, Figure], request: Request) -> list:
    """The parts pinned to a profile (``Part.profile``) whose sweep file was given but not at that profile:
    planned at it, from the given file; a part that cannot be planned keeps why in its figure."""
    given = {declared_name(figure.sweep): figure.sweep for figure, _, _ in planned}
    done = {figure.part.key for figure, _, _ in planned}
    out = []
    for key, (_, part) in parts().items():
        path = given.get(declared_name(str(ROOT / part.sweep)))
        if part.profile is None or key in done or path is None:
            continue
        side = replace(request, sweep=path, profile=part.profile, experiment=None, overrides=(), layout=None)
        try:
            source = resolve(side)
        except AnalysisError as err:
            figures[key] = Figure(part, path, part.profile, reason=str(err))
            continue
        out.append((Figure(part, path, part.profile, source.name), side, source))
    return out


def profile_of(sweep: str, profile: str) -> str:
    """``profile`` when the sweep file defines it, else '' (the file's own settings)."""
    document = yaml.safe_load((ROOT / sweep).read_text()) or {}
    return profile if profile in (document.get("profiles") or {}) else ""


def paper_folder(request: Request) -> Path:
    """The report's folder: the request's, else analysis_out/paper[-PROFILE]."""
    default = Path("analysis_out") / ("paper" + (f"-{request.profile}" if request.profile else ""))
    return Path(request.out or default).resolve()


def commands(figure: Figure, request: Request) -> tuple[str, str]:
    """The sweep's command and its analysis's (with the request's store, when one was named)."""
    tail = ["--profile", figure.profile] if figure.profile else []
    if request.tracking_uri:
        tail += ["--tracking-uri", redact(request.tracking_uri)]
    return (
        shlex.join(["python", "-m", "scaling.sweep", figure.sweep, *tail]),
        shlex.join(["python", "-m", "analysis", figure.sweep, *tail]),
    )


def figure_pngs(result, part: Part) -> list[Path]:
    """The PNG of the part's own figure (``Part.figure``: fig1.png for fig1-quick), else every PNG the
    analysis drew."""
    pngs = [p for p in result.files if p.suffix == ".png"]
    own = [p for p in pngs if part.figure and p.stem == part.figure]
    return own or pngs


def part_claims(paper: Paper, figure: Figure, request: Request) -> pd.DataFrame:
    """The part's claims, with the paper, the profile and the commands that produce them."""
    claims = [c for c in paper.claims if c.figure == figure.name]
    results = {figure.name: figure.result} if figure.result is not None else {}
    rows = claiming.evaluate(results, {figure.name: figure.reason}, claims=claims)
    sweep, analysis = commands(figure, request)
    path = figure.sweep if Path(figure.sweep).is_file() else str(ROOT / figure.sweep)
    part = figure.part
    sizes = [size_text(path, figure.profile, c.models, part.paper, part.sizes) for c in claims]
    return rows.assign(
        paper=paper.seed, sweep_file=figure.sweep, profile=figure.profile, size=sizes,
        cost=estimated_cost(path, figure.profile), sweep_command=sweep, analysis_command=analysis,
    )  # fmt: skip


def figure_section(figure: Figure, rows: pd.DataFrame, out: Path) -> str:
    title = html.escape(figure.part.title)
    if figure.result is None:
        where = f" ({html.escape(figure.experiment)})" if figure.experiment else ""
        head = f"<h3>{title}: not run{where}</h3><p>{html.escape(figure.reason)}</p>"
    else:
        result = figure.result
        cells = result.table["cell_key"].nunique()
        link = (result.out / "report.html").relative_to(out) if result.out.is_relative_to(out) else result.out
        head = (
            f"<h3>{title}: experiment {html.escape(result.experiment)}</h3><p>{cells} complete cells, "
            f"{len(result.missing)} not complete; the sweep's own report: "
            f'<a href="{html.escape(str(link))}">{html.escape(str(link))}</a></p>'
        )
        pngs = figure_pngs(result, figure.part)
        head += "".join(image_html(p) for p in pngs) if pngs else "<p>(no figure drawn)</p>"
    run = figure.result is not None
    body = "".join(
        f'<tr style="background:{STATUS_COLOURS.get(r.status, "#fff")}"><td>{html.escape(r.panel)}</td>'
        f"<td class='text'>{html.escape(r.claim)}</td><td><b>{html.escape(r.status)}</b></td>"
        f"<td class='text'>{html.escape(r.evidence)}</td><td>{html.escape(r.profile or '(none)')}</td>"
        f"<td class='text'>{html.escape(r.size)}</td>"
        f"<td class='text'>{'' if run else 'to run: '}<code>{html.escape(r.sweep_command)}</code><br>"
        f"{'then ' if not run else ''}<code>{html.escape(r.analysis_command)}</code>"
        f"{'' if run or not r.cost else '<br>(' + html.escape(r.cost) + ')'}</td></tr>"
        for r in rows.itertuples()
    )
    return head + (
        f"<table class='data'><tr><th>panel</th><th {LEFT}>claim</th><th>status</th><th {LEFT}>numbers</th>"
        f"<th>profile</th><th {LEFT}>size against the paper's</th><th {LEFT}>commands</th></tr>{body}</table>"
    )


def paper_section(paper: Paper, figures: dict[str, Figure], claims: pd.DataFrame, request, out) -> str:
    mine = [figures[part.key] for part in paper.parts]
    rows = claims[claims["paper"] == paper.seed]
    summary = pd.DataFrame(
        [
            {
                "part": f.part.title,
                "sweep": f.sweep,
                "profile": f.profile or "-",
                "experiment": f.experiment or "-",
                "cells": (f.result.table["cell_key"].nunique() if f.result is not None else 0),
                "status": "analysed" if f.result is not None else "not run: " + f.reason,
            }
            for f in mine
        ]
    )
    ran = sum(f.result is not None for f in mine)
    sections = "".join(figure_section(f, rows[rows["figure"] == f.name], out) for f in mine)
    return f"""<h2 id="seed-{paper.seed}">Seed {paper.seed}: {html.escape(paper.title)}</h2>
<p>{ran} of {len(mine)} parts have complete cells in the store.</p>
<p class="answer">{html.escape(claiming.tally(rows))}.</p>
<p><b>How claims are judged.</b> {html.escape(paper.how(request))}</p>
{table_html(summary, "no parts")}
{sections}"""


def paper_command(sweeps: list[str], request: Request) -> str:
    args = ["python", "-m", "analysis", "--paper", *sweeps]
    args += ["--profile", request.profile] if request.profile else []
    args += ["--tracking-uri", redact(request.tracking_uri)] if request.tracking_uri else []
    args += ["--out", str(request.out)] if request.out else []
    return shlex.join(args)


def write_paper(
    figures: dict[str, Figure], request: Request, sweeps: list[str] = ()
) -> tuple[Path, pd.DataFrame]:
    """The one-page reproduction report and claims.csv; returns the page's path and the claims."""
    out, profile = paper_folder(request), request.profile
    out.mkdir(parents=True, exist_ok=True)
    claims = pd.concat(
        [part_claims(paper, figures[part.key], request) for paper in papers() for part in paper.parts],
        ignore_index=True,
    )
    columns = ["paper", "figure", "panel", "claim", "status", "evidence", "experiment", "profile", "size"]
    claims = claims[columns + ["sweep_file", "cost", "sweep_command", "analysis_command"]]
    claims.to_csv(out / "claims.csv", index=False)
    sections = "".join(paper_section(paper, figures, claims, request, out) for paper in papers())
    at = html.escape(profiles_read(figures, profile))
    toc = "".join(
        f'<li><a href="#seed-{p.seed}">Seed {p.seed}</a>: '
        f"{html.escape(claiming.tally(claims[claims['paper'] == p.seed]))}</li>"
        for p in papers()
    )
    body = f"""<h1>Reproduction report: seeds 001, 003 and 004{at}</h1>
<p>Each claim of the three papers, checked on the runs in the store: {html.escape(claiming.tally(claims))}.
Each row names its profile's size beside the paper's ("d 4 (paper 8)"): the paper's is its sweep file's own
settings, which follow the paper and, where the paper is silent, what the file's header says it chose.
Made by <code>{html.escape(paper_command(list(sweeps), request))}</code>. The runs are small (each part's
profile says its size), so a claim that does not reproduce here says what this budget shows, not that the
paper is wrong.</p>
<ul>{toc}</ul>
{sections}"""
    page = out / "report.html"
    page.write_text(_page("reproduction report", body))
    return page, claims
