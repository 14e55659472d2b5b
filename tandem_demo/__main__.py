"""`python -m tandem_demo <command>`: build, train and evaluate the demo models (see tandem_demo/cli.py)."""

import sys

from tandem_demo.cli import main

sys.exit(main())
