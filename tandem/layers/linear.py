"""Linear and Embedding without random initialization: their weights always come from a checkpoint.

Skipping init matters when the model is built on the meta device before loading: meta-device
random init goes through torch's decompositions, which cost seconds on first use.

CPU bfloat16 weights can be packed once into oneDNN's blocked layout (`Linear.pack`): F.linear
re-lays the weight out on every call, which dominates at the few rows of a decode step. Measured
on this project's 2-core AMX machine at one thread: 1.5-2.4x faster at 1-64 rows, 0.9-1.6x at
512-2048 (benchmarks/linear_cpu.py). Packed outputs are bitwise equal to F.linear's in bfloat16
(tests/layers/test_linear.py); float32 is never packed, its packed results differ in the last bits.
Packing may run in a background thread while the model serves (`PackingThread`): a Linear
switches from its mapped weight to the packed one between two calls, and outputs do not change.
"""

from __future__ import annotations

import functools
import os
import threading

import torch
import torch.nn.functional as F
from torch import nn

from tandem.compute_threads import compute_alone

# the row count oneDNN tunes the packed layout for; any row count works with it
_PACK_ROWS_HINT = 64


def can_pack(dtype: torch.dtype, device: torch.device) -> bool:
    """True where Linear.pack applies: bfloat16 on a CPU whose torch has oneDNN (mkldnn) ops and
    whose instruction set oneDNN packs bfloat16 for (AVX-512 or AVX-NE-CONVERT; not plain AVX2)."""
    return device.type == "cpu" and dtype == torch.bfloat16 and _cpu_packs_bfloat16()


@functools.cache
def _cpu_packs_bfloat16() -> bool:
    """One tiny pack tried once per process: oneDNN refuses at run time where the CPU lacks it."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(16, 16, dtype=torch.bfloat16), _PACK_ROWS_HINT)
    except RuntimeError:
        return False
    return True


class Linear(nn.Linear):
    # weight [out, in], bias [out]; y = x @ weight.T + bias
    packed_weight: torch.Tensor | None = None  # oneDNN layout; set by pack(), which drops `weight`

    def reset_parameters(self) -> None:
        pass

    def pack(self) -> None:
        """Replace `weight` by its oneDNN-packed copy (caller checks can_pack). The packed copy
        is the only one left: the checkpoint's memory-mapped weight is released."""
        self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), _PACK_ROWS_HINT)
        self.weight = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x [T, in] -> [T, out]. pack() may run in another thread: it sets packed_weight before it
        # drops weight, so one of the two reads below finds a tensor.
        packed = self.packed_weight
        if packed is None:
            weight = self.weight
            if weight is not None:
                return F.linear(x, weight, self.bias)
            packed = self.packed_weight
        return torch.ops.mkldnn._linear_pointwise(x, packed, self.bias, "none", [], "")


class Embedding(nn.Embedding):
    # weight [vocab, hidden]
    def reset_parameters(self) -> None:
        pass


def pack_linears(model: nn.Module) -> int:
    """Pack every Linear of `model` (see Linear.pack); returns how many."""
    layers = [m for m in model.modules() if isinstance(m, Linear) and m.weight is not None]
    for m in layers:
        m.pack()
    return len(layers)


def _lower_this_threads_priority() -> None:
    """A low CPU priority (nice 10) for the calling thread; Linux schedules threads one by one.
    On one busy core (the 125M bfloat16 bench model) packing then takes ~0.1 s from the first
    request instead of ~0.2 s and finishes ~2 s into continuous load (nice 19: 0.07 s, but ~13 s
    of unpacked, slower steps; nice 0: 0.17 s, 0.4 s). A no-op where not supported."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):
        pass


class PackingThread(threading.Thread):
    """pack_linears(model) off the start-up path: the model serves with its mapped weights
    meanwhile (slower products, same outputs). `join()` waits for the last layer. Not a daemon:
    interpreter exit waits for it (a thread killed inside a torch op aborts the process)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(name="tandem-pack-weights", daemon=False)
        self._model = model
        self.error: BaseException | None = None   # a failed pack leaves the layer on its weight

    def run(self) -> None:
        _lower_this_threads_priority()   # a worker owns its cores: packing must not slow serving
        compute_alone()                  # ... nor make the engine's OpenMP team sleep at its barriers
        with torch.no_grad():
            try:
                pack_linears(self._model)
            except BaseException as e:  # noqa: BLE001 - reported by the owner, never fatal
                self.error = e
