/* clmoe-generate: the summary (stderr, JSON) and --prefill-bench. */
#include <stdlib.h>
#include <string.h>

#include "generate_app.h"

const char *gen_bytes(char *buf, size_t len, double b)
{
  if (b >= 1073741824.0) snprintf(buf, len, "%.2f GiB", b / 1073741824.0);
  else if (b >= 1048576.0) snprintf(buf, len, "%.2f MiB", b / 1048576.0);
  else if (b >= 1024.0) snprintf(buf, len, "%.1f KiB", b / 1024.0);
  else snprintf(buf, len, "%.0f B", b);
  return buf;
}

static double rate(double n, double s) { return s > 0.0 ? n / s : 0.0; }

void gen_profiled_step(clmoe_ctx *ctx, clmoe_gen_state *g, const int32_t *next, float *logits, int greedy,
                       const clmoe_gen_sampling *draw, int64_t draw_step, int32_t *picked, gen_profile *p)
{
  clmoe_ctx_counters c0, c1;
  double kernel_s;
  int kernels;
  APP_CHECK(clmoe_ctx_finish(ctx)); /* nothing of the step before in this one's time */
  APP_CHECK(clmoe_ctx_profile_begin(ctx));
  clmoe_ctx_counters_get(ctx, &c0);
  const double t0 = app_now();
  APP_CHECK(greedy ? clmoe_gen_step_greedy(g, next, picked, NULL)
                   : draw ? clmoe_gen_step_sample(g, draw, next, draw_step, picked, NULL) : clmoe_gen_step(g, next, logits));
  p->wall_s += app_now() - t0;
  clmoe_ctx_counters_get(ctx, &c1);
  APP_CHECK(clmoe_ctx_profile_end(ctx, &kernel_s, &kernels));
  p->steps++;
  p->device_s += kernel_s;
  p->commands += kernels;
  p->count.launches += c1.launches - c0.launches;
  p->count.blocking_reads += c1.blocking_reads - c0.blocking_reads;
  p->count.blocking_writes += c1.blocking_writes - c0.blocking_writes;
  p->count.finishes += c1.finishes - c0.finishes;
}

void gen_profile_families(clmoe_ctx *ctx, gen_profile *p)
{
  const clmoe_kernel_time *rows;
  const int n = clmoe_ctx_profile_kernels(ctx, &rows);
  for (int i = 0; i < n; i++) {
    char fam[32];
    snprintf(fam, sizeof fam, "%.*s", (int)strcspn(rows[i].name, "_"), rows[i].name);
    int j = 0;
    while (j < p->nfam && strcmp(p->fam[j].name, fam)) j++;
    if (j == p->nfam) {
      if (p->nfam == GEN_PROFILE_FAMILIES) j = p->nfam - 1, snprintf(fam, sizeof fam, "other");
      else memset(&p->fam[p->nfam++], 0, sizeof p->fam[0]);
      snprintf(p->fam[j].name, sizeof p->fam[j].name, "%s", fam);
    }
    p->fam[j].seconds += rows[i].seconds;
    p->fam[j].launches += rows[i].launches;
  }
  for (int i = 1; i < p->nfam; i++) /* by time, largest first */
    for (int j = i; j > 0 && p->fam[j].seconds > p->fam[j - 1].seconds; j--) {
      gen_family t = p->fam[j];
      p->fam[j] = p->fam[j - 1], p->fam[j - 1] = t;
    }
  p->nkern = 0;
  for (int i = 0; i < n; i++) { /* the costliest rows, largest first */
    int j;
    if (p->nkern < GEN_PROFILE_KERNELS) j = p->nkern++;
    else if (rows[i].seconds > p->kern[GEN_PROFILE_KERNELS - 1].seconds) j = GEN_PROFILE_KERNELS - 1;
    else continue;
    p->kern[j] = rows[i];
    for (; j > 0 && p->kern[j].seconds > p->kern[j - 1].seconds; j--) {
      const clmoe_kernel_time t = p->kern[j];
      p->kern[j] = p->kern[j - 1], p->kern[j - 1] = t;
    }
  }
}

