"""Seed 004's science (attention temperature under distribution shift): the closed forms (theory), their
Monte Carlo curves (curves), the temperature patch for GPT-2 and LLaMA (patch), the LLM scan (llm_icl,
tiny_llm) and Garg et al.'s checkpoints (garg). Nothing here knows Ray or MLflow."""
