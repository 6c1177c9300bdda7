"""Every sweeps/figK.yaml of seed 001 plans (full and quick profile) with the families and baselines it
names; files naming families or baselines not registered on this branch are skipped, saying which."""
from pathlib import Path

import pytest

from scaling.baselines import BASELINES, parse_baseline
from scaling.plan import load_plan, read_document
from scaling.tasks import FAMILIES

SWEEPS = Path(__file__).resolve().parent.parent / "sweeps"
FIGURES = [f"fig{k}.yaml" for k in range(1, 9)]


def names_used(document, key):
    """Every value of ``key`` (family, or each entry of baselines) anywhere in the document."""
    found = set()
    if isinstance(document, dict):
        for k, v in document.items():
            if k == key:
                found.update(v if isinstance(v, list) else [v])
            found |= names_used(v, key)
    elif isinstance(document, list):
        for v in document:
            found |= names_used(v, key)
    return found


def missing_registrations(path):
    document, _ = read_document(path)
    families = names_used(document, "family") - set(FAMILIES)
    baselines = {parse_baseline(b)[0] if b.split("(")[0] in BASELINES else b
                 for b in names_used(document, "baselines")} - set(BASELINES)
    return sorted(families) + sorted(baselines)


@pytest.mark.parametrize("profile", ["", "quick"])
@pytest.mark.parametrize("figure", FIGURES)
def test_figure_sweep_plans(figure, profile):
    path = SWEEPS / figure
    missing = missing_registrations(path)
    if missing:
        pytest.skip(f"{figure} needs the task-family/baseline branch for: {', '.join(missing)}")
    plan = load_plan(path, profile)
    assert plan.cells and plan.name == figure.removesuffix(".yaml") + (f"-{profile}" if profile else "")
    if profile == "quick":
        assert all(p.resources.gpu == 0 for p in plan.cells), "quick profiles run on CPUs"
        assert all(p.cell.train.steps <= 5000 for p in plan.cells)
    else:
        assert all(p.cell.train.steps == 500000 and p.cell.train.lr == 1e-4 for p in plan.cells)


def test_fig7_quick_restricted_to_the_linear_task_plans_here():
    plan = load_plan(SWEEPS / "fig7.yaml", "quick", ["grid.task=[{family: linear, d: 8, noise_std: 0.22}]"])
    assert {p.cell.model.label for p in plan.cells} == {"mlp", "mlp_both_psiH"}
    assert {p.cell.N for p in plan.cells} == {5, 20, 40}
