"""Each paper's analysis, one folder per paper named as its science in scaling/papers/: the analysis
plug-in of its experiment kinds (``plugin.py``, named by the kinds' ``analysis``) and the paper's claims
(``claims.py``, on the machinery every paper's claims share: analysis/claims.py).
"""
