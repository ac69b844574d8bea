// CPU tests of klab/inspect.hpp: cuobjdump's resource-usage and SASS listings parsed from
// fixtures (the formats of the CUDA 12/13 cuobjdump), names, and the occupancy arithmetic.
#include <gtest/gtest.h>

#include <sstream>

#include "klab/error.hpp"
#include "klab/inspect.hpp"

using namespace klab::inspect;

namespace {

// Two cubins of one fatbin (sm_80 and sm_90a), each with the same two kernels.
const char* kUsage = R"(
Fatbin elf code:
================
arch = sm_80
code version = [1,8]
identifier = /src/lessons/01-vector-add/vector_add.cu

Resource usage:
 Common:
  GLOBAL:0
 Function _ZN8lesson0152_GLOBAL__N__4376322c_13_vector_add_cu_995341ca_2557419vector_add_v3_vec16IfEEvPKT_S4_PS2_l:
  REG:40 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:384 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z4tileILi64EEvPf:
  REG:255 STACK:16 SHARED:34304 LOCAL:24 CONSTANT[0]:368 TEXTURE:0 SURFACE:0 SAMPLER:0

Fatbin elf code:
================
arch = sm_90a
code version = [1,8]
identifier = /src/lessons/02-memory-access/transpose.cu

Resource usage:
 Function _Z4tileILi64EEvPf:
  REG:128 STACK:0 SHARED:34304 LOCAL:0 CONSTANT[0]:368 TEXTURE:0 SURFACE:0 SAMPLER:0
)";

const char* kSass = R"(
Fatbin elf code:
================
arch = sm_90a
code version = [1,8]
identifier = /src/lessons/02-memory-access/transpose.cu

	code for sm_90a
		Function : _Z4tileILi64EEvPf
	.headerflags	@"EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                /* 0x00000a00ff017b82 */
                                                                                         /* 0x000fe20000000800 */
        /*0010*/                   FFMA R2, R3, R4, R5 ;                                 /* 0x0000000000067919 */
        /*0020*/               @!P0 FFMA.FTZ R2, R3, R4, R5 ;                            /* 0x0000000000067919 */
        /*0030*/               @P1 MUFU.EX2 R6, R6 ;                                     /* 0x0000000000067919 */
        /*0040*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;       /* 0x0000000000067919 */
        /*0050*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;                         /* 0x0000000000067919 */
        /*0060*/                   EXIT ;                                                /* 0x0000000000067919 */
		Function : _Z5otherv
        /*0000*/                   FFMA R2, R3, R4, R5 ;                                 /* 0x0000000000067919 */
)";

}  // namespace

TEST(Inspect, ParsesResourceUsagePerCubin) {
  std::istringstream in(kUsage);
  const auto ks = parse_resource_usage(in);
  ASSERT_EQ(ks.size(), 3u);
  EXPECT_EQ(ks[0].arch, "sm_80");
  EXPECT_EQ(ks[0].source, "/src/lessons/01-vector-add/vector_add.cu");
  EXPECT_EQ(ks[0].base, "vector_add_v3_vec16");
  EXPECT_EQ(ks[0].regs, 40);
  EXPECT_EQ(ks[0].shared, 0);
  EXPECT_EQ(ks[1].regs, 255);
  EXPECT_EQ(ks[1].stack, 16);
  EXPECT_EQ(ks[1].shared, 34304);
  EXPECT_EQ(ks[1].local, 24);
  EXPECT_EQ(ks[2].arch, "sm_90a");
  EXPECT_EQ(ks[2].source, "/src/lessons/02-memory-access/transpose.cu");
  EXPECT_EQ(ks[2].regs, 128);
  EXPECT_EQ(ks[2].base, "tile");
}