static void profile_text(const gen_profile *p)
{
  if (p->steps == 0) {
    fprintf(stderr, "profile: no decode step after the %d warm-up steps (raise -n)\n", GEN_PROFILE_WARMUP);
    return;
  }
  const double n = (double)p->steps;
  fprintf(stderr, "profile: %lld decode steps after %d warm-up: per step %.1f device commands (%.1f clmoe "
          "kernels), %.1f blocking reads, %.1f blocking writes, %.1f finishes; wall %.3f ms, device %.3f ms\n",
          (long long)p->steps, GEN_PROFILE_WARMUP, (double)p->commands / n, (double)p->count.launches / n,
          (double)p->count.blocking_reads / n, (double)p->count.blocking_writes / n, (double)p->count.finishes / n,
          1e3 * p->wall_s / n, 1e3 * p->device_s / n);
  for (int i = 0; i < p->nfam; i++)
    fprintf(stderr, "  %-16s %8.3f ms per step  %6.1f commands per step\n", p->fam[i].name,
            1e3 * p->fam[i].seconds / n, (double)p->fam[i].launches / n);
}

/* A profiled prefill (one step of p): its families, then its costliest kernels by name. */
static void prefill_profile_text(int64_t T, const gen_profile *p)
{
  fprintf(stderr, "profile of the %lld-token prefill: %lld device commands (%lld clmoe kernels), %lld blocking "
          "reads, %lld finishes; wall %.3f ms, device %.3f ms\n", (long long)T, (long long)p->commands,
          (long long)p->count.launches, (long long)p->count.blocking_reads, (long long)p->count.finishes,
          1e3 * p->wall_s, 1e3 * p->device_s);
  for (int i = 0; i < p->nfam; i++)
    fprintf(stderr, "  %-16s %10.3f ms  %7lld commands\n", p->fam[i].name, 1e3 * p->fam[i].seconds,
            (long long)p->fam[i].launches);
  for (int i = 0; i < p->nkern && i < 24; i++)
    fprintf(stderr, "    %-36s %10.3f ms  %7lld launches\n", p->kern[i].name, 1e3 * p->kern[i].seconds,
            (long long)p->kern[i].launches);
}

static void profile_json(FILE *f, const gen_profile *p)
{
  const double n = p->steps > 0 ? (double)p->steps : 1.0;
  fprintf(f, "{\"steps\": %lld, \"warmup_steps\": %d, \"commands_per_step\": ", (long long)p->steps,
          GEN_PROFILE_WARMUP);
  json_double(f, (double)p->commands / n);
  fprintf(f, ", \"launches_per_step\": ");
  json_double(f, (double)p->count.launches / n);
  fprintf(f, ", \"blocking_reads_per_step\": ");
  json_double(f, (double)p->count.blocking_reads / n);
  fprintf(f, ", \"blocking_writes_per_step\": ");
  json_double(f, (double)p->count.blocking_writes / n);
  fprintf(f, ", \"finishes_per_step\": ");
  json_double(f, (double)p->count.finishes / n);
  fprintf(f, ", \"wall_ms_per_step\": ");
  json_double(f, 1e3 * p->wall_s / n);
  fprintf(f, ", \"device_ms_per_step\": ");
  json_double(f, 1e3 * p->device_s / n);
  fprintf(f, ", \"families\": [");
  for (int i = 0; i < p->nfam; i++) {
    fprintf(f, "%s{\"family\": ", i ? ", " : "");
    json_string(f, p->fam[i].name);
    fprintf(f, ", \"ms_per_step\": ");
    json_double(f, 1e3 * p->fam[i].seconds / n);
    fprintf(f, ", \"commands_per_step\": ");
    json_double(f, (double)p->fam[i].launches / n);
    fprintf(f, "}");
  }
  fprintf(f, "], \"kernels\": [");
  for (int i = 0; i < p->nkern; i++) {
    fprintf(f, "%s{\"kernel\": ", i ? ", " : "");
    json_string(f, p->kern[i].name);
    fprintf(f, ", \"ms_per_step\": ");
    json_double(f, 1e3 * p->kern[i].seconds / n);
    fprintf(f, ", \"launches_per_step\": ");
    json_double(f, (double)p->kern[i].launches / n);
    fprintf(f, "}");
  }
  fprintf(f, "]}");
}

