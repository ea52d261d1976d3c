"""Shared fixtures: archs, programs and the shared dependence graphs (skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from twill.arch.registry import get_arch
from twill.frontend.programs import load_program
from twill.problem import build_problem

SHARED_DDG = Path(__file__).resolve().parents[2] / "shared" / "ddg"
# The H100 model of issue 8, frozen for tests of the solver's mechanics on instances derived on it
# (tests/archs/h100_issue8.toml says why); tests of the model itself read the built-in h100.
H100_ISSUE8 = str(Path(__file__).resolve().parent / "archs" / "h100_issue8.toml")


@pytest.fixture(scope="session")
def h100():
    return get_arch("h100")


@pytest.fixture(scope="session")
def b200():
    return get_arch("b200")


def problem(name: str, arch_name: str, **params):
    arch = get_arch(arch_name)
    return build_problem(load_program(name, arch, params), arch)


def shared_graph(name: str) -> Path:
    path = SHARED_DDG / f"{name}.b200.curated_ddg.json"
    if not path.is_file():
        pytest.skip(f"{path} is not available (../shared is absent)")
    return path
