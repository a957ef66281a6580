/* clmoe-op's parts: the harness every operator command shares (op_common.c: the flags,
 * the example files, reading and checking the safetensors inputs, writing the outputs)
 * and the commands (clmoe_op.c: kda, compare and the command table; clmoe_op_mla.c: mla).
 * A command describes its tensors once (op_sig) and keeps only its own flags, sizes and
 * library calls. */
#ifndef CLMOE_APP_OP_H
#define CLMOE_APP_OP_H

#include <stddef.h>
#include <stdint.h>

#include "app_common.h"

#define OP_MAX_TENSORS 12

/* A command's tensors by name, their shapes spelled in size letters ("BTHK": [B, T, H, K]);
 * sz arrays hold the sizes in the order of `letters`. The first nmain inputs are the main
 * ones (all F32 or all BF16, loaded as they are); the others are any float type, loaded as
 * F32, but cu_seqlens (I32 or I64). The inputs from ido on are the backward's (do first):
 * --backward needs do, and without it they are ignored. */
typedef struct op_sig {
  const char *name;          /* the command: "kda" */
  const char *letters;       /* the size letters, at most 8: "BTHKVN" */
  char seqs;                 /* the letter of N, the sequences (B, or cu_seqlens' N) */
  const char *shape;         /* --shape's sizes, the first letters: "B,T,H,K,V" */
  const char *example_flags; /* the flags that go with --make-example only (messages) */
  int nin, nmain, nrequired; /* inputs; the first nmain main, the first nrequired required */
  int icu, ido;              /* the indices of cu_seqlens and do among the inputs */
  const char *do_shape;      /* do's shape for messages: "[B, T, H, V]" */
  const char *const *in_names, *const *in_dims;
  const char *const *out_names, *const *out_dims; /* every output F32 */
} op_sig;

/* The flags every command takes (op_flag); a command's own flags sit beside them. */
typedef struct op_args {
  app_flags std;                 /* --help (the command's usage), --device */
  const char *in, *out;          /* --in FILE, --out FILE */
  const char *example, *shape;   /* --make-example FILE, --shape LIST */
  const char *dtype;             /* --dtype f32|bf16 (of the example's main inputs) */
  const char *cu_list;           /* --cu-seqlens LIST */
  int64_t *cu;                   /* [ncu] cu_list parsed by op_args_finish */
  int ncu;
  int backward, with_backward;   /* --backward, --with-backward */
  long long seed;                /* --seed; -1: not given */
} op_args;

/* The inputs found in --in, loaded on the device, and the sizes they imply. */
typedef struct op_inputs {
  int present[OP_MAX_TENSORS];
  clmoe_tensor t[OP_MAX_TENSORS];
  int64_t sz[8]; /* by the letters of op_sig.letters */
} op_inputs;

/* Prints "app: message" and exits 1 (a bad input file, not a bad command line). */
void op_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* A finite number, or a usage error naming flag. */
double op_parse_double(const char *flag, const char *value);
/* "0,5,12" -> a new array of *n integers in [lo, hi] (free it); a usage error naming flag. */
int64_t *op_parse_list(const char *flag, const char *value, int64_t lo, int64_t hi, int *n);
/* "F32 [2, 3]" for messages; a negative size prints as *. */
const char *op_describe(const char *dtype, const int64_t *dims, int n, char *buf, size_t len);
/* The sizes of a shape spelled in s's letters ("BTHK"), from sz; returns the rank. */
int op_dims(const op_sig *s, const char *spec, const int64_t *sz, int64_t dims[4]);

/* The command line. op_args_init before the loop (usage: the command's --help);
 * op_flag takes argv[*i] when it is one of the shared flags (returns 1); op_args_finish
 * after the loop parses --cu-seqlens and checks that --make-example's flags and a run's
 * are not mixed (own_example: one of the command's own example flags was given). Returns
 * 1 for --make-example, 0 for a run (then --in and --out are given). */
void op_args_init(op_args *a, void (*usage)(void));
int op_flag(int argc, char **argv, int *i, op_args *a);
int op_args_finish(op_args *a, const op_sig *s, int own_example);

/* --make-example: --shape's sizes into sz (checked against --cu-seqlens), then the file:
 * the inputs with want[j] (never cu_seqlens, which comes from --cu-seqlens), values
 * N(mean[j], sd[j]) from clmoe's counter-based generator (--seed, default 1), the main
 * inputs in --dtype, the others F32. No device. */
void op_example_sizes(const op_args *a, const op_sig *s, int64_t *sz);
void op_example_write(const op_args *a, const op_sig *s, const int64_t *sz, const int *want,
                      const float *mean, const float *sd);

/* Reading --in, in this order: op_open_input; op_find_inputs (every name known, the
 * required ones present, do with --backward, the backward's inputs dropped without it,
 * cu_seqlens from the file or --cu-seqlens but not both); the
 * command's sizes, with op_want on each present input (its shape from sz, NULL: any sizes
 * of its rank; its dtype: main ones all qtype) and op_sequences for N; then, with a
 * context, op_load_inputs (--cu-seqlens checked against T, uploaded as I32). */
clmoe_st_file *op_open_input(const op_args *a);
void op_find_inputs(const clmoe_st_file *f, const op_args *a, const op_sig *s, op_inputs *in);
void op_want(const clmoe_st_file *f, const op_sig *s, int j, const int64_t *sz, clmoe_st_dtype qtype);
int64_t op_sequences(const clmoe_st_file *f, const op_args *a, const op_sig *s, const op_inputs *in);
void op_load_inputs(clmoe_st_file *f, clmoe_ctx *ctx, const op_args *a, const op_sig *s, op_inputs *in);

/* The first nout outputs as F32 tensors of their shapes. */
void op_create_outputs(clmoe_ctx *ctx, const op_sig *s, const op_inputs *in, clmoe_tensor *out, int nout);
/* Writes the first nout outputs to --out with the metadata: clmoe_version, op, device,
 * platform, driver, input, then the command's meta[nmeta] pairs, then cu_seqlens and
 * storage (the main inputs' type). */
void op_write_outputs(const op_args *a, clmoe_ctx *ctx, const op_sig *s, const op_inputs *in,
                      const clmoe_tensor *out, int nout, const char *const (*meta)[2], int nmeta);
/* Releases the outputs, the inputs, the context and the input file. */
void op_release(clmoe_st_file *f, clmoe_ctx *ctx, op_inputs *in, clmoe_tensor *out, int nout);

/* clmoe-op mla (clmoe_op_mla.c). */
int cmd_mla(int argc, char **argv);

#endif
