"""Seed 003's analysis (transformers as statisticians): the constructions' plug-in and the paper's claims."""
