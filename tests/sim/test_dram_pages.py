"""The paged byte store behind the Verilator memory model (tb/hdl/dram_pages.cpp), compiled as a
shared library and driven through ctypes: the DPI functions' contract without a simulator build.
The RTL tests run the same code inside every Verilator simulation."""

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from hw.build import TB_HDL

SOURCE = TB_HDL / "dram_pages.cpp"


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler (c++, g++ or clang++) on PATH: Verilator needs one too")
    out = tmp_path_factory.mktemp("dram_pages") / "libdram_pages.so"
    subprocess.run([cxx, "-std=c++17", "-O1", "-Wall", "-Werror", "-shared", "-fPIC",
                    str(SOURCE), "-o", str(out)], check=True)
    so = ctypes.CDLL(str(out))
    u64 = ctypes.c_ulonglong
    so.tessera_mem_init.argtypes, so.tessera_mem_init.restype = [ctypes.c_int], ctypes.c_int
    so.tessera_mem_get64.argtypes, so.tessera_mem_get64.restype = [u64], u64
    so.tessera_mem_get8.argtypes, so.tessera_mem_get8.restype = [u64], ctypes.c_ubyte
    so.tessera_mem_put64.argtypes, so.tessera_mem_put64.restype = [u64, u64, ctypes.c_ubyte], None
    so.tessera_mem_load.argtypes, so.tessera_mem_load.restype = [ctypes.c_char_p], ctypes.c_longlong
    so.tessera_mem_dump.argtypes, so.tessera_mem_dump.restype = [ctypes.c_char_p, u64, u64], \
        ctypes.c_int
    return so


def read(lib, addr: int, size: int) -> bytes:
    return bytes(lib.tessera_mem_get8(addr + i) for i in range(size))


def write(lib, addr: int, data: bytes) -> None:
    for i in range(0, len(data), 8):
        chunk = data[i:i + 8]
        lib.tessera_mem_put64(addr + i, int.from_bytes(chunk.ljust(8, b"\0"), "little"),
                              (1 << len(chunk)) - 1)


@pytest.mark.parametrize("bits", [0, 15, 33, -1])
def test_init_refuses_address_spaces_it_cannot_hold(lib, bits):
    assert lib.tessera_mem_init(bits) == -1


def test_unwritten_bytes_read_zero_and_writes_cross_pages(lib):
    assert lib.tessera_mem_init(32) == 0
    assert lib.tessera_mem_get64(0xFFFF_FF00) == 0 and lib.tessera_mem_get8(12345) == 0
    data = bytes(range(1, 25))
    write(lib, 0x1_0000 - 12, data)                 # straddles the first 64 KiB page boundary
    assert read(lib, 0x1_0000 - 12, 24) == data
    assert lib.tessera_mem_get64(0x1_0000 - 4) == int.from_bytes(data[8:16], "little")
    assert read(lib, 0x1_0000 - 13, 1) == b"\0" and read(lib, 0x1_0000 + 12, 1) == b"\0"
    lib.tessera_mem_put64(0x20, 0x1122334455667788, 0b1010_0101)   # only strobed bytes
    assert read(lib, 0x20, 8) == bytes([0x88, 0, 0x66, 0, 0, 0x33, 0, 0x11])
    assert lib.tessera_mem_init(32) == 0            # init forgets earlier contents
    assert read(lib, 0x1_0000 - 12, 24) == bytes(24)


def test_addresses_wrap_at_the_address_space(lib):
    for bits in (16, 20):                           # 16: a single page is the whole space
        assert lib.tessera_mem_init(bits) == 0
        write(lib, (1 << bits) - 4, bytes([1, 2, 3, 4, 5, 6, 7, 8]))
        assert read(lib, 0, 4) == bytes([5, 6, 7, 8])
        assert lib.tessera_mem_get64((1 << bits) - 4) == int.from_bytes(bytes(range(1, 9)),
                                                                        "little")
        assert read(lib, (1 << bits) + 1, 1) == bytes([6])


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    pytest.skip("no /proc/self/status: resident memory is not measurable here")


def test_only_written_pages_cost_memory(lib):
    """Sixteen bytes spread over a 4 GiB space allocate sixteen 64 KiB pages, not the space."""
    assert lib.tessera_mem_init(32) == 0
    before = _rss_kib()
    for i in range(16):
        lib.tessera_mem_put64(i << 28, i + 1, 1)
    assert all(lib.tessera_mem_get8(i << 28) == i + 1 for i in range(16))
    for page in range(0, 1 << 16, 7):               # reads of unwritten pages allocate nothing
        assert lib.tessera_mem_get64((page << 16) + 8) == 0
    grown = _rss_kib() - before
    assert grown < 8 << 10, f"{grown} KiB resident for 16 written pages"


def test_load_reads_readmemh_images(lib, tmp_path):
    assert lib.tessera_mem_init(24) == 0
    write(lib, 0x300, b"\x77\x77")
    image = tmp_path / "image.hex"
    image.write_text("// a comment\n@100\n01 02 ff\nA0 /* block\n comment */ 0b\n"
                     "@FFFFFE 10 20\n@300 5")
    assert lib.tessera_mem_load(str(image).encode()) == 8
    assert read(lib, 0x100, 5) == bytes([1, 2, 0xFF, 0xA0, 0x0B])
    assert read(lib, 0xFFFFFE, 2) == bytes([0x10, 0x20])
    assert read(lib, 0x300, 2) == b"\x05\x77"        # bytes the file does not name are kept


@pytest.mark.parametrize("text", ["01 100\n", "@\n", "01 zz\n", "01 / 02\n", "01 /* open",
                                  "@1000000 01\n", "@FFFFFF 01 02\n"])
def test_load_refuses_what_is_not_a_byte_image(lib, tmp_path, text):
    assert lib.tessera_mem_init(24) == 0
    image = tmp_path / "bad.hex"
    image.write_text(text)
    assert lib.tessera_mem_load(str(image).encode()) == -1
    assert lib.tessera_mem_load(str(tmp_path / "missing.hex").encode()) == -1


def test_dump_writes_what_the_testbench_reads(lib, tmp_path):
    """``tb.harness.Harness.dump`` reads whitespace-separated bytes after an ``@`` line."""
    assert lib.tessera_mem_init(31) == 0
    data = bytes(range(200, 237))
    write(lib, 0x7FFF_FFF0 - 20, data)
    out = tmp_path / "dump.hex"
    assert lib.tessera_mem_dump(str(out).encode(), 0x7FFF_FFF0 - 21, 0x7FFF_FFF0 + 16) == 0
    lines = out.read_text().splitlines()
    assert lines[0] == "@7fffffdb"
    words = " ".join(lines[1:]).split()
    assert bytes.fromhex("".join(words)) == b"\0" + data
    assert lib.tessera_mem_dump(str(tmp_path / "no" / "dir.hex").encode(), 0, 1) == -1
    assert lib.tessera_mem_dump(str(out).encode(), 8, 7) == -1
