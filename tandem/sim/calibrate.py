"""Calibration on this CPU: fit the "cpu" preset's constants from measured steps, then predict a
measured run with them and print predicted against measured TTFT and ITL.

Input: the JSON of benchmarks/sim/measure_cpu.py: `fit_points` (steps of known composition and
their seconds) and `validation` (a real-time run: per request arrival, lengths, block hashes,
every token's time).

Fit: the cost model's formula (tandem/sim/cost_model.py) with overlap 0 is linear in its
constants, so
    seconds = step_overhead + seqs * seq_overhead + flops / flops_rate + bytes / bytes_rate
is fitted by non-negative least squares over the four unknowns (every subset of them solved by
least squares, the best non-negative one kept), errors relative to each step's time.
Prediction: the validation workload replayed by the simulator on one colocated "cpu" worker
with those constants (tandem's default scheduler, 16-token blocks, the engine's KV memory), the
same definitions of TTFT (arrival to first token) and ITL (gap between tokens) on both sides.
Goal: every predicted p50/p90 within 20% of the measured one. Given constants fitted on another
measurement, the prediction is out of sample (the steps of this file are not used).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np

from tandem.config import SchedulerConfig
from tandem.sim.config import SimConfig, Topology
from tandem.sim.cost_model import CostModel
from tandem.sim.fleet import Fleet
from tandem.sim.hardware import CPU
from tandem.sim.model_spec import model_spec
from tandem.sim.request import SimRequest
from tandem.sim.trace import make_trace

NAMES = ("step_overhead_s", "seq_overhead_s", "flops", "mem_bw")


def features(spec_name: str, points: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    cost = CostModel(model_spec(spec_name), CPU)
    rows, y = [], []
    for p in points:
        w = cost.work([tuple(s) for s in p["seqs"]], p["sampled"])
        rows.append([1.0, w.seqs, w.flops, w.bytes])
        y.append(p["seconds"])
    return np.array(rows), np.array(y)


def nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares, relative errors, by trying every subset of columns."""
    wa, wy = a / y[:, None], np.ones_like(y)
    best, best_err = np.zeros(a.shape[1]), np.inf
    for k in range(1, a.shape[1] + 1):
        for cols in itertools.combinations(range(a.shape[1]), k):
            sub = wa[:, cols]
            scale = np.abs(sub).max(axis=0)
            coef, *_ = np.linalg.lstsq(sub / scale, wy, rcond=None)
            coef = coef / scale
            if (coef < 0).any():
                continue
            err = float(np.sum((sub @ coef - wy) ** 2))
            if err < best_err:
                best_err = err
                best = np.zeros(a.shape[1])
                best[list(cols)] = coef
    return best


def fit(spec_name: str, points: list[dict]) -> tuple[dict, dict]:
    """The cpu preset's fitted constants and the fit's relative errors."""
    a, y = features(spec_name, points)
    c = nnls(a, y)
    constants = {"step_overhead_s": float(c[0]), "seq_overhead_s": float(c[1]),
                 "flops": float(1.0 / c[2]) if c[2] > 0 else 1e30,
                 "mem_bw": float(1.0 / c[3]) if c[3] > 0 else 1e30}
    rel = np.abs(a @ c - y) / y
    return constants, {"points": len(y), "median_rel_error": round(float(np.median(rel)), 3),
                       "p90_rel_error": round(float(np.percentile(rel, 90)), 3)}


def measured_latencies(validation: list[dict]) -> tuple[list[float], list[float]]:
    ttft, itl = [], []
    for r in validation:
        times = r["token_times"]
        if times:
            ttft.append(times[0] - r["arrival"])
            itl.extend(b - a for a, b in zip(times, times[1:]))
    return ttft, itl


def predict(doc: dict, constants: dict) -> dict:
    bs = doc["block_size"]
    reqs = [SimRequest(r["id"], r["arrival"], r["prompt_tokens"], r["output_tokens"], tuple(r["hash_ids"]),
                       r.get("session")) for r in doc["validation"]]
    cfg = SimConfig(trace="", model=doc["model"], accelerator="cpu", devices=1, topology=Topology(colocated=1),
                    kv_cache_gb=doc["kv_cache_bytes"] / 1e9, scheduler=SchedulerConfig(), cpu_constants=constants)
    return Fleet(cfg, make_trace(reqs, bs)).run()


def calibrate(path: str | Path, constants: dict | None = None) -> dict:
    """Fit on the file's own steps, or, given `constants` (fitted on another run), only predict."""
    doc = json.loads(Path(path).read_text())
    if constants is None:
        constants, quality = fit(doc["model"], doc["fit_points"])
    else:
        quality = {"fitted_on": "another run (--cpu-constants)"}
    sim = predict(doc, constants)
    ttft, itl = measured_latencies(doc["validation"])
    rows = {}
    for metric, values in (("ttft_ms", ttft), ("itl_ms", itl)):
        for q in (50, 90):
            meas = float(np.percentile(values, q)) * 1000.0
            pred = sim[metric][f"p{q}"]
            rows[f"{metric} p{q}"] = {"measured": round(meas, 1), "predicted": pred,
                                      "ratio": round(pred / meas, 3), "within_20pct": abs(pred / meas - 1) <= 0.2}
    return {"measured_on": doc["meta"], "fitted_cpu_constants": constants, "fit": quality,
            "predicted_vs_measured": rows, "all_within_20pct": all(r["within_20pct"] for r in rows.values()),
            "cache_hit_ratio": {"predicted": sim["cache"]["hit_ratio"]}}
