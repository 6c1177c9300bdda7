"""The rules that judge a sweep's answers, below both their users: the analysis (its tables, report and
figures; analysis/ says the answers in words) and the adaptive driver (scaling.adaptive, which judges each
wave's cells by the same rules).

- verdicts.py: does a model context-scale, task-scale? The rule, its numbers and labels (seed 001's question);
- fit.py: the scaling-law fits err = E + A n^-alpha + B T^-beta of a sweep's table (which rows, which groups);
- power_law.py: one such law fitted to one group's points, with intervals over seeds;
- provenance.py: which cells may be pooled into one curve, and the settings that split it.
"""
