/* hf_logits_check: compares clmoe-generate's --logits file with the logits transformers
 * computed for the tiny Kimi Linear fixtures (tests/data/kimi_linear/NAME/expected.safetensors).
 *
 *   hf_logits_check OURS.safetensors EXPECTED.safetensors TOL K:LEN...
 *
 * Row i of OURS' "logits" [P, vocab] is the model's logits after the first LEN tokens of
 * fixture prompt K (the i-th K:LEN argument); it must equal row LEN - 1 of EXPECTED's
 * "logits.K" within TOL relative to that row's largest magnitude. Prints one line per row
 * and exits 0 when all agree, 1 otherwise (NaN never agrees), 2 on a bad command line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/safetensors.h"

static float *read_all(clmoe_st_file *f, const char *name, int64_t *rows, int64_t *cols)
{
  clmoe_st_info info;
  if (clmoe_st_info_of(f, name, &info) != CLMOE_OK || info.ndim != 2) {
    fprintf(stderr, "hf_logits_check: %s: no 2-D tensor %s\n", clmoe_st_path(f), name);
    exit(1);
  }
  float *x = malloc((size_t)info.numel * sizeof *x);
  if (!x || clmoe_st_read_f32(f, name, x, (size_t)info.numel) != CLMOE_OK) {
    fprintf(stderr, "hf_logits_check: cannot read %s: %s\n", name, clmoe_last_error());
    exit(1);
  }
  *rows = info.shape[0], *cols = info.shape[1];
  return x;
}

int main(int argc, char **argv)
{
  if (argc < 5) {
    fprintf(stderr, "usage: hf_logits_check OURS EXPECTED TOL K:LEN...\n");
    return 2;
  }
  clmoe_st_file *ours, *exp;
  if (clmoe_st_open(argv[1], &ours) != CLMOE_OK || clmoe_st_open(argv[2], &exp) != CLMOE_OK) {
    fprintf(stderr, "hf_logits_check: %s\n", clmoe_last_error());
    return 1;
  }
  const double tol = atof(argv[3]);
  int64_t P, V;
  float *mine = read_all(ours, "logits", &P, &V);
  if (P != argc - 4) {
    fprintf(stderr, "hf_logits_check: %s has %lld rows, %d prompts given\n", argv[1], (long long)P, argc - 4);
    return 1;
  }
  int bad = 0;
  for (int i = 0; i < argc - 4; i++) {
    int k, len;
    char name[32];
    if (sscanf(argv[4 + i], "%d:%d", &k, &len) != 2 || len < 1) {
      fprintf(stderr, "hf_logits_check: '%s' is not K:LEN\n", argv[4 + i]);
      return 2;
    }
    snprintf(name, sizeof name, "logits.%d", k);
    int64_t T, V2;
    float *want = read_all(exp, name, &T, &V2);
    if (V2 != V || len > T) {
      fprintf(stderr, "hf_logits_check: %s is [%lld, %lld]: no row %d of width %lld\n", name, (long long)T,
              (long long)V2, len - 1, (long long)V);
      return 1;
    }
    const float *w = want + (int64_t)(len - 1) * V, *g = mine + (int64_t)i * V;
    double err = 0.0, scale = 0.0;
    int argmax_w = 0, argmax_g = 0, nan = 0;
    for (int64_t v = 0; v < V; v++) {
      nan |= !isfinite(g[v]);
      err = fmax(err, fabs((double)g[v] - w[v]));
      scale = fmax(scale, fabs((double)w[v]));
      if (w[v] > w[argmax_w]) argmax_w = (int)v;
      if (g[v] > g[argmax_g]) argmax_g = (int)v;
    }
    const int ok = !nan && err <= tol * scale;
    printf("%s prompt %d, %d tokens: max |error| %.3g of max |logit| %.3g (relative %.3g), argmax %d vs %d%s\n",
           ok ? "ok  " : "BAD ", k, len, err, scale, err / scale, argmax_g, argmax_w, nan ? ", ours not finite" : "");
    bad += !ok;
    free(want);
  }
  free(mine);
  clmoe_st_close(ours);
  clmoe_st_close(exp);
  return bad ? 1 : 0;
}
