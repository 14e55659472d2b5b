"""Engine microbenchmarks against HF transformers (issue 2, item 7); same as `tandem bench engine`.

    .venv/bin/python benchmarks/engine_bench.py [--threads 2] [--dtypes float32,bfloat16] [--out DIR]

See tandem/bench/engine_bench.py for what is measured and `--help` for every flag.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's tandem

from tandem.bench.engine_bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
