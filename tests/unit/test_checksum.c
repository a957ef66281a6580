/* CUnit suite: checksums of files. CRC-32C against its published test vectors and a plain
 * bit-by-bit reference, in one piece and in many; safetensors files with their checksums:
 * every flipped bit refused with the tensor or "metadata" named, swapped tensors, a
 * relabelled dtype, an edited metadata value; files without checksums still load. The
 * writer's removal of stale temporary files of killed saves, and of nothing else. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/checksum.h"
#include "test_common.h"

static char dir[256]; /* a fresh temporary directory for this run */

static const char *path_of(const char *name)
{
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

/* The definition, one bit at a time: reflected polynomial 0x82F63B78, ~0 in and out. */
static uint32_t crc32c_bitwise(const unsigned char *p, size_t n)
{
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

/* RFC 3720 (iSCSI) B.4 and the common "check" value. */
static void test_crc32c_vectors(void)
{
  unsigned char buf[32];
  CU_ASSERT_EQUAL(clmoe__io_crc32c(0, "123456789", 9), 0xE3069283u);
  memset(buf, 0, sizeof buf);
  CU_ASSERT_EQUAL(clmoe__io_crc32c(0, buf, 32), 0x8A9136AAu);
  memset(buf, 0xFF, sizeof buf);
  CU_ASSERT_EQUAL(clmoe__io_crc32c(0, buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
  CU_ASSERT_EQUAL(clmoe__io_crc32c(0, buf, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
  CU_ASSERT_EQUAL(clmoe__io_crc32c(0, buf, 32), 0x113FDB5Cu);
  CU_ASSERT_EQUAL(clmoe__io_crc32c(0, "", 0), 0u);
  CU_ASSERT_EQUAL(clmoe__io_crc32c(0x12345678u, NULL, 0), 0x12345678u);
}

/* Random buffers at every length up to 300 (all alignments of the 8-byte steps) against
 * the bitwise reference, and each cut into random pieces. */
static void test_crc32c_pieces(void)
{
  enum { N = 4096 };
  unsigned char *buf = malloc(N + 8);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  uint64_t s = test_seed | 1;
  for (int i = 0; i < N + 8; i++) s ^= s << 13, s ^= s >> 7, s ^= s << 17, buf[i] = (unsigned char)s;
  int bad = 0;
  for (size_t len = 0; len <= 300; len++)
    for (size_t off = 0; off < 8; off += 3) {
      uint32_t want = crc32c_bitwise(buf + off, len);
      bad += clmoe__io_crc32c(0, buf + off, len) != want;
      uint32_t c = 0;
      for (size_t at = 0; at < len;) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        size_t piece = (size_t)(s % 23);
        if (piece > len - at) piece = len - at;
        c = clmoe__io_crc32c(c, buf + off + at, piece);
        at += piece;
      }
      bad += c != want;
    }
  uint32_t whole = clmoe__io_crc32c(0, buf, N), a = clmoe__io_crc32c(0, buf, 1000);
  CU_ASSERT_EQUAL(clmoe__io_crc32c(a, buf + 1000, N - 1000), whole);
  CU_ASSERT_EQUAL(whole, crc32c_bitwise(buf, N));
  if (bad) fprintf(stderr, "\n  %d CRC-32C mismatches (seed %llu)\n", bad, (unsigned long long)test_seed);
  CU_ASSERT_EQUAL(bad, 0);
  /* one flipped bit anywhere changes the crc */
  int same = 0;
  for (int bit = 0; bit < 8 * 64; bit++) {
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    same += clmoe__io_crc32c(0, buf, N) == whole;
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
  }
  CU_ASSERT_EQUAL(same, 0);
  free(buf);
}

/* ---- safetensors files with checksums ----------------------------------------------------- */
static size_t slurp(const char *path, unsigned char *buf, size_t cap)
{
  FILE *fp = fopen(path, "rb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
  size_t n = fread(buf, 1, cap, fp);
  fclose(fp);
  CU_ASSERT_FATAL(n > 8 && n < cap);
  return n;
}

static void spill(const char *path, const unsigned char *buf, size_t n)
{
  FILE *fp = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
  CU_ASSERT_EQUAL(fwrite(buf, 1, n, fp), n);
  CU_ASSERT_EQUAL(fclose(fp), 0);
}

/* Two same-shape F32 tensors, an I32 one and two metadata entries. */
static void write_sample(const char *path)
{
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {-1, -2, -3, -4, -5, -6};
  int32_t c[3] = {7, 8, 9};
  clmoe_st_writer *w;
  TEST_OK(clmoe_st_writer_create(path, &w));
  TEST_OK(clmoe_st_writer_add_host(w, "param/a", CLMOE_ST_F32, 2, (int64_t[]){2, 3}, a));
  TEST_OK(clmoe_st_writer_add_host(w, "param/b", CLMOE_ST_F32, 2, (int64_t[]){2, 3}, b));
  TEST_OK(clmoe_st_writer_add_host(w, "buffer/c", CLMOE_ST_I32, 1, (int64_t[]){3}, c));
  TEST_OK(clmoe_st_writer_metadata(w, "lr", "0.001"));
  TEST_OK(clmoe_st_writer_metadata(w, "step", "12"));
  TEST_OK(clmoe_st_writer_finish(w));
}

/* Opens path and reads every tensor; the status, with the message in msg. */
static clmoe_status open_read_all(const char *path, char *msg, size_t len)
{
  clmoe_st_file *f = NULL;
  clmoe_status st = clmoe_st_open(path, &f);
  for (int i = 0; st == CLMOE_OK && i < clmoe_st_count(f); i++) {
    clmoe_st_info info;
    clmoe_st_info_at(f, i, &info);
    float host[8];
    if (i % 3 == 1) { /* each way of reading: to the device, converted, raw */
      clmoe_tensor t;
      st = clmoe_st_load(f, info.name, test_ctx, CLMOE_ST_LOAD_F32, &t);
      if (st == CLMOE_OK) clmoe_tensor_destroy(&t);
    } else if (i % 3 == 0) {
      st = clmoe_st_read_f32(f, info.name, host, (size_t)info.numel);
    } else {
      st = clmoe_st_read(f, info.name, host, (size_t)info.bytes);
    }
  }
  snprintf(msg, len, "%s", st == CLMOE_OK ? "" : clmoe_last_error());
  clmoe_st_close(f);
  return st;
}

/* The byte offset of the first occurrence of s in buf [n] (the test fails without one). */
static size_t find(const unsigned char *buf, size_t n, const char *s)
{
  size_t k = strlen(s);
  for (size_t i = 0; i + k <= n; i++)
    if (!memcmp(buf + i, s, k)) return i;
  CU_FAIL_FATAL("pattern not in the file");
  return 0;
}

/* Every single flipped bit of the file, header and data: refused, the message naming the
 * file and a tensor or the metadata (a bit in the header's JSON syntax: a format error). */
static void test_st_bit_flips(void)
{
  const char *p = path_of("flip.safetensors"), *q = path_of("flip2.safetensors");
  unsigned char buf[2048], m[2048];
  char msg[1024];
  write_sample(p);
  size_t n = slurp(p, buf, sizeof buf), hlen = buf[0] | (size_t)buf[1] << 8;
  CU_ASSERT_EQUAL_FATAL(open_read_all(p, msg, sizeof msg), CLMOE_OK);
  int accepted = 0, unnamed = 0, data_named = 0;
  for (size_t bit = 8 * 8; bit < 8 * n; bit++) {
    memcpy(m, buf, n);
    m[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    spill(q, m, n);
    clmoe_status st = open_read_all(q, msg, sizeof msg);
    if (st == CLMOE_OK) {
      if (accepted++ < 5) fprintf(stderr, "\n  flipped bit %zu (byte %zu) accepted", bit, bit / 8);
      continue;
    }
    const int in_data = bit / 8 >= 8 + hlen;
    const int named = strstr(msg, q) && (strstr(msg, "tensor '") || strstr(msg, "metadata"));
    if (in_data) data_named += named && strstr(msg, "its data fails its CRC-32C checksum");
    if (!named && (in_data || strstr(msg, "checksum"))) {
      if (unnamed++ < 5) fprintf(stderr, "\n  flipped bit %zu: %s", bit, msg);
    }
  }
  CU_ASSERT_EQUAL(accepted, 0);
  CU_ASSERT_EQUAL(unnamed, 0);
  CU_ASSERT_EQUAL(data_named, (int)(8 * (n - 8 - hlen)));
  unlink(q);
}

/* Edits a mischief could make and still leave valid JSON: each refused with what it hit. */
static void test_st_edits(void)
{
  const char *p = path_of("edit.safetensors"), *q = path_of("edit2.safetensors");
  unsigned char buf[2048], m[2048];
  char msg[1024];
  write_sample(p);
  size_t n = slurp(p, buf, sizeof buf), hlen = buf[0] | (size_t)buf[1] << 8;
  /* F32 relabelled I32 (same size, so the offsets still fit) */
  memcpy(m, buf, n);
  memcpy(m + find(m, n, "\"F32\""), "\"I32\"", 5);
  spill(q, m, n);
  CU_ASSERT_EQUAL(open_read_all(q, msg, sizeof msg), CLMOE_ERR_DAMAGED);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "tensor 'param/a': its name, dtype, shape or data_offsets (I32 [2, 3]"));
  /* two same-shape tensors swapped in the data region (in the table: test_st_swap_table) */
  memcpy(m, buf, n);
  size_t d = 8 + hlen;
  memcpy(m + d, buf + d + 24, 24), memcpy(m + d + 24, buf + d, 24);
  spill(q, m, n);
  CU_ASSERT_EQUAL(open_read_all(q, msg, sizeof msg), CLMOE_ERR_DAMAGED);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "tensor 'param/a': its data fails its CRC-32C checksum"));
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, q));
  /* an edited metadata value (the same length: the JSON stays valid) */
  memcpy(m, buf, n);
  m[find(m, n, "\"0.001\"") + 5] = '2';
  spill(q, m, n);
  CU_ASSERT_EQUAL(open_read_all(q, msg, sizeof msg), CLMOE_ERR_DAMAGED);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "metadata: the entries fail their CRC-32C checksum"));
  memcpy(m, buf, n);
  m[find(m, n, "\"12\"") + 1] = '9';
  spill(q, m, n);
  CU_ASSERT_EQUAL(open_read_all(q, msg, sizeof msg), CLMOE_ERR_DAMAGED);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "metadata"));
  unlink(q);
}

