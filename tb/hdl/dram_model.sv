// Tessera simulation-only memory model and clock. Never synthesized.
//
// tessera_clock: free-running clock generated in HDL, so simulations never step the clock from
// Python (10 time units per cycle).
//
// tessera_dram: byte-addressed memory of 2**ADDR_BITS bytes (ADDR_BITS <= 32) with three ports.
// Under Verilator the bytes live in a paged store (tb/hdl/dram_pages.cpp, through DPI-C) that
// allocates only the 64 KiB pages written; under Icarus (no DPI) in a dense array, which
// tb/tools.py allows up to ICARUS_MAX_ADDR_BITS. Both behave the same cycle for cycle: a read
// sees the memory as it was before the same cycle's write. The ports:
//   A and B read ports: one beat of A_BYTES / B_BYTES per accepted request; a request is
//     accepted when `*_ready` is high; data returns `*_LAT` cycles after acceptance, in order.
//     A B request reads its B_BYTES bytes at element stride `b_stride` (1 = contiguous) and
//     costs the bandwidth of the whole beats its span covers (tessera_strided_cost).
//   C write port: one beat of C_BYTES with a byte strobe per accepted request; written at once
//     and acknowledged on `c_bvalid` C_LAT cycles after acceptance, in order.
// Each port is rate-limited by a credit counter: every cycle it earns *_BPC bytes until the
// presented request's cost is covered (then it holds: an idle port does not bank bandwidth), and
// a request is accepted only when its whole cost is available. So a port sustains exactly *_BPC
// bytes per cycle, at most one beat per cycle. When *_BPC does not divide the cost, the held
// credit can exceed the cost by up to *_BPC - 1 bytes (docs/bench.md, "Ports slower than a
// beat": the cycle model is exact only for rates that divide the beat).
//
// Stall injection (off unless asked for, so cycle counts stay exact by default): plusargs
// +STALL_SEED=<n> and, per port P in A, B, C, +STALL_P=<0..255> (probability /256 that the port
// refuses a request in a cycle) and +DELAY_P=<0..255> (probability /256 that the port holds back
// its next response (read data or write acknowledgement) in a cycle; responses stay in order and
// queue in a FIFO of FIFO_DEPTH, and the port accepts no more requests than that FIFO can hold).
// Each port draws from its own xorshift32 stream seeded from STALL_SEED, so a run is
// reproducible from the seed on every simulator.
//
// Host access (testbench only):
//   `load` (one cycle): reads the $readmemh-format file named by plusarg +DRAM_IMAGE=<path>
//     (whitespace-separated bytes with `@<hex address>` directives; unnamed bytes keep their
//     contents).
//   `dump` (one cycle): writes bytes [dump_lo, dump_hi] to +DRAM_DUMP=<path> in $writememh's
//     format.
`timescale 1ns/1ps

module tessera_clock (output reg clk);
    initial clk = 1'b0;
    always #5 clk = ~clk;
endmodule

module tessera_port_credit #(parameter BEAT = 16, parameter BPC = 16) (
    input  wire        clk,
    input  wire        rst,
    input  wire        take,   // a request is accepted this cycle
    input  wire [31:0] need,   // bytes the presented request costs (BEAT for a dense beat)
    output wire        ready
);
    // Credit in bytes. It grows by BPC per cycle until the presented request's cost is
    // available and then holds (an idle port does not bank bandwidth); an accepted request
    // spends its cost. Leftover credit is kept, so the sustained rate is exactly BPC bytes per
    // cycle.
    reg [31:0] credit;
    wire [31:0] earned = credit + BPC;
    assign ready = (credit >= need);
    always @(posedge clk) begin
        if (rst)
            credit <= BEAT;
        else if (take)
            credit <= earned - need;
        else if (credit < need)
            credit <= earned;
    end
endmodule

// Bytes of bandwidth a read of BEAT elements at element stride `stride` costs: the whole beats
// its span covers, at most one beat per element.
module tessera_strided_cost #(parameter BEAT = 16) (
    input  wire [15:0] stride,
    output wire [31:0] need
);
    wire [31:0] span  = (BEAT - 1) * ((stride == 0) ? 32'd1 : {16'd0, stride}) + 1;
    wire [31:0] beats = (span + BEAT - 1) / BEAT;
    assign need = ((beats > BEAT) ? BEAT : beats) * BEAT;
endmodule

// One xorshift32 stream: `hold` is high with probability prob/256 in each cycle.
module tessera_jitter #(parameter [31:0] SALT = 32'h9e3779b9) (
    input  wire        clk,
    input  wire        rst,
    input  wire [31:0] seed,
    input  wire [7:0]  prob,
    output wire        hold
);
    reg [31:0] x;
    wire [31:0] x1 = x ^ (x << 13);
    wire [31:0] x2 = x1 ^ (x1 >> 17);
    wire [31:0] x3 = x2 ^ (x2 << 5);
    always @(posedge clk) begin
        if (rst) x <= ((seed ^ SALT) == 32'd0) ? SALT : (seed ^ SALT);
        else x <= x3;
    end
    assign hold = (prob != 8'd0) && (x[31:24] < prob);
endmodule

// In-order response queue of a port under +DELAY_P: `in_valid`/`in_data` from the fixed-latency
// pipeline, released one per cycle unless `hold`. `count` is the number queued.
module tessera_delay_fifo #(parameter WIDTH = 8, parameter DEPTH = 64) (
    input  wire             clk,
    input  wire             rst,
    input  wire             in_valid,
    input  wire [WIDTH-1:0] in_data,
    input  wire             hold,
    output wire             out_valid,
    output wire [WIDTH-1:0] out_data,
    output reg  [15:0]      count
);
    reg [WIDTH-1:0] q [0:DEPTH-1];
    reg [15:0] rp, wp;
    assign out_valid = (count != 16'd0) && !hold;
    assign out_data = q[rp];
    always @(posedge clk) begin
        if (rst) begin
            rp <= 16'd0; wp <= 16'd0; count <= 16'd0;
        end else begin
            if (in_valid) begin
                q[wp] <= in_data;
                wp <= (wp + 16'd1) % DEPTH;
            end
            if (out_valid) rp <= (rp + 16'd1) % DEPTH;
            count <= count + (in_valid ? 16'd1 : 16'd0) - (out_valid ? 16'd1 : 16'd0);
        end
    end
endmodule

module tessera_dram #(
    parameter ADDR_BITS = 24,
    parameter A_BYTES = 16, parameter A_BPC = 16, parameter A_LAT = 32,
    parameter B_BYTES = 16, parameter B_BPC = 16, parameter B_LAT = 32,
    parameter C_BYTES = 64, parameter C_BPC = 64, parameter C_LAT = 32
) (
    input  wire                   clk,
    input  wire                   rst,
    input  wire [ADDR_BITS-1:0]   a_addr,
    input  wire                   a_valid,
    output wire                   a_ready,
    output wire [A_BYTES*8-1:0]   a_rdata,
    output wire                   a_rvalid,
    input  wire [ADDR_BITS-1:0]   b_addr,
    input  wire [15:0]            b_stride,    // element stride of a B read (1 = dense)
    input  wire                   b_valid,
    output wire                   b_ready,
    output wire [B_BYTES*8-1:0]   b_rdata,
    output wire                   b_rvalid,
    input  wire [ADDR_BITS-1:0]   c_addr,
    input  wire [C_BYTES*8-1:0]   c_data,
    input  wire [C_BYTES-1:0]     c_strb,
    input  wire                   c_valid,
    output wire                   c_ready,
    output wire                   c_bvalid,
    input  wire                   load,
    input  wire                   dump,
    input  wire [ADDR_BITS-1:0]   dump_lo,
    input  wire [ADDR_BITS-1:0]   dump_hi
);
    localparam [ADDR_BITS-1:0] MASK = {ADDR_BITS{1'b1}};
    localparam FIFO_DEPTH = 64;
`ifdef VERILATOR
    // paged store in C++ (tb/hdl/dram_pages.cpp): holds only the pages written
    import "DPI-C" function int tessera_mem_init(input int addr_bits);
    import "DPI-C" function longint unsigned tessera_mem_get64(input longint unsigned addr);
    import "DPI-C" function byte unsigned tessera_mem_get8(input longint unsigned addr);
    import "DPI-C" function void tessera_mem_put64(input longint unsigned addr,
        input longint unsigned data, input byte unsigned strb);
    import "DPI-C" function longint tessera_mem_load(input string path);
    import "DPI-C" function int tessera_mem_dump(input string path, input longint unsigned lo,
        input longint unsigned hi);
    initial begin
        if (tessera_mem_init(ADDR_BITS) != 0) $fatal(1, "tessera_dram: ADDR_BITS=%0d", ADDR_BITS);
    end
