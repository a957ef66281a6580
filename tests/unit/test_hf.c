/* CUnit suite: Hugging Face Kimi Linear checkpoints (include/clmoe/hf.h). config.json in the
 * hub's form and in transformers 5's form give the same config, field by field as written
 * here by hand from the JSON; malformed or unsupported configs give errors naming the file
 * and the key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_common.h"

/* The tiny model of tests/data/kimi_linear in both forms, as key / JSON value pairs (keys as
 * the hub and transformers 5.25 write them). */
typedef struct kv {
  const char *key, *value;
} kv;

static const kv hub_keys[] = {
    {"model_type", "\"kimi_linear\""}, {"architectures", "[\"KimiLinearForCausalLM\"]"},
    {"vocab_size", "512"}, {"hidden_size", "64"}, {"intermediate_size", "96"}, {"num_hidden_layers", "5"},
    {"num_attention_heads", "2"}, {"num_key_value_heads", "2"}, {"hidden_act", "\"silu\""},
    {"rms_norm_eps", "1e-06"}, {"tie_word_embeddings", "false"}, {"rope_theta", "10000.0"},
    {"q_lora_rank", "null"}, {"kv_lora_rank", "32"}, {"qk_nope_head_dim", "16"}, {"qk_rope_head_dim", "8"},
    {"v_head_dim", "16"}, {"mla_use_nope", "true"}, {"num_experts", "8"}, {"num_experts_per_token", "2"},
    {"num_shared_experts", "1"}, {"moe_intermediate_size", "16"}, {"moe_renormalize", "true"},
    {"moe_router_activation_func", "\"sigmoid\""}, {"routed_scaling_factor", "2.446"},
    {"first_k_dense_replace", "1"}, {"moe_layer_freq", "1"}, {"use_grouped_topk", "true"},
    {"num_expert_group", "4"}, {"topk_group", "2"},
    {"linear_attn_config", "{\"full_attn_layers\": [2, 5], \"kda_layers\": [1, 3, 4], \"head_dim\": 16, "
                           "\"num_heads\": 2, \"short_conv_kernel_size\": 4}"},
    {NULL, NULL}};

static const kv tf5_keys[] = {
    {"model_type", "\"kimi_linear\""}, {"vocab_size", "512"}, {"hidden_size", "64"},
    {"intermediate_size", "96"}, {"num_hidden_layers", "5"}, {"num_attention_heads", "2"},
    {"num_key_value_heads", "2"}, {"hidden_act", "\"silu\""}, {"rms_norm_eps", "1e-06"},
    {"layer_types", "[\"linear_attention\", \"full_attention\", \"linear_attention\", \"linear_attention\", "
                    "\"full_attention\"]"},
    {"mlp_layer_types", "[\"dense\", \"sparse\", \"sparse\", \"sparse\", \"sparse\"]"},
    {"linear_conv_kernel_dim", "4"}, {"linear_head_dim", "16"}, {"linear_num_heads", "2"},
    {"q_lora_rank", "null"}, {"kv_lora_rank", "32"}, {"qk_nope_head_dim", "16"}, {"qk_rope_head_dim", "8"},
    {"v_head_dim", "16"}, {"n_routed_experts", "8"}, {"num_experts_per_tok", "2"}, {"n_shared_experts", "1"},
    {"moe_intermediate_size", "16"}, {"norm_topk_prob", "true"}, {"routed_scaling_factor", "2.446"},
    {"n_group", "4"}, {"topk_group", "2"}, {NULL, NULL}};

/* Writes the object of `keys` to DIR/config.json, with key `key` given `value` (replaced when
 * present, else added; value NULL: left out); returns the path. */