/* Swapped tensors with the offsets' lengths kept: the entry checksum names the tensor. */
static void test_st_swap_table(void)
{
  const char *p = path_of("swap.safetensors"), *q = path_of("swap2.safetensors");
  unsigned char buf[2048], m[2048];
  char msg[1024];
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {-1, -2, -3, -4, -5, -6}, z[6] = {0};
  clmoe_st_writer *w;
  TEST_OK(clmoe_st_writer_create(p, &w));
  TEST_OK(clmoe_st_writer_add_host(w, "pad", CLMOE_ST_F32, 1, (int64_t[]){6}, z)); /* offsets [0, 24] */
  TEST_OK(clmoe_st_writer_add_host(w, "w/a", CLMOE_ST_F32, 2, (int64_t[]){2, 3}, a)); /* [24, 48] */
  TEST_OK(clmoe_st_writer_add_host(w, "w/b", CLMOE_ST_F32, 2, (int64_t[]){2, 3}, b)); /* [48, 72] */
  TEST_OK(clmoe_st_writer_finish(w));
  size_t n = slurp(p, buf, sizeof buf);
  memcpy(m, buf, n);
  size_t oa = find(m, n, "[24,48]"), ob = find(m, n, "[48,72]");
  memcpy(m + oa, "[48,72]", 7), memcpy(m + ob, "[24,48]", 7);
  spill(q, m, n);
  CU_ASSERT_EQUAL(open_read_all(q, msg, sizeof msg), CLMOE_ERR_DAMAGED);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "tensor 'w/a': its name, dtype, shape or data_offsets"));
  /* the names exchanged instead */
  memcpy(m, buf, n);
  m[find(m, n, "\"w/a\"") + 3] = 'b', m[find(m, n, "\"w/b\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[48") + 3] = 'a';
  spill(q, m, n);
  CU_ASSERT_EQUAL(open_read_all(q, msg, sizeof msg), CLMOE_ERR_DAMAGED);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "its name, dtype, shape or data_offsets"));
  unlink(q);
}