`else
    // dense byte array (Icarus has no DPI): 2**ADDR_BITS bytes, so tb/tools.py builds Icarus
    // models only for small address spaces
    reg [7:0] mem [0:(1<<ADDR_BITS)-1];
`endif

    // -- stall injection settings (plusargs, read once) --------------------------------------
    reg [31:0] stall_seed;
    reg [7:0] stall_a, stall_b, stall_c, delay_a, delay_b, delay_c;
    integer arg;
    initial begin
        stall_seed = 32'd1;
        stall_a = 0; stall_b = 0; stall_c = 0; delay_a = 0; delay_b = 0; delay_c = 0;
        if ($value$plusargs("STALL_SEED=%d", arg)) stall_seed = arg;
        if ($value$plusargs("STALL_A=%d", arg)) stall_a = arg;
        if ($value$plusargs("STALL_B=%d", arg)) stall_b = arg;
        if ($value$plusargs("STALL_C=%d", arg)) stall_c = arg;
        if ($value$plusargs("DELAY_A=%d", arg)) delay_a = arg;
        if ($value$plusargs("DELAY_B=%d", arg)) delay_b = arg;
        if ($value$plusargs("DELAY_C=%d", arg)) delay_c = arg;
    end
    wire a_stall, b_stall, c_stall, a_hold, b_hold, c_hold;
    tessera_jitter #(.SALT(32'h1b873593)) j_sa (.clk(clk), .rst(rst), .seed(stall_seed), .prob(stall_a), .hold(a_stall));
    tessera_jitter #(.SALT(32'hcc9e2d51)) j_sb (.clk(clk), .rst(rst), .seed(stall_seed), .prob(stall_b), .hold(b_stall));
    tessera_jitter #(.SALT(32'h85ebca6b)) j_sc (.clk(clk), .rst(rst), .seed(stall_seed), .prob(stall_c), .hold(c_stall));
    tessera_jitter #(.SALT(32'hc2b2ae35)) j_da (.clk(clk), .rst(rst), .seed(stall_seed), .prob(delay_a), .hold(a_hold));
    tessera_jitter #(.SALT(32'h27d4eb2f)) j_db (.clk(clk), .rst(rst), .seed(stall_seed), .prob(delay_b), .hold(b_hold));
    tessera_jitter #(.SALT(32'h165667b1)) j_dc (.clk(clk), .rst(rst), .seed(stall_seed), .prob(delay_c), .hold(c_hold));

    // requests in flight (accepted, response not yet delivered), to bound the delay FIFOs
    reg [15:0] a_out, b_out, c_out;
    wire a_room = (delay_a == 0) || (a_out < FIFO_DEPTH - 1);
    wire b_room = (delay_b == 0) || (b_out < FIFO_DEPTH - 1);
    wire c_room = (delay_c == 0) || (c_out < FIFO_DEPTH - 1);
    wire a_credit_ok, b_credit_ok, c_credit_ok;
    assign a_ready = a_credit_ok && !a_stall && a_room;
    assign b_ready = b_credit_ok && !b_stall && b_room;
    assign c_ready = c_credit_ok && !c_stall && c_room;

    wire [31:0] b_need;
    tessera_strided_cost #(.BEAT(B_BYTES)) b_cost (.stride(b_stride), .need(b_need));
    tessera_port_credit #(.BEAT(A_BYTES), .BPC(A_BPC)) a_credit (
        .clk(clk), .rst(rst), .take(a_valid && a_ready), .need(A_BYTES), .ready(a_credit_ok));
    tessera_port_credit #(.BEAT(B_BYTES), .BPC(B_BPC)) b_credit (
        .clk(clk), .rst(rst), .take(b_valid && b_ready), .need(b_need), .ready(b_credit_ok));
    tessera_port_credit #(.BEAT(C_BYTES), .BPC(C_BPC)) c_credit (
        .clk(clk), .rst(rst), .take(c_valid && c_ready), .need(C_BYTES), .ready(c_credit_ok));

    // read data pipelines: stage 0 is filled at acceptance, the last stage is the output
    reg [A_BYTES*8-1:0] a_pipe [0:A_LAT-1];
    reg                 a_vpipe [0:A_LAT-1];
    reg [B_BYTES*8-1:0] b_pipe [0:B_LAT-1];
    reg                 b_vpipe [0:B_LAT-1];
    reg                 c_vpipe [0:C_LAT-1];
    // without +DELAY_P the pipeline end is the port's response; with it, a FIFO releases them
    wire a_fv, b_fv, c_fv;
    wire [A_BYTES*8-1:0] a_fd;
    wire [B_BYTES*8-1:0] b_fd;
    wire [0:0] c_fd;
    wire [15:0] a_fc, b_fc, c_fc;
    tessera_delay_fifo #(.WIDTH(A_BYTES*8), .DEPTH(FIFO_DEPTH)) a_q (
        .clk(clk), .rst(rst), .in_valid(a_vpipe[A_LAT-1] && delay_a != 0),
        .in_data(a_pipe[A_LAT-1]), .hold(a_hold), .out_valid(a_fv), .out_data(a_fd),
        .count(a_fc));
    tessera_delay_fifo #(.WIDTH(B_BYTES*8), .DEPTH(FIFO_DEPTH)) b_q (
        .clk(clk), .rst(rst), .in_valid(b_vpipe[B_LAT-1] && delay_b != 0),
        .in_data(b_pipe[B_LAT-1]), .hold(b_hold), .out_valid(b_fv), .out_data(b_fd),
        .count(b_fc));
    tessera_delay_fifo #(.WIDTH(1), .DEPTH(FIFO_DEPTH)) c_q (
        .clk(clk), .rst(rst), .in_valid(c_vpipe[C_LAT-1] && delay_c != 0), .in_data(1'b1),
        .hold(c_hold), .out_valid(c_fv), .out_data(c_fd), .count(c_fc));
    assign c_bvalid = (delay_c != 0) ? c_fv : c_vpipe[C_LAT-1];
    assign a_rdata  = (delay_a != 0) ? a_fd : a_pipe[A_LAT-1];
    assign a_rvalid = (delay_a != 0) ? a_fv : a_vpipe[A_LAT-1];
    assign b_rdata  = (delay_b != 0) ? b_fd : b_pipe[B_LAT-1];
    assign b_rvalid = (delay_b != 0) ? b_fv : b_vpipe[B_LAT-1];
    always @(posedge clk) begin
        if (rst) begin
            a_out <= 16'd0; b_out <= 16'd0; c_out <= 16'd0;
        end else begin
            a_out <= a_out + ((a_valid && a_ready) ? 16'd1 : 16'd0) - (a_rvalid ? 16'd1 : 16'd0);
            b_out <= b_out + ((b_valid && b_ready) ? 16'd1 : 16'd0) - (b_rvalid ? 16'd1 : 16'd0);
            c_out <= c_out + ((c_valid && c_ready) ? 16'd1 : 16'd0) - (c_bvalid ? 16'd1 : 16'd0);
        end
    end

    reg [A_BYTES*8-1:0] a_word;
    reg [B_BYTES*8-1:0] b_word;
    integer i, s, w;
