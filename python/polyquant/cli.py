"""The ``polyquant`` console script's entry point (``polyquant.cli:main``); the command line itself
lives in ``polyquant._tools.cli``, whose public names are re-exported here."""

from ._tools.cli import (
    EXIT_ERROR,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_MISMATCH,
    EXIT_OK,
    EXIT_STATUS_HELP,
    build_parser,
    info_command,
    info_report,
    main,
)

__all__ = ["main", "build_parser", "info_report", "info_command", "EXIT_OK", "EXIT_MISMATCH", "EXIT_ERROR",
           "EXIT_INTERNAL", "EXIT_INTERRUPTED", "EXIT_STATUS_HELP"]
