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
    with_ustat = any(row.get("ustat/c2") is not None for row in rows)  # a second row for the monitor
    fig, grid = plt.subplots(1 + with_ustat, len(_PANELS), figsize=(4.2 * len(_PANELS), 3.4 * (1 + with_ustat)),
                             squeeze=False)
    if with_ustat:
        plot_ustat(grid[1], rows)
    for ax, (key, title) in zip(grid[0], _PANELS, strict=True):
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


def plot_ustat(axes, rows: list[dict]) -> None:
    """Four panels of the U-statistic monitor (docs/u-statistics.md): G in force, the best G and G* with its interval;
    the predicted MSE at the current G relative to the best G; c1, c2, c3 with their intervals; the share of mixed
    groups and the effective number of prompts."""
    g_ax, mse_ax, c_ax, share_ax = axes

    def band(ax, key: str, color: str, label: str) -> None:
        steps, values = series(rows, f"ustat/{key}")
        ax.plot(steps, values, color=color, lw=1.5, label=label)
        low = dict(zip(*series(rows, f"ustat/{key}_low"), strict=True))
        high = dict(zip(*series(rows, f"ustat/{key}_high"), strict=True))
        both = [s for s in steps if s in low and s in high]
        ax.fill_between(both, [low[s] for s in both], [high[s] for s in both], color=color, alpha=0.15)

    band(g_ax, "g_star", "tab:purple", "G* = 1 + sqrt(c3/c1)")
    g_ax.step(*series(rows, "ustat/group_size"), where="post", color="tab:blue", lw=2, label="G in force")
    g_ax.plot(*series(rows, "ustat/best_group_size"), "o", ms=3, color="tab:green", label="best candidate G")
    g_ax.set_yscale("log", base=2)
    g_ax.set_title("group size (G* interval shaded)")
    band(mse_ax, "mse_ratio", "tab:red", "MSE(G) / min MSE")
    mse_ax.axhline(1.0, color="gray", lw=0.8)
    mse_ax.set_title("predicted gradient MSE at the current G")
    for key, color in (("c1", "tab:blue"), ("c2", "tab:orange"), ("c3", "tab:green")):
        band(c_ax, key, color, key)
    c_ax.set_yscale("symlog", linthresh=1e-3 * max([abs(v) for v in series(rows, "ustat/c2")[1]] or [1.0]))
    c_ax.set_title("c1 (between prompts), c2, c3")
    share_ax.plot(*series(rows, "ustat/mixed_share"), color="tab:blue", label="share of mixed groups")
    share_ax.set_ylim(0, 1.05)
    share_ax.set_title("groups with a signal")
    prompts_ax = share_ax.twinx()
    prompts_ax.plot(*series(rows, "ustat/effective_prompts"), color="tab:orange", label="effective prompts")
    prompts_ax.set_ylabel("effective prompts", color="tab:orange")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")


def _smooth(values: list[float], window: int = 5) -> list[float]:
    """Trailing moving average, so the trend is visible through per-step noise."""
    return [sum(values[max(0, i - window + 1): i + 1]) / len(values[max(0, i - window + 1): i + 1])
            for i in range(len(values))]
