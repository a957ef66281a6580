/* Inference: the layer stack over the tokens of a prefill pass or a decode step
 * (include/clmoe/generate.h). The order of operations is that of clmoe_model_forward (model_run.c)
 * with train = 0, over the same schedule (lib/model/model_stack.c: Block AttnRes, or the
 * plain residual); only the token mixers differ: they read and advance the sequences' states.
 * tests/unit/test_generate.c checks that the logits agree. */
#include "generate_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "clmoe/attn_res.h"
#include "clmoe/gemm.h"
#include "clmoe/kda_layer.h"
#include "clmoe/mla.h"
#include "clmoe/ops.h"


double clmoe__gen_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 1 when layer l's token mixer takes its GEMV path in pass p (a decode step of few
 * sequences): its first launch can then apply the pre-norm itself. */
static int mixer_on_gemv(const clmoe_gen_state *g, int l, const gen_pass *p)
{
  const model_layer *L = &g->model->layers[l];
  if (p->kind != GEN_STEP) return 0;
  return L->is_mla ? clmoe__mla_decode_gemv_ok(&L->mla, p->ntok)
                   : p->ntok <= GEN_GEMV_TOKENS && clmoe__gen_kda_gemv_ok(&L->kda);
}

/* The token mixer of layer l: y [ntok, d] from x [ntok, d], advancing the states. A path
 * that can add its output into the residual stream's slot itself does so (slot += out, or
 * slot = out when empty) and sets *added; y is then unused. Paths other than the GEMV's
 * take the layer with its bf16 matrices as they are on the tile path (clmoe__gen_tile; an
 * MLA pass over a cache with W_ukv widened), else widened to fp32 (wd holds the copies). */
static clmoe_status mixer(clmoe_gen_state *g, int l, const gen_pass *p, const clmoe_tensor *x, clmoe_tensor *y,
                          clmoe_tensor *slot, int empty, int *added, gen_widened *wd)
{
  clmoe_ctx *ctx = g->ctx;
  model_layer *L = &g->model->layers[l];
  if (mixer_on_gemv(g, l, p)) { /* no CLBlast */
    *added = 1;
    return L->is_mla ? clmoe__mla_decode_step_into(ctx, &L->mla_cfg, &L->mla, g->mla[l], x, NULL, 0.0f, !empty, slot)
                     : clmoe__gen_kda_step(ctx, &L->kda, x, NULL, 0.0f, &g->kda[l], !empty, slot);
  }
  clmoe_kda_layer kda = L->kda;
  clmoe_mla_weights mla = L->mla;
  if (clmoe__gen_tile(ctx, g->model)) {
    if (L->is_mla && (p->kind == GEN_STEP || !p->fresh)) CLMOE_TRY(clmoe__gen_widen_mla_ukv(ctx, &L->mla, &mla, wd));
  } else if (L->is_mla) {
    CLMOE_TRY(clmoe__gen_widen_mla(ctx, &L->mla, &mla, wd));
  } else {
    CLMOE_TRY(clmoe__gen_widen_kda(ctx, &L->kda, &kda, wd));
  }
  if (p->kind == GEN_STEP) {
    if (L->is_mla) return clmoe_mla_decode_step(ctx, &L->mla_cfg, &mla, g->mla[l], x, y);
    return clmoe_kda_layer_step(ctx, &kda, x, &g->kda[l], y);
  }
  clmoe_tensor x3, y3;
  const int64_t s3[3] = {1, p->ntok, g->model->cfg.d_model};
  CLMOE_TRY(clmoe_tensor_view(x, &x3, 3, s3, 0));
  CLMOE_TRY(clmoe_tensor_view(y, &y3, 3, s3, 0));
  if (!L->is_mla) return clmoe_kda_layer_forward(ctx, &kda, &x3, &p->cu, &y3, NULL, &g->kda[l]);
  if (p->fresh) return clmoe_mla_prefill(ctx, &L->mla_cfg, &mla, g->mla[l], &x3, &p->cu_act, p->slots, &y3);
  /* later passes: the training form when it costs fewer multiply-adds (or as chosen) */
  const clmoe_gen_extend_form f = g->opts.extend_form;
  if (f == CLMOE_GEN_EXTEND_TRAINING ||
      (f == CLMOE_GEN_EXTEND_AUTO && clmoe_mla_extend_flash_cheaper(&L->mla_cfg, g->mla[l], p->counts)))
    return clmoe_mla_extend_flash(ctx, &L->mla_cfg, &mla, g->mla[l], x, p->counts, y);
  return clmoe_mla_extend(ctx, &L->mla_cfg, &mla, g->mla[l], x, p->counts, y);
}

