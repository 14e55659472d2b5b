"""PNG plots of one or several runs: latency CDFs and load over time.

- cdf.png: CDFs of TTFT and ITL (one line per run);
- timeline.png: output tokens/s and completed requests/s per time bin, and requests and
  tokens (prompt + generated so far) in flight, which is what occupies the KV cache.
matplotlib is imported inside the functions (Agg backend) so the rest of bench works without it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tandem.bench.sample import RequestSample


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _cdf(ax, values: list[float], label: str) -> None:
    if not values:
        return
    x = np.sort(np.asarray(values)) * 1000.0
    y = np.arange(1, x.size + 1) / x.size
    ax.plot(x, y, label=label)


def plot_cdfs(runs: dict[str, list[RequestSample]], path: str | Path) -> str:
    plt = _pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for label, samples in runs.items():
        ok = [s for s in samples if s.ok]
        _cdf(a1, [s.ttft for s in ok if s.ttft is not None], label)
        _cdf(a2, [g for s in ok for g in s.itl], label)
    for ax, title in ((a1, "TTFT"), (a2, "inter-token latency")):
        ax.set_title(f"CDF of {title}")
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of samples")
        ax.grid(alpha=0.3)
        ax.axhline(0.9, color="grey", lw=0.5, ls="--")
        if runs:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)


def timeline(samples: list[RequestSample], bin_s: float) -> dict[str, np.ndarray]:
    """Per time bin: t [B] (bin start, s), output tok/s [B], completed req/s [B],
    in-flight requests [B] and in-flight tokens [B] (sampled at each bin's middle)."""
    if not samples:
        return {k: np.zeros(0) for k in ("t", "tokens_per_s", "requests_per_s", "inflight_requests", "inflight_tokens")}
    end = max(s.end for s in samples)
    nbins = max(1, int(np.ceil(end / bin_s)))
    t = np.arange(nbins) * bin_s
    tokens = np.zeros(nbins)
    done = np.zeros(nbins)
    inflight_req = np.zeros(nbins)
    inflight_tok = np.zeros(nbins)
    for s in samples:
        # chunks counted one token each when the server sent no per-chunk usage: scale them so
        # that a request's chunks add up to its completion tokens from the final usage
        counted = sum(s.chunk_tokens)
        scale = s.completion_tokens / counted if counted and s.completion_tokens else 1.0
        if s.ok:
            for ct, n in zip(s.chunk_times, s.chunk_tokens):
                tokens[min(nbins - 1, int((s.start + ct) / bin_s))] += n * scale
            done[min(nbins - 1, int(s.end / bin_s))] += 1
        mid = t + bin_s / 2
        live = (mid >= s.start) & (mid < s.end)
        inflight_req += live
        if live.any():
            abs_times = s.start + np.asarray(s.chunk_times)
            cum = np.concatenate([[0], np.cumsum(s.chunk_tokens) * scale]) if s.chunk_tokens else np.zeros(1)
            generated = cum[np.searchsorted(abs_times, mid[live], side="right")] if s.chunk_tokens else 0
            inflight_tok[live] += s.prompt_tokens + generated
    return {"t": t, "tokens_per_s": tokens / bin_s, "requests_per_s": done / bin_s,
            "inflight_requests": inflight_req, "inflight_tokens": inflight_tok}


def _twin_steps(ax, t, left, right) -> None:
    """Two step series on one x axis: left (values, label, color) and right on a twin axis."""
    lines = []
    for axis, (values, label, color) in ((ax, left), (ax.twinx(), right)):
        lines += axis.step(t, values, where="post", color=color, label=label)
        axis.set_ylabel(label, color=color)
        axis.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(lines, [ln.get_label() for ln in lines], loc="upper left", fontsize=8)


def plot_timeline(samples: list[RequestSample], path: str | Path, bin_s: float | None = None) -> str:
    plt = _pyplot()
    end = max((s.end for s in samples), default=1.0)
    bin_s = bin_s or max(0.25, end / 60.0)
    tl = timeline(samples, bin_s)
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    _twin_steps(a1, tl["t"], (tl["tokens_per_s"], "output tokens/s", "tab:blue"),
                (tl["requests_per_s"], "completed requests/s", "tab:orange"))
    a1.set_title(f"throughput ({bin_s:.2f} s bins)")
    _twin_steps(a2, tl["t"], (tl["inflight_requests"], "requests in flight", "tab:purple"),
                (tl["inflight_tokens"], "tokens in flight (prompt + generated)", "tab:green"))
    a2.set_xlabel("time since start (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)
