"""The contract between Tessera's hardware and its software, in plain Python (no Amaranth).

Everything both sides must agree on lives here, once: the configuration and its derived
numbers (:mod:`spec.config`), descriptors and their rules (:mod:`spec.desc`), record and image
layouts (:mod:`spec.layouts`, :mod:`spec.record`), the register map (:mod:`spec.regmap`), the
sequencer's schedule and traffic (:mod:`spec.schedule`), the bit-exact golden arithmetic
(:mod:`spec.golden`), the convolution run-table entry (:mod:`spec.tables`) and the C headers
(:mod:`spec.headers`). ``hw`` builds RTL from it; ``planner``, ``firmware`` and ``tb`` read it
and never the Amaranth modules.
"""