/* The dense gated FFN for few tokens: gate and up in one GEMV launch, the down product with
 * the gated unit applied to its input in another (clmoe_situ_ffn_forward's math). gain not
 * NULL: the input is RMSNorm(x) gain (eps), applied in the first launch. */
static clmoe_status ffn_gemv(clmoe_gen_state *g, const clmoe_situ_ffn *f, const clmoe_tensor *x,
                             const clmoe_tensor *gain, float eps, int accumulate, clmoe_tensor *y)
{
  const int64_t N = x->shape[0], F = f->w_gate.shape[0];
  clmoe_tensor u = {0}, w = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(g->ctx, &u, CLMOE_F32, 2, (int64_t[]){N, F}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(g->ctx, &w, CLMOE_F32, 2, (int64_t[]){N, F}), done);
  const clmoe__gemv_slot in[2] = {{&f->w_gate, &u, NULL}, {&f->w_upp, &w, NULL}}, out = {&f->w_dn, y, NULL};
  CLMOE_TRY_GOTO(st, clmoe__ops_gemv(g->ctx, "generate (gemv)", x, NULL, gain, gain ? 1 : 0, 0, eps, 0, 2, in), done);
  st = clmoe__ops_gemv(g->ctx, "generate (gemv)", &u, &w, NULL, 2, (int)f->glu, 0.0f, accumulate, 1, &out);
done:
  clmoe_tensor_destroy(&u);
  clmoe_tensor_destroy(&w);
  return st;
}

/* The few-token forms of layer l's FFN in pass p, which add into the residual stream and
 * whose first launch can apply the pre-norm: the dense FFN on the GEMV, or the MoE layer's
 * decode forward (no sort, no dispatch; fp32 or bf16 weights); 0: neither. */
enum { FFN_DENSE = 1, FFN_MOE_DECODE = 2 };
static int ffn_few(const clmoe_gen_state *g, int l, const gen_pass *p)
{
  const model_layer *L = &g->model->layers[l];
  if (L->is_dense)
    return p->ntok <= GEN_GEMV_TOKENS && clmoe__ops_gemv_ok(&L->ffn.w_gate) && clmoe__ops_gemv_ok(&L->ffn.w_upp) &&
                   clmoe__ops_gemv_ok(&L->ffn.w_dn)
               ? FFN_DENSE
               : 0;
  if (g->model->dist) return 0; /* experts on their ranks */
  return p->ntok * L->moe.cfg.top_k <= GEN_MOE_DECODE_PAIRS && L->moe.cfg.top_k <= CLMOE_MOE_DECODE_TOPK_MAX
             ? FFN_MOE_DECODE
             : 0;
}

/* Sub-layer s of layer l on x; its output goes to y, or (*added set) straight into the
 * residual stream's slot as mixer() says. */
