/* clmoe-bench mla: the gated MLA's attention.
 *
 * Prefill: the tiled attention forward (and forward + backward) over H, T and batch, against
 *   the materialised kernel (scores [B T, H, T] in global memory) in the same run, whose
 *   output is compared; FLOPs 2 H (Dqk + Dv) B T (T + 1) / 2 (unmasked pairs only: at
 *   H 32, qk 192, v 128, T 4096 that is 1.72e11, T 16384 2.75e12), the backward counted as
 *   2.5x the forward (as flash-attention reports do). The portable kernels (mla_fwd.cl,
 *   mla_bwd.cl) and the ones on the tile interface (mla_tile.cl: tile = its own choice of
 *   query tile, tile64 / tile128 forced; "tile fwd+bwd" adds mla_tile_bwd.cl) are timed side
 *   by side, whatever the fast path says; tile forward rows show the largest difference to
 *   the portable output relative to its largest value.
 * Decode: clmoe_mla_decode_step (the whole layer, absorbed form, paged cache) for N
 *   sequences at context L, against a materialised attention core over a dense f32 cache
 *   (S = [q_c; q_r] C^T by batched GEMM, a softmax, o_c = P C by batched GEMM: the least a
 *   naive step costs); cache bytes per token and the bytes one step reads.
 *   A decode row is the whole layer's step; run context 1 for its fixed cost (projections).
 * Times: the device time of the kernels from OpenCL profiling (CLBlast's GEMMs included,
 * through their events), median over runs, with the wall-clock median beside it; rates
 * use the kernel time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "clmoe/paths.h"

#define MAX_LIST BENCH_MAX_LIST

static void usage(void)
{
  printf("Usage: clmoe-bench mla [--shapes H:T,...] [--H LIST] [--T LIST] [--batch LIST]\n"
         "                       [--Dn N] [--Dr N] [--Dv N] [--dtype bf16|f32] [--no-backward]\n"
         "                       [--naive-max T] [--decode-ctx LIST] [--decode-batch LIST]\n"
         "                       [--decode-H H] [--d D] [--q-rank R] [--kv-rank R]\n"
         "                       [--cache-dtype bf16|f32] [--no-prefill] [--no-decode] [--no-tiles]\n"
         "                       [--reps N] [--max-seconds S] [--kernels] [--device SPEC] [--json FILE|-]\n"
         "\n"
         "Prefill: clmoe_mla_attention's portable kernel (tiled, online softmax) and forward +\n"
         "backward, and the forward on the tile interface (rows tile, tile64, tile128) for every\n"
         "batch x H x T (or each --shapes pair), against the materialised kernel for T <=\n"
         "--naive-max. Decode: clmoe_mla_decode_step (absorbed, paged cache) for every batch x\n"
         "context, against a materialised attention core over a dense cache.\n"
         "\n"
         "  --shapes H:T,...   prefill shapes as pairs, e.g. 32:4096,32:16384,16:65536\n"
         "  --H LIST           prefill heads (default 32)\n"
         "  --T LIST           prefill sequence lengths (default 4096,16384)\n"
         "  --batch LIST       prefill sequences per batch (default 1)\n"
         "  --Dn, --Dr, --Dv   head sizes (default 128, 64, 128)\n"
         "  --dtype T          storage of q, k, v and o: bf16 (default) or f32\n"
         "  --no-backward      prefill forward only\n"
         "  --no-tiles         skip the tile forward (mla_tile.cl: tile, tile64, tile128 rows)\n"
         "  --naive-max T      longest T for the materialised kernel (default 8192)\n"
         "  --decode-ctx LIST  decode context lengths (default 4096,65536)\n"
         "  --decode-batch LIST decode sequences (default 1,8)\n"
         "  --decode-H H, --d D, --q-rank R, --kv-rank R\n"
         "                     the decode layer (default: the gpu preset's MLA: 8, 1024, 512, 512)\n"
         "  --cache-dtype T    decode cache storage: bf16 (default) or f32\n"
         "  --no-prefill, --no-decode  skip a part\n"
         "  --reps N           timed runs after one warm-up (default 10)\n"
         "  --max-seconds S    stop repeating after S seconds per measurement (default 10)\n"
         "  --kernels          under each prefill row, its kernels by name: ms per run (profiling)\n"
         "  --json FILE        results as JSON (- for stdout)\n");
}

typedef struct bench_opts {
  int reps;
  double max_s;
  int kernels; /* --kernels: each prefill row's kernels by name */
} bench_opts;

