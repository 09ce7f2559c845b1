"""`python -m polyquant ...` is the `polyquant` command (see polyquant.cli)."""

import sys

from polyquant.cli import main

if __name__ == "__main__":
    sys.exit(main())
