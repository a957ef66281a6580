/* clmoe-bench moe: the Stable LatentMoE layer, forward and forward + backward, over token
 * counts and the widths of model presets, on both expert GEMM paths (our grouped kernel and
 * CLBlast batched calls over padded groups), with the share of time per phase; and the
 * load-balancing curves of QB, QB-histogram, the sign rule and none on a skewed router.
 * FLOPs: clmoe_moe_forward_flops (matrix products; the backward counts as twice the forward);
 * bytes: every weight once plus x and y (the least a forward must move). The padded path's
 * output is compared with the grouped path's from the same run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MAX_LIST BENCH_MAX_LIST

static void usage(void)
{
  printf("Usage: clmoe-bench moe [--preset LIST] [--tokens LIST] [--experts E] [--top-k K]\n"
         "                       [--widths D:L:F,...] [--gemm LIST] [--no-backward] [--reps N]\n"
         "                       [--max-seconds S] [--device SPEC] [--json FILE|-]\n"
         "       clmoe-bench moe --curves STEPS [--curve-tokens M] [--fresh] [--gamma G] ...\n"
         "\n"
         "Times clmoe_moe_forward and forward + backward (median wall time, the device\n"
         "finished) for every preset's MoE widths and token count, on each expert GEMM path,\n"
         "then once more with per-phase timing for the shares of routing, dispatch, expert\n"
         "GEMMs, combine and the dense projections (that run waits after every phase).\n"
         "The backward's own time is the forward + backward median minus the forward's.\n"
         "\n"
         "  --preset LIST      model presets whose [moe] widths to use (default tiny,gpu)\n"
         "  --tokens LIST      tokens per call (default 512,2048)\n"
         "  --experts E        override the preset's expert count (default: the preset's, 896)\n"
         "  --top-k K          override the preset's top-k\n"
         "  --widths LIST      instead of the presets' widths: model width, latent and expert\n"
         "                     width as D:L:F triples (other settings from the first preset)\n"
         "  --gemm LIST        of grouped, padded (default both)\n"
         "  --no-backward      forward only\n"
         "  --reps N           timed runs after one warm-up (default 5)\n"
         "  --max-seconds S    stop repeating after S seconds per measurement (default 5)\n"
         "  --curves STEPS     instead: max/mean load per step of each balancing rule on a skewed\n"
         "                     router (896 experts, top-16, every 8th expert +1 on its logit)\n"
         "  --curve-tokens M   tokens per step of --curves (default 4096)\n"
         "  --fresh            --curves draws new tokens every step (default: the same batch)\n"
         "  --gamma G          the sign rule's step (default 1e-3)\n"
         "  --json FILE        results as JSON (- for stdout)\n");
}

/* "1024:256:128,2048:512:256" -> triples */
static int parse_widths(const char *s, long long (*w)[3])
{
  int n = 0;
  char *copy = strdup(s), *save = NULL;
  if (!copy) app_die(CLMOE_ERR_OUT_OF_MEMORY, "strdup");
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char *c1 = strchr(tok, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2 || n == MAX_LIST) app_usage_error("--widths: '%s' is not a list of at most %d D:L:F triples", s, MAX_LIST);
    *c1 = *c2 = '\0';
    w[n][0] = app_parse_int("--widths (D)", tok, 1, 1 << 16);
    w[n][1] = app_parse_int("--widths (L)", c1 + 1, 1, 1 << 16);
    w[n++][2] = app_parse_int("--widths (F)", c2 + 1, 1, 1 << 16);
  }
  free(copy);
  if (n == 0) app_usage_error("--widths: empty list");
  return n;
}

static int split_names(char *s, char **out)
{
  int n = 0;
  char *save = NULL;
  for (char *tok = strtok_r(s, ",", &save); tok && n < MAX_LIST; tok = strtok_r(NULL, ",", &save)) out[n++] = tok;
  return n;
}

/* ---- layer timing --------------------------------------------------------------------------- */

