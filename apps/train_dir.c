/* clmoe-train's run directory (train_run.h): what a run leaves in --out DIR and how a new
 * command finds it.
 *
 *   DIR/checkpoint-00000300.safetensors   step-numbered checkpoints, the newest `keep` kept
 *   DIR/checkpoint.safetensors            a symbolic link to the newest (replaced atomically)
 *   DIR/metrics.csv                       one row per step
 *   DIR/.clmoe-train.lock                 held (flock) by the process writing DIR
 *
 * A fresh run refuses a directory that holds a run unless told to discard it (--overwrite);
 * a resumed run goes on in its checkpoint's directory and refuses one whose checkpoints go
 * past the step it resumes from (they would be rewritten with a different history). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_run.h"

#define CKPT_PREFIX "checkpoint-"
#define CKPT_SUFFIX ".safetensors"
#define LATEST "checkpoint.safetensors"
#define LOCK_NAME ".clmoe-train.lock"

void train_dir_ckpt_path(char *buf, size_t len, const char *dir, int64_t step)
{
  int n = snprintf(buf, len, "%s/" CKPT_PREFIX "%08" PRId64 CKPT_SUFFIX, dir, step);
  if (n < 0 || (size_t)n >= len) app_fail(APP_EXIT_USAGE, "--out %s: the path is too long", dir);
}

/* fsync of a directory, so that a rename or link in it survives a crash. */
static void sync_dir(const char *dir)
{
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

/* Exits when fd's lock is held by another process, naming it (the lock file's text). */
static void fail_if_held(int fd, int how, const char *dir)
{
  char who[256];
  if (flock(fd, how | LOCK_NB) == 0 || errno != EWOULDBLOCK) return;
  ssize_t n = pread(fd, who, sizeof who - 1, 0);
  who[n > 0 ? n : 0] = '\0';
  who[strcspn(who, "\n")] = '\0';
  app_fail(APP_EXIT_FAILED, "%s is in use by another clmoe-train (%s): two runs must not write one directory "
           "(is a job of this chain still running?)", dir, who[0] ? who : "unknown process");
}

/* The step of a checkpoint file name "checkpoint-NNNNNNNN.safetensors", or -1. */
static int64_t step_of_name(const char *name)
{
  const size_t np = strlen(CKPT_PREFIX), ns = strlen(CKPT_SUFFIX), n = strlen(name);
  if (n <= np + ns || strncmp(name, CKPT_PREFIX, np) || strcmp(name + n - ns, CKPT_SUFFIX)) return -1;
  int64_t step = 0;
  for (size_t i = np; i < n - ns; i++) {
    if (name[i] < '0' || name[i] > '9' || step > INT64_MAX / 10 - 10) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

/* The steps of DIR's checkpoints, ascending (*steps malloc'ed; NULL when none); their count,
 * or -1 when DIR cannot be read (errno set; ENOENT: no directory). */
static int list_steps(const char *dir, int64_t **steps)
{
  *steps = NULL;
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    const int64_t s = step_of_name(e->d_name);
    if (s < 0) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      int64_t *grown = realloc(*steps, (size_t)cap * sizeof *grown);
      if (!grown) app_die(CLMOE_ERR_OUT_OF_MEMORY, "listing checkpoints");
      *steps = grown;
    }
    (*steps)[n++] = s;
  }
  closedir(d);
  for (int i = 1; i < n; i++) /* insertion sort: a handful of files */
    for (int j = i; j > 0 && (*steps)[j - 1] > (*steps)[j]; j--) {
      const int64_t t = (*steps)[j];
      (*steps)[j] = (*steps)[j - 1], (*steps)[j - 1] = t;
    }
  return n;
}

int train_dir_latest(const char *dir, char *path, size_t len)
{
  struct stat st;
  int n = snprintf(path, len, "%s/" LATEST, dir);
  if (n < 0 || (size_t)n >= len) app_fail(APP_EXIT_USAGE, "%s: the path is too long", dir);
  if (stat(path, &st) == 0) return 1;
  if (lstat(path, &st) == 0)
    app_fail(APP_EXIT_FAILED, "%s is a link to a checkpoint that is not there (removed by hand?): point it "
             "at one of %s/" CKPT_PREFIX "*" CKPT_SUFFIX " or resume one of them by name", path, dir);
  int64_t *steps; /* no link (a copy without it): the newest numbered checkpoint */
  const int count = list_steps(dir, &steps);
  if (count > 0) train_dir_ckpt_path(path, len, dir, steps[count - 1]);
  free(steps);
  return count > 0;
}

/* What DIR holds of a run, for the messages: "a checkpoint at step 30", "metrics.csv", or
 * NULL when nothing. */
static const char *run_held(const char *dir, char *buf, size_t len)
{
  int64_t *steps;
  const int count = list_steps(dir, &steps);
  struct stat st;
  char p[PATH_MAX];
  if (count > 0) snprintf(buf, len, "checkpoints up to step %" PRId64, steps[count - 1]);
  free(steps);
  if (count > 0) return buf;
  snprintf(p, sizeof p, "%s/" LATEST, dir);
  if (lstat(p, &st) == 0) return snprintf(buf, len, "%s", LATEST), buf;
  snprintf(p, sizeof p, "%s/metrics.csv", dir);
  if (stat(p, &st) == 0 && st.st_size > 0) return snprintf(buf, len, "metrics.csv"), buf;
  return NULL;
}

static void remove_or_fail(const char *path)
{
  if (unlink(path) != 0 && errno != ENOENT)
    app_fail(APP_EXIT_FAILED, "--overwrite: cannot remove %s: %s", path, strerror(errno));
}

/* Removes DIR's checkpoints after step `after` (all with -1), and with them the link. */
static void remove_after(const char *dir, int64_t after)
{
  int64_t *steps;
  const int count = list_steps(dir, &steps);
  char p[PATH_MAX];
  for (int i = 0; i < count; i++) {
    if (steps[i] <= after) continue;
    train_dir_ckpt_path(p, sizeof p, dir, steps[i]);
    remove_or_fail(p);
  }
  free(steps);
}

void train_dir_check(const char *dir, int64_t resume_step, int overwrite)
{
  char what[128], p[PATH_MAX];
  snprintf(p, sizeof p, "%s/" LOCK_NAME, dir);
  int fd = open(p, O_RDONLY | O_CLOEXEC); /* a run at work there: say so first */
  if (fd >= 0) {
    fail_if_held(fd, LOCK_SH, dir);
    close(fd); /* (releases the probe's shared lock) */
  }
  if (resume_step < 0) { /* a fresh run */
    const char *held = run_held(dir, what, sizeof what);
    if (held && !overwrite)
      app_fail(APP_EXIT_USAGE, "--out %s already holds a run (%s): give --resume %s (or --resume auto) to go on "
               "with it, --overwrite to discard it and start again, or another --out", dir, held, dir);
    return;
  }
  int64_t *steps;
  const int count = list_steps(dir, &steps);
  const int64_t last = count > 0 ? steps[count - 1] : -1;
  free(steps);
  if (last > resume_step && !overwrite)
    app_fail(APP_EXIT_USAGE, "%s holds checkpoints up to step %" PRId64 ", after the step %" PRId64 " this run "
             "resumes from: going on here would replace them with another history; give --overwrite to discard "
             "the later ones, or --out NEWDIR to continue in a new directory", dir, last, resume_step);
}

/* Points DIR/checkpoint.safetensors at the checkpoint of `step` (a relative link, replaced
 * atomically by a rename, the directory synced); exits on failure. */
static void point_latest(const char *dir, int64_t step)
{
  char target[64], tmp[PATH_MAX], link_path[PATH_MAX];
  snprintf(target, sizeof target, CKPT_PREFIX "%08" PRId64 CKPT_SUFFIX, step); /* relative: DIR may move */
  snprintf(tmp, sizeof tmp, "%s/." LATEST ".%ld.tmp", dir, (long)getpid());
  snprintf(link_path, sizeof link_path, "%s/" LATEST, dir);
  unlink(tmp);
  if (symlink(target, tmp) != 0 || rename(tmp, link_path) != 0) {
    const int e = errno;
    unlink(tmp);
    app_fail(APP_EXIT_FAILED, "cannot point %s at %s: %s (the checkpoint itself is written)", link_path, target,
             strerror(e));
  }
  sync_dir(dir);
}

void train_dir_claim(const char *dir, int64_t resume_step, int overwrite)
{
  char p[PATH_MAX];
  struct stat st;
  if (!overwrite) return;
  remove_after(dir, resume_step); /* -1: every checkpoint */
  snprintf(p, sizeof p, "%s/" LATEST, dir);
  if (resume_step < 0) {
    remove_or_fail(p);
    snprintf(p, sizeof p, "%s/metrics.csv", dir);
    remove_or_fail(p);
    return;
  }
  char own[PATH_MAX]; /* the link again at the checkpoint resumed from, when it is in DIR */
  train_dir_ckpt_path(own, sizeof own, dir, resume_step);
  if (stat(own, &st) == 0) point_latest(dir, resume_step);
  else if (lstat(p, &st) == 0 && stat(p, &st) != 0) remove_or_fail(p);
}

void train_dir_lock(const char *dir)
{
  char p[PATH_MAX], who[256], host[128] = "?";
  snprintf(p, sizeof p, "%s/" LOCK_NAME, dir);
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) app_fail(APP_EXIT_FAILED, "cannot create %s: %s", p, strerror(errno));
  fail_if_held(fd, LOCK_EX, dir);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    /* file systems without flock (some Lustre mounts): go on, say so */
    fprintf(stderr, "%s: warning: cannot lock %s (%s): nothing stops a second run from writing %s\n", app_name, p,
            strerror(errno), dir);
    close(fd);
    return;
  }
  gethostname(host, sizeof host - 1);
  int n = snprintf(who, sizeof who, "pid %ld on %s\n", (long)getpid(), host);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, who, (size_t)n, 0) != n)
    fprintf(stderr, "%s: warning: writing %s: %s\n", app_name, p, strerror(errno));
  /* fd stays open (close-on-exec) for the life of the process: the lock goes with it */
}

