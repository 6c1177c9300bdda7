"""Budgeting: what a cell costs (time, memory, FLOPs), what a sweep costs on CPUs and GPUs, and which cells
share a trial."""
