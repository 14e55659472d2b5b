"""The benchmark's results: one Cell per measurement (or per skipped one, with its reason), written
as JSON and as a markdown table of times and fractions of the bound (bounds.py)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Cell:
    model: str
    step: str                      # decode | prefill | hf-decode
    variant: str                   # eager | triton | triton+graphs | transformers
    batch: int
    tokens: int                    # decode: context per sequence; prefill: chunk
    seconds: float | None = None   # median step time; None: skipped
    bound_s: float | None = None
    skipped: str | None = None     # why it was not measured

    @property
    def fraction(self) -> float | None:
        return self.bound_s / self.seconds if self.seconds and self.bound_s is not None else None


def write(out: Path, header: dict, cells: list[Cell]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = [{**asdict(c), "fraction": c.fraction} for c in cells]
    (out / "gpu-bench.json").write_text(json.dumps({**header, "cells": rows}, indent=1) + "\n")
    (out / "gpu-bench.md").write_text(markdown(header, cells))


def markdown(header: dict, cells: list[Cell]) -> str:
    lim = header["limits"]
    lines = [f"# GPU bench: {header['device_name']}, torch {header['torch']}, {header['dtype']}"
             + (" (smoke: tiny shapes)" if header["smoke"] else ""), "",
             f"Machine limits measured here: device-to-device copy {lim['copy_bytes_per_s'] / 1e9:.1f} GB/s "
             f"(read + write, {lim['copy_bytes'] / 2**20:.0f} MiB), matmul "
             f"{lim['matmul_flops'] / 1e12:.2f} TFLOP/s ({lim['matmul_n']}^3). A step is the forward, the LM "
             f"head and an argmax; `of bound` = the step's lower bound from those limits over the time measured.",
             ""]
    for model in dict.fromkeys(c.model for c in cells):
        lines += [f"## {model}", "",
                  "| step | variant | batch | context / chunk | time | tokens/s | bound | of bound |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        skipped = []
        for c in (c for c in cells if c.model == model):
            if c.seconds is None:
                skipped.append(f"- {c.step} {c.variant} batch {c.batch}, {c.tokens}: {c.skipped}")
                continue
            produced = c.batch if c.step != "prefill" else c.tokens
            rate = f"{produced / c.seconds:,.0f}" if c.seconds > 0 else ""   # below the timer's resolution
            bound = f"{c.bound_s * 1e3:.3f} ms" if c.bound_s is not None else ""
            frac = f"{c.fraction:.2f}" if c.fraction is not None else ""
            lines.append(f"| {c.step} | {c.variant} | {c.batch} | {c.tokens} | {c.seconds * 1e3:.3f} ms | "
                         f"{rate} | {bound} | {frac} |")
        lines += ["", *(["Not measured:", *skipped, ""] if skipped else [])]
    return "\n".join(lines) + "\n"
