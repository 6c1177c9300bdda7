"""Seed 004 in the reproduction report (analysis.paper; registered in pyproject.toml's
``icl_scaling.papers``): its parts, one sweep file each, and what the paper states of their sizes."""

from __future__ import annotations

from analysis.paper import Paper, Part
from papers.temperature.analysis.claims import CLAIMS, HOW

THEORY = ("d",)  # seed 004's closed forms and Monte Carlo: no trained model
# seed 004 App. K: Garg et al.'s released checkpoint (its own file plans only with the checkpoint given)
GARG_CHECKPOINT = {"d": "20", "N": "40", "width": "256", "layers": "12", "steps": "500000 (Garg et al.)"}
LLAMA = {"llm": "Llama-2-7b-chat"}  # seed 004 Sec. 5.2 (its own file plans only with the weights given)

PAPER = Paper(
    "004",
    "Demir & Dogan, Optimal Attention Temperature Enhances In-Context Learning under Distribution Shift",
    (
        Part(
            "temp-fig1",
            "sweeps/temp_fig1.yaml",
            "Figure 1: theory and Monte Carlo under three shifts",
            THEORY,
        ),
        Part("temp-fig2", "sweeps/temp_fig2.yaml", "Figure 2: noise shift", THEORY),
        Part("temp-fig4", "sweeps/temp_fig4.yaml", "Figure 4: linear vs linearized attention", THEORY),
        Part("temp-fig5", "sweeps/temp_fig5.yaml", "Figure 5: attention-weight histograms", THEORY),
        Part(
            "temp-gpt2-scan",
            "sweeps/temp_gpt2_scan.yaml",
            "Figure 6: GPT-2 under a covariance shift",
            ("d", "N", "width", "steps", "layers"),
            GARG_CHECKPOINT,
        ),
        Part(
            "temp-llama-a",
            "sweeps/temp_llama_a.yaml",
            "Figure 3a: LLM exact match vs demonstrations",
            ("llm",),
            LLAMA,
        ),
        Part(
            "temp-llama-b",
            "sweeps/temp_llama_b.yaml",
            "Figure 3b: LLM exact match vs noisy ratio",
            ("llm",),
            LLAMA,
        ),
        *[
            Part(
                f"temp-llama-{panel}-smollm",
                f"sweeps/temp_llama_{panel}.yaml",
                f"Figure 3{panel} on SmolLM2-135M-Instruct (this CPU; the smollm profile)",
                ("llm",),
                LLAMA,
                profile="smollm",
            )
            for panel in ("a", "b")
        ],
        Part(
            "temp-sec44",
            "sweeps/temp_sec44.yaml",
            "Sec. 4.4: tau_opt = c under Sigma_x test = c I (w ~ N(0, I), sigma = 0)",
            THEORY,
        ),
    ),
    CLAIMS,
    lambda request: HOW,
)
