"""Training curves from a run's metrics.jsonl: `grpo-train plot RUN_DIR` (the demo writes it at the end)."""

from __future__ import annotations

from pathlib import Path

from grpo_train.metrics import METRICS_FILE, read_jsonl

PLOT_FILE = "curves.png"

_PANELS = [
    ("reward/mean", "reward (mean)"),
    ("reward/accuracy", "train accuracy"),
    ("train/completion_len_mean", "completion length (tokens)"),
    ("eval/accuracy", "held-out greedy accuracy"),
]


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(row["step"], row[key]) for row in rows if row.get(key) is not None]
    return [s for s, _ in points], [v for _, v in points]


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw reward, accuracy, completion length per step and the eval accuracy points; returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a cluster node
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run folder")
    rows = read_jsonl(run_dir / METRICS_FILE)
    if not rows:
        raise FileNotFoundError(f"{run_dir / METRICS_FILE}: no metrics to plot")
    fig, axes = plt.subplots(1, len(_PANELS), figsize=(4.2 * len(_PANELS), 3.4))
    for ax, (key, title) in zip(axes, _PANELS, strict=True):
        steps, values = series(rows, key)
        if key.startswith("eval/"):
            ax.plot(steps, values, "o-", color="tab:green", label="all")
            for s, v in zip(steps, values, strict=True):
                ax.annotate(f"{v:.1%}", (s, v), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
            # The per-category (synthetic) breakdown, faint, so the overall line stays readable.
            categories = sorted({k for row in rows for k in row if k.startswith("eval/category/")})
            for category in categories:
                ax.plot(*series(rows, category), ".--", lw=0.8, alpha=0.6, label=category.rsplit("/", 1)[-1])
            if categories:
                ax.legend(fontsize=6, loc="best")
        else:
            ax.plot(steps, values, color="tab:blue", alpha=0.35, lw=1)
            ax.plot(steps, _smooth(values), color="tab:blue", lw=2)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(str(run_dir))
    fig.tight_layout()
    path = Path(out) if out else run_dir / PLOT_FILE
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _smooth(values: list[float], window: int = 5) -> list[float]:
    """Trailing moving average, so the trend is visible through per-step noise."""
    return [sum(values[max(0, i - window + 1): i + 1]) / len(values[max(0, i - window + 1): i + 1])
            for i in range(len(values))]
