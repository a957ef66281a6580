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
