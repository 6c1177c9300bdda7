"""Scaling experiments for in-context learning: tasks, models, training and the sweep driver."""
