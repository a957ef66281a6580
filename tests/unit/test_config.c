/* CUnit suite: configuration files. The presets parse and reproduce the published
 * parameter counts; a config written out parses back to itself; every file of the
 * corpus tests/data/bad/config gives its own clear error naming the file and line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_common.h"

static void test_presets(void)
{
  int n = 0;
  for (const char *const *name = clmoe_config_preset_names(); *name; name++, n++) {
    clmoe_config c;
    clmoe_status st = clmoe_config_preset(*name, &c);
    if (st != CLMOE_OK) fprintf(stderr, "\n  preset %s: %s\n", *name, clmoe_last_error());
    CU_ASSERT_EQUAL(st, CLMOE_OK);
  }
  CU_ASSERT(n >= 5);
  clmoe_config c;
  CU_ASSERT_EQUAL(clmoe_config_preset("k4", &c), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "tiny"));
}

/* The report's totals (MODEL.md sections 1 and 6): K3 2.78T total, 104.2B active; the gpu
 * preset 705M total, 99M active. Rounded the way they are published. */
static void test_counts(void)
{
  clmoe_config c;
  clmoe_param_count p;
  TEST_OK(clmoe_config_preset("k3", &c));
  clmoe_config_count_params(&c, &p);
  CU_ASSERT_EQUAL(clmoe_config_mla_count(&c), 24);
  CU_ASSERT(fabs(p.total / 1e12 - 2.78) < 0.005);
  CU_ASSERT(fabs(p.active / 1e9 - 104.2) < 0.05);
  CU_ASSERT(p.active < p.total);
  TEST_OK(clmoe_config_preset("gpu", &c));
  clmoe_config_count_params(&c, &p);
  CU_ASSERT(fabs(p.total / 1e6 - 705) < 0.5);
  CU_ASSERT(fabs(p.active / 1e6 - 99) < 0.5);
  /* tiny: MLA only at layer 4, the dense FFN in layer 1. */
  TEST_OK(clmoe_config_preset("tiny", &c));
  CU_ASSERT(c.is_mla[3] && !c.is_mla[0] && !c.is_mla[1] && !c.is_mla[2]);
  CU_ASSERT_EQUAL(c.dense_layers, 1);
  CU_ASSERT_EQUAL(c.experts, 896);
  CU_ASSERT_EQUAL(c.top_k, 8);
}

static void test_round_trip(void)
{
  const char *const *name = clmoe_config_preset_names();
  for (; *name; name++) {
    clmoe_config a, b;
    TEST_OK(clmoe_config_preset(*name, &a));
    a.train.ncurriculum = 2;
    a.train.curriculum_len[0] = 128, a.train.curriculum_step[0] = 0;
    a.train.curriculum_len[1] = 512, a.train.curriculum_step[1] = 100;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(clmoe_config_write(&a, f), 0);
    fclose(f);
    TEST_OK(clmoe_config_parse(text, *name, &b));
    snprintf(b.name, sizeof b.name, "%s", a.name);
    CU_ASSERT_EQUAL(memcmp(&a, &b, sizeof a), 0);
    free(text);
  }
}

/* Each bad file and the words its error must contain (besides the file's name). */
static const struct { const char *file, *expect; } bad_files[] = {
    {"unknown_key.conf", ":3: [model] colour: unknown key"},
    {"unknown_section.conf", ":2: unknown section [modle]"},
    {"no_section.conf", ":2: 'vocab' comes before any [section]"},
    {"not_a_number.conf", ":3: [model] d_model: 'sixty-four' is not a whole number"},
    {"fraction.conf", ":3: [model] layers: '2.5' is not a whole number"},
    {"out_of_range.conf", ":3: [kda] lower_bound: -6 is outside [-5"},
    {"twice.conf", ":4: [model] vocab: given twice"},
    {"no_value.conf", ":3: [model] vocab: no value"},
    {"no_equals.conf", ":3: 'vocab 256' is neither"},
    {"bad_header.conf", ":2: '[model' is not a [section] header"},
    {"bad_layer.conf", ":3: [model] mla_layers: 'x' is not a layer number"},
    {"layer_past_end.conf", "mla_layers names layer 9 but the model has 4 layers"},
    {"bad_balancing.conf", ":3: [moe] balancing: 'auxloss' is not one of"},
    {"bad_curriculum.conf", ":3: [train] curriculum: steps must increase"},
    {"missing_sizes.conf", "[model] vocab, d_model and layers are required"},
    {"topk_too_big.conf", "[moe] top_k = 9 exceeds experts = 8"},
    {"kda_missing.conf", "[kda] heads, head_dim and gate_rank are required"},
    {"empty.conf", "[model] vocab, d_model and layers are required"},
    {"nul_byte.conf", "contains a NUL byte"},
    {"does_not_exist.conf", "cannot open"},
};

static void test_bad_corpus(void)
{
  const char *src = getenv("CLMOE_SRCDIR");
  CU_ASSERT_PTR_NOT_NULL_FATAL(src);
  for (size_t i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/bad/config/%s", src, bad_files[i].file);
    clmoe_config c;
    clmoe_status st = clmoe_config_load(path, &c);
    const char *msg = clmoe_last_error();
    int ok = (st == CLMOE_ERR_FORMAT || st == CLMOE_ERR_IO) && strstr(msg, bad_files[i].file) &&
             strstr(msg, bad_files[i].expect);
    if (!ok)
      fprintf(stderr, "\n  %s: status %s, message \"%s\", expected \"%s\"\n", bad_files[i].file,
              clmoe_strerror(st), msg, bad_files[i].expect);
    CU_ASSERT(ok);
  }
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "presets parse", test_presets);
  CU_add_test(suite, "parameter counts of k3 and gpu", test_counts);
  CU_add_test(suite, "write then parse gives the same config", test_round_trip);
  CU_add_test(suite, "bad config corpus", test_bad_corpus);
}

int main(void) { return test_main("config", add_tests); }
