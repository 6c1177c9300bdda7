"""Analysis of sweeps: MLflow -> tidy table -> scaling-law fits, verdicts, figures and a report."""