/* The leftovers of killed saves of any of DIR's checkpoints (checkpoint-N.safetensors.tmp.PID):
 * each name's are removed as the library's save of that name would (clmoe_st_remove_stale). */
static void remove_stale_saves(const char *dir)
{
  DIR *d = opendir(dir);
  char base[PATH_MAX];
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
    const char *tmp = strstr(e->d_name, CKPT_SUFFIX ".tmp.");
    if (strncmp(e->d_name, CKPT_PREFIX, strlen(CKPT_PREFIX)) || !tmp) continue;
    snprintf(base, sizeof base, "%s/%.*s", dir, (int)(tmp - e->d_name + strlen(CKPT_SUFFIX)), e->d_name);
    clmoe_st_remove_stale(base);
  }
  if (d) closedir(d);
}

void train_dir_publish(const char *dir, int64_t step, int64_t keep)
{
  char p[PATH_MAX];
  point_latest(dir, step);
  remove_stale_saves(dir);
  if (keep <= 0) return;
  int64_t *steps;
  const int count = list_steps(dir, &steps);
  int64_t kept = 0;
  for (int i = count - 1; i >= 0; i--) { /* newest first; never the one just published */
    if (steps[i] > step || ++kept <= keep) continue;
    train_dir_ckpt_path(p, sizeof p, dir, steps[i]);
    if (unlink(p) != 0 && errno != ENOENT)
      fprintf(stderr, "%s: warning: cannot remove the old checkpoint %s: %s\n", app_name, p, strerror(errno));
  }
  free(steps);
}
