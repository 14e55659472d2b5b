"""The training loss curve as a PNG (matplotlib, headless backend)."""

from __future__ import annotations

from pathlib import Path


def plot_loss_curve(history: dict, path: str | Path, title: str) -> None:
    """history: {"train": [[step, tokens, loss], ...], "eval": [[step, tokens, {part: loss}], ...]}."""
    import matplotlib  # lazy: pyplot costs ~0.7 s, and the backend must be chosen before pyplot is imported

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: see above

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    if history["train"]:
        tokens = [t / 1e6 for _, t, _ in history["train"]]
        losses = [x for _, _, x in history["train"]]
        ax.plot(tokens, losses, color="0.75", linewidth=0.6, label="train (per step)")
        smooth, acc = [], None
        for x in losses:  # exponential moving average, for readability
            acc = x if acc is None else 0.95 * acc + 0.05 * x
            smooth.append(acc)
        ax.plot(tokens, smooth, color="C0", linewidth=1.5, label="train (EMA)")
    parts = sorted({p for _, _, d in history["eval"] for p in d})
    for i, part in enumerate(parts):
        pts = [(t / 1e6, d[part]) for _, t, d in history["eval"] if part in d]
        ax.plot([a for a, _ in pts], [b for _, b in pts], marker="o", markersize=3, color=f"C{i + 1}",
                label=f"held-out {part}")
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
