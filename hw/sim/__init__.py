"""Simulation-only tops (never synthesized)."""
