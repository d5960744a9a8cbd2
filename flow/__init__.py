"""Orchestration: what drives the other layers.

Compiling ONNX networks into firmware images and ``.tsr`` archives (:mod:`flow.compile`),
running them on the golden device or the RTL (:mod:`flow.execute`, :mod:`flow.net_run`),
measuring tilings on the RTL for the tuning database (:mod:`flow.measure`) and the
``tessera`` command (:mod:`flow.tessera`, :mod:`flow.cli`, :mod:`flow.tunedb_cli`). It may
import every other package; nothing but ``bench``, ``examples`` and tests imports it.
"""
