/* clmoe-tokenize: text to token ids and back with a model's tokenizer (tokenizer.json or
 * tiktoken.model), and CLMOETOK token shards for clmoe-train. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "app_common.h"
#include "clmoe/tokenizer.h"

static void usage(void)
{
  printf("Usage: clmoe-tokenize --tokenizer FILE|DIR [options] [FILE ...]\n"
         "\n"
         "Encodes text to token ids (from --text, the FILEs, or stdin when neither is given; - is\n"
         "stdin), or decodes ids to text.\n"
         "\n"
         "  --tokenizer PATH    a Hugging Face tokenizer.json, a tiktoken.model rank file, or a\n"
         "                      directory holding one (tokenizer.json first)\n"
         "  --config PATH       for a tiktoken file: the tokenizer_config.json (or its directory)\n"
         "                      whose added_tokens_decoder names the special tokens (default: the\n"
         "                      one beside the rank file, if any); the split pattern is Kimi's\n"
         "  --text TEXT         text to encode (repeatable: one sequence each)\n"
         "  --print-ids         print each input's ids, comma-separated, one line per input\n"
         "  --no-special        special tokens written in the text are encoded as plain text\n"
         "                      (default: they become their ids)\n"
         "  --add-special       the special tokens the tokenizer.json's post-processor puts\n"
         "                      around each input (a BOS, ...), as Hugging Face's\n"
         "                      add_special_tokens=True (tiktoken files add none)\n"
         "  --decode IDS        print the text of comma-separated ids (repeatable)\n"
         "  --skip-special      --decode: leave special tokens out\n"
         "  --shard OUT         write every input's ids, in order, as one CLMOETOK token shard\n"
         "                      (clmoe-train --data OUT); written to a temporary file, fsynced and\n"
         "                      renamed\n"
         "  --append TOKEN      after each input, this token (a special token's text or an id),\n"
         "                      e.g. an end-of-text token between documents\n"
         "  --json FILE         a JSON report: the tokenizer and, per input, its ids and count\n"
         "                      (- for stdout)\n"
         "  --help, --version\n"
         "\n"
         "Exit status: 0 done, 1 failed (a file, the tokenizer, an id), 2 bad command line.\n");
}

typedef struct input {
  const char *name; /* the file, "-" or "--text N" */
  char *text;
  size_t len;
  clmoe_tokens ids;
} input;

static void read_input(input *in, const char *path)
{
  FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
  if (!f) app_fail(APP_EXIT_FAILED, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (!buf) app_fail(APP_EXIT_FAILED, "%s: out of host memory", path);
    if (len == cap) {
      char *b = realloc(buf, 2 * cap);
      if (!b) free(buf);
      buf = b, cap *= 2;
      continue;
    }
    const size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got) continue;
    if (ferror(f)) app_fail(APP_EXIT_FAILED, "%s: read failed", path);
    break;
  }
  if (f != stdin) fclose(f);
  in->name = path, in->text = buf, in->len = len;
}

/* "1,2,3" -> ids; exits with a usage error naming the flag on anything else. */
static int32_t *parse_ids(const char *s, size_t *n)
{
  size_t cap = 16;
  int32_t *ids = malloc(cap * sizeof *ids);
  *n = 0;
  if (!ids) app_fail(APP_EXIT_FAILED, "out of host memory");
  for (const char *p = s; *p;) {
    char *end;
    errno = 0;
    const long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ','))
      app_usage_error("--decode: '%s' is not a comma-separated list of ids", s);
    if (*n == cap) {
      int32_t *b = realloc(ids, 2 * cap * sizeof *ids);
      if (!b) app_fail(APP_EXIT_FAILED, "out of host memory");
      ids = b, cap *= 2;
    }
    ids[(*n)++] = (int32_t)v;
    p = *end ? end + 1 : end;
  }
  if (!*n) app_usage_error("--decode: no ids given");
  return ids;
}

static void print_ids(FILE *f, const clmoe_tokens *t)
{
  for (size_t k = 0; k < t->n; k++) fprintf(f, k ? ",%d" : "%d", (int)t->ids[k]);
}