static clmoe_status sublayer_widened(clmoe_gen_state *g, int l, int s, const gen_pass *p, const clmoe_tensor *x,
                                     clmoe_tensor *y, clmoe_tensor *slot, int empty, int *added, gen_widened *wd)
{
  model_layer *L = &g->model->layers[l];
  const int tile = clmoe__gen_tile(g->ctx, g->model); /* bf16 matrices on the tile GEMM */
  *added = 0;
  if (s == SUB_MIXER) return mixer(g, l, p, x, y, slot, empty, added, wd);
  const int few = ffn_few(g, l, p);
  if (few) {
    *added = 1;
    return few == FFN_DENSE ? ffn_gemv(g, &L->ffn, x, NULL, 0.0f, !empty, slot)
                            : clmoe_moe_decode_forward(g->ctx, &L->moe, x, !empty, slot, NULL);
  }
  if (L->is_dense) {
    clmoe_situ_ffn f = L->ffn;
    if (!tile) CLMOE_TRY(clmoe__gen_widen_ffn(g->ctx, &L->ffn, &f, wd));
    return clmoe_situ_ffn_forward(g->ctx, &f, x, 0.0f, y, NULL);
  }
  if (g->model->dist) { /* experts on their ranks; every rank runs the same passes (bf16 weights, fp32 sums) */
    clmoe_moe_ep_layer ep;
    CLMOE_TRY(clmoe__gen_widen_ep(g->ctx, &L->ep, &ep, wd));
    return clmoe_moe_ep_forward(g->ctx, g->model->dist, &ep, x, y, NULL);
  }
  /* Tile path: every matrix as it is (the routed experts on the bf16 tile kernels, which
   * clmoe_moe_forward_infer takes by the same rule); else the router, latent and shared
   * matrices widened, the expert stacks read as they are by the grouped kernels. */
  clmoe_moe_layer moe = L->moe;
  if (!tile) CLMOE_TRY(clmoe__gen_widen_moe(g->ctx, &L->moe, &moe, wd));
  return clmoe_moe_forward_infer(g->ctx, &moe, x, y); /* biases frozen */
}

static clmoe_status sublayer(clmoe_gen_state *g, int l, int s, const gen_pass *p, const clmoe_tensor *x,
                             clmoe_tensor *y, clmoe_tensor *slot, int empty, int *added)
{
  gen_widened wd;
  wd.n = 0;
  const clmoe_status st = sublayer_widened(g, l, s, p, x, y, slot, empty, added, &wd);
  clmoe__gen_widen_release(&wd); /* the queue is in order: the calls above have read them */
  return st;
}

/* Copies host ints into t (i32, whole, offset 0) without waiting: the caller keeps the
 * array alive until the queue has run the copy (stack's final read, or its finish on
 * failure). *queued is set. */
static clmoe_status upload(clmoe_ctx *ctx, clmoe_tensor *t, const int32_t *host, int *queued)
{
  if (clmoe_tensor_numel(t) == 0) return CLMOE_OK; /* (a pass with no row wanted) */
  CLMOE_CL(clEnqueueWriteBuffer(ctx->queue, t->buf, CL_FALSE, 0, (size_t)clmoe_tensor_numel(t) * sizeof *host,
                                host, 0, NULL, NULL));
  *queued = 1;
  return CLMOE_OK;
}

/* out [N, d] = rows ids [N] of table [V, d] (f32). Host ids are valid (clmoe_gen_prefill and
 * the steps check them), the head's rows come from the pass itself, and an id outside
 * [0, V) (a greedy pick's NaN mark, reported on the host) reads row 0. */
static clmoe_status gather_rows(clmoe_ctx *ctx, const clmoe_tensor *table, const clmoe_tensor *ids,
                                clmoe_tensor *out)
{
  const int64_t V = table->shape[0], d = table->shape[1], N = ids->shape[0];
  CLMOE_TRY(clmoe__want(table, CLMOE_F32, "generate", "embedding table"));
  CLMOE_TRY(clmoe__want_shape(out, "generate", "gathered rows", 0, 2, N, d, 0, 0));
  if (N == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "gen_step", NULL, "gen_gather_rows", &k));
  cl_ulong toff = (cl_ulong)table->offset, uV = (cl_ulong)V, ud = (cl_ulong)d, uN = (cl_ulong)N;
  cl_ulong ooff = (cl_ulong)out->offset;
  CLMOE_TRY(clmoe__args(k, 8, KA(table->buf), KA(toff), KA(uV), KA(ud), KA(ids->buf), KA(uN), KA(out->buf),
                        KA(ooff)));
  size_t local[2] = {64, 1}, global[2] = {(size_t)d, (size_t)N};
  return clmoe__launch(ctx, k, 2, global, local);
}


