/* Inference: decode steps (include/clmoe/generate.h): one step with its logits or its picks
 * brought back, and runs of steps whose picks (greedy or sampled on the device) feed the
 * next step on the device, with one wait per run. The layer stack is generate_run.c's. */
#include "generate_internal.h"

#include <stdlib.h>

/* One decode step: logits host [nseq, V] (NULL: not read back; allocated here when greedy
 * is NULL too), greedy host [nseq] (NULL: none) the picks: greedy tokens, or with sampling
 * its draws at draw_step. */
static clmoe_status step(clmoe_gen_state *g, const char *op, const int32_t *tokens, float *logits, int32_t *greedy,
                         const clmoe_gen_sampling *sampling, int64_t draw_step)
{
  if (!g || !tokens) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: state and tokens are required", op);
  for (int64_t s = 0; s < g->nseq; s++) CLMOE_TRY(clmoe__gen_check_tokens(g, op, s, tokens + s, 1));
  const int64_t V = g->model->cfg.vocab;
  float *out = logits;
  if (!out && !greedy && !(out = malloc((size_t)(g->nseq * V) * sizeof *out)))
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (logits)");
  const double t0 = clmoe__gen_now();
  gen_pass p = {.kind = GEN_STEP, .ntok = g->nseq};
  const gen_io io = {.ids = tokens, .nrows = g->nseq, .logits = out, .greedy = greedy, .sampling = sampling,
                     .draw_step = draw_step};
  clmoe_status st = clmoe__gen_stack(g, &p, &io);
  if (out != logits) free(out);
  if (st != CLMOE_OK) return st;
  for (int64_t s = 0; s < g->nseq; s++) g->len[s]++;
  g->stats.step_seconds += clmoe__gen_now() - t0;
  g->stats.step_tokens += g->nseq;
  g->stats.steps++;
  for (int64_t s = 0; greedy && s < g->nseq; s++)
    if (greedy[s] < 0)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: sequence %lld: logit %lld is NaN", op, (long long)s,
                          (long long)(-1 - (int64_t)greedy[s]));
  return CLMOE_OK;
}

clmoe_status clmoe_gen_step(clmoe_gen_state *g, const int32_t *tokens, float *logits)
{
  return step(g, "clmoe_gen_step", tokens, logits, NULL, NULL, 0);
}

clmoe_status clmoe_gen_step_greedy(clmoe_gen_state *g, const int32_t *tokens, int32_t *next, float *logits)
{
  if (!next) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_gen_step_greedy: next is required");
  return step(g, "clmoe_gen_step_greedy", tokens, logits, next, NULL, 0);
}

clmoe_status clmoe_gen_step_sample(clmoe_gen_state *g, const clmoe_gen_sampling *sampling, const int32_t *tokens,
                                   int64_t draw_step, int32_t *next, float *logits)
{
  static const char op[] = "clmoe_gen_step_sample";
  if (!next || !g) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: state and next are required", op);
  gen_sampling_plan pl;
  CLMOE_TRY(clmoe__gen_sampling_plan(sampling, g->model->cfg.vocab, op, &pl));
  return step(g, op, tokens, logits, next, sampling, draw_step);
}

/* n steps fed on the device (see clmoe_gen_decode); sampling NULL: greedy. */
static clmoe_status run(clmoe_gen_state *g, const char *op, const clmoe_gen_sampling *sampling, const int32_t *tokens,
                        int64_t draw_step, int64_t n, int32_t *out)
{
  if (!g || !tokens || !out || n < 1)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: state, tokens, out and n >= 1 are required", op);
  if (g->model->dist)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: not under expert parallelism (the ranks must feed the same "
                        "tokens: take rank 0's with clmoe_gen_step_greedy or clmoe_gen_sample)", op);
  if (sampling) {
    gen_sampling_plan pl;
    CLMOE_TRY(clmoe__gen_sampling_plan(sampling, g->model->cfg.vocab, op, &pl));
  }
  for (int64_t s = 0; s < g->nseq; s++) CLMOE_TRY(clmoe__gen_check_tokens(g, op, s, tokens + s, 1));
  clmoe_ctx *ctx = g->ctx;
  const int64_t S = g->nseq;
  clmoe_tensor picks = {0}; /* i32 [nseq]: step k's picks, step k + 1's input */
  CLMOE_TRY(clmoe_tensor_create(ctx, &picks, CLMOE_I32, 1, &S));
  const double t0 = clmoe__gen_now();
  clmoe_status st = CLMOE_OK;
  int64_t k = 0;
  for (; k < n && st == CLMOE_OK; k++) {
    gen_pass p = {.kind = GEN_STEP, .ntok = S};
    const gen_io io = {.ids = k ? NULL : tokens, .ids_dev = k ? &picks : NULL, .nrows = S,
                       .greedy = out + k * S, .greedy_dev = &picks, .sampling = sampling, .draw_step = draw_step + k};
    st = clmoe__gen_stack(g, &p, &io);
    if (st == CLMOE_OK)
      for (int64_t s = 0; s < S; s++) g->len[s]++;
  }
  /* One wait for the whole run: every step's picks are in out (and the first step's ids
   * upload has read tokens) once the queue is done. */
  const cl_int fin = clFinish(ctx->queue);
  if (fin == CL_SUCCESS) clmoe__count_wait(ctx, CLMOE_WAIT_FINISH);
  else if (st == CLMOE_OK) st = clmoe__cl_error(fin, "clFinish", __FILE__, __LINE__);
  clmoe_tensor_destroy(&picks);
  if (st != CLMOE_OK) return st;
  g->stats.step_seconds += clmoe__gen_now() - t0;
  g->stats.step_tokens += n * S;
  g->stats.steps += n;
  for (int64_t i = 0; i < n * S; i++)
    if (out[i] < 0)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: step %lld, sequence %lld: logit %lld is NaN", op,
                          (long long)(i / S + 1), (long long)(i % S), (long long)(-1 - (int64_t)out[i]));
  return CLMOE_OK;
}

clmoe_status clmoe_gen_decode_greedy(clmoe_gen_state *g, const int32_t *tokens, int64_t n, int32_t *out)
{
  return run(g, "clmoe_gen_decode_greedy", NULL, tokens, 0, n, out);
}

clmoe_status clmoe_gen_decode(clmoe_gen_state *g, const clmoe_gen_sampling *sampling, const int32_t *tokens,
                              int64_t draw_step, int64_t n, int32_t *out)
{
  if (!sampling) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_gen_decode: sampling options are required");
  return run(g, "clmoe_gen_decode", sampling, tokens, draw_step, n, out);
}
