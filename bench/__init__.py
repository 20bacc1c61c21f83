"""Benchmarks: harnesses that measure icegres beside a peer in the same run (see README.md)."""
