"""Seed 003, "Transformers as Statisticians": ReLU-attention transformers whose weights are built from
formulas, not trained: in-context gradient descent (least squares and ridge, Sec. 3) and in-context
algorithm selection by post-ICL validation (Sec. 4). torch only: no Ray, no MLflow.

transformer.py    the module (eq. 2.1), token slots (eq. 2.2), embedding and parallel composition (eq. 4.2)
constructions.py  the GD transformer (eqs. 3.1-3.4) and the selection transformer (eqs. 4.1-4.5)
reference.py      explicit gradient descent, closed-form ridge, train / validation indicators
predictors.py     the constructions as predictors of every prefix of a batch of prompts

Import from the modules (``from papers.statisticians.constructions import gd_transformer``): this file
imports nothing, so the modules may import each other without a cycle through the package.
"""
