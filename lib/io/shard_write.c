/* Writing CLMOETOK token shards (the format: include/clmoe/data.h): a zeroed header, the
 * tokens as they come (buffered), then the header with the count, fsync, and a rename of
 * "<path>.tmp.<pid>" over the destination, so a reader never sees half a shard. */
#include "runtime/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clmoe/data.h"

#define HEADER 32
#define BUF_TOKENS 65536

struct clmoe_shard_writer {
  char *path, *tmp;
  int fd;
  int64_t vocab, count;
  int size;              /* bytes per token: 2 or 4 */
  unsigned char *buf;    /* [BUF_TOKENS * size] */
  size_t used;           /* bytes in buf */
};

static clmoe_status write_all(clmoe_shard_writer *w, const void *p, size_t n, off_t at)
{
  size_t done = 0;
  while (done < n) {
    const ssize_t r = pwrite(w->fd, (const char *)p + done, n - done, at + (off_t)done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return clmoe__error(CLMOE_ERR_IO, "%s: write failed: %s", w->tmp, r < 0 ? strerror(errno) : "no progress");
    done += (size_t)r;
  }
  return CLMOE_OK;
}

static clmoe_status flush(clmoe_shard_writer *w)
{
  if (!w->used) return CLMOE_OK;
  const off_t at = HEADER + (off_t)(w->count * w->size) - (off_t)w->used;
  CLMOE_TRY(write_all(w, w->buf, w->used, at));
  w->used = 0;
  return CLMOE_OK;
}

void clmoe_shard_abort(clmoe_shard_writer *w)
{
  if (!w) return;
  if (w->fd >= 0) {
    close(w->fd);
    unlink(w->tmp);
  }
  free(w->path), free(w->tmp), free(w->buf);
  free(w);
}

clmoe_status clmoe_shard_create(const char *path, int64_t vocab, clmoe_shard_writer **out)
{
  *out = NULL;
  if (!path || !path[0]) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_shard_create: no path");
  if (vocab < 2 || vocab > INT32_MAX)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: vocabulary size %lld (2 .. 2^31 - 1 for a shard)", path,
                        (long long)vocab);
  clmoe_shard_writer *w = calloc(1, sizeof *w);
  if (!w) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  w->fd = -1;
  w->vocab = vocab;
  w->size = vocab <= 65536 ? 2 : 4;
  const size_t n = strlen(path) + 32;
  w->path = strdup(path), w->tmp = malloc(n), w->buf = malloc((size_t)BUF_TOKENS * (size_t)w->size);
  if (!w->path || !w->tmp || !w->buf) {
    clmoe_shard_abort(w);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  snprintf(w->tmp, n, "%s.tmp.%ld", path, (long)getpid());
  w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd < 0) {
    const clmoe_status st = clmoe__error(CLMOE_ERR_IO, "%s: cannot create: %s", w->tmp, strerror(errno));
    clmoe_shard_abort(w);
    return st;
  }
  const unsigned char zero[HEADER] = {0};
  const clmoe_status st = write_all(w, zero, HEADER, 0);
  if (st != CLMOE_OK) {
    clmoe_shard_abort(w);
    return st;
  }
  *out = w;
  return CLMOE_OK;
}

clmoe_status clmoe_shard_append(clmoe_shard_writer *w, const int32_t *ids, int64_t n)
{
  if (n < 0 || (n && !ids)) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_shard_append: bad arguments");
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= w->vocab)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: token %lld is %d, not in [0, %lld) (the vocabulary)",
                          w->path, (long long)(w->count + i), (int)ids[i], (long long)w->vocab);
  }
  for (int64_t i = 0; i < n; i++) {
    if (w->used == (size_t)BUF_TOKENS * (size_t)w->size) CLMOE_TRY(flush(w));
    const uint32_t v = (uint32_t)ids[i];
    for (int b = 0; b < w->size; b++) w->buf[w->used++] = (unsigned char)(v >> 8 * b);
    w->count++;
  }
  return CLMOE_OK;
}

int64_t clmoe_shard_count(const clmoe_shard_writer *w) { return w->count; }

static void put_le(unsigned char *p, uint64_t v, int n)
{
  for (int b = 0; b < n; b++) p[b] = (unsigned char)(v >> 8 * b);
}

clmoe_status clmoe_shard_finish(clmoe_shard_writer *w)
{
  unsigned char h[HEADER] = "CLMOETOK";
  put_le(h + 8, 1, 4);
  put_le(h + 12, (uint64_t)w->size, 4);
  put_le(h + 16, (uint64_t)w->count, 8);
  put_le(h + 24, (uint64_t)w->vocab, 4);
  memset(h + 28, 0, 4);
  clmoe_status st = flush(w);
  if (st == CLMOE_OK) st = write_all(w, h, HEADER, 0);
  if (st == CLMOE_OK && fsync(w->fd) != 0) st = clmoe__error(CLMOE_ERR_IO, "%s: fsync failed: %s", w->tmp, strerror(errno));
  if (st == CLMOE_OK) {
    const int rc = close(w->fd);
    w->fd = -1;
    if (rc != 0) {
      st = clmoe__error(CLMOE_ERR_IO, "%s: close failed: %s", w->tmp, strerror(errno));
      unlink(w->tmp);
    }
  }
  if (st == CLMOE_OK && rename(w->tmp, w->path) != 0) {
    st = clmoe__error(CLMOE_ERR_IO, "%s: cannot rename %s over it: %s", w->path, w->tmp, strerror(errno));
    unlink(w->tmp);
  }
  if (st == CLMOE_OK) { /* the rename itself durable: best effort (some file systems refuse) */
    char *dir = strdup(w->path);
    if (dir) {
      char *slash = strrchr(dir, '/');
      if (slash) *slash = slash == dir ? (slash[1] = '\0', '/') : '\0';
      const int dfd = open(slash ? dir : ".", O_RDONLY | O_CLOEXEC);
      if (dfd >= 0) (void)fsync(dfd), close(dfd);
      free(dir);
    }
  }
  clmoe_shard_abort(w); /* frees; the file descriptor is closed already unless a step failed */
  return st;
}