typedef void (*run_fn)(clmoe_ctx *ctx, void *state);

static int measured_runs; /* timed runs of the last measure() */

/* Median kernel and wall time of fn over repeated runs (one warm-up first). */
static void measure(clmoe_ctx *ctx, run_fn fn, void *state, const bench_opts *o, double *kernel_s, double *wall_s)
{
  double *kt = malloc((size_t)o->reps * sizeof *kt), *wt = malloc((size_t)o->reps * sizeof *wt);
  if (!kt || !wt) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  fn(ctx, state);
  APP_CHECK(clmoe_ctx_finish(ctx));
  clmoe_ctx_profile_clear(ctx);
  int n = 0;
  double start = app_now();
  while (n < o->reps && (n < 3 || app_now() - start < o->max_s)) {
    double w0 = app_now();
    APP_CHECK(clmoe_ctx_profile_begin(ctx));
    fn(ctx, state);
    APP_CHECK(clmoe_ctx_profile_end(ctx, &kt[n], NULL));
    wt[n] = app_now() - w0;
    n++;
  }
  *kernel_s = bench_median(kt, n);
  *wall_s = bench_median(wt, n);
  free(kt), free(wt);
  measured_runs = n;
}

/* --kernels: the last measurement's kernels, mean ms per run (profiling events). */
static void report_kernels(clmoe_ctx *ctx, const bench_opts *o)
{
  if (!o->kernels || measured_runs <= 0) return;
  const clmoe_kernel_time *rows;
  const int n = clmoe_ctx_profile_kernels(ctx, &rows);
  for (int i = 0; i < n; i++)
    printf("         kernel %-28s %10.3f ms  %5.1f launches per run\n", rows[i].name,
           rows[i].seconds * 1e3 / measured_runs, (double)rows[i].launches / measured_runs);
}

static double max_rel_diff(const clmoe_tensor *a, const clmoe_tensor *b)
{
  size_t n = (size_t)clmoe_tensor_numel(a);
  float *x = malloc(n * sizeof *x + 4), *y = malloc(n * sizeof *y + 4);
  if (!x || !y) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  APP_CHECK(clmoe_tensor_read_f32(a, x));
  APP_CHECK(clmoe_tensor_read_f32(b, y));
  double scale = 0.0, worst = 0.0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)y[i]));
  for (size_t i = 0; i < n; i++) worst = isfinite(x[i]) ? fmax(worst, fabs((double)x[i] - y[i])) : INFINITY;
  free(x), free(y);
  return scale > 0 ? worst / scale : worst;
}

static FILE *jf;
static int jfirst = 1;
static double jcache_tb = -1.0; /* decode rows: the cache's bytes per token (JSON), -1 none */
static const char *jdiff_what = "naive"; /* what a row's difference is against */

static void report(const char *part, long long B, long long H, long long T, const char *pass, double ks, double ws,
                   double flops, double bytes, double diff)
{
  char check[48] = "";
  if (diff >= 0) snprintf(check, sizeof check, "|%s| %.1e", !strcmp(jdiff_what, "naive") ? "tiled - naive" :
                          "tile - portable", diff);
  const double t = ks;
  printf("%-8s %5lld %4lld %8lld  %-14s %10.3f %10.3f %9.3f %9.1f  %s\n", part, B, H, T, pass, ks * 1e3,
         ws * 1e3, flops / t * 1e-12, bytes / t * 1e-9, check);
  fflush(stdout);
  if (!jf) return;
  fprintf(jf, "%s\n    {\"part\": \"%s\", \"B\": %lld, \"H\": %lld, \"T\": %lld, \"pass\": \"%s\", \"kernel_ms\": %.4f, "
              "\"wall_ms\": %.4f, \"flops\": %.6e, \"bytes\": %.6e, "
              "\"tflops\": %.4f, \"max_rel_diff_vs_%s\": ",
          jfirst ? "" : ",", part, B, H, T, pass, ks * 1e3, ws * 1e3, flops, bytes,
          flops / t * 1e-12, jdiff_what);
  json_double(jf, diff);
  if (jcache_tb >= 0) fprintf(jf, ", \"cache_bytes_per_token\": %.0f", jcache_tb);
  fprintf(jf, "}");
  jfirst = 0;
}