`ifdef VERILATOR
    reg [63:0] q;
    reg [7:0] strb;
`endif
    always @(posedge clk) begin
        // blocking temporaries: the bytes of this cycle's accepted requests
`ifdef VERILATOR
        // read on acceptance only (data of a stage whose valid bit is low is never looked at),
        // then write: a read sees the memory before this cycle's write, as the dense array's
        // nonblocking writes give
        if (a_valid && a_ready)
            for (i = 0; i < A_BYTES; i = i + 1) begin
                if (i % 8 == 0) q = tessera_mem_get64(64'(a_addr) + 64'(i));
                a_word[i*8 +: 8] = q[(i % 8)*8 +: 8];
            end
        if (b_valid && b_ready) begin
            if (b_stride == 16'd1)
                for (i = 0; i < B_BYTES; i = i + 1) begin
                    if (i % 8 == 0) q = tessera_mem_get64(64'(b_addr) + 64'(i));
                    b_word[i*8 +: 8] = q[(i % 8)*8 +: 8];
                end
            else
                for (i = 0; i < B_BYTES; i = i + 1)
                    b_word[i*8 +: 8] = tessera_mem_get8(64'(b_addr) + 64'(i) * 64'(b_stride));
        end
        if (!rst && c_valid && c_ready)
            for (w = 0; w < C_BYTES; w = w + 8) begin
                for (i = 0; i < 8; i = i + 1) begin
                    q[i*8 +: 8] = (w + i < C_BYTES) ? c_data[(w + i)*8 +: 8] : 8'd0;
                    strb[i] = (w + i < C_BYTES) && c_strb[w + i];
                end
                if (strb != 8'd0) tessera_mem_put64(64'(c_addr) + 64'(w), q, strb);
            end
`else
        for (i = 0; i < A_BYTES; i = i + 1)
            a_word[i*8 +: 8] = mem[(a_addr + i) & MASK];
        for (i = 0; i < B_BYTES; i = i + 1)
            b_word[i*8 +: 8] = mem[(b_addr + i * b_stride) & MASK];
