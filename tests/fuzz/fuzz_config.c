/* fuzz_config: the config parser and writer (include/clmoe/model_config.h) on any text.
 *
 * Each input is read as a config file (clmoe_config_load, which also sees NUL bytes and
 * the size limit) and, up to its first NUL, parsed as a string (clmoe_config_parse). Every
 * config the parser accepts must round-trip: clmoe_config_write gives a text that parses
 * again, and writing that config gives the same text, byte for byte (the property of the
 * checkpoints, which carry their config as text). A refused input must be a status code
 * with a message; a round trip that fails or differs aborts, and libFuzzer keeps the input.
 *
 * Seeds: tests/fuzz/corpus/fuzz_config/ (the shipped presets, variants with partial
 * sections, explicit layer lists and a curriculum, and tests/data/bad/config). Build and
 * run: `make fuzz`, then tests/fuzz/fuzz_config CORPUS_DIR, or scripts/fuzz.sh SECONDS. */
#include "fuzz_common.h" /* first: it sets _GNU_SOURCE */

#include <string.h>

/* The config as text (malloc'd, NUL-terminated); aborts when the writer refuses a config
 * the parser accepted. */
static char *config_text(const clmoe_config *cfg, const char *what)
{
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) abort();
  const int rc = clmoe_config_write(cfg, f);
  if (fclose(f) != 0) abort();
  FUZZ_REQUIRE(rc == 0, "clmoe_config_write refused %s, which the parser accepted", what);
  FUZZ_REQUIRE(strlen(text) == len, "the written %s holds a NUL byte", what);
  return text;
}

/* Accepted configs round-trip: parse(write(cfg)) succeeds and writes the same text. */
static void round_trip(const clmoe_config *cfg)
{
  char *first = config_text(cfg, "the parsed config");
  clmoe_config again;
  clmoe_status st = clmoe_config_parse(first, cfg->name, &again);
  FUZZ_REQUIRE(st == CLMOE_OK, "the written config does not parse (%s):\n%s", clmoe_strerror(st),
               first);
  char *second = config_text(&again, "the config parsed from the written text");
  FUZZ_REQUIRE(strcmp(first, second) == 0, "written twice, the config differs:\n%s\n----\n%s",
               first, second);
  FUZZ_REQUIRE(clmoe_config_mla_count(&again) == clmoe_config_mla_count(cfg),
               "the MLA layers differ after a round trip");
  free(first);
  free(second);
}

static void check_refusal(clmoe_status st, const char *how)
{
  FUZZ_REQUIRE(st == CLMOE_ERR_FORMAT || st == CLMOE_ERR_IO || st == CLMOE_ERR_INVALID_ARGUMENT,
               "%s gave %s", how, clmoe_strerror(st));
  FUZZ_REQUIRE(clmoe_last_error()[0] != '\0', "%s: an error without a message", how);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  clmoe_config cfg;
  clmoe_status st = clmoe_config_load(fuzz_file(data, size), &cfg);
  if (st == CLMOE_OK) {
    clmoe_param_count count;
    clmoe_config_count_params(&cfg, &count);
    round_trip(&cfg);
  } else {
    check_refusal(st, "clmoe_config_load");
  }

  char *text = malloc(size + 1);
  if (!text) abort();
  memcpy(text, data, size);
  text[size] = '\0';
  st = clmoe_config_parse(text, "fuzz.conf", &cfg);
  free(text);
  if (st == CLMOE_OK) round_trip(&cfg);
  else check_refusal(st, "clmoe_config_parse");
  return 0;
}
