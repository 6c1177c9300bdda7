"""The shell commands the project documents, collected from where a user reads them:

- the fenced shell blocks (```bash, ```sh, ```shell, ```console) of README.md and docs/*.md;
- the comment headers of sweeps/*.yaml (a line that holds `python ...` or `pip install ...`);
- the examples of each command-line tool's `--help` (its epilog's `examples:` section).

A command is one logical line: a backslash, a trailing `&&` or `|` continues it on the next line, and a
`#` comment (outside quotes) ends it. tests/test_documented_commands.py checks every one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELL_FENCES = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
# a line that starts a command a user would type, for fences not marked as shell (which then fail)
COMMAND_START = re.compile(r"^\s*(\$ )?(python3?|pip|ray|mlflow|docker|ssh|aws|export)\s")
# in a sweep file's comment: a command from `python` / `pip install` to the end of the line (or to a
# closing parenthesis or backquote that is not part of it)
DESCRIPTION = re.compile(r"\s{2,}")  # in --help examples: a command, then what it does
HEADER_COMMAND = re.compile(r"(?<![\w/.-])((?:python3? |pip install )[^`)]*)")
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
    """The commands in a sweep file's comments (its header and its profiles' notes): from `python` or
    `pip install` to the end of the line, a closing backquote or parenthesis, or a description (after
    three blanks or an opening parenthesis)."""
    relative = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if "#" not in line:
            continue
        comment = line[line.index("#") + 1 :]
        for match in HEADER_COMMAND.finditer(comment):
            text = re.split(r"\s{3,}|\s\(", match.group(1))[0]
            found.append(Command(re.sub(r"\s+", " ", text).strip().rstrip(".,;:"), f"{relative}:{number}"))
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
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def sweep_files() -> list[Path]:
    return sorted((ROOT / "sweeps").glob("*.yaml"))
