/* Stale temporary files of safetensors saves: "<path>.tmp.<pid>", the name
 * clmoe_st_writer_finish writes to before its rename, left behind when a save was killed
 * (SIGKILL, preemption, a node lost). The next save of the same path removes them: only
 * regular files of exactly that name whose pid is not a running process, or that have not
 * changed for CLMOE__IO_ST_STALE_HOURS (a pid reused since); never anything else. */
#include "safetensors_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A live save rewrites its file continuously; one this old is no save in progress. */
#define CLMOE__IO_ST_STALE_HOURS 6

/* The pid of a name "<base>.tmp.<pid>" as the writer prints it (decimal, no sign, no
 * leading zero), or 0 when name is not one. */
static long tmp_pid(const char *name, const char *base, size_t blen)
{
  if (strncmp(name, base, blen) || strncmp(name + blen, ".tmp.", 5)) return 0;
  const char *d = name + blen + 5;
  size_t n = strspn(d, "0123456789");
  if (n == 0 || n > 9 || d[n] != '\0' || d[0] == '0') return 0;
  return strtol(d, NULL, 10);
}

static int stale(int dfd, const char *name, long pid)
{
  struct stat sb;
  if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode)) return 0;
  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 1;
  return difftime(time(NULL), sb.st_mtime) > CLMOE__IO_ST_STALE_HOURS * 3600.0;
}

int clmoe_st_remove_stale(const char *path) { return path ? clmoe__io_st_remove_stale(path) : 0; }

int clmoe__io_st_remove_stale(const char *path)
{
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  char *dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
  const size_t blen = strlen(base);
  int removed = 0;
  DIR *d = dir && blen ? opendir(dir) : NULL;
  const long self = (long)getpid();
  for (struct dirent *e; d && (e = readdir(d));) {
    long pid = tmp_pid(e->d_name, base, blen);
    if (pid > 0 && pid != self && stale(dirfd(d), e->d_name, pid) && unlinkat(dirfd(d), e->d_name, 0) == 0)
      removed++;
  }
  if (d) closedir(d);
  free(dir);
  return removed;
}