static const char *write_config(const kv *keys, const char *key, const char *value, char *path, size_t len)
{
  snprintf(path, len, "%s/config.json", test_tmpdir("hf"));
  FILE *f = fopen(path, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  int n = 0, found = 0;
  fputc('{', f);
  for (const kv *k = keys; k->key; k++) {
    const int here = key && !strcmp(k->key, key);
    found |= here;
    if (here && !value) continue;
    fprintf(f, "%s\"%s\": %s", n++ ? ", " : "", k->key, here ? value : k->value);
  }
  if (key && !found && value) fprintf(f, "%s\"%s\": %s", n ? ", " : "", key, value);
  fputs("}\n", f);
  CU_ASSERT_EQUAL(fclose(f), 0);
  return path;
}

/* A config file of the given text. */
static const char *write_text(const char *text, char *path, size_t len)
{
  snprintf(path, len, "%s/config.json", test_tmpdir("hf"));
  FILE *f = fopen(path, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs(text, f);
  CU_ASSERT_EQUAL(fclose(f), 0);
  return path;
}

/* The config both JSON forms describe, set by hand. */
static void expect_tiny(const clmoe_config *c)
{
  CU_ASSERT_EQUAL(c->vocab, 512);
  CU_ASSERT_EQUAL(c->d_model, 64);
  CU_ASSERT_EQUAL(c->layers, 5);
  const unsigned char mla[5] = {0, 1, 0, 0, 1};
  for (int l = 0; l < 5; l++) CU_ASSERT_EQUAL(c->is_mla[l], mla[l]);
  CU_ASSERT_EQUAL(c->dense_layers, 1);
  CU_ASSERT_DOUBLE_EQUAL(c->norm_eps, 1e-6, 1e-20);
  CU_ASSERT_EQUAL(c->residual, CLMOE_RESIDUAL_PLAIN);
  CU_ASSERT_EQUAL(c->kda_heads, 2);
  CU_ASSERT_EQUAL(c->kda_head_dim, 16);
  CU_ASSERT_EQUAL(c->kda_gate_rank, 16);
  CU_ASSERT_EQUAL(c->kda_out_gate_rank, 16);
  CU_ASSERT_EQUAL(c->kda_conv_width, 4);
  CU_ASSERT_EQUAL(c->kda_unbounded_gate, 1);
  CU_ASSERT_EQUAL(c->mla_heads, 2);
  CU_ASSERT_EQUAL(c->mla_q_rank, 0);
  CU_ASSERT_EQUAL(c->mla_kv_rank, 32);
  CU_ASSERT_EQUAL(c->mla_qk_nope_dim, 16);
  CU_ASSERT_EQUAL(c->mla_qk_rope_dim, 8);
  CU_ASSERT_EQUAL(c->mla_v_dim, 16);
  CU_ASSERT_EQUAL(c->mla_output_gate, 0);
  CU_ASSERT_DOUBLE_EQUAL(c->mla_norm_eps, 1e-6, 0.0); /* transformers' default, not rms_norm_eps */
  CU_ASSERT_EQUAL(c->dense_ff, 96);
  CU_ASSERT_EQUAL(c->activation, CLMOE_ACTIVATION_SWIGLU);
  CU_ASSERT_EQUAL(c->experts, 8);
  CU_ASSERT_EQUAL(c->top_k, 2);
  CU_ASSERT_EQUAL(c->shared_experts, 1);
  CU_ASSERT_EQUAL(c->shared_ff, 16);
  CU_ASSERT_EQUAL(c->expert_ff, 16);
  CU_ASSERT_EQUAL(c->latent, 0);
  CU_ASSERT_DOUBLE_EQUAL(c->routed_scale, 2.446, 1e-15);
  CU_ASSERT_EQUAL(c->groups, 4);
  CU_ASSERT_EQUAL(c->topk_groups, 2);
  CU_ASSERT_EQUAL(c->renormalize, 1);
  CU_ASSERT_STRING_EQUAL(c->balancing, "none");
}

static void test_forms(void)
{
  char path[4200];
  clmoe_config hub, tf5;
  TEST_OK(clmoe_hf_config_read(write_config(hub_keys, NULL, NULL, path, sizeof path), &hub));
  expect_tiny(&hub);
  /* the directory works as well as the file */
  TEST_OK(clmoe_hf_config_read(test_tmpdir("hf"), &hub));
  expect_tiny(&hub);
  CU_ASSERT(clmoe_hf_is_checkpoint(test_tmpdir("hf")));
  CU_ASSERT(!clmoe_hf_is_checkpoint(path));
  TEST_OK(clmoe_hf_config_read(write_config(tf5_keys, NULL, NULL, path, sizeof path), &tf5));
  expect_tiny(&tf5);
  /* switches: no grouping, no renormalisation, K3's bounded gate and full-rank gates */
  TEST_OK(clmoe_hf_config_read(write_config(hub_keys, "use_grouped_topk", "false", path, sizeof path), &hub));
  CU_ASSERT_EQUAL(hub.groups, 1);
  CU_ASSERT_EQUAL(hub.topk_groups, 1);
  TEST_OK(clmoe_hf_config_read(write_config(tf5_keys, "norm_topk_prob", "false", path, sizeof path), &tf5));
  CU_ASSERT_EQUAL(tf5.renormalize, 0);
  const char *k3 = "{\"model_type\": \"kimi_linear\", \"vocab_size\": 512, \"hidden_size\": 64,"
                   " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"q_lora_rank\": 24,"
                   " \"mla_use_output_gate\": true, \"num_expert_group\": 1, \"topk_group\": 1,"
                   " \"linear_attn_config\": {\"full_attn_layers\": [2], \"kda_layers\": [1], \"head_dim\": 16,"
                   " \"num_heads\": 2, \"use_full_rank_gate\": true, \"gate_lower_bound\": -4.5}}";
  TEST_OK(clmoe_hf_config_read(write_text(k3, path, sizeof path), &hub));
  CU_ASSERT_EQUAL(hub.kda_unbounded_gate, 0);
  CU_ASSERT_DOUBLE_EQUAL(hub.kda_lower_bound, -4.5, 0.0);
  CU_ASSERT_EQUAL(hub.kda_out_gate_rank, 0);
  CU_ASSERT_EQUAL(hub.mla_q_rank, 24);
  CU_ASSERT_EQUAL(hub.mla_output_gate, 1);
  CU_ASSERT_EQUAL(hub.dense_layers, 1); /* first_k_dense_replace defaults to 1 */
}

/* Each case: the form, a key given another value (or left out: NULL), and the words the
 * error must hold besides the file's name. */
static const struct {
  int tf5;
  const char *key, *value, *expect;
} bad_cases[] = {
    {0, "model_type", "\"llama\"", "model_type: 'llama' is not supported"},
    {0, "model_type", NULL, "model_type: required but absent"},
    {0, "mla_use_nope", "false", "mla_use_nope: false: MLA with rotary embeddings"},
    {0, "hidden_act", "\"gelu\"", "hidden_act: 'gelu' is not supported"},
    {0, "moe_router_activation_func", "\"softmax\"", "moe_router_activation_func: 'softmax'"},
    {0, "num_key_value_heads", "1", "num_key_value_heads: differs from num_attention_heads"},
    {0, "moe_layer_freq", "2", "moe_layer_freq: not 1"},
    {0, "tie_word_embeddings", "true", "tie_word_embeddings: true"},
    {0, "attn_res_block_size", "12", "attn_res_block_size"},
    {0, "n_routed_experts", "16", "n_routed_experts: disagrees with num_experts"},
    {0, "vocab_size", "\"512\"", "vocab_size: not a whole number"},
    {0, "hidden_size", NULL, "hidden_size: required (a whole number) but absent"},
    {0, "num_experts_per_token", "9", "[moe] top_k = 9 exceeds"},
    {0, "topk_group", "5", "[moe] topk_groups = 5 exceeds groups = 4"},
    {0, "layer_types", "[\"linear_attention\"]", "layer_types: not a list of 5 strings"},
    {0, "layer_types", "[\"linear_attention\", \"linear_attention\", \"linear_attention\", \"linear_attention\","
                       " \"full_attention\"]", "layer_types: disagrees with linear_attn_config.full_attn_layers"},
    {0, "linear_attn_config", NULL, "layer_types: absent, and so is linear_attn_config.full_attn_layers"},
    {0, "linear_attn_config", "[1]", "linear_attn_config: not an object"},
    {1, "mlp_layer_types", "[\"dense\", \"sparse\", \"dense\", \"sparse\", \"sparse\"]",
     "mlp_layer_types: dense layers after a sparse one"},
    {1, "layer_types", "[\"linear_attention\", \"full\", \"linear_attention\", \"linear_attention\","
                       " \"full_attention\"]", "layer_types: entry 1 is not"},
    {1, "hidden_size", "0", "hidden_size: not a whole number in [1,"},
    {1, "first_k_dense_replace", "2", "mlp_layer_types: disagrees with first_k_dense_replace"},
};

static void test_bad(void)
{
  char path[4200];
  clmoe_config c;
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    write_config(bad_cases[i].tf5 ? tf5_keys : hub_keys, bad_cases[i].key, bad_cases[i].value, path, sizeof path);
    const clmoe_status st = clmoe_hf_config_read(path, &c);
    const char *msg = clmoe_last_error();
    const int ok = st != CLMOE_OK && strstr(msg, path) && strstr(msg, bad_cases[i].expect);
    if (!ok) fprintf(stderr, "\n  case %zu (%s): status %d, message: %s\n", i, bad_cases[i].expect, (int)st, msg);
    CU_ASSERT(ok);
  }
  /* the KDA/MLA partition of the hub form */
  static const char *const lists[][2] = {
      {"[2, 5]", "[1, 3, 3]"}, {"[2, 5]", "[1, 3]"}, {"[2, 6]", "[1, 3, 4]"}};
  static const char *const expect[] = {"layer 3 is named twice", "layer 4 is in neither list",
                                       "entry 1 is not a layer number in [1, 5]"};
  for (int i = 0; i < 3; i++) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"model_type\": \"kimi_linear\", \"vocab_size\": 512, \"hidden_size\": 64,"
             " \"num_hidden_layers\": 5, \"num_attention_heads\": 2, \"linear_attn_config\": {"
             "\"full_attn_layers\": %s, \"kda_layers\": %s, \"head_dim\": 16, \"num_heads\": 2}}",
             lists[i][0], lists[i][1]);
    write_text(json, path, sizeof path);
    CU_ASSERT_NOT_EQUAL(clmoe_hf_config_read(path, &c), CLMOE_OK);
    if (!strstr(clmoe_last_error(), expect[i])) fprintf(stderr, "\n  lists %d: %s\n", i, clmoe_last_error());
    CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), expect[i]));
  }
  /* not JSON, and absent */
  write_text("{\"model_type\": }", path, sizeof path);
  CU_ASSERT_EQUAL(clmoe_hf_config_read(path, &c), CLMOE_ERR_FORMAT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), path));
  write_text("{\"model_type\": \"kimi_linear\", \"model_type\": \"kimi_linear\"}", path, sizeof path);
  CU_ASSERT_EQUAL(clmoe_hf_config_read(path, &c), CLMOE_ERR_FORMAT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), path));
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "model_type: given twice"));
  CU_ASSERT_NOT_EQUAL(clmoe_hf_config_read("/nonexistent/config.json", &c), CLMOE_OK);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "/nonexistent/config.json"));
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "config.json: the hub's and transformers 5's forms give the same config", test_forms);
  CU_add_test(suite, "config.json: bad and unsupported configs name the file and the key", test_bad);
}

int main(void)
{
  return test_main("hf", add_tests);
}