static const char *weights_name(const clmoe_model *model)
{
  return clmoe_gen_weights(model) == CLMOE_BF16 ? "bf16" : "fp32";
}

static void model_line(const gen_opts *o, const clmoe_model *model, clmoe_ctx *ctx)
{
  const clmoe_config *c = clmoe_model_config(model);
  fprintf(stderr, "%s: %s: %d layers (%d MLA), d %lld, vocab %lld, weights %s%s, on %s\n", app_name, o->ckpt,
          c->layers, clmoe_config_mla_count(c), (long long)c->d_model, (long long)c->vocab, weights_name(model),
          o->weights_why ? o->weights_why : "", clmoe_ctx_caps(ctx)->device_name);
}

static void memory_json(FILE *f, const clmoe_gen_memory *m)
{
  fprintf(f, "{\"weights\": %zu, \"kda_state\": %zu, \"mla_cache_allocated\": %zu, \"mla_cache_used\": %zu, "
          "\"mla_bytes_per_token\": %zu, \"tokens\": %lld}", m->weights, m->kda_state, m->mla_cache, m->mla_cache_used,
          m->mla_token_bytes, (long long)m->tokens);
}

void gen_report(const gen_opts *o, clmoe_model *model, clmoe_ctx *ctx, const gen_result *r)
{
  const double dec_tokens = (double)r->steps * (double)r->nseq;
  if (!o->quiet) {
    char a[32], b[32], c[32], d[32];
    const clmoe_gen_memory *m = &r->mem;
    model_line(o, model, ctx);
    fprintf(stderr, "load: %.3f s\n", r->load_s);
    fprintf(stderr, "prefill: %lld tokens of %lld prompts in %.3f s: %.1f tokens/s; time to first token %.3f s\n",
            (long long)r->prompt_tokens, (long long)r->nseq, r->prefill_s, rate((double)r->prompt_tokens, r->prefill_s),
            r->first_token_s);
    fprintf(stderr, "decode: %lld steps x %lld sequences in %.3f s: %.1f tokens/s (%.1f steps/s); %lld tokens kept\n",
            (long long)r->steps, (long long)r->nseq, r->decode_s, rate(dec_tokens, r->decode_s),
            rate((double)r->steps, r->decode_s), (long long)r->new_tokens);
    fprintf(stderr, "memory: weights %s, KDA states %s (constant), MLA cache %s used (%zu B per token) of %s "
            "allocated\n", gen_bytes(a, sizeof a, (double)m->weights), gen_bytes(b, sizeof b, (double)m->kda_state),
            gen_bytes(c, sizeof c, (double)m->mla_cache_used), m->mla_token_bytes,
            gen_bytes(d, sizeof d, (double)m->mla_cache));
    clmoe_pool_stats ps;
    clmoe_ctx_pool_stats(ctx, &ps);
    fprintf(stderr, "device memory: peak in use %s, held by the pool %s\n",
            gen_bytes(a, sizeof a, (double)ps.peak_in_use_bytes), gen_bytes(b, sizeof b, (double)ps.device_bytes));
    if (o->profile) profile_text(&r->prof);
  }
  if (!o->json) return;
  FILE *f = app_open_output(o->json);
  fprintf(f, "{\n  \"checkpoint\": ");
  json_string(f, o->ckpt);
  fprintf(f, ",\n  \"device\": ");
  json_string(f, clmoe_ctx_caps(ctx)->device_name);
  fprintf(f, ",\n  \"weights_dtype\": \"%s\"", weights_name(model));
  fprintf(f, ",\n  \"sequences\": %lld,\n  \"prompt_tokens\": %lld,\n  \"new_tokens\": %lld,\n  \"steps\": %lld,\n",
          (long long)r->nseq, (long long)r->prompt_tokens, (long long)r->new_tokens, (long long)r->steps);
  fprintf(f, "  \"load_s\": ");
  json_double(f, r->load_s);
  fprintf(f, ",\n  \"prefill_s\": ");
  json_double(f, r->prefill_s);
  fprintf(f, ",\n  \"prefill_tokens_per_s\": ");
  json_double(f, rate((double)r->prompt_tokens, r->prefill_s));
  fprintf(f, ",\n  \"time_to_first_token_s\": ");
  json_double(f, r->first_token_s);
  fprintf(f, ",\n  \"decode_s\": ");
  json_double(f, r->decode_s);
  fprintf(f, ",\n  \"decode_tokens_per_s\": ");
  json_double(f, rate(dec_tokens, r->decode_s));
  fprintf(f, ",\n  \"memory\": ");
  memory_json(f, &r->mem);
  clmoe_pool_stats ps;
  clmoe_ctx_pool_stats(ctx, &ps);
  fprintf(f, ",\n  \"device_memory\": {\"peak_in_use\": %llu, \"held\": %llu}",
          (unsigned long long)ps.peak_in_use_bytes, (unsigned long long)ps.device_bytes);
  if (o->profile) {
    fprintf(f, ",\n  \"profile\": ");
    profile_json(f, &r->prof);
  }
  fprintf(f, ",\n  \"outputs\": [\n");
  for (int64_t s = 0; s < r->nseq; s++) {
    fprintf(f, "    {\"prompt\": ");
    json_string(f, o->prompt_from[s]);
    if (!o->prompt_ids[s]) {
      fprintf(f, ", \"prompt_text\": ");
      json_bytes(f, o->prompt[s], o->prompt_len[s]);
    }
    fprintf(f, ", \"prompt_ids\": [");
    for (int64_t i = 0; i < r->prompt_len[s]; i++) fprintf(f, "%s%d", i ? ", " : "", r->prompt[s][i]);
    fprintf(f, "]");
    fprintf(f, ", \"end\": \"%s\", \"text\": ", r->why[s] ? r->why[s] : "length");
    json_bytes(f, r->text[s], r->text_len[s]);
    fprintf(f, ", \"ids\": [");
    for (int64_t i = 0; i < r->nids[s]; i++)
      fprintf(f, "%s%d", i ? ", " : "", r->ids[s][i]);
    fprintf(f, "]");
    fprintf(f, "}%s\n", s + 1 < r->nseq ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  app_close_output(f);
}

/* One benchmark length: a synthetic prompt (bytes from the seed), prefilled in chunks,
 * then a few decode steps at that context. */
typedef struct bench_row {
  int64_t T, chunk, steps;
  double prefill_s, step_s;
  clmoe_gen_memory mem;
  size_t all_mla_bytes; /* the cache an all-MLA stack of the same depth would hold */
  gen_profile prof;     /* --profile: the prefill's kernels */
} bench_row;

static void bench_one(const gen_opts *o, clmoe_model *model, clmoe_ctx *ctx, int64_t T, bench_row *row)
{
  const clmoe_config *c = clmoe_model_config(model);
  const int64_t V = c->vocab;
  int32_t *p = malloc((size_t)T * sizeof *p);
  float *logits = malloc((size_t)V * sizeof *logits);
  if (!p || !logits) app_die(CLMOE_ERR_OUT_OF_MEMORY, "benchmark prompt");
  for (int64_t i = 0; i < T; i++) {
    int32_t t = (int32_t)(clmoe_random_uniform(o->sampling.seed, (uint64_t)i, 0.0f, 1.0f) * (float)V);
    p[i] = t < V ? t : (int32_t)V - 1;
  }
  clmoe_gen_options go = o->gen;
  go.reserve_tokens = T + o->bench_steps; /* one allocation: no doubling inside the timing */
  clmoe_gen_state *g;
  APP_CHECK(clmoe_gen_state_create(model, 1, &go, &g));
  const int32_t *pp[1] = {p};
  const int64_t len[1] = {T};
  clmoe_ctx_counters c0, c1;
  memset(&row->prof, 0, sizeof row->prof);
  if (o->profile) { /* this prefill's kernels alone */
    APP_CHECK(clmoe_ctx_finish(ctx));
    clmoe_ctx_profile_clear(ctx);
    APP_CHECK(clmoe_ctx_profile_begin(ctx));
    clmoe_ctx_counters_get(ctx, &c0);
  }
  double t0 = app_now();
  APP_CHECK(clmoe_gen_prefill(g, pp, len, logits, NULL));
  row->prefill_s = app_now() - t0;
  if (o->profile) {
    int kernels;
    clmoe_ctx_counters_get(ctx, &c1);
    APP_CHECK(clmoe_ctx_profile_end(ctx, &row->prof.device_s, &kernels));
    row->prof.steps = 1, row->prof.commands = kernels, row->prof.wall_s = row->prefill_s;
    row->prof.count.launches = c1.launches - c0.launches;
    row->prof.count.blocking_reads = c1.blocking_reads - c0.blocking_reads;
    row->prof.count.blocking_writes = c1.blocking_writes - c0.blocking_writes;
    row->prof.count.finishes = c1.finishes - c0.finishes;
    gen_profile_families(ctx, &row->prof);
  }
  clmoe_gen_memory_usage(g, &row->mem); /* the context of the prompt itself */
  int32_t next = p[T - 1];
  t0 = app_now();
  for (int64_t k = 0; k < o->bench_steps; k++) APP_CHECK(clmoe_gen_step(g, &next, logits));
  row->step_s = o->bench_steps ? (app_now() - t0) / (double)o->bench_steps : 0.0;
  row->T = T, row->steps = o->bench_steps;
  row->chunk = go.prefill_chunk ? go.prefill_chunk : 2048;
  const int nmla = clmoe_config_mla_count(c);
  row->all_mla_bytes = nmla ? row->mem.mla_token_bytes / (size_t)nmla * (size_t)c->layers * (size_t)row->mem.tokens : 0;
  clmoe_gen_state_destroy(g);
  free(p), free(logits);
}

int gen_prefill_bench(const gen_opts *o, clmoe_model *model, clmoe_ctx *ctx)
{
  bench_row rows[GEN_MAX_BENCH];
  if (!o->quiet) {
    model_line(o, model, ctx);
    fprintf(stderr, "%10s %8s %11s %12s %14s %14s %14s %14s\n", "tokens", "chunk", "prefill s", "tokens/s",
            "KDA state", "MLA cache", "all-MLA cache", "decode step ms");
  }
  for (int i = 0; i < o->nbench; i++) {
    bench_one(o, model, ctx, o->bench[i], &rows[i]);
    if (o->quiet) continue;
    char a[32], b[32], c[32];
    const bench_row *r = &rows[i];
    fprintf(stderr, "%10lld %8lld %11.3f %12.1f %14s %14s %14s %14.2f\n", (long long)r->T, (long long)r->chunk,
            r->prefill_s, rate((double)r->T, r->prefill_s), gen_bytes(a, sizeof a, (double)r->mem.kda_state),
            gen_bytes(b, sizeof b, (double)r->mem.mla_cache_used), gen_bytes(c, sizeof c, (double)r->all_mla_bytes),
            1e3 * r->step_s);
  }
  for (int i = 0; o->profile && !o->quiet && i < o->nbench; i++) prefill_profile_text(rows[i].T, &rows[i].prof);
  if (!o->json) return 0;
  FILE *f = app_open_output(o->json);
  fprintf(f, "{\n  \"checkpoint\": ");
  json_string(f, o->ckpt);
  fprintf(f, ",\n  \"device\": ");
  json_string(f, clmoe_ctx_caps(ctx)->device_name);
  fprintf(f, ",\n  \"prefill_bench\": [\n");
  for (int i = 0; i < o->nbench; i++) {
    const bench_row *r = &rows[i];
    fprintf(f, "    {\"tokens\": %lld, \"chunk\": %lld, \"prefill_s\": ", (long long)r->T, (long long)r->chunk);
    json_double(f, r->prefill_s);
    fprintf(f, ", \"prefill_tokens_per_s\": ");
    json_double(f, rate((double)r->T, r->prefill_s));
    fprintf(f, ", \"decode_steps\": %lld, \"decode_step_s\": ", (long long)r->steps);
    json_double(f, r->step_s);
    fprintf(f, ", \"all_mla_cache_bytes\": %zu, \"memory\": ", r->all_mla_bytes);
    memory_json(f, &r->mem);
    if (o->profile) {
      fprintf(f, ", \"profile\": ");
      profile_json(f, &r->prof);
    }
    fprintf(f, "}%s\n", i + 1 < o->nbench ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  app_close_output(f);
  return 0;
}