/* ---- prefill ------------------------------------------------------------------------------ */

typedef struct prefill_state {
  clmoe_tensor q, kn, kr, v, o, lse, o_naive, o_tile, dout, dq, dkn, dkr, dv;
  int what;                  /* 0 forward, 1 forward + backward, 2 naive */
  clmoe_mla_attn_path path;  /* the forward's kernel (what 0 and 1) */
} prefill_state;

static void prefill_run(clmoe_ctx *ctx, void *p)
{
  prefill_state *s = p;
  clmoe_mla_attn_inputs in = {&s->q, &s->kn, &s->kr, &s->v, NULL};
  if (s->what == 2) {
    APP_CHECK(clmoe_mla_attention_naive(ctx, 0.0f, &in, &s->o_naive, NULL));
    return;
  }
  clmoe_tensor *o = s->path == CLMOE_MLA_ATTN_PORTABLE ? &s->o : &s->o_tile;
  APP_CHECK(clmoe_mla_attention_path(ctx, s->path, 0.0f, &in, o, &s->lse));
  if (s->what == 1) {
    clmoe_mla_attn_grads g = {&s->dq, &s->dkn, &s->dkr, &s->dv};
    APP_CHECK(clmoe_mla_attention_backward_path(ctx, s->path == CLMOE_MLA_ATTN_PORTABLE ? CLMOE_MLA_ATTN_PORTABLE
                                                : CLMOE_MLA_ATTN_TILE, 0.0f, &in, o, &s->lse, &s->dout, &g));
  }
}

