"""Tessera hardware generator (Amaranth 0.5).

Every module here builds hardware from the contract in :mod:`spec` (configuration,
descriptors, layouts, register map, schedule, golden arithmetic), which imports no Amaranth.
"""
