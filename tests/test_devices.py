"""The trial's device (``train.device: auto`` -> the GPU Ray assigned, else the CPU) and the GPU memory
cap of a fractional trial; the CUDA side of the cap is checked on a real card by
``python -m benchmarks --gpu``."""

import logging

import pytest
import torch

from scaling.trial.devices import cap_gpu_memory, trial_device


@pytest.mark.parametrize(
    "setting, gpu, expected",
    [("auto", 0, "cpu"), ("cpu", 1, "cpu"), ("cuda:1", 0, "cuda:1"), ("cuda", 0.25, "cuda")],
)
def test_a_set_device_is_taken_as_given_and_auto_without_a_gpu_is_the_cpu(setting, gpu, expected):
    assert trial_device(setting, gpu) == torch.device(expected)


def test_auto_with_a_gpu_is_the_first_visible_cuda_device_or_the_cpu_said_aloud(monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert trial_device("auto", 0.25) == torch.device("cuda", 0)  # Ray's CUDA_VISIBLE_DEVICES: its GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with caplog.at_level(logging.WARNING, "scaling.trial.devices"):
        assert trial_device("auto", 0.5) == torch.device("cpu")
    assert "holds gpu 0.5 but torch sees no CUDA device" in caplog.text


@pytest.mark.parametrize("device, gpu", [("cpu", 0.25), ("cpu", 0), ("cuda", 1.0), ("cuda", 0)])
def test_only_a_fraction_of_a_gpu_is_capped(device, gpu):
    assert cap_gpu_memory(torch.device(device), gpu) is None