static void prefill_case(clmoe_ctx *ctx, const bench_opts *o, clmoe_dtype dt, long long B, long long H, long long T,
                         long long Dn, long long Dr, long long Dv, int backward, long long naive_max, int tiles)
{
  prefill_state s;
  memset(&s, 0, sizeof s);
  const int64_t sq[4] = {B, T, H, Dn + Dr}, sn[4] = {B, T, H, Dn}, sr[3] = {B, T, Dr}, sv[4] = {B, T, H, Dv};
  const int64_t sl[3] = {B, T, H};
  clmoe_tensor *in[4] = {&s.q, &s.kn, &s.kr, &s.v};
  const int64_t *shapes[4] = {sq, sn, sr, sv};
  for (int i = 0; i < 4; i++) {
    APP_CHECK(clmoe_tensor_create(ctx, in[i], dt, i == 2 ? 3 : 4, shapes[i]));
    APP_CHECK(clmoe_tensor_fill_normal(in[i], 31 + (uint64_t)i, 0.0f, 1.0f));
  }
  APP_CHECK(clmoe_tensor_create(ctx, &s.o, dt, 4, sv));
  APP_CHECK(clmoe_tensor_create(ctx, &s.o_tile, dt, 4, sv));
  APP_CHECK(clmoe_tensor_create(ctx, &s.lse, CLMOE_F32, 3, sl));
  if (backward) {
    APP_CHECK(clmoe_tensor_create(ctx, &s.dout, CLMOE_F32, 4, sv));
    APP_CHECK(clmoe_tensor_fill_normal(&s.dout, 40, 0.0f, 1.0f));
    APP_CHECK(clmoe_tensor_create(ctx, &s.dq, CLMOE_F32, 4, sq));
    APP_CHECK(clmoe_tensor_create(ctx, &s.dkn, CLMOE_F32, 4, sn));
    APP_CHECK(clmoe_tensor_create(ctx, &s.dkr, CLMOE_F32, 3, sr));
    APP_CHECK(clmoe_tensor_create(ctx, &s.dv, CLMOE_F32, 4, sv));
  }
  int64_t *lens = malloc((size_t)B * sizeof *lens);
  if (!lens) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  for (long long b = 0; b < B; b++) lens[b] = T;
  const double flops = clmoe_mla_attention_flops(lens, B, H, Dn + Dr, Dv);
  free(lens);
  const double es = (double)clmoe_dtype_size(dt);
  const double bytes = (double)(B * T) * es * (double)(H * (Dn + Dr + Dn + 2 * Dv) + Dr);
  double ks, ws;
  s.path = CLMOE_MLA_ATTN_PORTABLE;
  for (int what = 0; what <= (backward ? 1 : 0); what++) {
    s.what = what;
    measure(ctx, prefill_run, &s, o, &ks, &ws);
    report("prefill", B, H, T, what ? "fwd+bwd" : "forward", ks, ws, what ? 3.5 * flops : flops, bytes, -1.0);
    report_kernels(ctx, o);
  }
  /* The tile forward (and forward + backward on tiles: mla_tile_bwd.cl). */
  static const clmoe_mla_attn_path paths[3] = {CLMOE_MLA_ATTN_TILE, CLMOE_MLA_ATTN_TILE64, CLMOE_MLA_ATTN_TILE128};
  jdiff_what = "portable";
  for (int k = 0; k < (tiles ? 3 : 0); k++) {
    clmoe_mla_attn_inputs tin = {&s.q, &s.kn, &s.kr, &s.v, NULL};
    if (clmoe_mla_attention_path(ctx, paths[k], 0.0f, &tin, &s.o_tile, &s.lse) != CLMOE_OK) {
      printf("prefill  %s: %s\n", clmoe_mla_attn_path_name(paths[k]), clmoe_last_error());
      continue;
    }
    s.path = paths[k];
    for (int what = 0; what <= (backward && k == 0 ? 1 : 0); what++) {
      char pass[32];
      snprintf(pass, sizeof pass, "%s %s", clmoe_mla_attn_path_name(paths[k]), what ? "fwd+bwd" : "forward");
      s.what = what;
      measure(ctx, prefill_run, &s, o, &ks, &ws);
      const double diff = what ? -1.0 : max_rel_diff(&s.o_tile, &s.o);
      report("prefill", B, H, T, pass, ks, ws, what ? 3.5 * flops : flops, bytes, diff);
      report_kernels(ctx, o);
    }
  }
  jdiff_what = "naive";
  s.path = CLMOE_MLA_ATTN_PORTABLE;
  const double s_bytes = (double)(B * T) * (double)H * (double)T * 4.0;
  if (T <= naive_max && s_bytes <= (double)clmoe_ctx_caps(ctx)->max_alloc_bytes) {
    APP_CHECK(clmoe_tensor_create(ctx, &s.o_naive, dt, 4, sv));
    s.what = 2;
    measure(ctx, prefill_run, &s, o, &ks, &ws);
    s.what = 0;
    prefill_run(ctx, &s);
    report("prefill", B, H, T, "naive forward", ks, ws, flops, bytes + s_bytes * 3.0, max_rel_diff(&s.o, &s.o_naive));
  }
  clmoe_tensor *all[] = {&s.q, &s.kn, &s.kr, &s.v, &s.o, &s.lse, &s.o_naive, &s.o_tile, &s.dout, &s.dq, &s.dkn,
                         &s.dkr, &s.dv};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
  clmoe_ctx_pool_trim(ctx);
}

/* ---- decode -------------------------------------------------------------------------------- */

typedef struct decode_state {
  clmoe_mla_config cfg;
  clmoe_mla_weights w;
  clmoe_mla_cache *cache;
  clmoe_tensor x, y;
  /* the materialised core: qcat [N, H, dc + Dr], dense cache [N, L, dc + Dr], S [N, H, L], oc [N, H, dc] */
  clmoe_tensor qcat, dense, S, oc;
  int naive;
} decode_state;

static void decode_run(clmoe_ctx *ctx, void *p)
{
  decode_state *s = p;
  if (!s->naive) {
    APP_CHECK(clmoe_mla_decode_step(ctx, &s->cfg, &s->w, s->cache, &s->x, &s->y));
    return;
  }
  const float scale = 1.0f / sqrtf((float)(s->cfg.qk_nope + s->cfg.qk_rope));
  clmoe_tensor S2, lat;
  const int64_t N = s->S.shape[0], H = s->S.shape[1], L = s->S.shape[2];
  APP_CHECK(clmoe_gemm_batched(ctx, CLMOE_NOTRANS, CLMOE_TRANS, scale, &s->qcat, &s->dense, 0.0f, &s->S));
  APP_CHECK(clmoe_tensor_view(&s->S, &S2, 2, (int64_t[]){N * H, L}, 0));
  APP_CHECK(clmoe_softmax(ctx, &S2, &S2));
  APP_CHECK(clmoe_tensor_slice(&s->dense, &lat, 2, 0, s->cfg.kv_rank));
  APP_CHECK(clmoe_gemm_batched(ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &s->S, &lat, 0.0f, &s->oc));
}