typedef struct bench_io {
  clmoe_tensor x, y, dy, dx;
  clmoe_moe_grads g;
} bench_io;

static void run_once(clmoe_ctx *ctx, clmoe_moe_layer *L, bench_io *io, int backward)
{
  if (!backward) {
    APP_CHECK(clmoe_moe_forward(ctx, L, &io->x, &io->y, NULL));
    return;
  }
  clmoe_moe_saved sv;
  APP_CHECK(clmoe_moe_forward(ctx, L, &io->x, &io->y, &sv));
  APP_CHECK(clmoe_moe_backward(ctx, L, &io->x, &sv, &io->dy, &io->g, &io->dx));
  clmoe_moe_saved_destroy(&sv);
}

/* Median wall time of `reps` runs, and the phase times of one more run. */
static double measure(clmoe_ctx *ctx, clmoe_moe_layer *L, bench_io *io, int backward, int reps,
                      double max_s, clmoe_moe_timing *phases, int *runs)
{
  double *t = malloc((size_t)reps * sizeof *t);
  if (!t) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  run_once(ctx, L, io, backward); /* warm-up: builds kernels, fills the pool */
  APP_CHECK(clmoe_ctx_finish(ctx));
  int n = 0;
  const double start = app_now();
  while (n < reps && (n < 2 || app_now() - start < max_s)) {
    const double t0 = app_now();
    run_once(ctx, L, io, backward);
    APP_CHECK(clmoe_ctx_finish(ctx));
    t[n++] = app_now() - t0;
  }
  memset(phases, 0, sizeof *phases);
  L->timing = phases;
  run_once(ctx, L, io, backward);
  L->timing = NULL;
  const double med = bench_median(t, n);
  free(t);
  *runs = n;
  return med;
}

