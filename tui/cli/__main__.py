"""`python -m redline.tui.cli`: the same as the `redline` console script."""

import sys

from .arguments import main

sys.exit(main())