static void decode_case(clmoe_ctx *ctx, const bench_opts *o, const clmoe_mla_config *cfg, clmoe_dtype cache_dt,
                        long long N, long long L)
{
  decode_state s;
  memset(&s, 0, sizeof s);
  s.cfg = *cfg;
  const int64_t d = cfg->d_model, H = cfg->n_heads, row = cfg->kv_rank + cfg->qk_rope;
  APP_CHECK(clmoe_mla_weights_create(ctx, cfg, &s.w));
  APP_CHECK(clmoe_mla_weights_init(&s.w, 77, 0.02f));
  APP_CHECK(clmoe_mla_cache_create(ctx, cfg, N, cache_dt, N * (L + o->reps + 8), &s.cache));
  /* Prefill every sequence to L - 1 tokens (one batch through the training-form pass). */
  clmoe_tensor xp = {0}, yp = {0};
  const int64_t sp[3] = {N, L - 1, d}, sx[2] = {N, d};
  double t0 = app_now();
  if (L > 1) {
    APP_CHECK(clmoe_tensor_create(ctx, &xp, CLMOE_F32, 3, sp));
    APP_CHECK(clmoe_tensor_create(ctx, &yp, CLMOE_F32, 3, sp));
    APP_CHECK(clmoe_tensor_fill_normal(&xp, 5, 0.0f, 1.0f));
    APP_CHECK(clmoe_mla_prefill(ctx, cfg, &s.w, s.cache, &xp, NULL, NULL, &yp));
    APP_CHECK(clmoe_ctx_finish(ctx));
    clmoe_tensor_destroy(&xp), clmoe_tensor_destroy(&yp);
  }
  const double prefill_s = app_now() - t0;
  APP_CHECK(clmoe_tensor_create(ctx, &s.x, CLMOE_F32, 2, sx));
  APP_CHECK(clmoe_tensor_create(ctx, &s.y, CLMOE_F32, 2, sx));
  APP_CHECK(clmoe_tensor_fill_normal(&s.x, 6, 0.0f, 1.0f));
  const double tb = (double)clmoe_mla_cache_token_bytes(s.cache);
  /* per step: scores 2 H L (dc + Dr) and P C 2 H L dc per sequence; reads the cache once */
  const double flops = 2.0 * (double)(N * H * L) * (double)(row + cfg->kv_rank), bytes = (double)(N * L) * tb;
  double ks, ws;
  measure(ctx, decode_run, &s, o, &ks, &ws);
  char pass[32];
  snprintf(pass, sizeof pass, "absorbed %s", cache_dt == CLMOE_BF16 ? "bf16" : "f32");
  jcache_tb = tb;
  report("decode", N, H, L, pass, ks, ws, flops, bytes, -1.0);
  jcache_tb = -1.0;
  printf("         cache %.0f bytes/token (%lld numbers), %.3g MB per sequence; prefill of %lld x %lld tokens "
         "took %.2f s (wall)\n", tb, (long long)row, tb * (double)L * 1e-6, N, L - 1, prefill_s);
  clmoe_mla_cache_destroy(s.cache);
  s.cache = NULL;
  /* The materialised core over a dense f32 cache (needs N H L + N L (dc + Dr) floats). */
  const int64_t sq[3] = {N, H, row}, sd[3] = {N, L, row}, ss[3] = {N, H, L}, so[3] = {N, H, cfg->kv_rank};
  if ((double)(N * L * row) * 4.0 <= (double)clmoe_ctx_caps(ctx)->max_alloc_bytes) {
    APP_CHECK(clmoe_tensor_create(ctx, &s.qcat, CLMOE_F32, 3, sq));
    APP_CHECK(clmoe_tensor_create(ctx, &s.dense, CLMOE_F32, 3, sd));
    APP_CHECK(clmoe_tensor_create(ctx, &s.S, CLMOE_F32, 3, ss));
    APP_CHECK(clmoe_tensor_create(ctx, &s.oc, CLMOE_F32, 3, so));
    APP_CHECK(clmoe_tensor_fill_normal(&s.qcat, 8, 0.0f, 1.0f));
    APP_CHECK(clmoe_tensor_fill_normal(&s.dense, 9, 0.0f, 1.0f));
    s.naive = 1;
    measure(ctx, decode_run, &s, o, &ks, &ws);
    report("decode", N, H, L, "naive core f32", ks, ws, flops, (double)(N * L * row) * 4.0 + 2.0 * (double)(N * H * L) * 4.0, -1.0);
  }
  clmoe_tensor *all[] = {&s.x, &s.y, &s.qcat, &s.dense, &s.S, &s.oc};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
  clmoe_mla_weights_destroy(&s.w);
  clmoe_ctx_pool_trim(ctx);
}

