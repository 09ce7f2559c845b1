"""Developer tools of the polyquant repository (not part of the installed package)."""
