"""CRC processors restarted through a synchronous reset (the image's and the A loads' CRCs),
and a CRC split in two pipeline stages (the image's)."""

import functools
import operator

from amaranth import Cat, Module, ResetInserter, Signal, Value
from amaranth.lib import crc as lib_crc
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["restartable_crc", "crc_step_masks", "crc_data_term", "CrcState"]


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


def crc_step_masks(algorithm: lib_crc.Algorithm, data_width: int) -> tuple[tuple[int, ...],
                                                                          tuple[int, ...]]:
    """The update of ``algorithm``'s state register over one ``data_width``-bit word, which is
    linear over GF(2): ``state' = S(state) ^ D(word)``. Returns ``(state_masks, data_masks)``:
    bit ``i`` of ``state'`` is the XOR of the ``state`` bits set in ``state_masks[i]`` and the
    word bits set in ``data_masks[i]``.

    The state is the plain (not reflected, not output-XORed) shift register of the MSB-first
    bitwise CRC; a word's bits enter bit 0 first with ``reflect_input``, else its top bit first.
    :class:`CrcState` holds that state; :func:`crc_data_term` computes ``D(word)``.
    """
    n, poly = algorithm.crc_width, algorithm.polynomial
    top, mask = 1 << (n - 1), (1 << n) - 1
    order = range(data_width) if algorithm.reflect_input else range(data_width - 1, -1, -1)

    def step(state: int, word: int) -> int:
        for j in order:
            feedback = bool(state & top) ^ ((word >> j) & 1)
            state = (state << 1) & mask
            if feedback:
                state ^= poly
        return state

    state_cols = [step(1 << j, 0) for j in range(n)]            # S's column j: S(e_j)
    data_cols = [step(0, 1 << j) for j in range(data_width)]
    state_masks = tuple(sum(1 << j for j in range(n) if state_cols[j] >> i & 1)
                        for i in range(n))
    data_masks = tuple(sum(1 << j for j in range(data_width) if data_cols[j] >> i & 1)
                       for i in range(n))
    return state_masks, data_masks


def _xor_rows(masks, vector: Value) -> Value:
    """The GF(2) product: bit ``i`` is the XOR of ``vector``'s bits set in ``masks[i]``."""
    bits = []
    for mask in masks:
        terms = [vector[j] for j in range(len(vector)) if mask >> j & 1]
        bits.append(functools.reduce(operator.xor, terms) if terms else 0)
    return Cat(*bits)


def crc_data_term(algorithm: lib_crc.Algorithm, word: Value) -> Value:
    """``D(word)`` of :func:`crc_step_masks`: the word's contribution to the next state, an XOR
    network of the word alone (register it, and give the register to :class:`CrcState`)."""
    return _xor_rows(crc_step_masks(algorithm, len(word))[1], word)


class CrcState(wiring.Component):
    """The state register of ``algorithm`` over ``data_width``-bit words whose contributions
    (:func:`crc_data_term`) come from registers: with ``valid`` the state becomes
    ``S(state) ^ term``, with ``restart`` the initial value (a term offered with it is dropped).

    Splitting the update this way puts the word's XOR network (four LUT levels for 64-bit words on
    an ECP5) in the cycle before, in front of the term's register, and leaves the state's own
    (its 32 bits and the term's one) in this cycle: the one-stage processor's seven LUT levels
    between the data register and the state were a 10.9 ns path of the whole 8x8 (session 22).
    Several terms may be XORed before they arrive (the word is linear in them).

    Members
    -------
    term : ``In(crc_width)``; valid, restart : ``In(1)``
    crc : ``Out(crc_width)``: the CRC of the words taken so far (reflected and XORed for output as
        the algorithm says), from the register, one edge after the last term.
    """

    def __init__(self, algorithm: lib_crc.Algorithm, data_width: int):
        self._algorithm = algorithm
        self._state_masks = crc_step_masks(algorithm, data_width)[0]
        n = algorithm.crc_width
        super().__init__({"term": In(n), "valid": In(1), "restart": In(1), "crc": Out(n)})

    def elaborate(self, platform):
        m = Module()
        alg = self._algorithm
        state = Signal(alg.crc_width, init=alg.initial_crc)
        with m.If(self.restart):
            m.d.sync += state.eq(alg.initial_crc)
        with m.Elif(self.valid):
            m.d.sync += state.eq(_xor_rows(self._state_masks, state) ^ self.term)
        out = state[::-1] if alg.reflect_output else state
        m.d.comb += self.crc.eq(out ^ alg.xor_output)
        return m