int bench_mla(int argc, char **argv)
{
  long long Ts[MAX_LIST] = {4096, 16384}, Hs[MAX_LIST] = {32}, Bs[MAX_LIST] = {1};
  long long Ls[MAX_LIST] = {4096, 65536}, Ns[MAX_LIST] = {1, 8}, sH[MAX_LIST], sT[MAX_LIST];
  int nT = 2, nH = 1, nB = 1, nL = 2, nN = 2, nshapes = 0, backward = 1, prefill = 1, decode = 1, tiles = 1;
  long long Dn = 128, Dr = 64, Dv = 128, naive_max = 8192, dH = 8, d = 1024, rq = 512, dc = 512;
  bench_opts o = {10, 10.0, 0};
  const char *json = NULL, *device = NULL, *dtype_arg = "bf16", *cache_arg = "bf16";
  app_flags flags = {.take = APP_FLAG_HELP | APP_FLAG_VERSION | APP_FLAG_DEVICE | APP_FLAG_JSON, .usage = usage};
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (app_standard_flag(argc, argv, &i, &flags)) continue;
    if (app_option(argc, argv, &i, "--shapes", &v)) nshapes = bench_parse_pairs("--shapes", v, ':', sH, 1, 1024, sT, 1, 1 << 24);
    else if (app_option(argc, argv, &i, "--T", &v)) nT = bench_parse_list("--T", v, Ts, 1, 1 << 24);
    else if (app_option(argc, argv, &i, "--H", &v)) nH = bench_parse_list("--H", v, Hs, 1, 1024);
    else if (app_option(argc, argv, &i, "--batch", &v)) nB = bench_parse_list("--batch", v, Bs, 1, 4096);
    else if (app_option(argc, argv, &i, "--Dn", &v)) Dn = app_parse_int("--Dn", v, 1, 255);
    else if (app_option(argc, argv, &i, "--Dr", &v)) Dr = app_parse_int("--Dr", v, 1, 255);
    else if (app_option(argc, argv, &i, "--Dv", &v)) Dv = app_parse_int("--Dv", v, 1, 256);
    else if (app_option(argc, argv, &i, "--dtype", &v)) dtype_arg = v;
    else if (app_option(argc, argv, &i, "--cache-dtype", &v)) cache_arg = v;
    else if (app_option(argc, argv, &i, "--naive-max", &v)) naive_max = app_parse_int("--naive-max", v, 0, 1 << 24);
    else if (app_option(argc, argv, &i, "--decode-ctx", &v)) nL = bench_parse_list("--decode-ctx", v, Ls, 1, 1 << 24);
    else if (app_option(argc, argv, &i, "--decode-batch", &v)) nN = bench_parse_list("--decode-batch", v, Ns, 1, 4096);
    else if (app_option(argc, argv, &i, "--decode-H", &v)) dH = app_parse_int("--decode-H", v, 1, 1024);
    else if (app_option(argc, argv, &i, "--d", &v)) d = app_parse_int("--d", v, 1, 1 << 16);
    else if (app_option(argc, argv, &i, "--q-rank", &v)) rq = app_parse_int("--q-rank", v, 1, 1 << 16);
    else if (app_option(argc, argv, &i, "--kv-rank", &v)) dc = app_parse_int("--kv-rank", v, 1, 1 << 16);
    else if (app_option(argc, argv, &i, "--reps", &v)) o.reps = (int)app_parse_int("--reps", v, 1, 100000);
    else if (app_option(argc, argv, &i, "--max-seconds", &v)) {
      o.max_s = atof(v);
      if (!(o.max_s > 0)) app_usage_error("--max-seconds: '%s' is not a positive number", v);
    } else if (!strcmp(argv[i], "--no-backward")) backward = 0;
    else if (!strcmp(argv[i], "--no-tiles")) tiles = 0;
    else if (!strcmp(argv[i], "--kernels")) o.kernels = 1;
    else if (!strcmp(argv[i], "--no-prefill")) prefill = 0;
    else if (!strcmp(argv[i], "--no-decode")) decode = 0;
    else app_usage_error("unknown argument '%s'", argv[i]);
  }
  device = flags.device;
  json = flags.json;
  clmoe_dtype dt = CLMOE_BF16, cdt = CLMOE_BF16;
  if (!strcmp(dtype_arg, "f32")) dt = CLMOE_F32;
  else if (strcmp(dtype_arg, "bf16")) app_usage_error("--dtype: '%s' is not bf16 or f32", dtype_arg);
  if (!strcmp(cache_arg, "f32")) cdt = CLMOE_F32;
  else if (strcmp(cache_arg, "bf16")) app_usage_error("--cache-dtype: '%s' is not bf16 or f32", cache_arg);
  if (Dn + Dr > 256) app_usage_error("--Dn + --Dr = %lld exceeds 256", Dn + Dr);
  if (!nshapes) /* every H x T */
    for (int ih = 0; ih < nH; ih++)
      for (int it = 0; it < nT && nshapes < MAX_LIST; it++) sH[nshapes] = Hs[ih], sT[nshapes++] = Ts[it];
  clmoe_mla_config cfg = {d, dH, rq, dc, Dn, Dr, Dv, 0.0f, 0.0f};
  if (decode) APP_CHECK(clmoe_mla_config_check(&cfg));

  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options copts = {.device = device, .profiling = 1};
  APP_CHECK(clmoe_ctx_create(&ctx, &copts));
  const clmoe_device_caps *caps = clmoe_ctx_caps(ctx);
  printf("clmoe-bench mla on %s (%s): qk %lld + %lld, v %lld, %s attention inputs; decode layer d %lld, H %lld, "
         "q rank %lld, kv rank %lld, %s cache\n", caps->device_name, caps->platform_name, Dn, Dr, Dv, dtype_arg, d, dH,
         rq, dc, cache_arg);
  printf("%-8s %5s %4s %8s  %-14s %10s %10s %9s %9s  %s\n", "part", "B", "H", "T", "pass", "kernel ms", "wall ms",
         "TFLOP/s", "GB/s", "check");
  jf = json ? app_open_output(json) : NULL;
  if (jf) {
    fprintf(jf, "{\n  \"benchmark\": \"mla\",\n  \"clmoe_version\": \"%s\",\n  \"device\": ", clmoe_version());
    json_string(jf, caps->device_name);
    fprintf(jf, ",\n  \"driver\": ");
    json_string(jf, caps->driver_version);
    fprintf(jf, ",\n  \"Dn\": %lld, \"Dr\": %lld, \"Dv\": %lld, \"dtype\": \"%s\", \"cache_dtype\": \"%s\",\n"
                "  \"decode_layer\": {\"d\": %lld, \"H\": %lld, \"q_rank\": %lld, \"kv_rank\": %lld},\n  \"results\": [",
            Dn, Dr, Dv, dtype_arg, cache_arg, d, dH, rq, dc);
  }
  if (prefill)
    for (int ib = 0; ib < nB; ib++)
      for (int k = 0; k < nshapes; k++) prefill_case(ctx, &o, dt, Bs[ib], sH[k], sT[k], Dn, Dr, Dv, backward, naive_max, tiles);
  if (decode)
    for (int in = 0; in < nN; in++)
      for (int il = 0; il < nL; il++) decode_case(ctx, &o, &cfg, cdt, Ns[in], Ls[il]);
  if (jf) {
    fprintf(jf, "\n  ]\n}\n");
    app_close_output(jf);
  }
  clmoe_ctx_destroy(ctx);
  return 0;
}
