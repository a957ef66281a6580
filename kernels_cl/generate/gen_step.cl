/* gen_step.cl: the small per-token kernels of a generation pass (lib/generate/generate_run.c). */

/* out [N, d] row t = table [V, d] row ids[t]. The ids were checked on the host before they
 * were uploaded (clmoe_gen_prefill, clmoe_gen_step), so nothing is validated or read back
 * here. Grid: (d, N). */
__kernel void gen_gather_rows(__global const float *table, ulong toff, ulong d, __global const int *ids,
                              ulong N, __global float *out, ulong ooff)
{
  const ulong c = get_global_id(0), t = get_global_id(1);
  if (c >= d || t >= N) return;
  out[ooff + t * d + c] = table[toff + (ulong)ids[t] * d + c];
}