TEST(Inspect, CountsSassOfTheMatchingArchAndSymbolOnly) {
  std::istringstream usage(kUsage), sass(kSass);
  auto ks = parse_resource_usage(usage);
  add_sass(sass, ks);
  EXPECT_EQ(ks[1].instructions, 0) << "the sm_80 cubin's tile has no SASS in the listing";
  const Kernel& t = ks[2];
  EXPECT_EQ(t.instructions, 7);   // the encoding-only line is not an instruction
  EXPECT_EQ(t.sass.at("FFMA"), 2);   // predicated and .FTZ forms are FFMA too
  EXPECT_EQ(t.sass.at("MUFU"), 1);
  EXPECT_EQ(t.sass.at("HGMMA"), 1);
  EXPECT_EQ(t.sass.at("BAR"), 1);
  EXPECT_EQ(t.sass.count("_Z5otherv"), 0u);
}

TEST(Inspect, BaseNames) {
  EXPECT_EQ(base_name("void lesson01::(anonymous namespace)::vector_add_v3_vec16<float>(float const*, long)"),
            "vector_add_v3_vec16");
  EXPECT_EQ(base_name("void map_v2_grid_stride<__half, lesson01::(anonymous namespace)::Gelu>(__half const*, long)"),
            "map_v2_grid_stride");
  EXPECT_EQ(base_name("plain_c_kernel"), "plain_c_kernel");
  EXPECT_EQ(base_name("void k(int)"), "k");
  EXPECT_EQ(demangle("not_mangled"), "not_mangled");
}

TEST(Inspect, ImplNamesAreWholeWords) {
  EXPECT_TRUE(names_impl("softmax_rows_v6_exp2", "v6_exp2"));
  EXPECT_TRUE(names_impl("softmax_rows_v6_exp2", "softmax_rows_v6_exp2"));
  EXPECT_FALSE(names_impl("softmax_rows_v6_exp2", "v6_exp"));   // part of a word
  EXPECT_FALSE(names_impl("softmax_rows_v6_exp2", "6_exp2"));
  EXPECT_FALSE(names_impl("matmul_v2_fused", "fused_x"));
  EXPECT_FALSE(names_impl("matmul_v12_splitk", "v1"));
  EXPECT_FALSE(names_impl("xv1_naive", "v1_naive"));
  EXPECT_FALSE(names_impl("anything", ""));
}

TEST(Inspect, Occupancy) {
  const Limits h100 = limits_for(90);
  Kernel k;
  k.regs = 24;   // 768 registers a warp: 85 warps' worth, more than the 64 an SM holds
  EXPECT_EQ(occupancy(k, 256, h100).blocks, 8);   // 2048 threads an SM
  EXPECT_EQ(occupancy(k, 256, h100).warps_pct, 100);
  EXPECT_EQ(occupancy(k, 256, h100).limiter, "threads");
  k.regs = 64;   // 64 x 32 = 2048 registers a warp: 32 warps, 4 blocks of 8
  EXPECT_EQ(occupancy(k, 256, h100).blocks, 4);
  EXPECT_EQ(occupancy(k, 256, h100).limiter, "registers");
  k.regs = 255;   // rounds up to 8192 registers a warp: 8 warps
  EXPECT_EQ(occupancy(k, 1024, h100).blocks, 0);
  k.regs = 32;
  k.shared = 100 * 1024;   // two blocks of 100 KB (+1 KB each) in 228 KB
  EXPECT_EQ(occupancy(k, 128, h100).blocks, 2);
  EXPECT_EQ(occupancy(k, 128, h100).limiter, "shared memory");
  EXPECT_EQ(occupancy(k, 128, limits_for(80)).blocks, 1);   // 164 KB on an A100
  k.shared = 0;
  EXPECT_EQ(occupancy(k, 128, h100, 228 * 1024).blocks, 0);   // past the per-block maximum
  k.regs = 16;
  EXPECT_EQ(occupancy(k, 32, h100).blocks, 32);   // the block limit
  EXPECT_EQ(occupancy(k, 32, h100).limiter, "blocks");
  EXPECT_THROW(limits_for(75), klab::UsageError);
}