static void write_json(const char *path, const clmoe_tokenizer *tok, const char *name, const input *in, int nin)
{
  FILE *f = app_open_output(path);
  fprintf(f, "{\"tokenizer\": ");
  json_string(f, name);
  fprintf(f, ", \"kind\": \"%s\", \"vocab\": %lld, \"inputs\": [", clmoe_tokenizer_kind(tok),
          (long long)clmoe_tokenizer_vocab(tok));
  for (int k = 0; k < nin; k++) {
    fprintf(f, "%s\n  {\"input\": ", k ? "," : "");
    json_string(f, in[k].name);
    fprintf(f, ", \"bytes\": %zu, \"tokens\": %zu, \"ids\": [", in[k].len, in[k].ids.n);
    print_ids(f, &in[k].ids);
    fprintf(f, "]}");
  }
  fprintf(f, "]}\n");
  app_close_output(f);
}

/* --append's token: a special token's text, or an id. */
static int32_t append_id(const clmoe_tokenizer *tok, const char *s)
{
  const int32_t id = clmoe_tokenizer_special_id(tok, s);
  if (id >= 0) return id;
  char *end;
  errno = 0;
  const long long v = strtoll(s, &end, 10);
  if (end == s || *end || errno || v < 0 || v >= clmoe_tokenizer_vocab(tok))
    app_usage_error("--append: '%s' is neither a special token of the tokenizer nor an id below %lld", s,
                    (long long)clmoe_tokenizer_vocab(tok));
  return (int32_t)v;
}

