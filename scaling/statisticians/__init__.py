"""Seed 003, "Transformers as Statisticians": ReLU-attention transformers whose weights are built from
formulas, not trained: in-context gradient descent (least squares and ridge, Sec. 3) and in-context
algorithm selection by post-ICL validation (Sec. 4). torch only: no Ray, no MLflow.

transformer.py    the module (eq. 2.1), token slots (eq. 2.2), embedding and parallel composition (eq. 4.2)
constructions.py  the GD transformer (eqs. 3.1-3.4) and the selection transformer (eqs. 4.1-4.5)
reference.py      explicit gradient descent, closed-form ridge, train / validation indicators
predictors.py     the constructions as predictors of every prefix of a batch of prompts
"""

from .constructions import BOUND, gd_transformer, selection_transformer
from .predictors import OutOfBound, prefix_predictions, transformer_predictor
from .reference import explicit_gd, indicators, prefix_gd_weights, prefix_ridge_weights, validation_split
from .transformer import ReLUTransformer, Slots, embed, parallel, tokens

__all__ = [
    "BOUND",
    "OutOfBound",
    "ReLUTransformer",
    "Slots",
    "embed",
    "explicit_gd",
    "gd_transformer",
    "indicators",
    "parallel",
    "prefix_gd_weights",
    "prefix_predictions",
    "prefix_ridge_weights",
    "selection_transformer",
    "tokens",
    "transformer_predictor",
    "validation_split",
]