clmoe_status clmoe__gen_stack(clmoe_gen_state *g, const gen_pass *p, const gen_io *io)
{
  const int32_t *ids_host = io->ids, *rows = io->rows;
  const int64_t nrows = io->nrows;
  float *out = io->logits;
  int32_t *greedy = io->greedy;
  clmoe_model *m = g->model;
  clmoe_ctx *ctx = g->ctx;
  const clmoe_config *c = &m->cfg;
  const int64_t d = c->d_model, V = c->vocab, N = p->ntok;
  const float eps = (float)c->norm_eps;
  clmoe_tensor ids = {0}, stream = {0}, y = {0}, h = {0}, hn = {0}, alpha = {0}, rstd = {0}, sel = {0}, rid = {0};
  clmoe_tensor logits = {0}, best = {0}, slot, src;
  clmoe_status st;
  int queued = 0; /* uploads enqueued without waiting, reading host memory */
  if (!io->ids_dev) {
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &ids, CLMOE_I32, 1, &N), done);
    CLMOE_TRY_GOTO(st, upload(ctx, &ids, ids_host, &queued), done);
  }
  const clmoe_tensor *idp = io->ids_dev ? io->ids_dev : &ids;
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &stream, CLMOE_F32, 3, (int64_t[]){m->nslots, N, d}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &y, CLMOE_F32, 2, (int64_t[]){N, d}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &hn, CLMOE_F32, 2, (int64_t[]){N, d}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &rstd, CLMOE_F32, 1, &N), done);
  const int plain = c->residual == CLMOE_RESIDUAL_PLAIN; /* no mix: h is the running sum */
  const int head_tile = nrows > GEN_GEMV_TOKENS && clmoe__gen_tile(ctx, m); /* a GEMM of bf16 rows */
  const int head_gemv = !head_tile &&
                        (nrows <= GEN_GEMV_TOKENS || (nrows <= GEN_HEAD_GEMV_ROWS && m->head.dtype == CLMOE_BF16)) &&
                        clmoe__ops_gemv_ok(&m->head);
  /* the plain stack's final norm inside the head's GEMV launch when every row is wanted */
  const int head_norm = plain && head_gemv && !rows;
  if (!plain) {
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &h, CLMOE_F32, 2, (int64_t[]){N, d}), done);
    /* [N, nsrc] for the largest nsrc (every slot); views take the smaller ones */
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &alpha, CLMOE_F32, 1, (int64_t[]){N * m->nslots}), done);
  }
  CLMOE_TRY_GOTO(st, clmoe__model_stream_slot(&stream, 0, &slot), done);
  CLMOE_TRY_GOTO(st, gather_rows(ctx, &m->embed, idp, &slot), done);
  model_stack it;
  for (clmoe__model_stack_begin(&it, c);; clmoe__model_stack_next(&it)) {
    const int l = it.layer, s = it.sub, nsrc = it.nsrc;
    if (plain) { /* x [N, d] in slot 0: x += f(RMSNorm(x)); the final norm before the head */
      const clmoe_tensor *gain = it.final ? &m->fnorm : &m->layers[l].norm[s];
      if (!it.final && s == SUB_MIXER && mixer_on_gemv(g, l, p)) { /* the norm inside the mixer's first launch */
        model_layer *L = &m->layers[l];
        CLMOE_TRY_GOTO(st, L->is_mla ? clmoe__mla_decode_step_into(ctx, &L->mla_cfg, &L->mla, g->mla[l], &slot, gain,
                                                                   eps, 1, &slot)
                                     : clmoe__gen_kda_step(ctx, &L->kda, &slot, gain, eps, &g->kda[l], 1, &slot),
                       done);
        continue;
      }
      const int few = it.final ? 0 : s == SUB_MIXER ? 0 : ffn_few(g, l, p);
      if (few) { /* likewise the FFN's */
        model_layer *L = &m->layers[l];
        CLMOE_TRY_GOTO(st, few == FFN_DENSE ? ffn_gemv(g, &L->ffn, &slot, gain, eps, 1, &slot)
                                            : clmoe__moe_decode_forward_norm(ctx, &L->moe, &slot, gain, eps, 1, &slot,
                                                                             NULL),
                       done);
        continue;
      }
      if (it.final && head_norm) break; /* the final norm in the head's launch */
      CLMOE_TRY_GOTO(st, clmoe_rmsnorm(ctx, &slot, gain, eps, &hn, &rstd), done);
      if (it.final) break;
      int added;
      CLMOE_TRY_GOTO(st, sublayer(g, l, s, p, &hn, &y, &slot, 0, &added), done);
      if (!added) CLMOE_TRY_GOTO(st, clmoe_axpy(ctx, 1.0f, &y, &slot), done);
      continue;
    }
    clmoe_tensor a2;
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&alpha, &a2, 2, (int64_t[]){N, nsrc}, 0), done);
    CLMOE_TRY_GOTO(st, clmoe__model_stream_sources(&stream, nsrc, &src), done);
    const clmoe_tensor *w = it.final ? &m->far_w : &m->layers[l].ar_w[s];
    const clmoe_tensor *gn = it.final ? &m->far_g : &m->layers[l].ar_g[s];
    const clmoe_tensor *nm = it.final ? &m->fnorm : &m->layers[l].norm[s];
    if (N <= GEN_GEMV_TOKENS) { /* one launch */
      CLMOE_TRY_GOTO(st, clmoe__gen_attn_res_norm(ctx, &src, w, gn, nm, eps, &h, &hn), done);
    } else {
      CLMOE_TRY_GOTO(st, clmoe_attn_res(ctx, &src, w, gn, eps, &h, &a2), done);
      CLMOE_TRY_GOTO(st, clmoe_rmsnorm(ctx, &h, nm, eps, &hn, &rstd), done);
    }
    if (it.final) break;
    CLMOE_TRY_GOTO(st, clmoe__model_stream_slot(&stream, it.slot, &slot), done);
    int added;
    CLMOE_TRY_GOTO(st, sublayer(g, l, s, p, &hn, &y, &slot, it.empty, &added), done);
    if (!added) CLMOE_TRY_GOTO(st, it.empty ? clmoe_tensor_copy(&slot, &y) : clmoe_axpy(ctx, 1.0f, &y, &slot), done);
  }
  /* hn holds the final norm's output [N, d] (or, with head_norm, the head's launch applies
   * it to the stream's slot 0); the head runs on the wanted rows only. */
  const clmoe_tensor *x = head_norm ? &slot : &hn;
  if (rows) {
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &rid, CLMOE_I32, 1, &nrows), done);
    CLMOE_TRY_GOTO(st, upload(ctx, &rid, rows, &queued), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &sel, CLMOE_F32, 2, (int64_t[]){nrows, d}), done);
    CLMOE_TRY_GOTO(st, gather_rows(ctx, &hn, &rid, &sel), done);
    x = &sel;
  }
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &logits, CLMOE_F32, 2, (int64_t[]){nrows, V}), done);
  if (head_gemv) {
    const clmoe__gemv_slot hs = {&m->head, &logits, NULL};
    CLMOE_TRY_GOTO(st, clmoe__ops_gemv(ctx, "generate (gemv)", x, NULL, head_norm ? &m->fnorm : NULL, head_norm, 0, eps,
                                       0, 1, &hs),
                   done);
  } else if (head_tile) {
    CLMOE_TRY_GOTO(st, clmoe_linear(ctx, x, &m->head, NULL, &logits), done); /* clmoe_gemm_bf16 */
  } else {
    gen_widened wd;
    clmoe_tensor head;
    wd.n = 0;
    st = clmoe__gen_widen_head(ctx, &m->head, &head, &wd);
    if (st == CLMOE_OK) st = clmoe_linear(ctx, x, &head, NULL, &logits);
    clmoe__gen_widen_release(&wd);
    if (st != CLMOE_OK) goto done;
  }
  if (greedy && io->greedy_dev && !out) { /* picks stay on the device, come back unwaited */
    CLMOE_TRY_GOTO(st, io->sampling ? clmoe_gen_sample_rows(ctx, io->sampling, &logits, io->draw_step, io->greedy_dev)
                                    : clmoe_gen_argmax(ctx, &logits, io->greedy_dev), done);
    CLMOE_CL_GOTO(st, clEnqueueReadBuffer(ctx->queue, io->greedy_dev->buf, CL_FALSE, 0,
                                          (size_t)nrows * sizeof *greedy, greedy, 0, NULL, NULL), done);
    queued = 0; /* the caller waits for the queue before it reads greedy or frees the ids */
  } else if (greedy) { /* nrows ids come back, not nrows x V logits */
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &best, CLMOE_I32, 1, &nrows), done);
    CLMOE_TRY_GOTO(st, io->sampling ? clmoe_gen_sample_rows(ctx, io->sampling, &logits, io->draw_step, &best)
                                    : clmoe_gen_argmax(ctx, &logits, &best), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_read(&best, greedy, (size_t)nrows * sizeof *greedy), done);
    queued = 0; /* the blocking read waited for the uploads too (one in-order queue) */
  }
  if (out) {
    st = clmoe_tensor_read(&logits, out, (size_t)(nrows * V) * sizeof *out);
    queued = 0;
  }
