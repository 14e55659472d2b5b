"""ShardPlan: what one rank of a parallel worker loads of a checkpoint (filled by tandem.parallel
after it reshapes the model on the meta device; read by the loader).

- `slices`: model parameter name -> (dim, index, count): the rank loads part `index` of `count`
  equal parts along `dim` (column-parallel: the output dim 0; row-parallel: the input dim 1);
- `skip`: parameters the rank does not hold (other ranks' experts, a row-parallel bias held by
  the first rank only), as name prefixes;
- `layers`: the pipeline stage's decoder layers [start, end): checkpoint layer j loads into the
  model's layer j - start, others are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


@dataclass(frozen=True)
class ShardPlan:
    slices: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    skip: tuple[str, ...] = ()
    layers: tuple[int, int] | None = None     # [start, end) of this pipeline stage; None: all
    num_ranks: int = 1                        # ranks the weights are spread over (memory estimate)

    def local_name(self, name: str) -> str | None:
        """The rank's parameter for model parameter `name` (global layer index), or None."""
        if self.layers is not None:
            m = _LAYER.match(name)
            if m:
                j = int(m.group(1))
                start, end = self.layers
                if not start <= j < end:
                    return None
                name = f"model.layers.{j - start}.{name[m.end():]}"
        return None if name.startswith(self.skip) else name
