/* Shared helpers of the clmoe apps (app_common.h): error exits, the standard flags, option
 * parsing, JSON output, the clock. */
#include "app_common.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *app_name = "clmoe";

clmoe_dist *app_dist = NULL;

void app_die(clmoe_status st, const char *what)
{
  /* the message first (it names the file, flag or tensor); the call, for bug reports */
  if (app_dist && clmoe_dist_size(app_dist) > 1) {
    fprintf(stderr, "%s: rank %d of %d: %s\n  (%s from %s)\n", app_name, clmoe_dist_rank(app_dist),
            clmoe_dist_size(app_dist), clmoe_last_error(), clmoe_strerror(st), what);
    fflush(stderr);
    clmoe_dist_abort(app_dist, 1); /* ends every rank: none waits forever for this one */
  } else {
    fprintf(stderr, "%s: %s\n  (%s from %s)\n", app_name, clmoe_last_error(), clmoe_strerror(st), what);
  }
  exit(1);
}

void app_fail(int code, const char *fmt, ...)
{
  /* one write of the whole line, so that the ranks' messages do not interleave */
  char line[1024];
  int n;
  va_list ap;
  const int many = app_dist && clmoe_dist_size(app_dist) > 1;
  if (many) n = snprintf(line, sizeof line, "%s: rank %d of %d: ", app_name, clmoe_dist_rank(app_dist),
                         clmoe_dist_size(app_dist));
  else n = snprintf(line, sizeof line, "%s: ", app_name);
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s\n", line);
  fflush(stderr);
  if (many) clmoe_dist_abort(app_dist, code);
  exit(code);
}

void app_usage_error(const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "%s: ", app_name);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nRun '%s --help' for the options.\n", app_name);
  exit(2);
}

int app_option(int argc, char **argv, int *i, const char *name, const char **value)
{
  const char *arg = argv[*i];
  size_t n = strlen(name);
  if (strncmp(arg, name, n) != 0) return 0;
  if (arg[n] == '=') {
    *value = arg + n + 1;
    return 1;
  }
  if (arg[n] != '\0') return 0;
  if (*i + 1 >= argc) app_usage_error("%s needs a value", name);
  *value = argv[++*i];
  return 1;
}

int app_standard_flag(int argc, char **argv, int *i, app_flags *f)
{
  const char *arg = argv[*i], *v;
  if ((f->take & APP_FLAG_HELP) && (!strcmp(arg, "--help") || !strcmp(arg, "-h"))) {
    f->usage();
    exit(0);
  }
  if ((f->take & APP_FLAG_VERSION) && !strcmp(arg, "--version")) {
    printf("%s %s\n%s", app_name, clmoe_version(), clmoe_build_info());
    exit(0);
  }
  if ((f->take & APP_FLAG_DEVICE) && app_option(argc, argv, i, "--device", &v)) {
    if (f->ndevices == APP_MAX_DEVICES) app_usage_error("too many --device options");
    f->devices[f->ndevices++] = f->device = v;
    return 1;
  }
  if ((f->take & APP_FLAG_JSON) && app_option(argc, argv, i, "--json", &v)) {
    f->json = v;
    if (!strcmp(v, "-")) app_json_to_stdout();
    return 1;
  }
  return 0;
}

long long app_parse_int(const char *flag, const char *value, long long min, long long max)
{
  char *end = NULL;
  errno = 0;
  long long v = strtoll(value, &end, 10); /* decimal: "010" is ten, not eight */
  if (errno || !end || end == value || *end != '\0')
    app_usage_error("%s: '%s' is not an integer", flag, value);
  if (v < min || v > max) app_usage_error("%s: %lld is outside [%lld, %lld]", flag, v, min, max);
  return v;
}

/* A JSON string of arbitrary bytes: valid UTF-8 as it is, other bytes (and controls) as
 * \u00XX escapes. */
void json_bytes(FILE *f, const char *buf, int64_t len)
{
  const unsigned char *s = (const unsigned char *)buf;
  fputc('"', f);
  for (int64_t i = 0; i < len;) {
    const unsigned c = s[i];
    /* strict UTF-8 (RFC 3629): no overlong forms, surrogates or code points past U+10FFFF */
    int n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : (c >> 4) == 14 ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    for (int k = 1; k < n; k++)
      if (i + k >= len || (s[i + k] & 0xc0) != 0x80) n = 0;
    if (n > 2) {
      const unsigned c1 = s[i + 1];
      if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f) || (c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 > 0x8f))
        n = 0;
    }
    if (n > 1) {
      fwrite(s + i, 1, (size_t)n, f);
      i += n;
      continue;
    }
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c == '\n') fputs("\\n", f);
    else if (c < 0x20 || c >= 0x7f) fprintf(f, "\\u%04x", c);
    else fputc((int)c, f);
    i++;
  }
  fputc('"', f);
}

void json_string(FILE *f, const char *s) { json_bytes(f, s ? s : "", s ? (int64_t)strlen(s) : 0); }

void json_build(FILE *f)
{
  fputc('{', f);
  const char *line = clmoe_build_info();
  for (int first = 1; *line; first = 0) {
    const size_t len = strcspn(line, "\n"), key = strcspn(line, ":");
    if (key < len) {
      const size_t skip = key + 1 < len && line[key + 1] == ' ' ? 2 : 1;
      fputs(first ? "" : ", ", f);
      json_bytes(f, line, (int64_t)key);
      fputs(": ", f);
      json_bytes(f, line + key + skip, (int64_t)(len - key - skip));
    }
    line += len + (line[len] == '\n');
  }
  fputc('}', f);
}

void app_build_commit(char *buf, size_t len)
{
  const char *c = strstr(clmoe_build_info(), "commit: ");
  snprintf(buf, len, "%.*s", c ? (int)strcspn(c + 8, "\n") : 7, c ? c + 8 : "unknown");
}

void json_double(FILE *f, double v)
{
  if (isfinite(v)) fprintf(f, "%.6g", v);
  else fputs("null", f);
}

/* The process's standard output once --json - has taken it (app_json_to_stdout); NULL
 * before. */
static FILE *json_stdout = NULL;

void app_json_to_stdout(void)
{
  if (json_stdout) return;
  fflush(stdout);
  const int fd = dup(STDOUT_FILENO);
  FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
  if (!f || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    fprintf(stderr, "%s: --json -: cannot move the text output to stderr: %s\n", app_name, strerror(errno));
    exit(1);
  }
  /* text on stdout now reaches stderr: line by line, so it keeps its order with stderr's */
  setvbuf(stdout, NULL, _IOLBF, BUFSIZ);
  json_stdout = f;
}

FILE *app_open_output(const char *path)
{
  if (!strcmp(path, "-")) {
    app_json_to_stdout();
    return json_stdout;
  }
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "%s: cannot write %s: %s\n", app_name, path, strerror(errno));
    exit(1);
  }
  return f;
}

void app_close_output(FILE *f)
{
  /* the standard output stays open (an app may write to it again); its errors count */
  if (f == json_stdout || f == stdout ? fflush(f) != 0 || ferror(f) : fclose(f) != 0) {
    fprintf(stderr, "%s: writing the output failed: %s\n", app_name, strerror(errno));
    exit(1);
  }
}

double app_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
