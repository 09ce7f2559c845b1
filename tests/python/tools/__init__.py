"""The polyquant command line, its runner and benchmarks, and the bundled example."""
