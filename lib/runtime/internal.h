/* Internal to libclmoe: what the runtime offers every subsystem beyond its public headers
 * (errors, hashing, the embedded sources, the context record, kernels and their launch,
 * the buffer pool, tensor argument checks). Not installed. */
#ifndef CLMOE_INTERNAL_H
#define CLMOE_INTERNAL_H

#include "config.h"

#include <stddef.h>
#include <stdint.h>

#include "clmoe/program.h"
#include "clmoe/runtime.h"
#include "clmoe/status.h"
#include "clmoe/tensor.h"

/* ---- errors --------------------------------------------------------------------------- */
#if defined(__GNUC__)
#define CLMOE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLMOE_PRINTF(a, b)
#endif

/* Sets the thread's message and returns status. */
clmoe_status clmoe__error(clmoe_status status, const char *fmt, ...) CLMOE_PRINTF(2, 3);
/* Appends to the thread's message (for context added by callers up the stack). */
clmoe_status clmoe__append_error(const char *fmt, ...) CLMOE_PRINTF(1, 2);
/* Records a failed OpenCL call and returns its code. */
clmoe_status clmoe__cl_error(int err, const char *call, const char *file, int line);

#define CLMOE_CL(call)                                                                     \
  do {                                                                                     \
    cl_int clmoe_e_ = (call);                                                              \
    if (clmoe_e_ != CL_SUCCESS) return clmoe__cl_error(clmoe_e_, #call, __FILE__, __LINE__); \
  } while (0)

/* For functions with cleanup: sets `st` and jumps to `label` on failure. */
#define CLMOE_CL_GOTO(st, call, label)                                                     \
  do {                                                                                     \
    cl_int clmoe_e_ = (call);                                                              \
    if (clmoe_e_ != CL_SUCCESS) {                                                          \
      st = clmoe__cl_error(clmoe_e_, #call, __FILE__, __LINE__);                           \
      goto label;                                                                          \
    }                                                                                      \
  } while (0)

#define CLMOE_TRY(expr)                                                                    \
  do {                                                                                     \
    clmoe_status clmoe_s_ = (expr);                                                        \
    if (clmoe_s_ != CLMOE_OK) return clmoe_s_;                                             \
  } while (0)

#define CLMOE_TRY_GOTO(st, expr, label)                                                    \
  do {                                                                                     \
    st = (expr);                                                                           \
    if (st != CLMOE_OK) goto label;                                                        \
  } while (0)

/* ---- hashing (program cache keys) ------------------------------------------------------ */
typedef struct clmoe_hash {
  uint64_t a, b; /* two independent FNV-1a 64 lanes: a 128-bit key */
} clmoe_hash;
void clmoe__hash_init(clmoe_hash *h);
void clmoe__hash_bytes(clmoe_hash *h, const void *data, size_t len);
void clmoe__hash_str(clmoe_hash *h, const char *s); /* includes the terminating NUL */
void clmoe__hash_hex(const clmoe_hash *h, char out[33]);
uint64_t clmoe__fnv64(const void *data, size_t len);

/* ---- embedded kernel sources ------------------------------------------------------------ */
typedef struct clmoe_kernel_source {
  const char *family; /* file name without .cl */
  const char *path;   /* below the tree's root: "kda/kda_fwd.cl" (kernels_cl/kda/kda_fwd.cl) */
  const char *text;
} clmoe_kernel_source;
extern const clmoe_kernel_source clmoe__kernel_sources[]; /* ends with {NULL, NULL, NULL} */
extern const clmoe_kernel_source clmoe__preset_sources[]; /* the presets (presets/NAME.conf), likewise */

/* ---- knobs (knobs.c) ------------------------------------------------------------------
 * Every environment variable clmoe reads is a row of knobs.c's table (name, kind, default,
 * accepted values, doc, scope). A context reads them all once when it is created
 * (ctx->knobs; a bad value fails the creation, naming the variable and what it accepts),
 * and clmoe_ctx_set_knob overrides one on that context; code reads the context's value
 * with clmoe__knob*. The knobs read before any context exists (the device choice, MPI,
 * binding: `process` in the table) are read with clmoe__knob_env, the same parser. */
typedef enum clmoe__knob_id {
  CLMOE_K_DEVICE, CLMOE_K_CACHE_DIR, CLMOE_K_CACHE, CLMOE_K_CLBLAST_TUNING, CLMOE_K_POISON,
  CLMOE_K_KERNEL_DIR, CLMOE_K_FASTPATH, CLMOE_K_MPI, CLMOE_K_BIND,
  CLMOE_K_LOCAL_MEM_BYTES, CLMOE_K_CL_OPTIONS, CLMOE_K_BUILD_LOG, CLMOE_K_GEMM_ASYNC,
  CLMOE_K_GEMM_WGMMA, CLMOE_K_KDA_TC_STEP, CLMOE_K_KDA_TC_PRODUCER, CLMOE_K_KDA_TC_STSM,
  CLMOE_K_KDA_KEEP, CLMOE_K_KDA_KEEP_MAX_MB, CLMOE_K_KDA_TCB_FUSE, CLMOE_K_KDA_TCB_PAIR,
  CLMOE_K_KDA_TCB_STAGES, CLMOE_K_MLA_TC_ASYNC, CLMOE_K_MLA_TC_WGMMA,
  CLMOE_K_MLA_TC_TILES_PER_LAUNCH, CLMOE_K_MLA_TC_BWD, CLMOE_K_GEMV_WIDE_ROWS, CLMOE_K_SAMPLE_GROUPS,
  CLMOE_K_GEMV_ROWS, CLMOE_K_GEMV_TOK, CLMOE_K_ARGMAX_PART, CLMOE_K_INFER_TILE, CLMOE_K_GEMV_VEC,
  CLMOE_K_GEMV_PASSES, CLMOE_K_COUNT
} clmoe__knob_id;

typedef enum clmoe__knob_kind {
  CLMOE__KNOB_BOOL,     /* 0/1 (no/yes, off/on, false/true): i */
  CLMOE__KNOB_INT,      /* i, within the table's range */
  CLMOE__KNOB_INT_LIST, /* "a,b,c": list[0..n), each within the range */
  CLMOE__KNOB_NUMBER,   /* r, within the range */
  CLMOE__KNOB_STRING,   /* text */
  CLMOE__KNOB_ENUM      /* one of the table's spellings: text, and i its index */
} clmoe__knob_kind;

#define CLMOE__KNOB_LIST_MAX 8
enum { CLMOE__KNOB_DEFAULT = 0, CLMOE__KNOB_ENV = 1, CLMOE__KNOB_SET = 2 };

/* One knob's value. text: its spelling (malloc'ed; the default's when not set, NULL when
 * the knob is unset and has no default spelling: the code's own choice applies). */
typedef struct clmoe__knob_value {
  int source; /* CLMOE__KNOB_DEFAULT, _ENV or _SET (paths.h's clmoe_knob_source) */
  char *text;
  long long i;
  double r;
  int n;
  long long list[CLMOE__KNOB_LIST_MAX];
} clmoe__knob_value;

/* A context's knobs: as the environment gave them at creation, and the overrides. */
typedef struct clmoe__knobs {
  clmoe__knob_value env[CLMOE_K_COUNT];
  clmoe__knob_value set[CLMOE_K_COUNT]; /* source CLMOE__KNOB_SET where overridden */
} clmoe__knobs;

/* The variable's name ("CLMOE_FASTPATH"), and the id of a name (-1: none). */
const char *clmoe__knob_name(clmoe__knob_id id);
int clmoe__knob_lookup(const char *name);
/* 1 for the knobs read before any context exists (never set per context). */
int clmoe__knob_process(clmoe__knob_id id);
/* Parses and validates a spelling (NULL or "": the default) into *v (release it with
 * clmoe__knob_value_free); an error names the variable, the value and what it accepts. */
clmoe_status clmoe__knob_parse(clmoe__knob_id id, const char *text, clmoe__knob_value *v);
/* The same from the environment (source CLMOE_KNOB_ENV when the variable is set). */
clmoe_status clmoe__knob_env(clmoe__knob_id id, clmoe__knob_value *v);
void clmoe__knob_value_free(clmoe__knob_value *v);
/* A process-wide knob's environment value as getenv gives it, after validation: NULL when
 * unset, or when invalid (then *st is the error). */
const char *clmoe__knob_getenv(clmoe__knob_id id, clmoe_status *st);
/* Every knob from the environment (clmoe_ctx_create), and their release. */
clmoe_status clmoe__knobs_read(clmoe__knobs *k);
void clmoe__knobs_free(clmoe__knobs *k);

/* ---- per-device defaults (knobs_device.c) ---------------------------------------------
 * The choices the tile hosts make by device when their knob is unset: one row of a small
 * table, picked by the device's features (its tile implementation's, from
 * lib/tile/tile_internal.h's record, and its compute units). */
typedef struct clmoe__device_defaults {
  const char *row;           /* the row's name */
  int kda_warps;             /* KDA tile forward: warps per state work-group (1, 2, 4, 8) */
  int kda_lookahead;         /* KDA tile forward and backward: chunks the state rings copy
                              * ahead (1..3; stages: one more) */
  int kda_bwd_pair;          /* KDA tile backward chunk kernel: (chunk, head) pairs per
                              * work-group where they fit (CLMOE_KDA_TCB_PAIR=auto) */
  int kda_bwd_stages;        /* ... its copy rings' stages where they fit (else 2) */
  int kda_bwd_fuse_per_unit; /* the backward's state passes in one launch while their
                              * work-groups are at most this many per compute unit */
  int mla_tiles_per_launch;  /* MLA tile forward: query tiles per launch at most */
} clmoe__device_defaults;

/* The row for ctx's device with the tile implementation `tile` (clmoe__tile_features(ctx)). */
struct clmoe_tile_features;
const clmoe__device_defaults *clmoe__device_defaults_for(const clmoe_ctx *ctx,
                                                         const struct clmoe_tile_features *tile);

/* ---- the context -------------------------------------------------------------------- */
typedef struct clmoe_kernel_entry {
  char name[64];
  cl_kernel kernel;
} clmoe_kernel_entry;

typedef struct clmoe_program_entry {
  char *family;
  char *options; /* family-specific options only */
  cl_program program;
  clmoe_kernel_entry *kernels;
  int nkernels, cap_kernels;
} clmoe_program_entry;

typedef struct clmoe_pool_block {
  cl_mem mem;
  size_t bytes; /* size class */
} clmoe_pool_block;

typedef struct clmoe_pool {
  clmoe_pool_block *free_blocks;
  int nfree, cap_free;
  clmoe_pool_stats stats;
} clmoe_pool;

/* The context. The runtime's own state first; then what the subsystems above keep per
 * context, in their own terms (plain values, an opaque record, a release hook). */
struct clmoe_ctx {
  clmoe_device_caps caps;
  char choice_reason[256];
  cl_platform_id platform;
  cl_device_id device;
  cl_context context;
  cl_command_queue queue;
  int profiling;
  char base_options[512]; /* -D tunables from the capability record */
  clmoe_program_entry *programs;
  int nprograms, cap_programs;
  clmoe_program_stats prog_stats;
  clmoe_pool pool;
  int poison;                     /* 1: every buffer the pool hands out is filled with
                                   * CLMOE_POISON_WORD first (clmoe_ctx_options.poison) */
  int prof_active;                /* clmoe_ctx_profile_begin was called */
  struct clmoe__prof_event *prof_events; /* the kernels launched since */
  int prof_count, prof_cap;
  clmoe_kernel_time *prof_table; /* time by kernel name, summed over profiled intervals */
  int prof_rows, prof_table_cap;
  clmoe_ctx_counters counters;   /* launches and host waits (clmoe_ctx_counters_get) */
  void **staged;                  /* [nstaged] host copies of writes not waited for (counters.c) */
  int nstaged, cap_staged;
  clmoe__knobs knobs;             /* every knob, read at creation (knobs.c) */
  unsigned long long reported_local_mem; /* the device's local memory before
                                          * CLMOE_LOCAL_MEM_BYTES */
  /* lib/tile */
  const struct clmoe_tile_features *tile; /* the tile implementation's record, NULL until
                                           * probed (lib/tile/tile.c) */
  int fastpath_mode;   /* -2: from the knob CLMOE_FASTPATH; -1 auto, 0 off, 1 on (set by the caller) */
  int wgmma_ok;        /* warp-group (sm_90a) kernels build here: -1 not tried, 0 no, 1 yes */
  size_t local_optin;  /* clmoe__local_mem_optin, 0 until probed */
  /* lib/gemm */
  int gemm_backend;    /* clmoe_gemm_backend of clmoe_gemm (0: CLMOE_GEMM_AUTO) */
  int gemm_tile_bm, gemm_tile_bn; /* tile GEMM block (lib/gemm/gemm_tile.c); 0: chosen by device */
  int clblast_tuned;   /* tuner files applied (CLMOE_CLBLAST_TUNING) */
  void (*gemm_release)(clmoe_ctx *ctx); /* set by lib/gemm while it holds process-wide
                                         * state for this context (CLBlast's), called by
                                         * clmoe_ctx_destroy */
};

/* The context's value of a knob (the override, else the environment's at creation, else
 * the default), whether it was set (environment or override), its integer (bool, int; enum:
 * the index of its spelling) and its spelling (NULL: unset without a default spelling). */
const clmoe__knob_value *clmoe__knob(const clmoe_ctx *ctx, clmoe__knob_id id);
int clmoe__knob_is_set(const clmoe_ctx *ctx, clmoe__knob_id id);
long long clmoe__knob_int(const clmoe_ctx *ctx, clmoe__knob_id id);
const char *clmoe__knob_text(const clmoe_ctx *ctx, clmoe__knob_id id);
/* The poison pattern, a 32-bit word repeated: a quiet NaN as fp32 (0x7FC17FC1) and as
 * each of its bf16 halves (0x7FC1), 2143387585 as an int32 index (out of every range). */
#define CLMOE_POISON_WORD 0x7FC17FC1u

/* ---- kernels (program.c) and their launch (launch.c) -------------------------------- */
/* Finds (building on first use) kernel `name` of family `family` (kernels_cl/family.cl)
 * compiled with the context's tunables plus `options` (may be NULL). The kernel belongs
 * to the context; do not release it. */
clmoe_status clmoe__kernel(clmoe_ctx *ctx, const char *family, const char *options,
                           const char *name, cl_kernel *kernel);

/* Sets kernel arguments from (size, pointer) pairs: clmoe__args(k, 2, KA(buf), KA(n)). */
clmoe_status clmoe__args(cl_kernel kernel, int count, ...);
#define KA(x) sizeof(x), (const void *)&(x)
/* Local-memory argument of `bytes` bytes. */
#define KA_LOCAL(bytes) (size_t)(bytes), (const void *)NULL

/* Enqueues a kernel; global sizes are rounded up to multiples of the local sizes; local may
 * be NULL (the driver picks). Returns an OpenCL error with the kernel's name. */
clmoe_status clmoe__launch(clmoe_ctx *ctx, cl_kernel kernel, int dims, const size_t *global,
                           const size_t *local);
/* Fails (UNSUPPORTED, naming op) unless each of the n compiled kernels k runs work-groups
 * of `need` work-items (CL_KERNEL_WORK_GROUP_SIZE: registers can lower it). */
clmoe_status clmoe__kernels_fit(clmoe_ctx *ctx, const char *op, const cl_kernel *k, int n, size_t need);
/* 1-D launch of n work-items in groups of the context's default size. */
clmoe_status clmoe__launch1d(clmoe_ctx *ctx, cl_kernel kernel, size_t n);

/* Work-group size for a kernel with one work-group per row of n elements and up to 256
 * virtual lanes: at most 256, within the device's and the kernel's limits, and no larger
 * than the power of two >= n (short rows would leave work-items idle). */
clmoe_status clmoe__row_local(clmoe_ctx *ctx, cl_kernel kernel, int64_t n, size_t *local);
/* Launches `groups` work-groups of `local` work-items (1-D). */
clmoe_status clmoe__launch_groups(clmoe_ctx *ctx, cl_kernel kernel, int64_t groups, size_t local);

/* Round n up to a multiple of m. */
static inline size_t clmoe__round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* ---- devices (device.c, context.c) ------------------------------------------------------ */
/* Build probes run when a context is created (inline PTX on NVIDIA). */
void clmoe__probe_caps(clmoe_ctx *ctx);

/* Fills the capability record of one device. */
clmoe_status clmoe__device_caps(cl_platform_id platform, cl_device_id device, int pindex,
                                int dindex, clmoe_device_caps *caps);

/* 1 when needle occurs in hay, any case (an empty needle always does). */
int clmoe__contains_nocase(const char *hay, const char *needle);

/* ---- the buffer pool (pool.c) -------------------------------------------------------- */
/* Pool buffers: get one of at least `bytes` bytes (*capacity: its real size), put it back. */
clmoe_status clmoe__pool_get(clmoe_ctx *ctx, size_t bytes, cl_mem *mem, size_t *capacity);
void clmoe__pool_put(clmoe_ctx *ctx, cl_mem mem, size_t capacity);
/* Temporary device buffer from the pool (for ops that need scratch space). */
clmoe_status clmoe__scratch(clmoe_ctx *ctx, size_t bytes, cl_mem *mem);
void clmoe__scratch_release(clmoe_ctx *ctx, cl_mem mem, size_t bytes);
/* n scratch buffers of bytes[i] at once (all or none: on failure none is held), and their
 * release (each mem[i] set to NULL; NULL entries are skipped). */
clmoe_status clmoe__scratch_set(clmoe_ctx *ctx, int n, cl_mem *mem, const size_t *bytes);
void clmoe__scratch_release_set(clmoe_ctx *ctx, int n, cl_mem *mem, const size_t *bytes);

/* Releases every pooled buffer (clmoe_ctx_destroy). */
void clmoe__pool_destroy(clmoe_ctx *ctx);

/* ---- profiling (profile.c) ------------------------------------------------------------ */
/* Host waits, counted into ctx->counters by every path that blocks: code that calls
 * clEnqueueReadBuffer/WriteBuffer with CL_TRUE or clFinish itself bumps the counter too. */
enum clmoe__wait { CLMOE_WAIT_READ, CLMOE_WAIT_WRITE, CLMOE_WAIT_FINISH };
void clmoe__count_wait(clmoe_ctx *ctx, enum clmoe__wait kind);
/* Writes host [bytes] to mem at offset without a host wait: the bytes are copied and the copy
 * kept until the next blocking read or finish (clmoe__count_wait; the queue is in order, so
 * everything enqueued before has run when they return; a blocking write is no such point)
 * or clmoe_ctx_destroy. For the small plans and tables uploaded before a launch. */
clmoe_status clmoe__write_staged(clmoe_ctx *ctx, cl_mem mem, size_t offset, size_t bytes, const void *host);
/* Frees the staged copies (after a host wait, at destruction). */
void clmoe__staged_free(clmoe_ctx *ctx);
/* Releases the kept events and the table (clmoe_ctx_destroy). */
void clmoe__profile_destroy(clmoe_ctx *ctx);
/* While profiling is active: keeps `ev` (ownership passes to the context) under `name`;
 * with `start` (a marker enqueued before a library call such as CLBlast's, also owned),
 * the time counts from start's end to ev's end. No-op (releasing both) otherwise. */
clmoe_status clmoe__profile_record(clmoe_ctx *ctx, cl_event ev, cl_event start, const char *name);

/* ---- argument checks of the operators (tensor_check.c) ------------------------------ */
/* t must be a contiguous tensor of dtype; `op` and `name` appear in the message. */
clmoe_status clmoe__want(const clmoe_tensor *t, clmoe_dtype dtype, const char *op, const char *name);
/* a and b must have the same number of elements. */
clmoe_status clmoe__want_numel(const clmoe_tensor *a, const clmoe_tensor *b, const char *op,
                               const char *na, const char *nb);
/* t must be a contiguous f32 (or, with allow_bf16, bf16) tensor of `rank` dimensions
 * d0, d1, ... (the unused ones ignored); the message names op and name and the expected shape. */
clmoe_status clmoe__want_shape(const clmoe_tensor *t, const char *op, const char *name, int allow_bf16,
                               int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3);
/* Sequence boundaries of a [B, T, ...] batch: with cu (i32 [N + 1], B must be 1; checked to
 * start at 0, never decrease and end at T, reading it back to the host) N packed sequences,
 * else B rows of T tokens. *bounds ([N + 1], malloc'ed; free it) may be NULL when only the
 * check and N are wanted. */
clmoe_status clmoe__seq_bounds(const char *op, const clmoe_tensor *cu, int64_t B, int64_t T,
                               int64_t *N, cl_int **bounds);
/* Rows and last-dimension size of t (rows = numel / n). */
void clmoe__rows(const clmoe_tensor *t, int64_t *rows, int64_t *n);


#endif
