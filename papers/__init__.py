"""The science of each paper the project reproduces, one sibling folder per paper, named for its idea
(docs/design.md, "Layout"): context_scaling (seed 001, Abedsoltan et al., "Context-Scaling versus
Task-Scaling in In-Context Learning": tasks, models, feature maps, baselines, training, evaluation, the
packed engine; the other papers build on its tasks and models), statisticians (seed 003, Bai et al.,
"Transformers as Statisticians": transformers built from formulas) and temperature (seed 004, Demir &
Dogan, "Optimal Attention Temperature Enhances In-Context Learning under Distribution Shift"). Nothing
here knows Ray or MLflow (tests/test_layout.py checks it); this file imports nothing.
"""
