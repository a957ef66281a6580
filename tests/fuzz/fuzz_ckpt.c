/* fuzz_ckpt: the checkpoint loaders (clmoe_params_load in include/clmoe/params.h,
 * clmoe_gen_load in include/clmoe/generate.h) on any bytes, on the default OpenCL device.
 *
 * LLVMFuzzerInitialize creates one context and one model of MICRO_CONFIG: the tiny
 * preset's layout (KDA and MLA mixers, a dense FFN and Stable LatentMoE layers with their
 * balancing buffers, Block AttnRes) at the smallest sizes, so that its checkpoint is a few
 * tens of KB and every input stays cheap (the tiny preset's own checkpoint, with 896
 * experts, is tens of MB: far too large an input for a fuzzer). Each input is then a
 * checkpoint file:
 *   - clmoe_params_load into that model: a refused file must leave every parameter,
 *     moment and buffer as it was ("nothing is changed unless everything fits"; compared
 *     through a hash of their bytes);
 *   - clmoe_gen_load, which builds a model from the file's own "config" entry: run when that
 *     config is small (a file may describe a model of any size; the harness skips those
 *     above MAX_PARAMS or MAX_LAYERS instead of allocating them), the model destroyed.
 * A malformed file must be a status code with a message, never a crash or a leak.
 *
 * Seeds: the checkpoint of the micro model, written at start-up into the directory named by
 * CLMOE_FUZZ_SEED_DIR (scripts/fuzz.sh does this, so the seed always has the current
 * format), plus tests/fuzz/corpus/fuzz_ckpt/ (small damaged checkpoints). Build and run:
 * `make fuzz`, then tests/fuzz/fuzz_ckpt CORPUS_DIR, or scripts/fuzz.sh SECONDS. */
#include "fuzz_common.h" /* first: it sets _GNU_SOURCE */

#include <string.h>

#define MAX_PARAMS 200000.0 /* gen_load only for configs up to this many parameters */
#define MAX_LAYERS 8

static const char MICRO_CONFIG[] =
  "[model]\nvocab = 16\nd_model = 8\nlayers = 2\nmla_layers = 2\ndense_layers = 1\n"
  "[kda]\nheads = 1\nhead_dim = 8\ngate_rank = 4\nconv_width = 2\n"
  "[mla]\nheads = 1\nq_rank = 4\nkv_rank = 4\nqk_nope_dim = 4\nqk_rope_dim = 2\nv_dim = 4\n"
  "[ffn]\ndense_ff = 8\n"
  "[moe]\nexperts = 4\ntop_k = 2\nshared_experts = 1\nshared_ff = 4\nlatent = 4\nexpert_ff = 4\n"
  "quantile_bins = 16\n"
  "[attn_res]\nblock = 1\n";

static clmoe_ctx *ctx;
static clmoe_model *model;
static clmoe_params *params;
static unsigned char *scratch;
static size_t scratch_bytes;

