"""Benchmarks: each writes JSON under bench/results/ and prints a table."""