/* Files without checksums (other tools') load; one checksum entry without the other, or a
 * malformed one, is refused; the writer keeps the keys to itself. */
static void test_st_absent(void)
{
  const char *q = path_of("plain.safetensors");
  char msg[1024];
  const char *plain = "{\"__metadata__\":{\"format\":\"pt\"},\"x\":{\"dtype\":\"F32\",\"shape\":[2],"
                      "\"data_offsets\":[0,8]}}";
  unsigned char file[512];
  size_t h = strlen(plain);
  memset(file, 0, sizeof file);
  file[0] = (unsigned char)h;
  memcpy(file + 8, plain, h);
  spill(q, file, 8 + h + 8);
  CU_ASSERT_EQUAL(open_read_all(q, msg, sizeof msg), CLMOE_OK);
  const char *half = "{\"__metadata__\":{\"clmoe.crc32c.metadata\":\"00000000\"},\"x\":{\"dtype\":\"F32\","
                     "\"shape\":[2],\"data_offsets\":[0,8]}}";
  h = strlen(half);
  file[0] = (unsigned char)h;
  memcpy(file + 8, half, h);
  spill(q, file, 8 + h + 8);
  CU_ASSERT_EQUAL(open_read_all(q, msg, sizeof msg), CLMOE_ERR_FORMAT);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "'clmoe.crc32c.metadata' is there but 'clmoe.crc32c.tensors' is not"));
  clmoe_st_writer *w;
  TEST_OK(clmoe_st_writer_create(q, &w));
  CU_ASSERT_EQUAL(clmoe_st_writer_metadata(w, CLMOE_ST_CRC_TENSORS, "x"), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "reserved for the file's checksums"));
  CU_ASSERT_EQUAL(clmoe_st_writer_metadata(w, CLMOE_ST_CRC_METADATA, "x"), CLMOE_ERR_INVALID_ARGUMENT);
  clmoe_st_writer_discard(w);
  unlink(q);
}