#define OK_OR_DIE(call)                                                                    \
  do {                                                                                     \
    clmoe_status st_ = (call);                                                             \
    if (st_ != CLMOE_OK) {                                                                 \
      fprintf(stderr, "fuzz_ckpt: %s: %s\n", #call, clmoe_last_error());                   \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

/* FNV-1a 64 over one tensor's bytes, into h. */
static uint64_t hash_tensor(uint64_t h, const clmoe_tensor *t)
{
  const size_t n = clmoe_tensor_bytes(t);
  if (n == 0) return h;
  if (n > scratch_bytes) {
    free(scratch);
    scratch = malloc(n);
    scratch_bytes = scratch ? n : 0;
    if (!scratch) abort();
  }
  OK_OR_DIE(clmoe_tensor_read(t, scratch, n));
  for (size_t i = 0; i < n; i++) h = (h ^ scratch[i]) * 1099511628211ull;
  return h;
}

/* What a refused load must leave alone, read cheaply: the first parameter's value and
 * moments (the loader writes them first, so a load that stops half-way has changed them),
 * the last parameter's value, the last buffer and the step count. Reading every tensor
 * would cost more than the load itself (one blocking read each). */
static uint64_t hash_model(void)
{
  uint64_t h = 14695981039346656037ull;
  const clmoe_param *first = &params->p[0], *last = &params->p[params->n - 1];
  h = hash_tensor(h, first->value);
  if (first->trainable) h = hash_tensor(hash_tensor(h, &first->m), &first->v);
  h = hash_tensor(h, last->value);
  for (int i = params->n - 1; i >= 0; i--)
    if (!params->p[i].trainable) {
      h = hash_tensor(h, params->p[i].value);
      break;
    }
  return h ^ (uint64_t)params->step;
}

static void write_seed(const char *dir)
{
  char path[4096], *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f || clmoe_config_write(clmoe_model_config(model), f) != 0 || fclose(f) != 0) {
    fprintf(stderr, "fuzz_ckpt: cannot write the config text\n");
    exit(1);
  }
  clmoe_ckpt_meta meta = {0};
  OK_OR_DIE(clmoe_ckpt_meta_set(&meta, "config", text));
  OK_OR_DIE(clmoe_ckpt_meta_set(&meta, "step", "0"));
  snprintf(path, sizeof path, "%s/micro.safetensors", dir);
  OK_OR_DIE(clmoe_params_save(params, path, &meta));
  clmoe_ckpt_meta_free(&meta);
  free(text);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  clmoe_config cfg;
  OK_OR_DIE(clmoe_config_parse(MICRO_CONFIG, "micro", &cfg));
  OK_OR_DIE(clmoe_ctx_create(&ctx, NULL));
  OK_OR_DIE(clmoe_model_create(ctx, &cfg, &model));
  OK_OR_DIE(clmoe_model_init(model, 1));
  params = clmoe_model_params(model);
  const char *seed_dir = getenv("CLMOE_FUZZ_SEED_DIR");
  if (seed_dir && *seed_dir) write_seed(seed_dir);
  /* other values than the seed's, so that a load that stops half-way shows */
  OK_OR_DIE(clmoe_model_init(model, 2));
  return 0;
}

/* clmoe_gen_load only for files whose config is small: the harness reads the config the
 * way the loader does and skips the rest. */
static int small_config(const char *path)
{
  clmoe_st_file *f = NULL;
  if (clmoe_st_open(path, &f) != CLMOE_OK) return 1; /* the loader fails the same way */
  const char *text = clmoe_st_metadata(f, "config");
  clmoe_config cfg;
  int small = 1;
  if (text && clmoe_config_parse(text, "config", &cfg) == CLMOE_OK) {
    clmoe_param_count count;
    clmoe_config_count_params(&cfg, &count);
    small = count.total <= MAX_PARAMS && cfg.layers <= MAX_LAYERS;
  }
  clmoe_st_close(f);
  return small;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const char *path = fuzz_file(data, size);
  const uint64_t before = hash_model();
  clmoe_ckpt_meta meta = {0};
  clmoe_status st = clmoe_params_load(params, path, &meta);
  clmoe_ckpt_meta_free(&meta);
  if (st != CLMOE_OK) {
    FUZZ_REQUIRE(clmoe_last_error()[0] != '\0', "clmoe_params_load: an error without a message");
    /* Refused before any tensor is written, the model is untouched. A tensor whose data fails
     * its checksum is found as it streams in: that load has overwritten tensors, as
     * include/clmoe/params.h says (the caller must not go on with the model). */
    if (st != CLMOE_ERR_DAMAGED)
      FUZZ_REQUIRE(hash_model() == before, "a refused checkpoint changed the model (%s)",
                   clmoe_last_error());
  }

  if (!small_config(path)) return 0;
  clmoe_model *m = NULL;
  clmoe_ckpt_meta gmeta = {0};
  st = clmoe_gen_load(ctx, path, &m, &gmeta);
  clmoe_ckpt_meta_free(&gmeta);
  if (st == CLMOE_OK) {
    FUZZ_REQUIRE(m != NULL, "clmoe_gen_load succeeded without a model");
    clmoe_model_destroy(m);
  } else {
    FUZZ_REQUIRE(m == NULL, "a failed clmoe_gen_load returned a model");
    FUZZ_REQUIRE(clmoe_last_error()[0] != '\0', "clmoe_gen_load: an error without a message");
  }
  return 0;
}
