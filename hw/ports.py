"""Memory-port and register-bus interfaces shared by the accelerator and its harness."""

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ReadPort", "WritePort", "CsrBus", "named_members"]


class ReadPort:
    """A pipelined read port: one beat per accepted request, in order, fixed latency.

    The requester drives ``addr``/``valid``; a request is accepted in a cycle where ``ready`` is
    high. Its data arrives on ``rdata`` with ``rvalid`` high exactly once, in request order, a
    fixed number of cycles later; responses cannot be refused. Addresses are byte addresses and
    need not be aligned. A *strided* port also carries ``stride``: the beat's ``data_bytes``
    bytes are read at ``addr + i * stride`` (1 = contiguous).
    """

    class Signature(wiring.Signature):
        def __init__(self, *, addr_bits: int, data_bytes: int, strided: bool = False):
            self.addr_bits = addr_bits
            self.data_bytes = data_bytes
            self.strided = strided
            members = {
                "addr":   Out(addr_bits),
                "valid":  Out(1),
                "ready":  In(1),
                "rdata":  In(8 * data_bytes),
                "rvalid": In(1),
            }
            if strided:
                members["stride"] = Out(16)
            super().__init__(members)

        def __eq__(self, other):
            return (type(other) is type(self) and other.addr_bits == self.addr_bits
                    and other.data_bytes == self.data_bytes and other.strided == self.strided)

        def __repr__(self):
            return (f"ReadPort.Signature(addr_bits={self.addr_bits}, "
                    f"data_bytes={self.data_bytes}, strided={self.strided})")


class WritePort:
    """A write port: one beat per accepted request, with a byte strobe. Every accepted beat is
    acknowledged by one ``bvalid`` pulse, in order, a fixed number of cycles later (when the data
    is in memory)."""

    class Signature(wiring.Signature):
        def __init__(self, *, addr_bits: int, data_bytes: int):
            self.addr_bits = addr_bits
            self.data_bytes = data_bytes
            super().__init__({
                "addr":  Out(addr_bits),
                "data":  Out(8 * data_bytes),
                "strb":  Out(data_bytes),
                "valid": Out(1),
                "ready": In(1),
                "bvalid": In(1),
            })

        def __eq__(self, other):
            return (type(other) is type(self) and other.addr_bits == self.addr_bits
                    and other.data_bytes == self.data_bytes)

        def __repr__(self):
            return f"WritePort.Signature(addr_bits={self.addr_bits}, data_bytes={self.data_bytes})"


class CsrBus:
    """A 32-bit register bus: word addresses; a write is taken at the clock edge where ``we`` is
    high and reaches its register :data:`spec.regmap.CSR_WRITE_LATENCY` edges later; a read's
    ``rdata`` is valid :data:`spec.regmap.CSR_READ_LATENCY` clock edges after ``addr`` (which
    holds still meanwhile)."""

    class Signature(wiring.Signature):
        def __init__(self, *, addr_bits: int):
            self.addr_bits = addr_bits
            super().__init__({
                "addr":  Out(addr_bits),
                "wdata": Out(32),
                "we":    Out(1),
                "rdata": In(32),
            })

        def __eq__(self, other):
            return type(other) is type(self) and other.addr_bits == self.addr_bits

        def __repr__(self):
            return f"CsrBus.Signature(addr_bits={self.addr_bits})"


def named_members(prefix: str, names, member) -> dict:
    """``{prefix + name: member}`` for every name: a family of like signature members (for
    example ``c_<counter>: Out(32)`` for every performance counter)."""
    return {f"{prefix}{name}": member for name in names}
