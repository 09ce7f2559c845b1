"""Golden-data generators: one module per reference (``python -m tools.golden.<family>`` from the
repository root, in that reference's environment) over the helpers in ``common``; how each is run
is in docs/golden-data.md."""
