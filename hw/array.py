"""Output-stationary int8 systolic array."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig

__all__ = ["SystolicArray"]


class SystolicArray(wiring.Component):
    """Output-stationary ``array_rows`` x ``array_cols`` int8 systolic array.

    PE ``(i, j)`` owns output ``C[i, j]`` of the current array tile. Every cycle the array accepts
    one *beat*: a column of A (``i_a``, one int8 per row) and a row of B (``i_b``, one int8 per
    column) for one ``k``. A beat with ``i_first`` starts a new tile; the beat with ``i_last``
    ends it. A tile must span at least ``array_rows`` beats (pad with zero beats), which lets the
    result drain of one tile overlap the next tile's compute: consecutive tiles stream with no
    bubble. ``i_valid`` low is a bubble (no accumulation, no flags).

    Timing: if the last beat of a tile is presented in cycle ``c``, its results leave on ``o_row``
    in cycles ``c + array_rows + array_cols + s`` for ``s`` in ``0 .. array_rows-1``, one row per
    cycle, bottom row first (``o_r = array_rows - 1 - s``), with ``o_tag`` = the tile's
    ``i_tag`` (sampled with the last beat). :attr:`latency` is that ``array_rows + array_cols``.

    Each PE registers its int8 x int8 product (a multiplier's output register, for the FPGA's
    sake) and holds three int32 registers: the running sum, a capture of the finished sum, and a
    stage of a per-column shift chain that drains finished sums downwards (the bottom row's
    stage is its capture, read directly, which keeps the latency at ``R + C`` despite the
    product register).

    Parameters
    ----------
    cfg : AccelConfig
        Uses ``array_rows``, ``array_cols``, ``operand_bits``, ``acc_bits``.
    tag_bits : int
        Width of the per-tile tag carried from the last beat to the result rows.

    Members
    -------
    i_valid, i_first, i_last : ``In(1)``
    i_a : ``In(array_rows * 8)``  (row ``i`` in bits ``8i .. 8i+7``, two's complement)
    i_b : ``In(array_cols * 8)``
    i_tag : ``In(tag_bits)``
    o_valid : ``Out(1)``
    o_row : ``Out(array_cols * 32)`` (column ``j`` in bits ``32j .. 32j+31``)
    o_r : ``Out(range(array_rows))``
    o_tag : ``Out(tag_bits)``
    e_valid, e_r, e_tag : the values ``o_valid``, ``o_r``, ``o_tag`` take in the next cycle
    (for a memory read that must be issued a cycle before its row arrives)
    """

    def __init__(self, cfg: AccelConfig, *, tag_bits: int):
        if tag_bits < 1:
            raise ValueError(f"SystolicArray tag_bits must be >= 1, not {tag_bits!r}")
        self._cfg = cfg
        self._tag_bits = tag_bits
        rows, cols = cfg.array_rows, cfg.array_cols
        super().__init__({
            "i_valid": In(1),
            "i_first": In(1),
            "i_last": In(1),
            "i_a": In(rows * cfg.operand_bits),
            "i_b": In(cols * cfg.operand_bits),
            "i_tag": In(tag_bits),
            "o_valid": Out(1),
            "o_row": Out(cols * cfg.acc_bits),
            "o_r": Out(range(rows)),
            "o_tag": Out(tag_bits),
            "e_valid": Out(1),
            "e_r": Out(range(rows)),
            "e_tag": Out(tag_bits),
        })

    @property
    def latency(self) -> int:
        """Cycles from the last beat of a tile to its first result row."""
        return self._cfg.array_rows + self._cfg.array_cols

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        R, C = cfg.array_rows, cfg.array_cols
        ob, ab = cfg.operand_bits, cfg.acc_bits

        # -- input skew: row i of A (with the beat flags) is delayed i cycles, column j of B j.
        def delayed(sig, n, name, *, data=False):
            """``sig`` ``n`` cycles later; ``data``: no reset (only flags and tags need one)."""
            for stage in range(n):
                nxt = Signal.like(sig, name=f"{name}_d{stage + 1}", reset_less=data)
                m.d.sync += nxt.eq(sig)
                sig = nxt
            return sig

        a_west, f_west, b_north = [], [], []
        flags_in = Cat(self.i_valid, self.i_first, self.i_last)
        for i in range(R):
            a_west.append(delayed(self.i_a[ob * i:ob * (i + 1)], i, f"skew_a{i}", data=True))
            f_west.append(delayed(flags_in, i, f"skew_f{i}"))
        for j in range(C):
            b_north.append(delayed(self.i_b[ob * j:ob * (j + 1)], j, f"skew_b{j}", data=True))

        # -- PE grid. Operands, products and sums have no reset: every one is written before it
        # is read (a tile's first beat restarts `acc`), and on an FPGA the reset net would
        # otherwise reach every one of these flip-flops. The flags do reset.
        def grid(shape, what):
            return [[Signal(shape, name=f"pe{i}_{j}_{what}", reset_less=True) for j in range(C)]
                    for i in range(R)]

        a_out, b_out = grid(signed(ob), "a"), grid(signed(ob), "b")
        f_out = [[Signal(3, name=f"pe{i}_{j}_f") for j in range(C)] for i in range(R)]
        acc, cap = grid(signed(ab), "acc"), grid(signed(ab), "cap")
        # (row 0 has no shift stage: see the drain below)
        sh = [row if i else None for i, row in enumerate(grid(signed(ab), "sh"))]

        for i in range(R):
            for j in range(C):
                a_in = a_west[i].as_signed() if j == 0 else a_out[i][j - 1]
                b_in = b_north[j].as_signed() if i == 0 else b_out[i - 1][j]
                f_in = f_west[i] if j == 0 else f_out[i][j - 1]
                m.d.sync += [a_out[i][j].eq(a_in), b_out[i][j].eq(b_in), f_out[i][j].eq(f_in)]
                # The product is registered (FPGA multipliers are slow), so the accumulation
                # happens one cycle after the operands pass: with the flags the PE forwards.
                prod = Signal(signed(2 * ob), name=f"pe{i}_{j}_prod")
                prod_q = Signal(signed(2 * ob), name=f"pe{i}_{j}_p", reset_less=True)
                m.d.comb += prod.eq(a_in * b_in)
                m.d.sync += prod_q.eq(prod)
                valid, first, last = f_out[i][j][0], f_out[i][j][1], f_out[i][j][2]
                total = Signal(signed(ab), name=f"pe{i}_{j}_sum")
                m.d.comb += total.eq(Mux(first, 0, acc[i][j]) + prod_q)
                with m.If(valid):
                    m.d.sync += acc[i][j].eq(total)
                    with m.If(last):
                        m.d.sync += cap[i][j].eq(total)

        # -- drain: the cycle after the last beat's flag leaves the bottom PE of column j, every
        # PE of that column holds its finished sum in `cap`. The bottom row leaves straight from
        # its `cap`; rows above are loaded into the column's shift chain (`sh[i]` takes
        # `cap[i - 1]`), which moves down one row per cycle. The registered product's cycle is
        # thereby won back: the array's latency stays `R + C`.
        col_out = []
        for j in range(C):
            f_bottom = f_out[R - 1][j]
            load = Signal(name=f"drain_load{j}")
            m.d.sync += load.eq(f_bottom[0] & f_bottom[2])
            for i in range(1, R):
                with m.If(load):
                    m.d.sync += sh[i][j].eq(cap[i - 1][j])
                with m.Else():
                    m.d.sync += sh[i][j].eq(sh[i - 1][j] if i > 1 else 0)
            bottom = Signal(signed(ab), name=f"drain_out{j}")
            m.d.comb += bottom.eq(Mux(load, cap[R - 1][j], sh[R - 1][j] if R > 1 else 0))
            # Deskew: column j leaves j cycles after column 0; delay it to align the row.
            col_out.append(delayed(bottom, C - 1 - j, f"deskew{j}", data=True))

        # -- tag and row index: the tile's tag enters with its last beat and comes out with its
        # first result row, `latency` cycles later; rows then follow on consecutive cycles.
        tag_in = Signal(self._tag_bits + 1)
        m.d.comb += tag_in.eq(Cat(self.i_tag, self.i_valid & self.i_last))
        tag_e = delayed(tag_in, self.latency - 1, "tag")
        # e_*: the rows one cycle ahead of o_* (o_* is e_* registered)
        row_tag = Signal(self._tag_bits)
        s = Signal(range(R + 1))      # rows still to announce of the current tile
        with m.If(tag_e[-1]):
            m.d.comb += [self.e_valid.eq(1), self.e_tag.eq(tag_e[:-1]), self.e_r.eq(R - 1)]
            m.d.sync += [row_tag.eq(tag_e[:-1]), s.eq(R - 1)]
        with m.Elif(s != 0):
            m.d.comb += [self.e_valid.eq(1), self.e_tag.eq(row_tag), self.e_r.eq(s - 1)]
            m.d.sync += s.eq(s - 1)
        m.d.sync += [self.o_valid.eq(self.e_valid), self.o_tag.eq(self.e_tag),
                     self.o_r.eq(self.e_r)]
        m.d.comb += self.o_row.eq(Cat(*col_out))
        return m
