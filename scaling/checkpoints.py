"""Per-cell checkpoints on a local path or object store (any URI ``pyarrow.fs`` understands: a local or
network path, ``s3://``, ``gs://``), written atomically (temp file, then move).

Checkpoints are keyed by the cell (``<storage>/checkpoints/<cell key>/state.pt``), not by the Tune trial,
so they outlive any one driver: a rerun after a crash, or a sweep edited to add cells, continues each cell
from its own last checkpoint.
"""

from __future__ import annotations

import io
from pathlib import Path

import torch
from pyarrow import fs as pafs


class CheckpointStore:
    """Per-cell checkpoints on a local path or object store, written atomically (temp file, then move)."""

    def __init__(self, uri: str):
        if "://" not in uri:
            uri = str(Path(uri).resolve())
        self.fs, self.root = pafs.FileSystem.from_uri(uri)

    def _path(self, key: str) -> str:
        return f"{self.root}/checkpoints/{key}/state.pt"

    def save(self, key: str, state: dict) -> None:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        path = self._path(key)
        self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with self.fs.open_output_stream(path + ".tmp") as out:
            out.write(buffer.getvalue())
        self.fs.move(path + ".tmp", path)

    def load(self, key: str) -> dict | None:
        path = self._path(key)
        if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        with self.fs.open_input_stream(path) as stream:
            return torch.load(io.BytesIO(stream.read()), map_location="cpu", weights_only=True)

    def step(self, key: str) -> int | None:
        """The step of the cell's checkpoint, or None (for --dry-run)."""
        state = self.load(key)
        return None if state is None else int(state["step"])

    def delete(self, key: str) -> None:
        path = self._path(key).rsplit("/", 1)[0]
        if self.fs.get_file_info(path).type != pafs.FileType.NotFound:
            self.fs.delete_dir(path)
