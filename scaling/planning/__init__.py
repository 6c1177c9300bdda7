"""Planning: a sweep file -> validated cells, its variants, its adaptive settings, the checks on what a user
hands the driver (pure: no Ray, no MLflow, no torch)."""