int main(int argc, char **argv)
{
  app_name = "clmoe-tokenize";
  app_flags flags = {.take = APP_FLAG_HELP | APP_FLAG_VERSION | APP_FLAG_JSON, .usage = usage};
  const char *tok_path = NULL, *config = NULL, *shard = NULL, *append = NULL, *v;
  int print = 0, no_special = 0, add_special = 0, skip_special = 0, ntext = 0, nfile = 0, ndecode = 0;
  const char **texts = calloc((size_t)argc, sizeof *texts), **files = calloc((size_t)argc, sizeof *files);
  const char **decodes = calloc((size_t)argc, sizeof *decodes);
  if (!texts || !files || !decodes) app_fail(APP_EXIT_FAILED, "out of host memory");
  for (int i = 1; i < argc; i++) {
    if (app_standard_flag(argc, argv, &i, &flags)) continue;
    if (app_option(argc, argv, &i, "--tokenizer", &v)) tok_path = v;
    else if (app_option(argc, argv, &i, "--config", &v)) config = v;
    else if (app_option(argc, argv, &i, "--text", &v)) texts[ntext++] = v;
    else if (app_option(argc, argv, &i, "--decode", &v)) decodes[ndecode++] = v;
    else if (app_option(argc, argv, &i, "--shard", &v)) shard = v;
    else if (app_option(argc, argv, &i, "--append", &v)) append = v;
    else if (!strcmp(argv[i], "--print-ids")) print = 1;
    else if (!strcmp(argv[i], "--no-special")) no_special = 1;
    else if (!strcmp(argv[i], "--add-special")) add_special = 1;
    else if (!strcmp(argv[i], "--skip-special")) skip_special = 1;
    else if (argv[i][0] == '-' && argv[i][1]) app_usage_error("unknown argument '%s'", argv[i]);
    else files[nfile++] = argv[i];
  }
  if (!tok_path) app_usage_error("--tokenizer is required (a tokenizer.json, tiktoken.model or their directory)");
  if (ndecode && (ntext || nfile || shard || print))
    app_usage_error("--decode does not go with text inputs, --print-ids or --shard");
  if (!ndecode && !print && !shard && !flags.json)
    app_usage_error("nothing to do: give --print-ids, --shard OUT, --json FILE or --decode IDS");

  clmoe_tokenizer *tok = NULL;
  APP_CHECK(clmoe_tokenizer_open(tok_path, config, &tok));
  for (int k = 0; k < ndecode; k++) {
    size_t n, len;
    int32_t *ids = parse_ids(decodes[k], &n);
    char *text;
    APP_CHECK(clmoe_tokenizer_decode(tok, ids, n, skip_special ? CLMOE_TOKENIZE_SKIP_SPECIAL : 0, &text, &len));
    if (fwrite(text, 1, len, stdout) != len) app_fail(APP_EXIT_FAILED, "stdout: write failed");
    free(text), free(ids);
  }
  if (ndecode) {
    if (fflush(stdout) != 0) app_fail(APP_EXIT_FAILED, "stdout: write failed");
    clmoe_tokenizer_free(tok);
    free(texts), free(files), free(decodes);
    return APP_EXIT_OK;
  }

  const int nin = ntext + nfile > 0 ? ntext + nfile : 1;
  input *in = calloc((size_t)nin, sizeof *in);
  char (*names)[32] = calloc((size_t)(ntext ? ntext : 1), sizeof *names);
  if (!in || !names) app_fail(APP_EXIT_FAILED, "out of host memory");
  for (int k = 0; k < ntext; k++) {
    snprintf(names[k], sizeof names[k], "--text %d", k + 1);
    in[k].name = names[k], in[k].len = strlen(texts[k]);
    in[k].text = strdup(texts[k]);
    if (!in[k].text) app_fail(APP_EXIT_FAILED, "out of host memory");
  }
  for (int k = 0; k < nfile; k++) read_input(&in[ntext + k], files[k]);
  if (!ntext && !nfile) read_input(&in[0], "-");
  const int32_t extra = append ? append_id(tok, append) : -1;
  const unsigned fl = (no_special ? 0 : CLMOE_TOKENIZE_SPECIAL) | (add_special ? CLMOE_TOKENIZE_ADD_SPECIAL : 0);
  const double t0 = app_now();
  size_t bytes = 0, total = 0;
  for (int k = 0; k < nin; k++) {
    clmoe_status st = clmoe_tokenizer_encode(tok, in[k].text, in[k].len, fl, &in[k].ids);
    clmoe_tokens *t = &in[k].ids;
    if (st == CLMOE_OK && extra >= 0) {
      if (t->n == t->cap) {
        int32_t *ids = realloc(t->ids, (2 * t->cap + 1) * sizeof *ids);
        if (!ids) app_fail(APP_EXIT_FAILED, "out of host memory");
        t->ids = ids, t->cap = 2 * t->cap + 1;
      }
      t->ids[t->n++] = extra;
    }
    if (st != CLMOE_OK) app_fail(APP_EXIT_FAILED, "%s: %s", in[k].name, clmoe_last_error());
    bytes += in[k].len, total += in[k].ids.n;
  }
  const double secs = app_now() - t0;
  if (print)
    for (int k = 0; k < nin; k++) print_ids(stdout, &in[k].ids), putchar('\n');
  if (flags.json) write_json(flags.json, tok, tok_path, in, nin);
  if (shard) {
    clmoe_shard_writer *w = NULL;
    APP_CHECK(clmoe_shard_create(shard, clmoe_tokenizer_vocab(tok), &w));
    for (int k = 0; k < nin; k++) {
      const clmoe_status st = clmoe_shard_append(w, in[k].ids.ids, (int64_t)in[k].ids.n);
      if (st != CLMOE_OK) {
        clmoe_shard_abort(w);
        app_die(st, "clmoe_shard_append");
      }
    }
    APP_CHECK(clmoe_shard_finish(w));
    fprintf(stderr, "%s: %zu tokens from %d input%s (%zu bytes, %.2f bytes/token, %.1f MB/s) -> %s (vocabulary %lld)\n",
            app_name, total, nin, nin == 1 ? "" : "s", bytes, total ? (double)bytes / (double)total : 0.0,
            secs > 0 ? (double)bytes / secs / 1e6 : 0.0, shard, (long long)clmoe_tokenizer_vocab(tok));
  }
  if (fflush(stdout) != 0) app_fail(APP_EXIT_FAILED, "stdout: write failed");
  for (int k = 0; k < nin; k++) free(in[k].text), clmoe_tokens_free(&in[k].ids);
  free(in), free(names), free(texts), free(files), free(decodes);
  clmoe_tokenizer_free(tok);
  return APP_EXIT_OK;
}
