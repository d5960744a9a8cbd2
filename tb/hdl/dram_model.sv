// Tessera simulation-only memory model and clock. Never synthesized.
//
// tessera_clock: free-running clock generated in HDL, so simulations never step the clock from
// Python (10 time units per cycle).
//
// tessera_dram: byte-addressed memory of 2**ADDR_BITS bytes with three ports:
//   A and B read ports: one beat of A_BYTES / B_BYTES per accepted request; a request is
//     accepted when `*_ready` is high; data returns `*_LAT` cycles after acceptance, in order.
//     A B request reads its B_BYTES bytes at element stride `b_stride` (1 = contiguous) and
//     costs the bandwidth of the whole beats its span covers (tessera_strided_cost).
//   C write port: one beat of C_BYTES with a byte strobe per accepted request; written at once
//     and acknowledged on `c_bvalid` C_LAT cycles after acceptance, in order.
// Each port is rate-limited by a credit counter: every cycle it earns *_BPC bytes (capped at one
// beat), and a request is accepted only when a whole beat of credit is available. So a port
// sustains exactly *_BPC bytes per cycle, at most one beat per cycle.
//
// Host access (testbench only):
//   `load` (one cycle): $readmemh from the file named by plusarg +DRAM_IMAGE=<path>. The file
//     holds whitespace-separated bytes with `@<hex address>` directives; unnamed bytes keep
//     their contents.
//   `dump` (one cycle): $writememh of bytes [dump_lo, dump_hi] to +DRAM_DUMP=<path>.
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
    reg [7:0] mem [0:(1<<ADDR_BITS)-1];

    wire [31:0] b_need;
    tessera_strided_cost #(.BEAT(B_BYTES)) b_cost (.stride(b_stride), .need(b_need));
    tessera_port_credit #(.BEAT(A_BYTES), .BPC(A_BPC)) a_credit (
        .clk(clk), .rst(rst), .take(a_valid && a_ready), .need(A_BYTES), .ready(a_ready));
    tessera_port_credit #(.BEAT(B_BYTES), .BPC(B_BPC)) b_credit (
        .clk(clk), .rst(rst), .take(b_valid && b_ready), .need(b_need), .ready(b_ready));
    tessera_port_credit #(.BEAT(C_BYTES), .BPC(C_BPC)) c_credit (
        .clk(clk), .rst(rst), .take(c_valid && c_ready), .need(C_BYTES), .ready(c_ready));

    // read data pipelines: stage 0 is filled at acceptance, the last stage is the output
    reg [A_BYTES*8-1:0] a_pipe [0:A_LAT-1];
    reg                 a_vpipe [0:A_LAT-1];
    reg [B_BYTES*8-1:0] b_pipe [0:B_LAT-1];
    reg                 b_vpipe [0:B_LAT-1];
    reg                 c_vpipe [0:C_LAT-1];
    assign c_bvalid = c_vpipe[C_LAT-1];
    assign a_rdata  = a_pipe[A_LAT-1];
    assign a_rvalid = a_vpipe[A_LAT-1];
    assign b_rdata  = b_pipe[B_LAT-1];
    assign b_rvalid = b_vpipe[B_LAT-1];

    reg [A_BYTES*8-1:0] a_word;
    reg [B_BYTES*8-1:0] b_word;
    integer i, s;
    always @(posedge clk) begin
        // blocking temporaries: the bytes of this cycle's accepted requests
        for (i = 0; i < A_BYTES; i = i + 1)
            a_word[i*8 +: 8] = mem[(a_addr + i) & MASK];
        for (i = 0; i < B_BYTES; i = i + 1)
            b_word[i*8 +: 8] = mem[(b_addr + i * b_stride) & MASK];
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

    integer w;
    always @(posedge clk) begin
        if (!rst && c_valid && c_ready)
            for (w = 0; w < C_BYTES; w = w + 1)
                if (c_strb[w]) mem[(c_addr + w) & MASK] <= c_data[w*8 +: 8];
    end

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
endmodule