done:
  /* After a failure, uploads may still read the caller's arrays: wait for them. */
  if (queued && clFinish(ctx->queue) == CL_SUCCESS) clmoe__count_wait(ctx, CLMOE_WAIT_FINISH);
  clmoe_tensor *t[] = {&ids, &stream, &y, &h, &hn, &alpha, &rstd, &sel, &rid, &logits, &best};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) clmoe_tensor_destroy(t[i]);
  return st;
}

clmoe_status clmoe__gen_check_tokens(const clmoe_gen_state *g, const char *op, int64_t seq, const int32_t *t, int64_t n)
{
  const int64_t V = g->model->cfg.vocab;
  for (int64_t i = 0; i < n; i++)
    if (t[i] < 0 || t[i] >= V)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: token %lld of sequence %lld is %d, outside the "
                          "vocabulary [0, %lld)", op, (long long)i, (long long)seq, t[i], (long long)V);
  return CLMOE_OK;
}

/* The device sequence tables of a prefill pass. */
static clmoe_status pass_tables(clmoe_gen_state *g, gen_pass *p, const int64_t *counts)
{
  const int64_t n = g->nseq;
  int32_t *cu = malloc((size_t)(2 * n + 2) * sizeof *cu), *cua = cu + n + 1;
  if (!cu) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (prefill tables)");
  int64_t nact = 0;
  cu[0] = cua[0] = 0;
  p->fresh = 1;
  for (int64_t s = 0; s < n; s++) {
    cu[s + 1] = cu[s] + (int32_t)counts[s];
    if (counts[s] == 0) continue;
    p->fresh &= g->len[s] == 0;
    p->slots[nact] = (int32_t)s;
    cua[nact + 1] = cu[s + 1];
    nact++;
  }
  const int64_t n1 = n + 1, na1 = nact + 1;
  clmoe_status st = clmoe_tensor_create(g->ctx, &p->cu, CLMOE_I32, 1, &n1);
  if (st == CLMOE_OK) st = clmoe_tensor_write(&p->cu, cu, (size_t)n1 * sizeof *cu);
  if (st == CLMOE_OK) st = clmoe_tensor_create(g->ctx, &p->cu_act, CLMOE_I32, 1, &na1);
  if (st == CLMOE_OK) st = clmoe_tensor_write(&p->cu_act, cua, (size_t)na1 * sizeof *cua);
  free(cu);
  return st;
}

