"""Seed 001's analysis (context- vs task-scaling): the training kind's plug-in and the paper's claims."""
