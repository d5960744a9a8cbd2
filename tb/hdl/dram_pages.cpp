// Tessera simulation-only paged byte store: the memory of tessera_dram under Verilator
// (tb/hdl/dram_model.sv; docs/simulation.md "Memory model"). Never synthesized.
//
// The address space (2**addr_bits bytes, up to 32 bits) is split into 64 KiB pages. A page is
// allocated, zero-filled, on its first write; reading a page never written returns zeros and
// allocates nothing. So a simulation holds only the pages its image and outputs touch: a 103 MB
// weight matrix costs 103 MB, whatever the address space.
//
// The DPI-C functions below are the model's whole interface. Addresses wrap at the address
// space (they are masked to addr_bits), as the dense array of the Icarus model does.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>
#if __has_include("Vtop__Dpi.h")
#include "Vtop__Dpi.h"   // Verilator's prototypes of the imports: the signatures must match
#endif

namespace {

constexpr unsigned kPageBits = 16;
constexpr uint64_t kPageBytes = uint64_t(1) << kPageBits;

struct PagedStore {
    unsigned addr_bits = 0;
    uint64_t mask = 0;
    std::vector<std::unique_ptr<uint8_t[]>> pages;

    bool ready() const { return addr_bits != 0; }

    uint8_t get(uint64_t addr) const {
        addr &= mask;
        const auto& page = pages[addr >> kPageBits];
        return page ? page[addr & (kPageBytes - 1)] : 0;
    }

    uint8_t* page_for(uint64_t addr) {
        auto& page = pages[(addr & mask) >> kPageBits];
        if (!page) page.reset(new uint8_t[kPageBytes]());   // value-initialised: zeros
        return page.get();
    }

