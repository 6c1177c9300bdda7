"""Ray and MLflow for the lent GPU machine (docs/gpu.md, "Ray and MLflow on the GPU machine"; issue 33,
item 5): that machine runs Python 3.12 with torch and transformers but neither Ray nor MLflow, reaches no
package index, and one device call carries at most 64 MiB with the checkout, while Ray's wheel alone is
~79 MB. So the wheels are downloaded here, split into carry folders of at most ``LIMIT`` bytes (a wheel
larger than the room left is cut into numbered parts), carried one folder per call while the machine
stays warm, and put together there.

    python cluster/device_wheels.py download /tmp/device-wheels   # here: pip download of WHEELS (cp312)
    python cluster/device_wheels.py split /tmp/device-wheels       # here: .dw-1, .dw-2, ... in the checkout
    python3 cluster/device_wheels.py join /tmp/dw .dw-1 .dw-2 ...  # there: whole wheels in /tmp/dw

Standard library only: ``join`` runs on the device machine before anything is installed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

LIMIT = 58 * 2**20  # per carry folder: the 64 MiB of a call less the checkout (~3 MiB) and a margin
# What the sweep needs beyond the device image's packages (docs/gpu.md lists the image's), pinned to the
# versions of the project's tested environment: Ray with Tune, MLflow with its SQL store, and their needs.
WHEELS = (
    "ray==2.60.0",
    "tensorboardx==2.6.5",
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "referencing==0.37.0",
    "rpds-py==2026.9.1",
    "mlflow==3.17.2",
    "mlflow-skinny==3.17.2",
    "mlflow-tracing==3.17.2",
    "alembic==1.20.1",
    "sqlalchemy==2.1.9",
    "mako==1.4.3",
    "sqlparse==0.6.1",
    "graphene==3.4.3",
    "graphql-core==3.2.14",
    "graphql-relay==3.2.0",
    "flask==3.1.3",
    "flask-cors==6.0.5",
    "blinker==1.9.0",
    "itsdangerous==2.2.0",
    "gunicorn==26.2.0",
    "huey==3.5.4",
    "fastapi==0.165.0",
    "starlette==1.10.0",
    "uvicorn==0.54.0",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "cachetools==7.3.3",
    "cryptography==50.0.2",
    "cffi==2.1.1",
    "pycparser==3.12",
    "databricks-sdk==0.162.0",
    "google-auth==2.63.0",
    "pyasn1==0.6.5",
    "pyasn1-modules==0.4.2",
    "docker==7.2.0",
    "gitpython==3.2.1",
    "gitdb==4.0.12",
    "smmap==5.0.3",
    "importlib-metadata==9.1.0",
    "opentelemetry-api==1.45.2",
    "opentelemetry-proto==1.45.2",
    "opentelemetry-sdk==1.45.2",
    "opentelemetry-semantic-conventions==0.66b2",
    "prettytable==3.18.0",
    "wcwidth==0.9.4",
    "python-dotenv==1.2.4",
    "skops==0.16.0",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
PART = ".part-"


def download(directory: Path) -> None:
    """pip download of WHEELS for CPython 3.12 on x86-64 Linux (no dependencies resolved: they are listed)."""
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
        ]
        + ["--implementation", "cp", *platforms, "-d", str(directory), *WHEELS],
        check=True,
    )


def split(directory: Path, out: Path, limit: int = LIMIT) -> list[Path]:
    """The wheels of ``directory`` into folders ``out/.dw-1``, ``.dw-2``, ... of at most ``limit`` bytes
    each, largest wheel first; a wheel larger than the room left is cut into parts ``NAME.part-000``, ...
    that ``join`` puts together. Returns the folders."""
    folders: list[Path] = []
    room = 0
    for wheel in sorted(directory.glob("*.whl"), key=lambda p: (-p.stat().st_size, p.name)):
        data, index = wheel.read_bytes(), 0
        while data:
            if room == 0:
                folders.append(out / f".dw-{len(folders) + 1}")
                folders[-1].mkdir(parents=True, exist_ok=False)
                room = limit
            if index == 0 and len(data) <= room:  # the whole wheel fits
                (folders[-1] / wheel.name).write_bytes(data)
                room -= len(data)
                break
            chunk, data = data[:room], data[room:]
            (folders[-1] / f"{wheel.name}{PART}{index:03d}").write_bytes(chunk)
            room, index = room - len(chunk), index + 1
    return folders


def join(target: Path, folders: list[Path]) -> list[Path]:
    """The whole wheels of ``folders`` (parts put together in order) in ``target``; returns them."""
    target.mkdir(parents=True, exist_ok=True)
    files = sorted((f for folder in folders for f in folder.iterdir()), key=lambda f: f.name)
    for f in files:
        if PART not in f.name:
            shutil.copyfile(f, target / f.name)
    for f in files:
        if PART in f.name:
            with open(target / f.name.split(PART)[0], "ab") as whole:
                whole.write(f.read_bytes())
    return sorted(target.glob("*.whl"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python cluster/device_wheels.py", description=__doc__.split("\n\n")[0]
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("download", help="pip download of the wheels").add_argument("directory", type=Path)
    splitting = verbs.add_parser("split", help="the wheels into carry folders .dw-1, .dw-2, ...")
    splitting.add_argument("directory", type=Path)
    splitting.add_argument("--out", type=Path, default=Path("."), help="where the folders go (the checkout)")
    joining = verbs.add_parser("join", help="on the device: whole wheels from the carried folders")
    joining.add_argument("target", type=Path)
    joining.add_argument("folders", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if args.verb == "download":
        download(args.directory)
    elif args.verb == "split":
        for folder in split(args.directory, args.out):
            size = sum(f.stat().st_size for f in folder.iterdir())
            print(f"{folder} {size / 2**20:.1f} MiB")
    else:
        for wheel in join(args.target, args.folders):
            print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
