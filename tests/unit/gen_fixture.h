/* What the generation suites share (test_generate.c: the tiny preset's stack;
 * test_generate_plain.c: the plain residual stack): a model trained briefly on a repeating
 * byte cycle and saved as a checkpoint, and the checks that chunked prefill and decode
 * steps give, at every position, the logits of one training-form forward
 * (clmoe_model_forward) over the same tokens. */
#ifndef CLMOE_GEN_FIXTURE_H
#define CLMOE_GEN_FIXTURE_H

#include "test_common.h"

/* The trained pattern: bytes '0' .. '9' repeating (the next byte is the previous + 1). */
enum { GEN_CYCLE = 10 };
int32_t gen_cyc(int64_t i);

/* Writes params with a "config" entry of cfg (or none when cfg is NULL). */
clmoe_status gen_save_ckpt(clmoe_params *ps, const clmoe_config *cfg, const char *path);
/* Trains a model of cfg for a few steps on the cycle (random phases) and saves it to path;
 * asserts that the loss fell below a quarter of the first step's. */
void gen_train_and_save(const clmoe_config *cfg, const char *path);
/* The KDA gates of a young model forget within a few tokens (alpha about e^-2.5), so a
 * state lost between prefill passes would hardly show in the logits. With dt_bias = -6
 * the decay is about 0.99 per token: the state carries far, and the equivalence checks
 * catch a pass that drops or misplaces it. */
void gen_slow_down(clmoe_model *m);
/* The reference: logits [T, V] of one inference forward over tokens (malloc'ed; NULL with
 * a message on failure). */
float *gen_forward_logits(clmoe_model *model, const int32_t *tokens, int64_t T);
/* Test text: the cycle with a few bytes changed (so that the logits vary). */
void gen_text(int32_t *t, int64_t n, uint64_t seed);

/* Prefills nseq prompts (lens[s] tokens each, from full[s]) of `model` in chunks of
 * `chunk`, later passes attending to the MLA cache by `form`, then `steps` decode steps
 * feeding the next tokens of full[s]; compares every position's logits with a forward over
 * full[s][0 .. lens[s] + steps) within tol. */
void gen_check_equivalence(clmoe_model *model, clmoe_gen_extend_form form, int64_t nseq, const int64_t *lens,
                           int64_t steps, int64_t chunk, clmoe_dtype cache, double tol, int32_t *const *full);
/* The cases both stacks run, with the default extend form: one prompt in uneven chunks, a
 * batch of prompt lengths (f32 and bf16 latent cache), and one sequence of a batch reset
 * and refilled while the other keeps its context. */
void gen_eq_uneven_chunks(clmoe_model *model);
void gen_eq_batch_of_lengths(clmoe_model *model);
void gen_eq_reset_and_refill(clmoe_model *model);

#endif
