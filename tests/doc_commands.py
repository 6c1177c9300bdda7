"""The shell commands the project documents, collected from where a user reads them:

- the fenced shell blocks (```bash, ```sh, ```shell, ```console) of README.md, docs/*.md and
  benchmarks/README.md;
- the comment headers of sweeps/*.yaml (a line that holds `python ...` or `pip install ...`);
- the examples of each command-line tool's `--help` (its epilog's `examples:` section).

A command is one logical line: a backslash, a trailing `&&` or `|` continues it on the next line, and a
`#` comment (outside quotes) ends it. tests/test_documented_commands.py checks every one.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELL_FENCES = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
# a line that starts a command a user would type, for fences not marked as shell (which then fail)
COMMAND_START = re.compile(r"^\s*(\$ )?(python3?|pip|ray|mlflow|docker|ssh|aws|export)\s")
DESCRIPTION = re.compile(r"\s{2,}")  # in --help examples: a command, then what it does
HEADER_COMMAND = re.compile(r"(python3? |pip install )")  # how a command in a sweep file's comment starts
# the tools whose --help carries examples; (module or script, how the test runs it)
HELP_TOOLS = (
    ("scaling.sweep", "python -m scaling.sweep"),
    ("analysis", "python -m analysis"),
    ("benchmarks", "python -m benchmarks"),
    ("scaling.adaptive.replay", "python -m scaling.adaptive.replay"),
    ("cluster/onprem.py", "python cluster/onprem.py"),
    ("cluster/stop_ray.py", "python cluster/stop_ray.py"),
)


@dataclass(frozen=True)
class Command:
    text: str  # the command as a user would type it, continuations joined, comment removed
    source: str  # where it is written: file:line (or `python -m X --help`)

    def __str__(self) -> str:
        return f"{self.source}: {self.text}"


def strip_comment(line: str) -> str:
    """The line without a trailing `# comment` (a # at its start or after a blank, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def logical_lines(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """(first line number, command) for each command in numbered shell lines."""
    commands, parts, start = [], [], 0
    for number, raw in lines:
        line = strip_comment(raw).strip()
        line = line[2:] if line.startswith("$ ") else line
        if not line:
            continue
        if not parts:
            start = number
        if line.endswith("\\"):
            parts.append(line[:-1].rstrip())
            continue
        parts.append(line)
        if not line.endswith(("&&", "|")):
            commands.append((start, " ".join(parts)))
            parts = []
    if parts:
        commands.append((start, " ".join(parts)))
    return [(n, re.sub(r"\s+", " ", c).strip()) for n, c in commands]


def fences(path: Path) -> list[tuple[str, list[tuple[int, str]]]]:
    """(language, numbered lines) of each fenced block."""
    blocks, lines, i = [], path.read_text().splitlines(), 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        i += 1
        if not opening:
            continue
        marker, language, body = opening.group(2), opening.group(3).lower(), []
        while i < len(lines) and not lines[i].strip().startswith(marker):
            body.append((i + 1, lines[i]))
            i += 1
        blocks.append((language, body))
        i += 1
    return blocks


def fenced_commands(path: Path) -> list[Command]:
    relative = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [
        Command(text, f"{relative}:{number}")
        for language, body in fences(path)
        if language in SHELL_FENCES
        for number, text in logical_lines(body)
    ]


def unmarked_commands(path: Path) -> list[Command]:
    """Lines that look like commands inside fences not marked as shell (which the test would miss)."""
    relative = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [
        Command(line.strip(), f"{relative}:{number}")
        for language, body in fences(path)
        if language not in SHELL_FENCES
        for number, line in body
        if COMMAND_START.match(line)
    ]


def header_commands(path: Path) -> list[Command]:
    """The commands in a sweep file's comments (its header and its profiles' notes): a comment line that
    is a command (`#   python ...`, `#   pip install ...`; three blanks or ` (` then start a description),
    or a command in backquotes within a sentence."""
    relative = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        comment = line.partition("#")[2].strip() if "#" in line else ""
        if HEADER_COMMAND.match(comment):
            found.append(Command(re.split(r"\s{3,}|\s\(", comment)[0].strip(), f"{relative}:{number}"))
        for quoted in re.findall(r"`([^`]+)`", comment):
            if HEADER_COMMAND.match(quoted):
                found.append(Command(quoted.strip(), f"{relative}:{number}"))
    return found


def unmarked_header_commands(path: Path) -> list[Command]:
    """Commands written into a sweep file's prose without backquotes (which the test would miss)."""
    relative = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        comment = line.partition("#")[2].strip() if "#" in line else ""
        prose = re.sub(r"`[^`]*`", "", comment)
        if not HEADER_COMMAND.match(comment) and re.search(r"\b(python3? -m|pip install) ", prose):
            found.append(Command(comment, f"{relative}:{number}"))
    return found


def epilog_commands(help_text: str, tool: str) -> list[Command]:
    """The commands of a --help's `examples:` section (an example may continue with a backslash; text
    after two or more blanks, or on a following line without a backslash, describes it)."""
    commands, parts, in_examples = [], [], False
    for line in help_text.splitlines():
        if re.match(r"^\S.*:$", line):
            in_examples = line.strip().lower() in ("examples:", "example:")
            continue
        text = DESCRIPTION.split(line.strip())[0]
        if not in_examples or not (parts or text.startswith(("python ", "python3 ", "ray ", "pip "))):
            continue
        parts.append(text.rstrip("\\").rstrip())
        if not text.endswith("\\"):
            commands.append(" ".join(parts))
            parts = []
    return [Command(c, f"{tool} --help") for c in commands]


def doc_files() -> list[Path]:
    """The pages a reader reads: README.md, docs/*.md and the developers' notes on the benchmarks."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]


def sweep_files() -> list[Path]:
    return sorted((ROOT / "sweeps").glob("*.yaml"))


def documented_commands() -> list[Command]:
    """The commands of the docs and the sweep files' headers (the --help examples need the tools run)."""
    commands = [c for path in doc_files() for c in fenced_commands(path)]
    return commands + [c for path in sweep_files() for c in header_commands(path)]


ENTRY = re.compile(r"\bpython3? (?:-m ((?:scaling|analysis|benchmarks|cluster)(?:\.\w+)*)|(\S+\.py)\b)")


def documented_entry_points() -> list[tuple[str, ...]]:
    """The project's modules and scripts that documented commands run, as python's arguments
    (``("-m", "scaling.sweep")``, ``("cluster/onprem.py",)``), also inside `ray exec '...'`."""
    found = set()
    for command in documented_commands():
        for module, script in ENTRY.findall(command.text):
            if module:
                found.add(("-m", module))
            else:
                # a script of the checkout, wherever it was synced to (~/icl-scaling-cluster/cluster/...)
                parts = Path(script).parts
                repo = next(
                    (Path(*parts[i:]) for i in range(len(parts)) if (ROOT / Path(*parts[i:])).is_file()), None
                )
                if repo is not None:
                    found.add((str(repo),))
    return sorted(found)


# Every program a traced command calls is recorded, not run: bash finds none on an empty PATH and hands
# each to this handler (its arguments after bash's expansions, NUL-separated, then a \1 field).
RECORDER = "command_not_found_handle() { printf '%s\\0' \"$@\"; printf '\\1\\0'; return 0; }\n"


def trace(command: str, workdir: Path) -> tuple[list[list[str]], str]:
    """The program calls (argv lists) that bash makes running `command` in `workdir`, and its errors."""
    env = {
        "PATH": "/nonexistent/no-programs-here",
        "HOME": os.environ.get("HOME", str(workdir)),
        "USER": os.environ.get("USER") or "user",
        "PWD": str(workdir),
    }
    done = subprocess.run(
        ["/bin/bash", "-c", RECORDER + command], cwd=workdir, env=env, capture_output=True, timeout=60
    )
    calls, current = [], []
    for field in done.stdout.decode().split("\0")[:-1]:
        if field == "\1":
            calls.append(current)
            current = []
        else:
            current.append(field)
    return calls, done.stderr.decode().strip()