`endif
        if (rst) begin
            for (s = 0; s < A_LAT; s = s + 1) a_vpipe[s] <= 1'b0;
            for (s = 0; s < B_LAT; s = s + 1) b_vpipe[s] <= 1'b0;
            for (s = 0; s < C_LAT; s = s + 1) c_vpipe[s] <= 1'b0;
        end else begin
            c_vpipe[0] <= c_valid && c_ready;
            for (s = 1; s < C_LAT; s = s + 1) c_vpipe[s] <= c_vpipe[s-1];
            a_vpipe[0] <= a_valid && a_ready;
            b_vpipe[0] <= b_valid && b_ready;
            for (s = 1; s < A_LAT; s = s + 1) a_vpipe[s] <= a_vpipe[s-1];
            for (s = 1; s < B_LAT; s = s + 1) b_vpipe[s] <= b_vpipe[s-1];
        end
        a_pipe[0] <= a_word;
        b_pipe[0] <= b_word;
        for (s = 1; s < A_LAT; s = s + 1) a_pipe[s] <= a_pipe[s-1];
        for (s = 1; s < B_LAT; s = s + 1) b_pipe[s] <= b_pipe[s-1];
    end

`ifndef VERILATOR
    always @(posedge clk) begin
        if (!rst && c_valid && c_ready)
            for (w = 0; w < C_BYTES; w = w + 1)
                if (c_strb[w]) mem[(c_addr + w) & MASK] <= c_data[w*8 +: 8];
    end
`endif

`ifdef VERILATOR
    string image_path, dump_path;
    initial begin
        if (!$value$plusargs("DRAM_IMAGE=%s", image_path)) image_path = "dram_image.hex";
        if (!$value$plusargs("DRAM_DUMP=%s", dump_path)) dump_path = "dram_dump.hex";
    end
    always @(posedge clk) begin
        if (load && tessera_mem_load(image_path) < 0) $fatal(1, "tessera_dram: load failed");
        if (dump && tessera_mem_dump(dump_path, 64'(dump_lo), 64'(dump_hi)) != 0)
            $fatal(1, "tessera_dram: dump failed");
    end
`else
    reg [8*1024-1:0] image_path;
    reg [8*1024-1:0] dump_path;
    initial begin
        if (!$value$plusargs("DRAM_IMAGE=%s", image_path)) image_path = "dram_image.hex";
        if (!$value$plusargs("DRAM_DUMP=%s", dump_path)) dump_path = "dram_dump.hex";
    end
    always @(posedge clk) begin
        if (load) $readmemh(image_path, mem);
        if (dump) $writememh(dump_path, mem, dump_lo, dump_hi);
    end
`endif
endmodule
