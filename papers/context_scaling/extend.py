"""What a researcher's own task family, model, feature map or baseline for the training kind imports, in
one place (docs/extending.md): the base classes and the prompt batch they work on. Imports torch (a plug-in
module may; the project's own planning does not import this)."""

from __future__ import annotations

from papers.context_scaling.baselines import BaselineNotApplicable
from papers.context_scaling.feature_maps import feature_rows
from papers.context_scaling.plugins import ModelSettings, TaskSettings
from papers.context_scaling.tasks import Prompts, TaskFamily

__all__ = ["BaselineNotApplicable", "ModelSettings", "Prompts", "TaskFamily", "TaskSettings", "feature_rows"]
