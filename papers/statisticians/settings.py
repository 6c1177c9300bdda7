"""The constructions' one setting the planner needs without torch: ``BOUND``, the largest |score| the masks
and the selection's offset allow (papers.statisticians.constructions' docstring says why), the
default of the construction kinds' ``construction.bound`` (papers.statisticians.kind)."""

BOUND = 1e4
