"""Architecture models: the ``Arch`` value, its TOML format, where archs come from, and calibration."""

from twill.arch.model import Arch, Cost, Fact, Unit

__all__ = ["Arch", "Cost", "Fact", "Unit"]