static double max_rel_diff(const float *a, const float *ref, size_t n)
{
  double scale = 0.0, worst = 0.0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)ref[i]));
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(a[i])) return INFINITY;
    worst = fmax(worst, fabs((double)a[i] - (double)ref[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

static double weight_bytes(const clmoe_moe_config *c)
{
  const double E = (double)c->n_experts, d = (double)c->d, l = (double)c->latent, f = (double)c->expert_ff;
  const double S = (double)(c->n_shared * c->shared_ff);
  return 4.0 * (E * d + 2.0 * l * d + 3.0 * E * l * f + l + 3.0 * d * S);
}

/* One layer per preset, or (widths given) per D:L:F triple with the first preset's other
 * settings. */
static void bench_layers(clmoe_ctx *ctx, char **presets, int np, long long (*widths)[3], int nw,
                         const long long *tokens, int nt, long long experts, long long top_k, const int *gemms,
                         int ng, int backward, int reps, double max_s, FILE *jf)
{
  static const char *gemm_name[3] = {"auto", "grouped", "padded"};
  printf("%-12s %6s %5s %3s %-8s %-8s %10s %11s %8s %6s %6s %6s %6s %6s  %s\n", "preset", "tokens", "E",
         "k", "gemm", "pass", "ms", "tokens/s", "GFLOP/s", "route", "disp", "expert", "comb", "dense",
         "check");
  int first = 1;
  for (int ip = 0; ip < (nw ? nw : np); ip++) {
    clmoe_config mc;
    APP_CHECK(clmoe_config_preset(presets[nw ? 0 : ip], &mc));
    clmoe_moe_config cfg = {.d = mc.d_model, .latent = mc.latent, .n_experts = experts ? experts : mc.experts,
                            .top_k = top_k ? top_k : mc.top_k, .expert_ff = mc.expert_ff,
                            .n_shared = mc.shared_experts, .shared_ff = mc.shared_ff};
    char name[64];
    snprintf(name, sizeof name, "%s", presets[nw ? 0 : ip]);
    if (nw) {
      cfg.d = widths[ip][0], cfg.latent = widths[ip][1], cfg.expert_ff = widths[ip][2];
      snprintf(name, sizeof name, "%lld:%lld:%lld", widths[ip][0], widths[ip][1], widths[ip][2]);
    }
    clmoe_moe_layer L;
    APP_CHECK(clmoe_moe_layer_create(ctx, &L, &cfg));
    APP_CHECK(clmoe_moe_layer_init(&L, 1, 0.02f));
    for (int it = 0; it < nt; it++) {
      const int64_t m = tokens[it], sx[2] = {m, cfg.d};
      bench_io io;
      memset(&io, 0, sizeof io);
      APP_CHECK(clmoe_tensor_create(ctx, &io.x, CLMOE_F32, 2, sx));
      APP_CHECK(clmoe_tensor_create(ctx, &io.y, CLMOE_F32, 2, sx));
      APP_CHECK(clmoe_tensor_fill_normal(&io.x, 2, 0.0f, 1.0f));
      if (backward) {
        APP_CHECK(clmoe_tensor_create(ctx, &io.dy, CLMOE_F32, 2, sx));
        APP_CHECK(clmoe_tensor_create(ctx, &io.dx, CLMOE_F32, 2, sx));
        APP_CHECK(clmoe_tensor_fill_normal(&io.dy, 3, 0.0f, 1.0f));
        APP_CHECK(clmoe_moe_grads_create(ctx, &L, &io.g));
      }
      const size_t ny = (size_t)(m * cfg.d);
      float *yref = malloc(ny * sizeof *yref), *ygot = malloc(ny * sizeof *ygot);
      if (!yref || !ygot) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
      const double flops = clmoe_moe_forward_flops(&cfg, m);
      const double bytes = weight_bytes(&cfg) + 8.0 * (double)m * (double)cfg.d;
      for (int ig = 0; ig < ng; ig++) {
        L.cfg.gemm = (clmoe_moe_gemm)gemms[ig];
        double diff = -1.0, fwd_s = 0.0;
        for (int pass = 0; pass < 1 + backward; pass++) {
          clmoe_moe_timing ph;
          int runs;
          const double s = measure(ctx, &L, &io, pass, reps, max_s, &ph, &runs);
          char check[48] = "";
          if (pass == 0) {
            APP_CHECK(clmoe_tensor_read_f32(&io.y, ig == 0 ? yref : ygot));
            if (ig > 0) {
              diff = max_rel_diff(ygot, yref, ny);
              snprintf(check, sizeof check, "y vs %s %.1e", gemm_name[gemms[0]], diff);
            }
          }
          const double tot = ph.route + ph.dispatch + ph.experts + ph.combine + ph.dense;
          const double fl = pass ? 3.0 * flops : flops;
          if (pass == 0) fwd_s = s;
          const double bwd_s = pass ? s - fwd_s : -1.0; /* the backward alone (difference of medians) */
          if (pass) snprintf(check, sizeof check, "bwd %.3f ms, %.4g tok/s", bwd_s * 1e3, (double)m / bwd_s);
          printf("%-12s %6lld %5lld %3lld %-8s %-8s %10.3f %11.4g %8.2f %5.1f%% %5.1f%% %5.1f%% %5.1f%% %5.1f%%  %s\n",
                 name, (long long)m, (long long)cfg.n_experts, (long long)cfg.top_k,
                 gemm_name[gemms[ig]], pass ? "fwd+bwd" : "forward", s * 1e3, (double)m / s, fl / s * 1e-9,
                 100 * ph.route / tot, 100 * ph.dispatch / tot, 100 * ph.experts / tot, 100 * ph.combine / tot,
                 100 * ph.dense / tot, check);
          fflush(stdout);
          if (jf) {
            fprintf(jf, "%s\n    {\"preset\": \"%s\", \"tokens\": %lld, \"d\": %lld, \"latent\": %lld, "
                        "\"experts\": %lld, \"top_k\": %lld, \"expert_ff\": %lld, \"shared\": %lld, "
                        "\"gemm\": \"%s\", \"pass\": \"%s\", \"runs\": %d, \"ms\": %.4f, \"tokens_per_s\": %.6g, "
                        "\"flops\": %.6e, \"bytes\": %.6e, \"gflops\": %.4f, \"phase_s\": {\"route\": %.6f, "
                        "\"dispatch\": %.6f, \"experts\": %.6f, \"combine\": %.6f, \"dense\": %.6f}, "
                        "\"backward_ms\": %.4f, \"backward_tokens_per_s\": %.6g, "
                        "\"max_rel_diff_vs_first_gemm\": ",
                    first ? "" : ",", name, (long long)m, (long long)cfg.d, (long long)cfg.latent,
                    (long long)cfg.n_experts, (long long)cfg.top_k, (long long)cfg.expert_ff,
                    (long long)(cfg.n_shared * cfg.shared_ff), gemm_name[gemms[ig]], pass ? "fwd+bwd" : "forward",
                    runs, s * 1e3, (double)m / s, fl, bytes, fl / s * 1e-9, ph.route, ph.dispatch, ph.experts,
                    ph.combine, ph.dense, pass ? bwd_s * 1e3 : -1.0, pass ? (double)m / bwd_s : -1.0);
            json_double(jf, pass == 0 ? diff : -1.0);
            fprintf(jf, "}");
            first = 0;
          }
        }
      }
      free(yref), free(ygot);
      clmoe_tensor_destroy(&io.x), clmoe_tensor_destroy(&io.y), clmoe_tensor_destroy(&io.dy);
      clmoe_tensor_destroy(&io.dx);
      clmoe_moe_grads_destroy(&io.g);
      clmoe_ctx_pool_trim(ctx);
    }
    clmoe_moe_layer_destroy(&L);
  }
}

/* ---- balancing curves ---------------------------------------------------------------------- */

/* The skewed router of tests/unit/test_moe.c: every 8th expert +1 on its logit (constant input
 * feature 0), other router weights N(0, 0.5 / sqrt(64)). */
static void skewed_layer(clmoe_ctx *ctx, clmoe_moe_layer *L, clmoe_moe_balance b, float gamma)
{
  const int64_t d = 64, E = 896;
  clmoe_moe_config cfg = {.d = d, .latent = 8, .n_experts = E, .top_k = 16, .expert_ff = 4,
                          .balance = b, .sign_gamma = gamma};
  APP_CHECK(clmoe_moe_layer_create(ctx, L, &cfg));
  APP_CHECK(clmoe_moe_layer_init(L, 11, 0.1f));
  float *w = malloc((size_t)(E * d) * sizeof *w);
  if (!w) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  for (int64_t e = 0; e < E; e++)
    for (int64_t c = 0; c < d; c++)
      w[e * d + c] = c == 0 ? (e % 8 == 0 ? 1.0f : 0.0f) : clmoe_random_normal(12, (uint64_t)(e * d + c), 0.0f, 0.0625f);
  APP_CHECK(clmoe_tensor_write_f32(&L->w_router, w));
  free(w);
}

static void skewed_tokens(clmoe_tensor *x, uint64_t seed)
{
  const int64_t m = x->shape[0], d = x->shape[1];
  float *h = malloc((size_t)(m * d) * sizeof *h);
  if (!h) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  for (int64_t t = 0; t < m; t++)
    for (int64_t c = 0; c < d; c++) h[t * d + c] = c == 0 ? 1.0f : clmoe_random_normal(seed, (uint64_t)(t * d + c), 0.0f, 1.0f);
  APP_CHECK(clmoe_tensor_write_f32(x, h));
  free(h);
}

static void bench_curves(clmoe_ctx *ctx, int steps, long long m, int fresh, float gamma, FILE *jf)
{
  static const clmoe_moe_balance rules[4] = {CLMOE_MOE_BALANCE_QB, CLMOE_MOE_BALANCE_QB_HIST,
                                             CLMOE_MOE_BALANCE_SIGN, CLMOE_MOE_BALANCE_NONE};
  clmoe_moe_load *st = malloc((size_t)(4 * steps) * sizeof *st);
  if (!st) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  clmoe_tensor x = {0}, y = {0};
  const int64_t sx[2] = {m, 64};
  APP_CHECK(clmoe_tensor_create(ctx, &x, CLMOE_F32, 2, sx));
  APP_CHECK(clmoe_tensor_create(ctx, &y, CLMOE_F32, 2, sx));
  for (int r = 0; r < 4; r++) {
    clmoe_moe_layer L;
    skewed_layer(ctx, &L, rules[r], gamma);
    for (int s = 0; s < steps; s++) {
      if (s == 0 || fresh) skewed_tokens(&x, 13 + (uint64_t)s);
      clmoe_moe_saved sv;
      APP_CHECK(clmoe_moe_forward(ctx, &L, &x, &y, &sv));
      APP_CHECK(clmoe_moe_load_stats(ctx, &sv.disp, &st[r * steps + s], NULL));
      APP_CHECK(clmoe_moe_balance_update(ctx, &L, &sv));
      clmoe_moe_saved_destroy(&sv);
    }
    clmoe_moe_layer_destroy(&L);
  }
  printf("max/mean load per step: 896 experts, top-16, %lld tokens (%s batch), sign gamma %g\n", m,
         fresh ? "a fresh" : "the same", (double)gamma);
  printf("%4s %9s %9s %9s %9s   (q10/q50/q90 of QB)\n", "step", "qb", "qb-hist", "sign", "none");
  for (int s = 0; s < steps; s++) {
    printf("%4d", s);
    for (int r = 0; r < 4; r++) printf(" %9.3f", st[r * steps + s].max_over_mean);
    printf("   (%.1f/%.1f/%.1f)\n", st[s].q10, st[s].q50, st[s].q90);
  }
  if (jf) {
    fprintf(jf, "{\n  \"benchmark\": \"moe-balance-curves\",\n  \"clmoe_version\": \"%s\",\n  \"device\": ",
            clmoe_version());
    json_string(jf, clmoe_ctx_caps(ctx)->device_name);
    fprintf(jf, ",\n  \"experts\": 896, \"top_k\": 16, \"tokens\": %lld, \"fresh\": %d, \"sign_gamma\": %g,\n"
                "  \"curves\": {", m, fresh, (double)gamma);
    for (int r = 0; r < 4; r++) {
      fprintf(jf, "%s\n    \"%s\": [", r ? "," : "", clmoe_moe_balance_name(rules[r]));
      for (int s = 0; s < steps; s++) {
        const clmoe_moe_load *q = &st[r * steps + s];
        fprintf(jf, "%s{\"step\": %d, \"max_over_mean\": %.5f, \"max\": %lld, \"min\": %lld, \"q10\": %.2f, "
                    "\"q50\": %.2f, \"q90\": %.2f, \"empty\": %lld}", s ? ", " : "", s, q->max_over_mean,
                (long long)q->max, (long long)q->min, q->q10, q->q50, q->q90, (long long)q->empty);
      }
      fprintf(jf, "]");
    }
    fprintf(jf, "\n  }\n}\n");
  }
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&y);
  free(st);
}

int bench_moe(int argc, char **argv)
{
  long long tokens[MAX_LIST] = {512, 2048}, experts = 0, top_k = 0, curve_m = 4096, widths[MAX_LIST][3];
  int nw = 0, nt = 2, reps = 5, backward = 1, curves = 0, fresh = 0;
  double max_s = 5.0, gamma = 1e-3;
  const char *json = NULL, *device = NULL, *preset_arg = "tiny,gpu", *gemm_arg = "grouped,padded";
  app_flags flags = {.take = APP_FLAG_HELP | APP_FLAG_VERSION | APP_FLAG_DEVICE | APP_FLAG_JSON, .usage = usage};
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (app_standard_flag(argc, argv, &i, &flags)) continue;
    if (app_option(argc, argv, &i, "--preset", &v)) preset_arg = v;
    else if (app_option(argc, argv, &i, "--tokens", &v)) nt = bench_parse_list("--tokens", v, tokens, 1, 1 << 22);
    else if (app_option(argc, argv, &i, "--experts", &v)) experts = app_parse_int("--experts", v, 1, 1 << 20);
    else if (app_option(argc, argv, &i, "--top-k", &v)) top_k = app_parse_int("--top-k", v, 1, 64);
    else if (app_option(argc, argv, &i, "--gemm", &v)) gemm_arg = v;
    else if (app_option(argc, argv, &i, "--widths", &v)) nw = parse_widths(v, widths);
    else if (app_option(argc, argv, &i, "--reps", &v)) reps = (int)app_parse_int("--reps", v, 1, 100000);
    else if (app_option(argc, argv, &i, "--max-seconds", &v)) {
      max_s = atof(v);
      if (!(max_s > 0)) app_usage_error("--max-seconds: '%s' is not a positive number", v);
    } else if (app_option(argc, argv, &i, "--curves", &v)) curves = (int)app_parse_int("--curves", v, 1, 10000);
    else if (app_option(argc, argv, &i, "--curve-tokens", &v)) curve_m = app_parse_int("--curve-tokens", v, 1, 1 << 22);
    else if (app_option(argc, argv, &i, "--gamma", &v)) {
      gamma = atof(v);
      if (!(gamma > 0)) app_usage_error("--gamma: '%s' is not a positive number", v);
    } else if (!strcmp(argv[i], "--no-backward")) backward = 0;
    else if (!strcmp(argv[i], "--fresh")) fresh = 1;
    else app_usage_error("unknown argument '%s'", argv[i]);
  }
  device = flags.device;
  json = flags.json;
  char pbuf[256], gbuf[64], *presets[MAX_LIST], *gnames[MAX_LIST];
  snprintf(pbuf, sizeof pbuf, "%s", preset_arg);
  snprintf(gbuf, sizeof gbuf, "%s", gemm_arg);
  const int np = split_names(pbuf, presets), ngn = split_names(gbuf, gnames);
  int gemms[MAX_LIST];
  for (int i = 0; i < ngn; i++) {
    if (!strcmp(gnames[i], "grouped")) gemms[i] = CLMOE_MOE_GEMM_GROUPED;
    else if (!strcmp(gnames[i], "padded")) gemms[i] = CLMOE_MOE_GEMM_PADDED;
    else app_usage_error("--gemm: '%s' is not grouped or padded", gnames[i]);
  }
  if (np == 0 || ngn == 0) app_usage_error("--preset and --gemm need at least one name");
  for (int i = 0; i < np; i++) {
    clmoe_config mc;
    if (clmoe_config_preset(presets[i], &mc) != CLMOE_OK) app_usage_error("--preset: %s", clmoe_last_error());
    if (mc.latent < 1) app_usage_error("--preset: %s has no latent projection (not supported here)", presets[i]);
  }
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options copts = {.device = device};
  APP_CHECK(clmoe_ctx_create(&ctx, &copts));
  const clmoe_device_caps *caps = clmoe_ctx_caps(ctx);
  printf("clmoe-bench moe on %s (%s)\n", caps->device_name, caps->platform_name);
  FILE *jf = json ? app_open_output(json) : NULL;
  if (curves) {
    bench_curves(ctx, curves, curve_m, fresh, (float)gamma, jf);
  } else {
    if (jf) {
      fprintf(jf, "{\n  \"benchmark\": \"moe\",\n  \"clmoe_version\": \"%s\",\n  \"device\": ", clmoe_version());
      json_string(jf, caps->device_name);
      fprintf(jf, ",\n  \"driver\": ");
      json_string(jf, caps->driver_version);
      fprintf(jf, ",\n  \"results\": [");
    }
    bench_layers(ctx, presets, np, widths, nw, tokens, nt, experts, top_k, gemms, ngn, backward, reps, max_s, jf);
    if (jf) fprintf(jf, "\n  ]\n}\n");
  }
  if (jf) app_close_output(jf);
  clmoe_ctx_destroy(ctx);
  return 0;
}
