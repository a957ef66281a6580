/* Argument checks shared by the operators of every subsystem (declared in internal.h): one
 * wording for every op. */
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

clmoe_status clmoe__want(const clmoe_tensor *t, clmoe_dtype dtype, const char *op, const char *name)
{
  char desc[96];
  if (!t) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
  if (t->dtype != dtype)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s is %s, expected %s", op, name,
                        clmoe_tensor_describe(t, desc, sizeof desc), clmoe_dtype_name(dtype));
  if (!clmoe_tensor_is_contiguous(t))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s %s is not contiguous", op, name,
                        clmoe_tensor_describe(t, desc, sizeof desc));
  return CLMOE_OK;
}

clmoe_status clmoe__want_numel(const clmoe_tensor *a, const clmoe_tensor *b, const char *op,
                               const char *na, const char *nb)
{
  char da[96], db[96];
  if (clmoe_tensor_numel(a) != clmoe_tensor_numel(b))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s %s and %s %s differ in size", op, na,
                        clmoe_tensor_describe(a, da, sizeof da), nb,
                        clmoe_tensor_describe(b, db, sizeof db));
  return CLMOE_OK;
}

void clmoe__rows(const clmoe_tensor *t, int64_t *rows, int64_t *n)
{
  *n = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
  *rows = *n > 0 ? clmoe_tensor_numel(t) / *n : 0;
}

clmoe_status clmoe__want_shape(const clmoe_tensor *t, const char *op, const char *name, int allow_bf16,
                               int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
  char desc[96];
  const int64_t want[4] = {d0, d1, d2, d3};
  if (!t) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
  int ok = t->ndim == rank && clmoe_tensor_is_contiguous(t) &&
           (t->dtype == CLMOE_F32 || (allow_bf16 && t->dtype == CLMOE_BF16));
  for (int d = 0; ok && d < rank; d++) ok = t->shape[d] == want[d];
  if (ok) return CLMOE_OK;
  char expect[96];
  int used = snprintf(expect, sizeof expect, "[");
  for (int d = 0; d < rank; d++)
    used += snprintf(expect + used, sizeof expect - (size_t)used, "%s%lld", d ? ", " : "", (long long)want[d]);
  snprintf(expect + used, sizeof expect - (size_t)used, "] %s", allow_bf16 ? "f32 or bf16" : "f32");
  return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s is %s%s, expected %s (contiguous)", op, name,
                      clmoe_tensor_describe(t, desc, sizeof desc),
                      clmoe_tensor_is_contiguous(t) ? "" : " (not contiguous)", expect);
}

clmoe_status clmoe__seq_bounds(const char *op, const clmoe_tensor *cu, int64_t B, int64_t T,
                               int64_t *N, cl_int **bounds)
{
  if (bounds) *bounds = NULL;
  char desc[96];
  if (cu && (cu->dtype != CLMOE_I32 || cu->ndim != 1 || cu->shape[0] < 2 || !clmoe_tensor_is_contiguous(cu)))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: cu_seqlens is %s, expected i32 [N + 1] with N >= 1",
                        op, clmoe_tensor_describe(cu, desc, sizeof desc));
  if (cu && B != 1)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: with cu_seqlens the batch size B must be 1 (got %lld): "
                        "pack the sequences along T", op, (long long)B);
  *N = cu ? cu->shape[0] - 1 : B;
  cl_int *b = malloc((size_t)(*N + 1) * sizeof *b);
  if (!b) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  clmoe_status st = CLMOE_OK;
  if (!cu) {
    for (int64_t n = 0; n <= *N; n++) b[n] = (cl_int)(n * T);
  } else {
    st = clmoe_tensor_read(cu, b, (size_t)(*N + 1) * sizeof *b);
    for (int64_t n = 0; st == CLMOE_OK && n <= *N; n++) {
      int bad = (n == 0 && b[0] != 0) || (n > 0 && b[n] < b[n - 1]) || (n == *N && b[n] != T);
      if (bad)
        st = clmoe__error(CLMOE_ERR_INVALID_ARGUMENT,
                          "%s: cu_seqlens must start at 0, never decrease and end at T = %lld "
                          "(entry %lld is %d)", op, (long long)T, (long long)n, b[n]);
    }
  }
  if (st != CLMOE_OK || !bounds) free(b);
  else *bounds = b;
  return st;
}
