"""The registry of experiment kinds (filled in below)."""
