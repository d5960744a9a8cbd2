"""The CSR map: offsets, coverage of the descriptor and the counters, naming."""

import dataclasses
import re

import pytest

from spec.desc import DESC_FIELDS
from spec.layouts import LAYER_WORDS
from spec.regmap import COUNTERS, CSR_ADDR_BITS, REG, REGISTERS, Register


def test_regmap_offsets_unique_and_contiguous_from_zero():
    offsets = [r.offset for r in REGISTERS]
    assert offsets == list(range(len(REGISTERS)))


def test_regmap_fits_csr_addr_bits():
    assert len(REGISTERS) <= 1 << CSR_ADDR_BITS
    assert all(0 <= r.offset < 1 << CSR_ADDR_BITS for r in REGISTERS)


def test_regmap_names_unique_and_upper_case():
    names = [r.name for r in REGISTERS]
    assert len(set(names)) == len(names)
    for name in names:
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", name), name


def test_regmap_reg_indexes_every_register():
    assert len(REG) == len(REGISTERS)
    assert all(REG[r.name] is r for r in REGISTERS)


def test_regmap_access_and_doc():
    for r in REGISTERS:
        assert r.access in ("r", "w", "rw"), r
        assert isinstance(r.doc, str) and r.doc.strip(), r


def test_regmap_control_registers():
    # firmware ABI: control words first
    assert [(r.name, r.offset, r.access) for r in REGISTERS[:4]] == [
        ("CTRL", 0, "w"), ("STATUS", 1, "r"), ("ERROR", 2, "r"), ("CONFIG_ID", 3, "r")]


def test_regmap_every_descriptor_field_has_a_register_in_order():
    regs = [REG[f"DESC_{name.upper()}"] for name in DESC_FIELDS]
    assert all(r.access == "rw" for r in regs)
    offsets = [r.offset for r in regs]
    # consecutive, in DESC_FIELDS (= GemmDescriptor.words()) order
    assert offsets == list(range(offsets[0], offsets[0] + len(DESC_FIELDS)))


def test_regmap_every_counter_has_a_register_in_order():
    regs = [REG[f"PERF_{name.upper()}"] for name in COUNTERS]
    assert all(r.access == "r" for r in regs)
    offsets = [r.offset for r in regs]
    assert offsets == list(range(offsets[0], offsets[0] + len(COUNTERS)))
    assert len(set(COUNTERS)) == len(COUNTERS)


def test_regmap_has_no_other_registers():
    expected = {"CTRL", "STATUS", "ERROR", "CONFIG_ID", "IMAGE_ADDR", "LAYER_INDEX"}
    expected |= {f"DESC_{n.upper()}" for n in DESC_FIELDS}
    expected |= {f"LAYER_{n.upper()}" for n in LAYER_WORDS if not n.startswith("desc_")}
    expected |= {f"PERF_{n.upper()}" for n in COUNTERS}
    assert set(REG) == expected


def test_regmap_counters_cover_the_cycle_categories_and_bytes():
    # total_cycles is split into the six *_cycles categories documented in spec/regmap.py
    cats = [c for c in COUNTERS if c.endswith("_cycles") and c != "total_cycles"]
    assert COUNTERS[0] == "total_cycles" and len(cats) == 6
    assert {"rd_a_bytes", "rd_b_bytes", "wr_c_bytes"} <= set(COUNTERS)


def test_regmap_register_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        REGISTERS[0].offset = 5
    assert isinstance(REGISTERS, tuple) and all(isinstance(r, Register) for r in REGISTERS)
