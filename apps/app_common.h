/* What every clmoe app shares: error exits, the standard flags (--help, --version,
 * --device, --json), option parsing, JSON output. The library never exits or prints; the
 * apps do, through these helpers. */
#ifndef CLMOE_APP_COMMON_H
#define CLMOE_APP_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include "clmoe/clmoe.h"

/* Exit statuses, the same for every app (docs/user-guide.md, "Exit statuses"). */
enum {
  APP_EXIT_OK = 0,        /* done: the work finished */
  APP_EXIT_FAILED = 1,    /* failed: a runtime error (device, file, numbers); the message says */
  APP_EXIT_USAGE = 2,     /* refused: a bad command line or config, nothing was run */
  APP_EXIT_RESUMABLE = 75, /* stopped early with a checkpoint (--time-limit, --stop-at): run
                             again with --resume to go on (EX_TEMPFAIL of sysexits.h) */
  APP_EXIT_SIGINT = 130,  /* stopped by SIGINT (128 + 2), a checkpoint written */
  APP_EXIT_SIGTERM = 143, /* stopped by SIGTERM (128 + 15), a checkpoint written */
};

/* The running program's name for messages ("clmoe-info"). */
extern const char *app_name;

/* The distributed run of the app, when it has one (set after clmoe_dist_init): app_die
 * then names the rank and ends the whole job (MPI_Abort) so no other rank hangs. */
extern clmoe_dist *app_dist;
/* Distributed apps (apps/app_dist.c): MPI (app_dist), this rank's device and binding, the
 * per-rank report printed by rank 0 to `report` (NULL: none), and a context on the rank's
 * device. */
clmoe_ctx *app_dist_start(const char *device, int profiling, FILE *report, int *argc, char ***argv);
void app_dist_end(void); /* finalises MPI; app_dist becomes NULL */
void app_print_rank(FILE *f, const clmoe_rank_report *r);
/* Prints "app: message" and "(STATUS from what)" and exits 1. */
void app_die(clmoe_status st, const char *what) __attribute__((noreturn));
/* Prints "app: message" (with the rank in a distributed run) and exits with code, ending
 * every rank of a distributed run (MPI_Abort) so that none waits for this one. */
void app_fail(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
/* Prints "app: message" plus a hint to run --help, and exits 2 (bad command line). */
void app_usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* Exits through app_die when st is not CLMOE_OK. */
#define APP_CHECK(call)                                                                    \
  do {                                                                                     \
    clmoe_status app_st_ = (call);                                                         \
    if (app_st_ != CLMOE_OK) app_die(app_st_, #call);                                      \
  } while (0)

/* The flags every app reads the same way; an app takes those of them it names in
 * app_flags.take (clmoe-plan opens no device, so it takes no --device). */
enum {
  APP_FLAG_HELP = 1,    /* --help, -h: prints the usage on stdout and exits 0 */
  APP_FLAG_VERSION = 2, /* --version: prints "APP VERSION", then clmoe_build_info()'s
                           "key: value" lines, and exits 0 */
  APP_FLAG_DEVICE = 4,  /* --device SPEC: clmoe_device_choose's spec; repeatable */
  APP_FLAG_JSON = 8,    /* --json FILE: a JSON report; - for stdout, which then holds the
                           JSON alone (app_json_to_stdout) */
};
#define APP_FLAGS_ALL (APP_FLAG_HELP | APP_FLAG_VERSION | APP_FLAG_DEVICE | APP_FLAG_JSON)
#define APP_MAX_DEVICES 64

typedef struct app_flags {
  unsigned take;        /* the APP_FLAG_* this app (or subcommand) takes */
  void (*usage)(void);  /* what --help prints */
  const char *device;   /* the last --device given; NULL: none */
  const char *devices[APP_MAX_DEVICES]; /* every --device, in order (clmoe-xcheck runs each) */
  int ndevices;
  const char *json;     /* --json FILE; NULL: none */
} app_flags;

/* When argv[*i] is one of the standard flags f->take names, handles it: --help and
 * --version print and exit 0; --device and --json (either "--name VALUE" or
 * "--name=VALUE") are stored in f, *i advanced past the value. Returns 1 then, 0 for any
 * other argument (the app's own flags; one it does not take is an unknown argument). */
int app_standard_flag(int argc, char **argv, int *i, app_flags *f);

/* Matches "--name VALUE" and "--name=VALUE" at argv[*i]; advances *i past the value. */
int app_option(int argc, char **argv, int *i, const char *name, const char **value);
/* Parses an integer option value, exiting with a usage error naming the flag when bad. */
long long app_parse_int(const char *flag, const char *value, long long min, long long max);

/* JSON strings: valid UTF-8 as it is, quotes, backslashes and control characters escaped,
 * bytes that are not UTF-8 as \u00XX; json_bytes takes a length (NULs included). */
void json_bytes(FILE *f, const char *buf, int64_t len);
void json_string(FILE *f, const char *s);
/* The build's facts (clmoe_build_info) as a JSON object {"commit": ..., "configure": ...}. */
void json_build(FILE *f);
/* The build's commit (clmoe_build_info's "commit:" line), or "unknown". */
void app_build_commit(char *buf, size_t len);
/* A JSON number, or null when not finite. */
void json_double(FILE *f, double v);
/* --json -: the process's standard output is kept for the JSON alone, and the text the
 * app prints on stdout goes to stderr from then on (file descriptor 1 becomes a copy of
 * 2), so that `app --json - | parser` reads one JSON document. Called by
 * app_standard_flag when it reads --json -, before the app prints anything. Exits on
 * failure. */
void app_json_to_stdout(void);
/* Opens a --json destination: "-" is the standard output kept by app_json_to_stdout.
 * Exits on failure. */
FILE *app_open_output(const char *path);
/* Closes a --json destination (the standard output is flushed, not closed); a failed
 * write exits 1. */
void app_close_output(FILE *f);

/* Monotonic wall clock in seconds. */
double app_now(void);

#endif