clmoe_status clmoe_gen_prefill(clmoe_gen_state *g, const int32_t *const *tokens, const int64_t *lengths,
                               float *last_logits, float *all_logits)
{
  const char *op = "clmoe_gen_prefill";
  if (!g || !tokens || !lengths) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: state, tokens and lengths "
                                                      "are required", op);
  const int64_t n = g->nseq, C = g->opts.prefill_chunk, V = g->model->cfg.vocab;
  int64_t maxlen = 0, total = 0;
  for (int64_t s = 0; s < n; s++) {
    if (lengths[s] < 0 || lengths[s] > ((int64_t)1 << 31) || (lengths[s] > 0 && !tokens[s]))
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: sequence %lld: length %lld with %s tokens", op,
                          (long long)s, (long long)lengths[s], tokens[s] ? "its" : "no");
    CLMOE_TRY(clmoe__gen_check_tokens(g, op, s, tokens[s], lengths[s]));
    maxlen = lengths[s] > maxlen ? lengths[s] : maxlen;
    total += lengths[s];
  }
  if (total == 0) return CLMOE_OK;
  const int64_t most = C * n < total ? C * n : total; /* tokens of the largest pass */
  int64_t *counts = calloc((size_t)n, sizeof *counts), *base = calloc((size_t)n, sizeof *base);
  int32_t *ids = malloc((size_t)most * sizeof *ids), *rows = malloc((size_t)most * sizeof *rows);
  int32_t *slots = malloc((size_t)n * sizeof *slots), *rseq = malloc((size_t)most * sizeof *rseq);
  float *out = malloc((size_t)(all_logits ? most : n) * (size_t)V * sizeof *out);
  clmoe_status st = CLMOE_OK;
  if (!counts || !base || !ids || !rows || !slots || !rseq || !out) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (prefill of %lld tokens)", (long long)total);
    goto done;
  }
  for (int64_t s = 1; s < n; s++) base[s] = base[s - 1] + lengths[s - 1]; /* rows of all_logits */
  for (int64_t k = 0; k * C < maxlen; k++) {
    const double t0 = clmoe__gen_now();
    gen_pass p = {.kind = GEN_PREFILL, .counts = counts, .slots = slots};
    int64_t nt = 0, nrows = 0;
    for (int64_t s = 0; s < n; s++) {
      const int64_t left = lengths[s] - k * C;
      counts[s] = left <= 0 ? 0 : left < C ? left : C;
      if (counts[s] > 0) memcpy(ids + nt, tokens[s] + k * C, (size_t)counts[s] * sizeof *ids);
      if (!all_logits && counts[s] > 0 && left <= C) rseq[nrows] = (int32_t)s, rows[nrows++] = (int32_t)(nt + counts[s] - 1);
      nt += counts[s];
    }
    p.ntok = nt;
    st = pass_tables(g, &p, counts);
    const gen_io io = {.ids = ids, .rows = all_logits ? NULL : rows, .nrows = all_logits ? nt : nrows, .logits = out};
    if (st == CLMOE_OK) st = clmoe__gen_stack(g, &p, &io);
    clmoe_tensor_destroy(&p.cu);
    clmoe_tensor_destroy(&p.cu_act);
    if (st != CLMOE_OK) {
      clmoe__append_error(" (prefill pass %lld of %lld tokens)", (long long)k, (long long)nt);
      goto done;
    }
    /* Hand the logits out. */
    for (int64_t s = 0, r = 0; s < n; s++) {
      if (all_logits)
        memcpy(all_logits + (size_t)(base[s] + k * C) * (size_t)V, out + (size_t)r * (size_t)V,
               (size_t)(counts[s] * V) * sizeof *out);
      if (all_logits && last_logits && counts[s] > 0 && lengths[s] - k * C <= C)
        memcpy(last_logits + (size_t)s * (size_t)V, out + (size_t)(r + counts[s] - 1) * (size_t)V, (size_t)V * sizeof *out);
      r += all_logits ? counts[s] : 0;
    }
    for (int64_t i = 0; !all_logits && last_logits && i < nrows; i++)
      memcpy(last_logits + (size_t)rseq[i] * (size_t)V, out + (size_t)i * (size_t)V, (size_t)V * sizeof *out);
    for (int64_t s = 0; s < n; s++) g->len[s] += counts[s];
    g->stats.prefill_seconds += clmoe__gen_now() - t0;
    g->stats.prefill_tokens += nt;
    g->stats.prefill_passes++;
  }
done:
  free(counts), free(base), free(ids), free(rows), free(slots), free(rseq), free(out);
  return st;
}