/* ---- stale temporary files ---------------------------------------------------------------- */
static void touch(const char *path, double age_s)
{
  FILE *f = fopen(path, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs("partial save\n", f);
  fclose(f);
  if (age_s > 0) {
    struct timespec ts[2] = {{time(NULL) - (time_t)age_s, 0}, {time(NULL) - (time_t)age_s, 0}};
    CU_ASSERT_EQUAL(utimensat(AT_FDCWD, path, ts, 0), 0);
  }
}

static int exists(const char *path)
{
  struct stat sb;
  return lstat(path, &sb) == 0;
}

static void test_st_stale_tmp(void)
{
  char p[512], name[600];
  snprintf(p, sizeof p, "%s", path_of("ckpt.safetensors"));
  pid_t dead = fork(); /* a pid that ran and ended */
  CU_ASSERT_FATAL(dead >= 0);
  if (dead == 0) _exit(0);
  CU_ASSERT_EQUAL_FATAL(waitpid(dead, NULL, 0), dead);
  /* removed: a dead pid's, an impossible pid's, a live pid's unchanged for a day */
  const char *gone[3];
  char g[3][600];
  snprintf(g[0], sizeof g[0], "%s.tmp.%ld", p, (long)dead);
  snprintf(g[1], sizeof g[1], "%s.tmp.999999999", p);
  snprintf(g[2], sizeof g[2], "%s.tmp.%ld", p, (long)getppid());
  touch(g[0], 0), touch(g[1], 0), touch(g[2], 86400);
  for (int i = 0; i < 3; i++) gone[i] = g[i];
  /* kept: a live pid's (recent), other names, another destination's, a directory, a link */
  const char *kept_fmt[] = {"%s.tmp.1", "%s.tmp.12ab", "%s.tmp.", "%s.tmp.0999999999", "%s.tmp.999999999.bak",
                            "%s.tmp.-5", "%s.tmpx.999999999", "%s.old", "%sx.tmp.999999999"};
  enum { NK = sizeof kept_fmt / sizeof *kept_fmt };
  char kept[NK + 3][600];
  for (int i = 0; i < NK; i++) snprintf(kept[i], sizeof kept[i], kept_fmt[i], p), touch(kept[i], 0);
  snprintf(kept[NK], sizeof kept[NK], "%s", path_of("other.safetensors.tmp.999999999"));
  touch(kept[NK], 86400);
  snprintf(kept[NK + 1], sizeof kept[NK + 1], "%s.tmp.999999998", p);
  CU_ASSERT_EQUAL(mkdir(kept[NK + 1], 0700), 0);
  snprintf(kept[NK + 2], sizeof kept[NK + 2], "%s.tmp.999999997", p);
  CU_ASSERT_EQUAL(symlink(kept[0], kept[NK + 2]), 0);
  write_sample(p);
  for (int i = 0; i < 3; i++) {
    if (exists(gone[i])) fprintf(stderr, "\n  %s was not removed", gone[i]);
    CU_ASSERT_FALSE(exists(gone[i]));
  }
  for (int i = 0; i < NK + 3; i++) {
    if (!exists(kept[i])) fprintf(stderr, "\n  %s was removed", kept[i]);
    CU_ASSERT(exists(kept[i]));
  }
  rmdir(kept[NK + 1]);
  for (int i = 0; i < NK + 3; i++) unlink(kept[i]);
  snprintf(name, sizeof name, "%s", p);
  unlink(name);
}

static void add_tests(CU_pSuite suite)
{
  snprintf(dir, sizeof dir, "%s", test_tmpdir("sum"));
  CU_add_test(suite, "crc32c_vectors", test_crc32c_vectors);
  CU_add_test(suite, "crc32c_pieces", test_crc32c_pieces);
  CU_add_test(suite, "st_bit_flips", test_st_bit_flips);
  CU_add_test(suite, "st_edits", test_st_edits);
  CU_add_test(suite, "st_swap_table", test_st_swap_table);
  CU_add_test(suite, "st_absent", test_st_absent);
  CU_add_test(suite, "st_stale_tmp", test_st_stale_tmp);
}

int main(void) { return test_main("checksum", add_tests); }
