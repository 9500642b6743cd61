"""`python -m redline.tui` is `redline`."""

import sys

from .cli.arguments import main

if __name__ == "__main__":
    sys.exit(main())
