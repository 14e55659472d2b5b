"""Stalls in a run_mixed.py output: share of ITL samples above a threshold, per configuration.

Also (--plot PNG) the ITL distribution on log axes: CDF, and the share of samples above x
(the tail, where prefill stalls show).

  python benchmarks/disagg/itl_stalls.py OUT_DIR [--threshold-ms 500] [--plot PNG]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repo root, for `tandem`
from tandem.bench.report import load_report  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--threshold-ms", type=float, default=500.0)
    p.add_argument("--plot")
    a = p.parse_args()
    per_config = {}
    meta = json.loads((Path(a.out_dir) / "meta.json").read_text())
    print(f"| configuration | ITL samples | > {a.threshold_ms:.0f} ms | share | time in them | max ITL |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in meta["runs"]:
        itl = []
        for name in ("agentic", "decoders"):
            path = Path(a.out_dir) / r["label"] / f"{name}.json"
            if path.exists():
                itl += [g for s in load_report(path)[1] if s.ok for g in s.itl]
        x = np.asarray(itl)
        per_config[r["label"]] = x
        big = x[x > a.threshold_ms / 1000]
        print(f"| {r['label']} | {x.size} | {big.size} | {100 * big.size / x.size:.1f}% | "
              f"{100 * big.sum() / x.sum():.0f}% | {1000 * x.max():.0f} ms |")
    if a.plot:
        plot(per_config, a.plot)
    return 0


def plot(per_config: dict[str, np.ndarray], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for label, x in per_config.items():
        xs = np.sort(x) * 1000
        frac = np.arange(1, xs.size + 1) / xs.size
        a1.plot(xs, frac, label=label)
        a2.plot(xs, 1 - frac + 1 / xs.size, label=label)
    a1.set_title("CDF of inter-token latency (all streams)")
    a1.set_ylabel("fraction of samples")
    a2.set_title("share of ITL samples above x")
    a2.set_yscale("log")
    for ax in (a1, a2):
        ax.set_xscale("log")
        ax.set_xlim(left=5)   # a few chunks arrive in the same read (gaps of microseconds)
        ax.set_xlabel("ms (log)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    a1.axhline(0.9, color="grey", lw=0.5, ls="--")
    a2.axhline(0.1, color="grey", lw=0.5, ls="--")
    a2.axhline(0.01, color="grey", lw=0.5, ls="--")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
