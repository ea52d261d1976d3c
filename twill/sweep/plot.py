"""The sweep's picture: predicted throughput against the resources each point uses.

Two panels, SMEM (rings and hand-off buffers) and registers of the CTA, each with its Pareto
front: the points no other point beats on both axes. A proven point is a filled dot; a point
whose II is not proven is hollow, with a bar up to the throughput of its proven bound (the most
it could reach). Matplotlib's Agg backend draws without a display.
"""

from __future__ import annotations

from pathlib import Path

from twill.errors import UsageError
from twill.sweep.run import PointResult, SweepResult, pareto_front

__all__ = ["plot_sweep"]

_PANELS = (("SMEM used (KiB)", lambda r: r.smem_bytes / 1024 if r.smem_bytes is not None else None),
           ("registers of the CTA (K)", lambda r: r.regs / 1024 if r.regs is not None else None))


def plot_sweep(result: SweepResult, path: str | Path) -> Path:
    """Write the plot (.png, .svg or .pdf) and return its path."""
    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise UsageError(f"{path}: the plot must be a .png, .svg or .pdf file")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in result.ranked if r.has_schedule and r.tflops is not None]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for ax, (xlabel, resource) in zip(axes, _PANELS, strict=True):
        _panel(ax, shown, resource, result.space.shown)
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("predicted TFLOP/s (steady state, 1 CTA per SM)")
    axes[0].legend(loc="best", fontsize=8)
    skipped = len(result.ranked) - len(shown)
    note = f"; {skipped} point(s) without a schedule not drawn" if skipped else ""
    legend = f"; labels: {'/'.join(result.space.shown)}" if result.space.shown else ""
    fig.suptitle(f"twill sweep: {result.program} on {result.arch}, {len(result.ranked)} points{note}{legend}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _panel(ax, shown: list[PointResult], resource, varied: tuple[str, ...]) -> None:
    """One resource axis: every point, its label, the bound bars and the Pareto front."""
    drawn = [(r, resource(r)) for r in shown if resource(r) is not None]
    labels: dict[tuple[float, float], list[str]] = {}
    for r, x in drawn:
        proven = r.status == "optimal"
        ax.scatter([x], [r.tflops], s=36, zorder=3, facecolors="tab:blue" if proven else "none",
                   edgecolors="tab:blue")
        if not proven and r.tflops_bound:
            ax.vlines(x, r.tflops, r.tflops_bound, colors="tab:blue", alpha=0.4, linestyles="dotted")
        values = dict(r.params)
        # points within a unit of each other (KiB, K registers, TFLOP/s) share one label
        labels.setdefault((round(x), round(r.tflops)), []).append("/".join(str(values[n]) for n in varied))
    for (x, y), texts in labels.items():
        ax.annotate("\n".join(texts), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    front = pareto_front([(x, r.tflops) for r, x in drawn])
    if front:
        xs = [drawn[i][1] for i in front]
        ys = [drawn[i][0].tflops for i in front]
        ax.step(xs, ys, where="post", color="tab:red", zorder=2)
        ax.plot(xs, ys, "o", mfc="none", mec="tab:red", ms=11, label="Pareto front", zorder=4)
    ax.scatter([], [], facecolors="tab:blue", edgecolors="tab:blue", label="II proven optimal")
    ax.scatter([], [], facecolors="none", edgecolors="tab:blue", label="feasible (bar: up to its bound)")
