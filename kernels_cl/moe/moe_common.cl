/* moe_common.cl: helpers shared by the MoE kernel families (moe_route, moe_dispatch,
 * moe_gemm): the gated units (SiTU-GLU, SwiGLU) and an order-preserving integer image of
 * floats. */

#define SITU_B1 4.0f
#define SITU_B2 25.0f

inline float moe_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

/* SiTU(u, w) = (b1 tanh(u/b1) sigmoid(u)) (b2 tanh(w/b2)): bounded by b1 b2 = 100. */
inline float situ(float u, float w)
{
  return SITU_B1 * tanh(u / SITU_B1) * moe_sigmoid(u) * (SITU_B2 * tanh(w / SITU_B2));
}

/* da -> (du, dw) through SiTU at (u, w). */
inline float2 situ_grad(float u, float w, float da)
{
  const float tu = tanh(u / SITU_B1), su = moe_sigmoid(u), tw = tanh(w / SITU_B2);
  const float gp = (1.0f - tu * tu) * su + SITU_B1 * tu * su * (1.0f - su);
  return (float2)(da * (SITU_B2 * tw) * gp, da * (SITU_B1 * tu * su) * (1.0f - tw * tw));
}

/* The gated unit `glu` (clmoe_glu: 0 SiTU-GLU, 1 SwiGLU = u sigmoid(u) w) and its gradient;
 * glu is the same for every work-item of a launch. */
inline float glu_act(int glu, float u, float w)
{
  return glu ? u * moe_sigmoid(u) * w : situ(u, w);
}

inline float2 glu_grad(int glu, float u, float w, float da)
{
  if (!glu) return situ_grad(u, w, da);
  const float su = moe_sigmoid(u);
  return (float2)(da * w * su * (1.0f + u * (1.0f - su)), da * u * su);
}

/* An unsigned image of a float that sorts like the float; NaN counts as -inf. */
inline uint moe_ord(float v)
{
  const uint u = as_uint(isnan(v) ? -INFINITY : v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

inline float moe_unord(uint k)
{
  return as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
