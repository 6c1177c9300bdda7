"""Every Ray this project starts is its own: no `ray.init` without an explicit address (a plain `ray.init()`
joins whatever Ray already runs on the machine, RAY_ADDRESS or the latest `ray start`, e.g. another
user's test cluster, and then fails on num_cpus or runs on someone else's nodes)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ray_init_calls_without_address():
    for path in sorted(
        p for folder in ("scaling", "analysis", "benchmarks", "tests") for p in (ROOT / folder).rglob("*.py")
    ):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "init"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "ray"
                and not any(k.arg == "address" for k in node.keywords)
            ):
                yield f"{path.relative_to(ROOT)}:{node.lineno}"


def test_every_ray_init_names_its_address():
    assert list(ray_init_calls_without_address()) == []
