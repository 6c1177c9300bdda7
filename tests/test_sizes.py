"""The reproduction report's size column (analysis/sizes.py): each row names its profile's d, N, T, width,
steps and layers beside the paper's, read from the real sweep files planned at the profile and at none."""

from pathlib import Path

import yaml

from analysis.paper import parts
from analysis.sizes import size_text, values_text

SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"


def test_a_row_names_each_size_beside_the_papers_and_per_model_where_models_differ():
    fig1 = str(SWEEPS / "fig1.yaml")
    text = size_text(fig1, "repro")
    assert text.startswith("d 4 (paper 8); N 5, 10, 20 (paper 5-40, 5 values); T 16, 256, inf (paper 100-")
    assert "width gpt2 64 (paper 256), mlp 1024 (= paper)" in text
    assert "layers gpt2 2 (paper 8)" in text and "layers mlp" not in text  # eq. 14 has no n_layer
    gpt2 = size_text(fig1, "repro", ("gpt2",))
    assert "width gpt2 64 (paper 256)" in gpt2 and "mlp" not in gpt2


def test_what_the_paper_states_replaces_the_files_own_setting_and_is_said_once():
    part = parts()["fig1"][1]
    text = size_text(str(SWEEPS / "fig1.yaml"), "repro", (), part.paper, part.sizes)
    assert "steps gpt2 3000, mlp 12000, mlp_padded 12000 (paper not stated; Garg et al. 500000)" in text
    assert "T 16, 256, inf (paper 1e5, 1e6 in B" in text


def test_a_model_the_profile_does_not_train_is_said_to_be_missing_with_the_papers_size(tmp_path):
    document = yaml.safe_load((SWEEPS / "fig4.yaml").read_text())
    models = document["profiles"]["quick"]["grid"]["model"]
    assert "gpt2_interleaved" not in models
    text = size_text(str(SWEEPS / "fig4.yaml"), "quick", ("gpt2_interleaved",))
    assert (
        text.startswith("gpt2_interleaved not in this profile; the paper's: d 20;")
        and "width gpt2_interleaved 256" in text
    )


def test_sizes_a_kind_does_not_have_are_left_out_and_unplannable_papers_are_stated():
    theory = parts()["temp-fig1"][1]
    assert (
        size_text(str(SWEEPS / "temp_fig1.yaml"), "quick", (), theory.paper, theory.sizes)
        == "d 10 (paper 50)"
    )
    # its own settings need Garg et al.'s checkpoint: the paper's is stated
    scan = parts()["temp-gpt2-scan"][1]
    text = size_text(str(SWEEPS / "temp_gpt2_scan.yaml"), "quick", (), scan.paper, scan.sizes)
    assert text.startswith("d 4 (paper 20); N 10 (paper 40); width gpt2 64 (paper 256)")
    assert "layers gpt2 2 (paper 12)" in text and "T " not in text


def test_values_are_listed_up_to_three_then_written_as_a_range_with_their_count():
    assert values_text(["20", "5", "10", "5"]) == "5, 10, 20"
    assert values_text(["100", "1000", "inf", "10000"]) == "100-inf, 4 values"
