/* Argument checks shared by the operators: one wording for every op. */
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
