"""Seed 001's science: tasks, in-context models, feature maps, baselines, training, evaluation and the
stacked (packed) training engine. Nothing here knows Ray or MLflow (tests/test_layout.py checks it)."""
