"""twill architecture plugin: ``h100-fastexp``, an H100 SM with twice the MUFU exp2 rate.

twill calls ``archs()`` through the ``twill.archs`` entry point (see pyproject.toml) and loads
the TOML file it returns, checking that every number has a source.
"""

from pathlib import Path

__all__ = ["archs", "ARCH_FILE"]

ARCH_FILE = Path(__file__).with_name("h100-fastexp.toml")


def archs() -> list[Path]:
    """The arch files this package adds to twill."""
    return [ARCH_FILE]
