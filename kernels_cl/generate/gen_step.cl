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

/* The KDA layer's output gate before W_o, for a decode step (clmoe_kda_layer_step's RMSNorm
 * over each head's D channels with the shared gain, the sigmoid of the gate and their
 * product, in one launch):
 *   m[t, h D + i] = sigmoid(gs[t, h D + i]) o[t, h, i] rstd(t, h) gain[i]
 *   rstd = rsqrt(mean_i o[t, h, i]^2 + eps)
 * o, gs, m: [N, H D]; gain [D]. One work-group of GEN_LANES (64) per (token, head); the sum
 * of squares is 64 strided partials added in lane order. Grid: (64, N H). */
#define GEN_LANES 64
__kernel __attribute__((reqd_work_group_size(GEN_LANES, 1, 1)))
void gen_kda_out_gate(__global const float *o, __global const float *gs, __global const float *gain, int D,
                      float eps, __global float *m)
{
  __local float part[GEN_LANES];
  __local float rstd;
  const int lane = get_local_id(0);
  const ulong base = (ulong)get_group_id(1) * (ulong)D;
  float a = 0.0f;
  for (int i = lane; i < D; i += GEN_LANES) a += o[base + i] * o[base + i];
  part[lane] = a;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane == 0) {
    float s = 0.0f;
    for (int i = 0; i < GEN_LANES; i++) s += part[i];
    rstd = rsqrt(s / (float)D + eps);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int i = lane; i < D; i += GEN_LANES)
    m[base + i] = 1.0f / (1.0f + exp(-gs[base + i])) * (o[base + i] * rstd * gain[i]);
}
