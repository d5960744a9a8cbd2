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
    product register). Each multiplier reads its operands from a copy of the neighbours'
    operand registers, loaded with them (``pe<i>_<j>_am`` / ``_bm``; PE ``(0, 0)`` reads
    ``i_a00`` / ``i_b00``, its driver's copies), so an FPGA can place the copy beside the
    multiplier and the original beside the next PE.

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
    i_a00, i_b00 : ``In(8)``: row 0 of ``i_a`` and column 0 of ``i_b`` again, from a second
    register beside the first (PE ``(0, 0)``'s multiplier reads them; every other multiplier
    reads a copy the array makes, below)
    i_tag : ``In(tag_bits)``
    o_valid : ``Out(1)``
    o_row : ``Out(array_cols * 32)`` (column ``j`` in bits ``32j .. 32j+31``)
    o_r : ``Out(range(array_rows))``
    o_tag : ``Out(tag_bits)``
    e_valid, e_r, e_tag : the values ``o_valid``, ``o_r``, ``o_tag`` take in the next cycle
    f_valid, f_r, f_tag : the values ``e_valid``, ``e_r``, ``e_tag`` take in the next cycle (the
    accumulator's read-modify-write reads a row two cycles before the row arrives)
    f_first, f_first_tag : ``f_r == array_rows - 1`` (a tile's first row) and that row's tag,
    straight from the tag's pipeline register (``f_tag`` selects between it and the tag kept
    for the tile's later rows): the accumulator's read address starts from these

    With ``mesh=True`` the array also has the depthwise *mesh mode* of issue 18 (design and
    golden model: docs/architecture.md, :mod:`spec.dwmesh`; the compute engine does not drive
    it yet). Every PE then holds an int8 ``x`` that makes one move per cycle (``i_move``:
    :data:`MOVES`): ``FILL`` shifts the mesh up two rows and loads rows ``R-2`` and ``R-1``
    from ``i_fill`` (row ``R-2`` in its low half), ``LEFT`` / ``RIGHT`` / ``UP`` rotate its
    rows and columns as rings. A *tap* (``i_tap``, with ``i_first`` / ``i_last`` as for a
    beat) multiplies every ``x`` by its region's weight (``i_w``: four int8, region ``q`` in
    bits ``8q ..``; ``i_split`` (:data:`SPLITS`) says which: ``2 * (i >= R/2) + (j >= C/2)``
    for quadrants, ``i >= R/2`` for halves, 0 for the whole mesh) into the PE's accumulator, before the same cycle's move.
    All PEs compute at once, so the last tap's results leave ``mesh_latency`` cycles later, all
    columns together, bottom row first, with ``o_tag`` = ``i_tag`` sampled with the last tap.
    The mesh's inputs are registered once inside (the mode once per PE, beside its multiplier,
    the region weights per region), so no input reaches a multiplier within the cycle: the
    mesh acts a cycle after its inputs. The modes take turns: ``i_mesh`` (which switches every
    PE's multiplier to ``x`` and the weights) may rise only once a GEMM tile's last beat has
    passed the last PE (``R + C - 2`` cycles after it entered); a GEMM beat may enter
    :attr:`mesh_gemm_gap` cycles after the last mesh tap. As with GEMM tiles, a tile of either
    kind must span at least ``R`` cycles so that the drains do not overlap.

    i_mesh : ``In(1)`` (only with ``mesh``): this cycle's ``i_tap``, ``i_first``, ``i_last`` are
    the mesh's; ``i_move`` : ``In(3)``; ``i_split`` : ``In(2)``; ``i_fill`` : ``In(2 * C * 8)``;
    ``i_w`` : ``In(32)``; ``i_tap`` : ``In(1)``
    """

    #: ``i_move`` codes of the mesh mode
    MOVES = {"HOLD": 0, "FILL": 1, "LEFT": 2, "RIGHT": 3, "UP": 4}
    #: ``i_split`` codes: (row rings, column rings) per mesh
    SPLITS = {(1, 1): 0, (2, 2): 1, (2, 1): 2}

    def __init__(self, cfg: AccelConfig, *, tag_bits: int, mesh: bool = False):
        if tag_bits < 1:
            raise ValueError(f"SystolicArray tag_bits must be >= 1, not {tag_bits!r}")
        rows, cols = cfg.array_rows, cfg.array_cols
        self._cfg = cfg
        self._tag_bits = tag_bits
        self._mesh = mesh
        extra = {"i_mesh": In(1), "i_move": In(3), "i_split": In(2),
                 "i_fill": In(2 * cols * cfg.operand_bits), "i_w": In(4 * cfg.operand_bits),
                 "i_tap": In(1)} if mesh else {}
        super().__init__({**extra,
            "i_valid": In(1),
            "i_first": In(1),
            "i_last": In(1),
            "i_a": In(rows * cfg.operand_bits),
            "i_b": In(cols * cfg.operand_bits),
            "i_a00": In(cfg.operand_bits),
            "i_b00": In(cfg.operand_bits),
            "i_tag": In(tag_bits),
            "o_valid": Out(1),
            "o_row": Out(cols * cfg.acc_bits),
            "o_r": Out(range(rows)),
            "o_tag": Out(tag_bits),
            "e_valid": Out(1),
            "e_r": Out(range(rows)),
            "e_tag": Out(tag_bits),
            "f_valid": Out(1),
            "f_r": Out(range(rows)),
            "f_tag": Out(tag_bits),
            "f_first": Out(1),
            "f_first_tag": Out(tag_bits),
        })

    @property
    def latency(self) -> int:
        """Cycles from the last beat of a tile to its first result row."""
        return self._cfg.array_rows + self._cfg.array_cols

    #: Cycles from a mesh tile's last tap to its first result row: the input registers, the
    #: product register, then the capture, read straight out (every column at once, no deskew)
    mesh_latency = 3
    #: Cycles from a mesh tile's last tap to the first GEMM beat that may follow it (the last
    #: tap reaches the multipliers a cycle late, when the GEMM beat would reach PE (0, 0))
    mesh_gemm_gap = 2

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        R, C = cfg.array_rows, cfg.array_cols
        ob, ab = cfg.operand_bits, cfg.acc_bits

        # -- input skew: row i of A (with the beat flags) is delayed i cycles, column j of B j.
        def delayed(sig, n, name, *, data=False, before=None):
            """``sig`` ``n`` cycles later; ``data``: no reset (only flags and tags need one).
            ``before``: a list that gets what the last stage loads (``None`` when ``n`` is 0)."""
            last_d = None
            for stage in range(n):
                nxt = Signal.like(sig, name=f"{name}_d{stage + 1}", reset_less=data)
                m.d.sync += nxt.eq(sig)
                last_d, sig = sig, nxt
            if before is not None:
                before.append(last_d)
            return sig

        a_west, f_west, b_north = [], [], []
        a_west_d, b_north_d = [], []
        flags_in = Cat(self.i_valid, self.i_first, self.i_last)
        for i in range(R):
            a_west.append(delayed(self.i_a[ob * i:ob * (i + 1)], i, f"skew_a{i}", data=True,
                                  before=a_west_d))
            f_west.append(delayed(flags_in, i, f"skew_f{i}"))
        for j in range(C):
            b_north.append(delayed(self.i_b[ob * j:ob * (j + 1)], j, f"skew_b{j}", data=True,
                                   before=b_north_d))

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

        mesh = self._mesh
        if mesh:
            x, w_pe, mode, t_flags, t_last = self._mesh_logic(m)

        def operands(i, j):
            """What PE ``(i, j)`` takes in: the registers its neighbours (or the skew) hold."""
            return (a_west[i].as_signed() if j == 0 else a_out[i][j - 1],
                    b_north[j].as_signed() if i == 0 else b_out[i - 1][j])

        def loads(i, j):
            """What those registers load (``None`` where the operand is the array's input)."""
            a_d = a_west_d[i] if j == 0 else operands(i, j - 1)[0]
            b_d = b_north_d[j] if i == 0 else operands(i - 1, j)[1]
            return a_d, b_d

        def mul_copy(value, name):
            """A register beside the multiplier that loads what the operand register loads:
            the same value in the same cycle. The operand registers also feed the next PE's
            operand register; on the ECP5 (the multipliers in DSP tiles) the shared register
            sat far from one or the other, 9 ns of routing across each multiplier (session 15).
            ``keep``: synthesis must not merge it back (bench.fpga's script)."""
            if value is None:
                return None
            copy = Signal(signed(ob), name=name, reset_less=True, attrs={"keep": 1})
            m.d.sync += copy.eq(value.as_signed())
            return copy

        for i in range(R):
            for j in range(C):
                a_in, b_in = operands(i, j)
                f_in = f_west[i] if j == 0 else f_out[i][j - 1]
                m.d.sync += [a_out[i][j].eq(a_in), b_out[i][j].eq(b_in), f_out[i][j].eq(f_in)]
                a_d, b_d = loads(i, j)
                a_mul = mul_copy(a_d, f"pe{i}_{j}_am")
                b_mul = mul_copy(b_d, f"pe{i}_{j}_bm")
                a_mul = self.i_a00.as_signed() if a_mul is None else a_mul
                b_mul = self.i_b00.as_signed() if b_mul is None else b_mul
                # The product is registered (FPGA multipliers are slow), so the accumulation
                # happens one cycle after the operands pass: with the flags the PE forwards.
                prod = Signal(signed(2 * ob), name=f"pe{i}_{j}_prod")
                prod_q = Signal(signed(2 * ob), name=f"pe{i}_{j}_p", reset_less=True)
                if mesh:
                    # one operand pair per mode, selected by the mode of this cycle's input
                    m.d.comb += prod.eq(Mux(mode[i][j], x[i][j], a_mul)
                                        * Mux(mode[i][j], w_pe[i][j], b_mul))
                    flags = Mux(t_flags[0], t_flags, f_out[i][j])
                else:
                    m.d.comb += prod.eq(a_mul * b_mul)
                    flags = f_out[i][j]
                m.d.sync += prod_q.eq(prod)
                valid, first, last = flags[0], flags[1], flags[2]
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
            m.d.sync += load.eq((f_bottom[0] & f_bottom[2]) | (t_last if mesh else 0))
            for i in range(1, R):
                with m.If(load):
                    m.d.sync += sh[i][j].eq(cap[i - 1][j])
                with m.Else():
                    m.d.sync += sh[i][j].eq(sh[i - 1][j] if i > 1 else 0)
            bottom = Signal(signed(ab), name=f"drain_out{j}")
            m.d.comb += bottom.eq(Mux(load, cap[R - 1][j], sh[R - 1][j] if R > 1 else 0))
            # Deskew: column j leaves j cycles after column 0; delay it to align the row.
            skewed = delayed(bottom, C - 1 - j, f"deskew{j}", data=True)
            if mesh:
                # mesh tiles finish in every column at once: their rows bypass the deskew
                bypass = Signal(name=f"mesh_rows{j}")
                out_j = Signal(signed(ab), name=f"drain_col{j}")
                m.d.comb += out_j.eq(Mux(bypass, bottom, skewed))
                col_out.append((out_j, bypass))
            else:
                col_out.append((skewed, None))

        # -- tag and row index: the tile's tag enters with its last beat and comes out with its
        # first result row, `latency` cycles later; rows then follow on consecutive cycles.
        tag_in = Signal(self._tag_bits + 1)
        m.d.comb += tag_in.eq(Cat(self.i_tag, self.i_valid & self.i_last))
        assert self.latency >= 2 and self.mesh_latency >= 2        # f_* is two cycles ahead
        tag_f = delayed(tag_in, self.latency - 2, "tag")
        if mesh:
            # a mesh tile's tag joins at the stage that announces its rows on time
            mtag = Signal(self._tag_bits + 1, name="mesh_tag")
            m.d.comb += mtag.eq(Cat(self.i_tag, self.i_mesh & self.i_tap & self.i_last))
            mtag_f = delayed(mtag, self.mesh_latency - 2, "mesh_tag")
            mtag_e = delayed(mtag_f, 1, "mesh_tag_e")
            merged = Signal.like(tag_f, name="tag_f")
            m.d.comb += merged.eq(Mux(mtag_f[-1], mtag_f, tag_f))
            tag_f = merged
            # a mesh tile's rows, from the first one's announcement until all R have left
            rows_left = Signal(range(R + 1), name="mesh_rows_left")
            with m.If(mtag_e[-1]):
                m.d.sync += rows_left.eq(R)
            with m.Elif(rows_left != 0):
                m.d.sync += rows_left.eq(rows_left - 1)
            for _, bypass in col_out:
                m.d.comb += bypass.eq(rows_left != 0)
        # f_*: the rows two cycles ahead of o_* (e_* is f_* registered, o_* is e_* registered)
        row_tag = Signal(self._tag_bits)
        s = Signal(range(R + 1))      # rows still to announce of the current tile
        m.d.comb += [self.f_first.eq(tag_f[-1]), self.f_first_tag.eq(tag_f[:-1])]
        with m.If(tag_f[-1]):
            m.d.comb += [self.f_valid.eq(1), self.f_tag.eq(tag_f[:-1]), self.f_r.eq(R - 1)]
            m.d.sync += [row_tag.eq(tag_f[:-1]), s.eq(R - 1)]
        with m.Elif(s != 0):
            m.d.comb += [self.f_valid.eq(1), self.f_tag.eq(row_tag), self.f_r.eq(s - 1)]
            m.d.sync += s.eq(s - 1)
        m.d.sync += [self.e_valid.eq(self.f_valid), self.e_tag.eq(self.f_tag),
                     self.e_r.eq(self.f_r),
                     self.o_valid.eq(self.e_valid), self.o_tag.eq(self.e_tag),
                     self.o_r.eq(self.e_r)]
        m.d.comb += self.o_row.eq(Cat(*(c for c, _ in col_out)))
        return m

    def _mesh_logic(self, m):
        """The mesh's input registers, its ``x`` registers and moves, each region's weight, and
        the taps' flags (valid, first, last a cycle later, like a PE's forwarded flags). Returns
        ``(x, w, mode, flags, last)``: the ``x`` grid, each PE's weight, each PE's mode, the
        flags and the drain's load request."""
        cfg = self._cfg
        R, C, ob = cfg.array_rows, cfg.array_cols, cfg.operand_bits

        def reg(value, name, *, data=True, keep=False):
            r = Signal.like(value, name=name, reset_less=data, attrs={"keep": 1} if keep else {})
            m.d.sync += r.eq(value)
            return r

        # the inputs, registered: the mode once per PE (duplicates, kept apart by synthesis, so
        # each PE's operand selects are driven from beside them)
        mode = [[reg(self.i_mesh, f"pe{i}_{j}_mode", data=False, keep=True) for j in range(C)]
                for i in range(R)]
        mesh_q = reg(self.i_mesh, "mesh_q", data=False)
        move = reg(self.i_move, "mesh_move", data=False)
        fill_q = reg(self.i_fill, "mesh_fill")
        tap = reg(self.i_tap, "mesh_tap", data=False)
        first = reg(self.i_first, "mesh_first", data=False)
        last_q = reg(self.i_last, "mesh_last_in", data=False)

        x = [[Signal(signed(ob), name=f"pe{i}_{j}_x", reset_less=True) for j in range(C)]
             for i in range(R)]
        mv = self.MOVES
        hr, hc = R // 2, C // 2

        fill = [fill_q[ob * C * r:ob * C * (r + 1)] for r in range(2)]
        for i in range(R):
            for j in range(C):
                with m.Switch(move):
                    with m.Case(mv["FILL"]):
                        src = x[i + 2][j] if i < R - 2 else fill[i - (R - 2)][ob * j:ob * (j + 1)]
                        m.d.sync += x[i][j].eq(src)
                    for name, d in (("LEFT", 1), ("RIGHT", -1)):
                        with m.Case(mv[name]):
                            k = j + d
                            m.d.sync += x[i][j].eq(x[i][k % C])
                    with m.Case(mv["UP"]):
                        m.d.sync += x[i][j].eq(x[(i + 1) % R][j])
        # each quadrant's weight under the input's split, registered per quadrant
        split_rows = (self.i_split == self.SPLITS[(2, 2)]) | (self.i_split == self.SPLITS[(2, 1)])
        split_cols = self.i_split == self.SPLITS[(2, 2)]
        w = [self.i_w[ob * q:ob * (q + 1)].as_signed() for q in range(4)]
        w_quad = [[reg(Mux(split_cols, w[2 * qi + qj], Mux(split_rows, w[qi], w[0])),
                       f"mesh_w{qi}{qj}") for qj in range(2)] for qi in range(2)]
        w_pe = [[w_quad[i // hr][j // hc] for j in range(C)] for i in range(R)]
        flags = Signal(3, name="mesh_flags")
        m.d.sync += flags.eq(Cat(mesh_q & tap, first, last_q))
        last = Signal(name="mesh_last")
        m.d.comb += last.eq(flags[0] & flags[2])
        return x, w_pe, mode, flags, last
