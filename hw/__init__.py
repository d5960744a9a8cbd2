"""Tessera hardware generator (Amaranth 0.5).

Import :mod:`hw.config` freely: it does not import Amaranth. Everything else in this package
builds hardware.
"""
