"""Training curves from a run's metrics.jsonl: `grpo-train plot RUN_DIR` (every run writes it at the end).

The panels follow what the run logged (`panels`): the mean reward; the train accuracy where a verifier scored
(not with data.kind none); each reward function's mean value; completion length; KL (with a reference model),
entropy and gradient norm; the held-out accuracy with its breakdown, or without a verifier the reward functions
on the held-out set. A last row shows the U-statistic monitor when it ran."""

from __future__ import annotations

from pathlib import Path

from grpo_train.metrics import METRICS_FILE, read_jsonl

PLOT_FILE = "curves.png"
COLUMNS = 4  # panels per row of the figure

# Per-step panels, in order: (title, key), or (title, prefix) for the reward functions' own curves (one line per
# function). A panel is drawn when its keys are in the metrics: accuracy only where a verifier scored (not with
# data.kind none), KL only with a reference model, staleness only with rollout.max_staleness >= 1. A tuple of keys
# shares a panel.
_STEP_PANELS = [
    ("reward (mean)", "reward/mean"),
    ("train accuracy", "reward/accuracy"),
    ("reward functions (mean value, before weight)", "reward/fn/"),
    ("completion length (tokens)", "train/completion_len_mean"),
    ("KL to the reference (per token)", "train/kl"),
    ("entropy (per token)", "train/entropy"),
    ("gradient norm (before clipping)", "train/grad_norm"),
    ("trained tokens' staleness (weight versions)", ("rollout/staleness_mean", "rollout/staleness_max")),
    ("trained tokens by staleness (fraction)", "rollout/staleness_frac/"),
    ("behaviour weight by staleness (mean)", "train/behaviour_weight/"),
]


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(row["step"], row[key]) for row in rows if row.get(key) is not None]
    return [s for s, _ in points], [v for _, v in points]


def function_keys(rows: list[dict], prefix: str) -> list[str]:
    """The reward functions' mean keys (`reward/fn/<name>`, `eval/fn/<name>`, not their statuses), in first-seen
    order."""
    keys = {k: None for row in rows for k in row if k.startswith(prefix) and k.count("/") == 2}
    return list(keys)


def panels(rows: list[dict]) -> list[tuple[str, list[str]]]:
    """(title, keys) of the panels the metrics have data for: the per-step ones, then the held-out one (accuracy
    with its breakdown by category, or without a verifier the reward functions' means)."""
    def present(key: str) -> bool:
        return any(row.get(key) is not None for row in rows)

    out = []
    for title, key in _STEP_PANELS:
        if isinstance(key, tuple):  # several keys in one panel
            keys = [k for k in key if present(k)]
        elif key.endswith("/"):
            keys = [k for k in function_keys(rows, key) if present(k)]
        else:
            keys = [key] if present(key) else []
        if keys:
            out.append((title, keys))
    if present("eval/accuracy"):
        categories = sorted({k for row in rows for k in row if k.startswith("eval/category/")})
        out.append(("held-out greedy accuracy", ["eval/accuracy", *categories]))
    elif evals := [k for k in function_keys(rows, "eval/fn/") if present(k)]:
        out.append(("held-out reward functions (greedy)", evals))
    return out


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw a run's curves (`panels`, and a row for the U-statistic monitor when it ran); returns the PNG path."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run folder")
    rows = read_jsonl(run_dir / METRICS_FILE)
    if not rows:
        raise FileNotFoundError(f"{run_dir / METRICS_FILE}: no metrics to plot")
    fig = figure(rows, str(run_dir))
    path = Path(out) if out else run_dir / PLOT_FILE
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt  # after figure(), which chose the backend

    plt.close(fig)
    return path


def figure(rows: list[dict], title: str = ""):
    """The matplotlib figure of `rows` (metrics.jsonl): COLUMNS panels a row, integer steps on every x axis."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a cluster node
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    drawn = panels(rows)
    with_ustat = any(row.get("ustat/c2") is not None for row in rows)  # a last row for the monitor
    lines = max(1, -(-len(drawn) // COLUMNS)) + with_ustat  # -(-a // b): a / b rounded up
    fig, grid = plt.subplots(lines, COLUMNS, figsize=(4.2 * COLUMNS, 3.4 * lines), squeeze=False)
    axes = list(grid.flat)
    if with_ustat:
        plot_ustat(grid[-1], rows)
    for ax, (panel_title, keys) in zip(axes, drawn, strict=False):
        if keys[0].startswith("eval/"):
            plot_eval(ax, rows, keys)
        else:
            for i, key in enumerate(keys):
                steps, values = series(rows, key)
                color = "tab:blue" if len(keys) == 1 else f"C{i}"
                ax.plot(steps, values, color=color, alpha=0.35, lw=1)
                ax.plot(steps, _smooth(values), color=color, lw=2, label=key.rsplit("/", 1)[-1])
            if len(keys) > 1 or keys[0].startswith("reward/fn/"):
                ax.legend(fontsize=7, loc="best")
        ax.set_title(panel_title)
    for ax in axes[len(drawn): len(axes) - COLUMNS * with_ustat]:
        ax.axis("off")  # the last row's unused places
    for ax in axes:
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_eval(ax, rows: list[dict], keys: list[str]) -> None:
    """The held-out points: the first key with its values written on, the others (a breakdown) faint, or, for the
    reward functions, each a line with its values."""
    accuracy = keys[0] == "eval/accuracy"
    for i, key in enumerate(keys):
        steps, values = series(rows, key)
        if accuracy and i > 0:  # the per-category (synthetic) breakdown, faint, so the overall line stays readable
            ax.plot(steps, values, ".--", lw=0.8, alpha=0.6, label=key.rsplit("/", 1)[-1])
            continue
        ax.plot(steps, values, "o-", color="tab:green" if accuracy else f"C{i}",
                label="all" if accuracy else key.rsplit("/", 1)[-1])
        for s, v in zip(steps, values, strict=True):
            ax.annotate(f"{v:.1%}" if accuracy else f"{v:.3g}", (s, v), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=8)
    if len(keys) > 1 or not accuracy:
        ax.legend(fontsize=6, loc="best")


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
        ax.legend(fontsize=7, loc="best")


def _smooth(values: list[float], window: int = 5) -> list[float]:
    """Trailing moving average, so the trend is visible through per-step noise."""
    return [sum(values[max(0, i - window + 1): i + 1]) / len(values[max(0, i - window + 1): i + 1])
            for i in range(len(values))]
