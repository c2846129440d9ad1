"""Tests with GPU memory budgets, run by tests/e2e_pytest_plugin.rs as a user runs them:
`pytest --gpumemprof` on the unmodified torch package and the simulated GPU (the plugin
starts pytest again under the shim). Two tests keep their budgets, two break theirs, one has
no marker (not measured, though it allocates the most).
"""

import pytest
import torch

MIB = 1 << 20
kept = []


@pytest.mark.limit_gpu_memory("64 MiB")
def test_within_budget():
    a = torch.empty(16 * MIB, dtype=torch.uint8, device="cuda")
    b = torch.empty(16 * MIB, dtype=torch.uint8, device="cuda")
    del a, b


@pytest.mark.limit_gpu_memory("16 MiB")
def test_over_budget():
    big = torch.empty(16 * MIB, dtype=torch.uint8, device="cuda")  # BIG
    small = torch.empty(8 * MIB, dtype=torch.uint8, device="cuda")  # SMALL
    del big, small


@pytest.mark.limit_gpu_leaks("0 B")
def test_leaks_nothing():
    t = torch.empty(4 * MIB, dtype=torch.uint8, device="cuda")
    del t


@pytest.mark.limit_gpu_leaks("1 MiB")
def test_leaks_a_tensor():
    kept.append(torch.empty(4 * MIB, dtype=torch.uint8, device="cuda"))  # LEAK


def test_without_a_marker():
    x = torch.empty(128 * MIB, dtype=torch.uint8, device="cuda")
    del x
