"""CRC processors restarted through a synchronous reset (the image's and the A loads' CRCs)."""

from amaranth import ResetInserter
from amaranth.lib import crc as lib_crc

__all__ = ["restartable_crc"]


def restartable_crc(algorithm: lib_crc.Algorithm, data_width: int, restart):
    """``algorithm``'s processor over ``data_width``-bit words, set to its initial value by
    ``restart`` (a 1-bit value) instead of the processor's ``start``.

    Returns ``(processor, elaboratable)``: drive and read the processor's ``data``, ``valid``,
    ``crc`` as in Amaranth (leave its ``start`` undriven), and add ``elaboratable`` as the
    submodule. In a cycle with ``restart`` high the state returns to the initial value and a word
    offered with ``valid`` is dropped; from the next cycle on words are taken as usual.

    Why: ``amaranth.lib.crc.Processor`` selects the initial value with ``start`` at every leaf
    of its XOR network, so ``start`` meets the network's full depth (seven LUT levels at 64-bit
    words on an ECP5: an 11.5 ns path of the whole 8x8 design, session 21); a reset meets only
    the register.
    """
    processor = algorithm(data_width=data_width).create()
    return processor, ResetInserter(restart)(processor)
