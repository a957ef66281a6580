/* fuzz_hf_config: the reader of Hugging Face config.json files (clmoe_hf_config_read,
 * include/clmoe/hf.h) on any bytes.
 *
 * Each input is read as a config.json. A refused input must be a status code with a
 * message; an accepted one must be a config the library's own format carries: it is
 * validated, its parameters counted, and it is written and parsed back to the same text (as
 * a checkpoint would carry it). A property that fails aborts, and libFuzzer keeps the input.
 *
 * Seeds: tests/fuzz/corpus/fuzz_hf_config/ (the tiny fixtures' configs in the hub's and
 * transformers 5's forms, K3's form, and broken variants). Build and run: `make fuzz`, then
 * tests/fuzz/fuzz_hf_config CORPUS_DIR, or scripts/fuzz.sh SECONDS. */
#include "fuzz_common.h" /* first: it sets _GNU_SOURCE */

#include <string.h>

static char *config_text(const clmoe_config *cfg)
{
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) abort();
  const int rc = clmoe_config_write(cfg, f);
  if (fclose(f) != 0) abort();
  FUZZ_REQUIRE(rc == 0, "clmoe_config_write refused a config that clmoe_hf_config_read made");
  return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  clmoe_config cfg;
  clmoe_status st = clmoe_hf_config_read(fuzz_file(data, size), &cfg);
  if (st != CLMOE_OK) {
    FUZZ_REQUIRE(st == CLMOE_ERR_FORMAT || st == CLMOE_ERR_IO, "clmoe_hf_config_read gave %s",
                 clmoe_strerror(st));
    FUZZ_REQUIRE(clmoe_last_error()[0] != '\0', "an error without a message");
    return 0;
  }
  FUZZ_REQUIRE(clmoe_config_validate(&cfg, "fuzz") == CLMOE_OK, "an accepted config.json is not a valid config");
  clmoe_param_count count;
  clmoe_config_count_params(&cfg, &count);
  char *first = config_text(&cfg);
  clmoe_config again;
  st = clmoe_config_parse(first, cfg.name, &again);
  FUZZ_REQUIRE(st == CLMOE_OK, "the written config does not parse (%s):\n%s", clmoe_strerror(st), first);
  char *second = config_text(&again);
  FUZZ_REQUIRE(strcmp(first, second) == 0, "written twice, the config differs:\n%s\n----\n%s", first, second);
  free(first);
  free(second);
  return 0;
}
