"""Plot `tandem sim --calibrate` output: predicted against measured TTFT and ITL on this CPU.

    .venv/bin/python -m tandem sim --calibrate benchmarks/sim/results/cpu_measured.json \
        > benchmarks/sim/results/cpu_calibration.json
    .venv/bin/python benchmarks/sim/plot_calibration.py benchmarks/sim/results/cpu_calibration.json \
        docs/img/sim_calibration.png
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def main(src: str, dst: str) -> int:
    rows = json.loads(open(src).read())["predicted_vs_measured"]
    names = list(rows)
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    for a, keys in zip(ax, ([n for n in names if n.startswith("ttft")], [n for n in names if n.startswith("itl")])):
        idx = np.arange(len(keys))
        a.bar(idx - 0.2, [rows[k]["measured"] for k in keys], 0.4, label="measured")
        a.bar(idx + 0.2, [rows[k]["predicted"] for k in keys], 0.4, label="predicted (sim, cpu preset)")
        for i, k in enumerate(keys):
            a.annotate(f"x{rows[k]['ratio']:.2f}", (i + 0.2, rows[k]["predicted"]), ha="center", va="bottom")
        a.set_xticks(idx, keys)
        a.set_ylabel("ms")
        a.legend(loc="upper left")
        a.grid(alpha=0.3, axis="y")
    fig.suptitle("Fleet simulator against a measured run on this CPU (llama512, one core)")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