    void set(uint64_t addr, uint8_t value) {
        addr &= mask;
        page_for(addr)[addr & (kPageBytes - 1)] = value;
    }
};

PagedStore store;

void require_ready(const char* what) {
    if (!store.ready()) {
        std::fprintf(stderr, "tessera_dram: %s before tessera_mem_init\n", what);
        std::abort();
    }
}

int hex_digit(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = std::tolower(c);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

}  // namespace

extern "C" {

// Called once from tessera_dram's initial block: sets the address space and forgets any
// earlier contents. Returns 0, or -1 (with a message) for addr_bits outside [16, 32] (the
// AccelConfig range; a space of at least one page keeps the word reads within the mask).
int tessera_mem_init(int addr_bits) {
    if (addr_bits < int(kPageBits) || addr_bits > 32) {
        std::fprintf(stderr, "tessera_dram: ADDR_BITS=%d, the paged model holds %u..32\n",
                     addr_bits, kPageBits);
        return -1;
    }
    store.addr_bits = unsigned(addr_bits);
    store.mask = (uint64_t(1) << addr_bits) - 1;
    uint64_t count = (store.mask >> kPageBits) + 1;
    store.pages.clear();
    store.pages.resize(count);
    return 0;
}

// Eight bytes from addr (little-endian: byte addr in bits [7:0]).
unsigned long long tessera_mem_get64(unsigned long long addr) {
    require_ready("read");
    uint64_t word = 0;
    uint64_t off = addr & store.mask & (kPageBytes - 1);
    const auto& page = store.pages[(addr & store.mask) >> kPageBits];
    if (off + 8 <= kPageBytes) {
        if (page) std::memcpy(&word, page.get() + off, 8);   // little-endian host
        return word;
    }
    for (unsigned i = 0; i < 8; ++i) word |= uint64_t(store.get(addr + i)) << (8 * i);
    return word;
}

unsigned char tessera_mem_get8(unsigned long long addr) {
    require_ready("read");
    return store.get(addr);
}

// Writes the bytes of data whose bit is set in strb (bit i: byte addr + i).
void tessera_mem_put64(unsigned long long addr, unsigned long long data, unsigned char strb) {
    require_ready("write");
    for (unsigned i = 0; i < 8; ++i)
        if (strb >> i & 1) store.set(addr + i, uint8_t(data >> (8 * i)));
}

// $readmemh's format for a byte array: whitespace-separated hex bytes, `@<hex address>`
// directives, `//` line comments and `/* */` comments; bytes the file does not name keep their
// contents. Returns the number of bytes written, or -1 (with a message) when the file cannot be
// read, holds something else, or names an address outside the space (bytes before the bad
// token are written).
long long tessera_mem_load(const char* path) {
    require_ready("load");
    std::FILE* f = std::fopen(path, "rb");
    if (!f) {
        std::fprintf(stderr, "tessera_dram: cannot open memory image %s\n", path);
        return -1;
    }
    std::vector<char> buf(1 << 20);
    uint64_t addr = 0, written = 0;
    // parser state: a token in progress (hex value, directive flag), comments
    uint64_t value = 0;
    int digits = 0;
    bool directive = false, slash = false, star = false;
    bool line_comment = false, block_comment = false;
    long long bad = -1;
    auto finish = [&]() -> bool {   // the end of a token: store a byte or move the address
        if (directive) {
            if (digits == 0 || value > store.mask) return false;
            addr = value;
        } else if (digits > 0) {
            if (value > 0xff || addr > store.mask) return false;
            store.set(addr++, uint8_t(value));
            ++written;
        }
        value = 0, digits = 0, directive = false;
        return true;
    };
    uint64_t pos = 0;
    size_t got;
    while (bad < 0 && (got = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
        for (size_t i = 0; i < got && bad < 0; ++i, ++pos) {
            int c = static_cast<unsigned char>(buf[i]);
            if (line_comment) {
                line_comment = c != '\n';
            } else if (block_comment) {
                block_comment = !(star && c == '/');
                star = c == '*';
            } else if (slash) {
                slash = false;
                if (c == '/') line_comment = true;
                else if (c == '*') block_comment = true, star = false;
                else bad = (long long)pos;
            } else if (c == '/' || std::isspace(c)) {
                if (!finish()) bad = (long long)pos;
                slash = c == '/';
            } else if (c == '@' && digits == 0 && !directive) {
                directive = true;
            } else if (hex_digit(c) >= 0 && digits < 16) {
                value = value << 4 | uint64_t(hex_digit(c));
                ++digits;
            } else {
                bad = (long long)pos;   // not hex (4-state x/z digits do not fit a byte store)
            }
        }
    }
    bool read_error = std::ferror(f) != 0;
    std::fclose(f);
    if (read_error) {
        std::fprintf(stderr, "tessera_dram: error reading memory image %s\n", path);
        return -1;
    }
    if (bad < 0 && (slash || block_comment || !finish())) bad = (long long)pos;
    if (bad >= 0) {
        std::fprintf(stderr, "tessera_dram: %s: not a byte-wide $readmemh image at byte %lld\n",
                     path, bad);
        return -1;
    }
    return (long long)written;
}

// $writememh's format: an `@<hex address>` line, then the bytes [lo, hi] 16 to a line.
// Returns 0, or -1 (with a message) when lo > hi or the file cannot be written.
int tessera_mem_dump(const char* path, unsigned long long lo, unsigned long long hi) {
    require_ready("dump");
    if (lo > hi) {
        std::fprintf(stderr, "tessera_dram: dump of [%#llx, %#llx]: lo > hi\n", lo, hi);
        return -1;
    }
    std::FILE* f = std::fopen(path, "wb");
    if (!f) {
        std::fprintf(stderr, "tessera_dram: cannot write memory dump %s\n", path);
        return -1;
    }
    std::fprintf(f, "@%llx\n", lo);
    static const char hex[] = "0123456789abcdef";
    std::vector<char> line;
    bool ok = true;
    for (uint64_t a = lo; a <= hi; a += 16) {
        line.clear();
        for (uint64_t b = a; b <= hi && b < a + 16; ++b) {
            uint8_t v = store.get(b);
            if (b != a) line.push_back(' ');
            line.push_back(hex[v >> 4]);
            line.push_back(hex[v & 15]);
        }
        line.push_back('\n');
        ok = ok && std::fwrite(line.data(), 1, line.size(), f) == line.size();
        if (a + 16 < a) break;   // hi at the top of a 64-bit space
    }
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) std::fprintf(stderr, "tessera_dram: error writing memory dump %s\n", path);
    return ok ? 0 : -1;
}

}  // extern "C"
