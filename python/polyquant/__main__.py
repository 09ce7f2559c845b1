"""`python -m polyquant ...` is the `polyquant` command (see polyquant._tools.cli)."""

import sys

from polyquant._tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
