"""The trial: one Ray Tune trial runs a cell or a pack of cells through their kind, with its checkpoints,
leases, device, storage and timeline."""
