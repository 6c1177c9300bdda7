"""Seed 004's analysis (attention temperature): the scans' plug-in and the paper's claims."""
