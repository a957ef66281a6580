/* probe.cl: tiny kernels that test what a device's compiler accepts. */
#if defined(CLMOE_PROBE_PTX) && CLMOE_PROBE_PTX
/* Inline PTX (NVIDIA only): each work-item writes its lane id read through asm(). */
__kernel void probe_inline_ptx(__global uint *out)
{
  uint lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  out[get_global_id(0)] = lane;
}
#endif

#if defined(CLMOE_PROBE_TILE) && CLMOE_PROBE_TILE
/* The tile interface (built as "tile+probe", lib/tile/tile.c): one group of 32 lanes computes
 * D0 = A B with B row-major and D1 = A B with B stored transposed, from small integers that
 * bf16 holds exactly, so the host can demand exact results.
 *   a: [16, 16] bf16, b: [16, 8] bf16, d: [2, 16, 8] fp32 */
__kernel __attribute__((reqd_work_group_size(32, 1, 1))) void
probe_tile(__global const ushort *a, __global const ushort *b, __global float *d)
{
  /* uint storage: the PTX loads read pairs of bf16 as one 4-byte word */
  __local uint as[16 * 16 / 2], bs[16 * 8 / 2], bts[8 * 16 / 2];
  __local ushort *ah = (__local ushort *)as, *bh = (__local ushort *)bs, *bth = (__local ushort *)bts;
  int lane = (int)get_local_id(0);
  for (int i = lane; i < 256; i += 32) ah[i] = a[i];
  for (int i = lane; i < 128; i += 32) {
    bh[i] = b[i];
    bth[(i % 8) * 16 + i / 8] = b[i]; /* bt[n][k] = b[k][n] */
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  tile_a x = tile_load_a_bf16(ah, 16, lane);
  tile_c d0 = tile_c_zero(), d1 = tile_c_zero();
  tile_mma(&d0, x, tile_load_b_bf16(bh, 8, lane));
  tile_mma(&d1, x, tile_load_bt_bf16(bth, 16, lane));
  tile_store_c_global(d0, d, 8, lane);
  tile_store_c_global(d1, d + 128, 8, lane);
}
#endif

#if defined(CLMOE_PROBE_TILE_TEST) && CLMOE_PROBE_TILE_TEST
/* Every operand load of the tile interface, for the conformance check "tile.interface"
 * (check/check_tile.c), built as "tile+probe" with the context's tile options.
 * Work-group of 64: two groups of 32 lanes, group w reading inputs w and writing out[w].
 *   a: [2, 16, 16], b, b2: [2, 16, 8] fp32 (the bf16 variants see them rounded on the way
 *   into local memory; the f32 variants round on load)
 *   out: [2, 7, 16, 8] fp32:
 *     0: a b (a_bf16, b_bf16)        1: a b (at_bf16, bt_bf16: both stored transposed)
 *     2: a b (a_f32, b_f32)          3: a b (at_f32, bt_f32)
 *     4: a b2 (a_bf16, bt_bf16)      5: [out0 | out4] b2 (tile_a_from_c_local)
 *     6: [out0 | out4] b2 (tile_a_from_c with TILE_HAS_A_FROM_C; tile_a_from_c_local elsewhere)
 * Row strides in local memory are padded (18, 10) so that ld is not the tile width. */
#define TT_LDA 18
#define TT_LDB 10
__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void
probe_tile_test(__global const float *a, __global const float *b, __global const float *b2,
                __global float *out)
{
  const int w = (int)get_local_id(0) / 32, lane = (int)get_local_id(0) % 32;
  /* per group: ushort a, at [16 x 18]; b [16 x 10]; bt [8 x 18]; b2 [16 x 10]; float the
   * same for a, at, b, bt; fp32 scratch 16 x 16 (uint storage keeps 4-byte alignment) */
  __local uint hmem[2][(2 * 16 * TT_LDA + 2 * 16 * TT_LDB + 8 * TT_LDA) / 2];
  __local float fmem[2][2 * 16 * TT_LDA + 16 * TT_LDB + 8 * TT_LDA];
  __local float scratch[2][16 * 16];
  __local ushort *ah = (__local ushort *)hmem[w], *ath = ah + 16 * TT_LDA, *bh = ath + 16 * TT_LDA;
  __local ushort *b2h = bh + 16 * TT_LDB, *bth = b2h + 16 * TT_LDB;
  __local float *af = fmem[w], *atf = af + 16 * TT_LDA, *bf = atf + 16 * TT_LDA, *btf = bf + 16 * TT_LDB;
  a += w * 256, b += w * 128, b2 += w * 128, out += w * 7 * 128;
  for (int i = lane; i < 256; i += 32) {
    int r = i / 16, c = i % 16;
    ah[r * TT_LDA + c] = ath[c * TT_LDA + r] = f32_to_bf16(a[i]);
    af[r * TT_LDA + c] = atf[c * TT_LDA + r] = a[i];
  }
  for (int i = lane; i < 128; i += 32) {
    int k = i / 8, n = i % 8;
    bh[k * TT_LDB + n] = bth[n * TT_LDA + k] = f32_to_bf16(b[i]);
    bf[k * TT_LDB + n] = btf[n * TT_LDA + k] = b[i];
    b2h[k * TT_LDB + n] = f32_to_bf16(b2[i]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  tile_c d[5];
  for (int i = 0; i < 5; i++) d[i] = tile_c_zero();
  tile_mma(&d[0], tile_load_a_bf16(ah, TT_LDA, lane), tile_load_b_bf16(bh, TT_LDB, lane));
  tile_mma(&d[1], tile_load_at_bf16(ath, TT_LDA, lane), tile_load_bt_bf16(bth, TT_LDA, lane));
  tile_mma(&d[2], tile_load_a_f32(af, TT_LDA, lane), tile_load_b_f32(bf, TT_LDB, lane));
  tile_mma(&d[3], tile_load_at_f32(atf, TT_LDA, lane), tile_load_bt_f32(btf, TT_LDA, lane));
  /* b2 through the transposed view of a copy: bt2[n][k] */
  __local ushort *bt2 = bth; /* bth is no longer needed after this barrier pair */
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int i = lane; i < 128; i += 32) bt2[(i % 8) * TT_LDA + i / 8] = b2h[(i / 8) * TT_LDB + i % 8];
  barrier(CLK_LOCAL_MEM_FENCE);
  tile_mma(&d[4], tile_load_a_bf16(ah, TT_LDA, lane), tile_load_bt_bf16(bt2, TT_LDA, lane));
  tile_c e5 = tile_c_zero(), e6 = tile_c_zero();
  tile_b bb2 = tile_load_b_bf16(b2h, TT_LDB, lane);
  tile_mma(&e5, tile_a_from_c_local(d[0], d[4], scratch[w], lane), bb2);
#if TILE_HAS_A_FROM_C
  tile_mma(&e6, tile_a_from_c(d[0], d[4], lane), bb2);
#else
  tile_mma(&e6, tile_a_from_c_local(d[0], d[4], scratch[w], lane), bb2);
#endif
  for (int i = 0; i < 5; i++) tile_store_c_global(d[i], out + i * 128, 8, lane);
  tile_store_c_global(e5, out + 5 * 128, 8, lane);
  tile_store_c_global(e6, out + 6 * 128, 8, lane);
}
#endif

#if defined(CLMOE_PROBE_LMEM) && CLMOE_PROBE_LMEM
/* Local memory beyond what the device reports (NVIDIA reports 48 KB; Hopper's SMs give a
 * work-group up to 227 KB): CLMOE_PROBE_LMEM uints written by every work-item and read back
 * by others after the barrier; out[lid] = 1 when every word this work-item checked held
 * what was written. */
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void probe_local(__global uint *out)
{
  __local uint buf[CLMOE_PROBE_LMEM];
  const uint lid = (uint)get_local_id(0);
  for (uint i = lid; i < CLMOE_PROBE_LMEM; i += 256) buf[i] = i * 2654435761u + 12345u;
  barrier(CLK_LOCAL_MEM_FENCE);
  uint bad = 0;
  for (uint i = (lid + 128) % 256; i < CLMOE_PROBE_LMEM; i += 256) bad |= buf[i] != i * 2654435761u + 12345u;
  out[lid] = bad ? 0u : 1u;
}
#endif
