"""The constructions' one setting the planner needs without torch: ``BOUND``, the largest |score| the masks
and the selection's offset allow (scaling.papers.statisticians.constructions' docstring says why), the
default of the construction kinds' ``construction.bound`` (scaling.kinds.statisticians)."""

BOUND = 1e4
