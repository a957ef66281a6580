/* clmoe-info: every OpenCL platform and device with its capability record, which device
 * clmoe chooses and why, where that device sits (hwloc), and the kernel cache; with --mpi,
 * where every rank of an MPI job lands (device, NUMA node, binding); with --knobs, the
 * table of CLMOE_ environment variables and their values on the chosen device. */
#include <stdlib.h>
#include <string.h>

#include "app_common.h"
#include "clmoe/paths.h"

static void usage(void)
{
  printf("Usage: clmoe-info [--device SPEC] [--json FILE|-] [--no-probe] [--mpi]\n"
         "       clmoe-info --warm --preset NAME|--config FILE [--seq-len T] [--batch B]\n"
         "                  [--device SPEC] [--json FILE|-]\n"
         "       clmoe-info --knobs [--device SPEC] [--json FILE|-]\n"
         "\n"
         "Lists every OpenCL platform and device with the capability record clmoe uses to\n"
         "choose kernels, says which device clmoe picks and why, and shows that device's PCI\n"
         "address, NUMA node and nearby cores (hwloc) and the kernel cache directory.\n"
         "\n"
         "  --device SPEC  the device to describe as chosen, the first match of: P:D indices;\n"
         "                 gpu, cpu, accelerator; an implementation (pocl|portable,\n"
         "                 intel|oneapi, nvidia|cuda, amd|rocm, oclgrind, rusticl, clover,\n"
         "                 clvk, apple, arm|mali, qualcomm|adreno: only its own devices);\n"
         "                 part of a platform's name, vendor, version or ICD suffix; part of\n"
         "                 a device's name or vendor (default: CLMOE_DEVICE, else the first\n"
         "                 GPU, else the first CPU device)\n"
         "  --json FILE    write the same information as JSON (- for stdout)\n"
         "  --warm         build the kernels a model's training step and generation use on the chosen\n"
         "                 device into the cache (for example in a Slurm prolog; kernels are\n"
         "                 built for the model's sizes): one forward, backward and AdamW\n"
         "                 step of the model of --preset NAME or --config FILE on B x T\n"
         "                 tokens (--batch, default 1; --seq-len, default the config's\n"
         "                 [train] seq_len), nothing written but the cache; reports the time\n"
         "  --no-probe     skip the compiler probes (inline PTX, matrix tiles) for a faster\n"
         "                 listing\n"
         "  --mpi          under mpirun/srun: every rank chooses its device and binds its cores\n"
         "                 as a distributed run does, and rank 0 prints each rank's host,\n"
         "                 device, PCI address, NUMA node and cpuset in rank order (--device\n"
         "                 may be a comma-separated list, one entry per local rank)\n"
         "  --knobs        every CLMOE_ environment variable clmoe reads (user settings,\n"
         "                 per-kernel tuning, testing): its value on the chosen device's\n"
         "                 context, default, where the value came from, accepted values\n"
         "                 and what it does\n"
         "  --help, --version\n"
         "\n"
         "Environment: CLMOE_DEVICE, CLMOE_CACHE_DIR, CLMOE_CACHE=0, CLMOE_KERNEL_DIR,\n"
         "CLMOE_FASTPATH=0|1|auto (the matrix-unit tile kernels);\n"
         "with --mpi also CLMOE_BIND=auto|none and CLMOE_MPI=0|1 (docs/distributed.md);\n"
         "the rest: clmoe-info --knobs.\n");
}

static void fmt_bytes(char *buf, size_t len, uint64_t b)
{
  if (b >= (1ull << 30)) snprintf(buf, len, "%.1f GiB", (double)b / (double)(1ull << 30));
  else if (b >= (1ull << 20)) snprintf(buf, len, "%.1f MiB", (double)b / (double)(1ull << 20));
  else snprintf(buf, len, "%.0f KiB", (double)b / 1024.0);
}

static const char *yes_no(int v) { return v > 0 ? "yes" : v == 0 ? "no" : "not probed"; }

/* The matrix-unit fast path of a device, known once a context has probed it. */
typedef struct tile_info {
  int probed;          /* 0: no context was opened on the device (--no-probe, or not chosen) */
  clmoe_tile_impl impl;
  int fastpath;        /* clmoe_ctx_fastpath */
  char reason[80];     /* clmoe_ctx_fastpath_reason */
} tile_info;

static void print_device(const clmoe_device_caps *c, int chosen, const tile_info *t)
{
  char gmem[32], lmem[32], alloc[32];
  fmt_bytes(gmem, sizeof gmem, c->global_mem_bytes);
  fmt_bytes(lmem, sizeof lmem, c->local_mem_bytes);
  fmt_bytes(alloc, sizeof alloc, c->max_alloc_bytes);
  printf("%s[%d:%d] %s\n", chosen ? "* " : "  ", c->platform_index, c->device_index, c->device_name);
  printf("      platform      %s (%s)\n", c->platform_name, c->platform_version);
  printf("      impl          %s (%s; platform vendor %s, ICD suffix %s)\n", clmoe_impl_name(c->impl),
         clmoe_impl_title(c->impl), c->platform_vendor, c->icd_suffix[0] ? c->icd_suffix : "none");
  printf("      vendor        %s [%s], %s\n", c->vendor_name, clmoe_vendor_name(c->vendor),
         c->is_gpu ? "GPU" : c->is_cpu ? "CPU" : c->is_accelerator ? "accelerator" : "other");
  printf("      driver        %s; %s; %s\n", c->driver_version, c->device_version, c->opencl_c_version);
  printf("      compute       %u units at %u MHz, work-group <= %zu, warp/wavefront %d, float vector %u\n",
         c->compute_units, c->clock_mhz, c->max_work_group_size, c->warp_size, c->float_vector_width);
  printf("      memory        %s global (largest buffer %s), %s local%s\n", gmem, alloc, lmem,
         c->local_mem_dedicated ? "" : " (emulated in global memory)");
  printf("      features      fp64 %s, fp16 %s, subgroups %s, int64 atomics %s\n", yes_no(c->has_fp64),
         yes_no(c->has_fp16), yes_no(c->has_subgroups), yes_no(c->has_int64_atomics));
  if (c->pci_known)
    printf("      pci           %04x:%02x:%02x.%x\n", c->pci_domain, c->pci_bus, c->pci_device,
           c->pci_function);
  else
    printf("      pci           not reported by the driver\n");
  if (c->vendor == CLMOE_VENDOR_NVIDIA)
    printf("      nvidia        compute capability %d.%d, inline PTX %s\n", c->nv_cc_major,
           c->nv_cc_minor, yes_no(c->inline_ptx));
  if (t->probed)
    printf("      matrix tiles  %s; fast path %s\n", clmoe_tile_impl_name(t->impl), t->reason);
  else
    printf("      matrix tiles  not probed\n");
  printf("      tunables      CLMOE_WG=%u\n", c->wg_size);
}

static void json_device(FILE *f, const clmoe_device_caps *c, int chosen, const tile_info *t)
{
  fprintf(f, "    {\"platform_index\": %d, \"device_index\": %d, \"chosen\": %s,\n", c->platform_index,
          c->device_index, chosen ? "true" : "false");
  fprintf(f, "     \"name\": "), json_string(f, c->device_name);
  fprintf(f, ", \"platform\": "), json_string(f, c->platform_name);
  fprintf(f, ", \"platform_version\": "), json_string(f, c->platform_version);
  fprintf(f, ",\n     \"implementation\": \"%s\", \"platform_vendor\": ", clmoe_impl_name(c->impl));
  json_string(f, c->platform_vendor);
  fprintf(f, ", \"icd_suffix\": ");
  if (c->icd_suffix[0]) json_string(f, c->icd_suffix);
  else fprintf(f, "null");
  fprintf(f, ",\n     \"vendor\": "), json_string(f, c->vendor_name);
  fprintf(f, ", \"vendor_id\": \"%s\", \"type\": \"%s\"", clmoe_vendor_name(c->vendor),
          c->is_gpu ? "gpu" : c->is_cpu ? "cpu" : c->is_accelerator ? "accelerator" : "other");
  fprintf(f, ", \"driver_version\": "), json_string(f, c->driver_version);
  fprintf(f, ", \"device_version\": "), json_string(f, c->device_version);
  fprintf(f, ", \"opencl_c_version\": "), json_string(f, c->opencl_c_version);
  fprintf(f, ",\n     \"compute_units\": %u, \"clock_mhz\": %u, \"max_work_group_size\": %zu, "
             "\"warp_size\": %d, \"float_vector_width\": %u,\n", c->compute_units, c->clock_mhz, c->max_work_group_size,
          c->warp_size, c->float_vector_width);
  fprintf(f, "     \"global_mem_bytes\": %llu, \"max_alloc_bytes\": %llu, \"local_mem_bytes\": %llu, "
             "\"local_mem_dedicated\": %s,\n", (unsigned long long)c->global_mem_bytes,
          (unsigned long long)c->max_alloc_bytes, (unsigned long long)c->local_mem_bytes,
          c->local_mem_dedicated ? "true" : "false");
  fprintf(f, "     \"fp64\": %s, \"fp16\": %s, \"subgroups\": %s, \"int64_atomics\": %s, ",
          c->has_fp64 ? "true" : "false", c->has_fp16 ? "true" : "false",
          c->has_subgroups ? "true" : "false", c->has_int64_atomics ? "true" : "false");
  if (c->pci_known)
    fprintf(f, "\"pci\": \"%04x:%02x:%02x.%x\",\n", c->pci_domain, c->pci_bus, c->pci_device, c->pci_function);
  else
    fprintf(f, "\"pci\": null,\n");
  fprintf(f, "     \"nv_compute_capability\": \"%d.%d\", \"inline_ptx\": %s, \"wg_size\": %u,\n",
          c->nv_cc_major, c->nv_cc_minor, c->inline_ptx < 0 ? "null" : c->inline_ptx ? "true" : "false",
          c->wg_size);
  if (t->probed) {
    fprintf(f, "     \"tile_impl\": \"%s\", \"fastpath\": %s, \"fastpath_reason\": ",
            clmoe_tile_impl_name(t->impl), t->fastpath ? "true" : "false");
    json_string(f, t->reason);
    fprintf(f, "}");
  } else {
    fprintf(f, "     \"tile_impl\": null, \"fastpath\": null, \"fastpath_reason\": null}");
  }
}


static void json_rank(FILE *f, const clmoe_rank_report *r)
{
  fprintf(f, "    {\"rank\": %d, \"size\": %d, \"local_rank\": %d, \"local_size\": %d, \"host\": ",
          r->rank, r->size, r->local_rank, r->local_size);
  json_string(f, r->host);
  fprintf(f, ",\n     \"platform_index\": %d, \"device_index\": %d, \"device\": ", r->platform_index,
          r->device_index);
  json_string(f, r->device);
  fprintf(f, ", \"device_reason\": ");
  json_string(f, r->device_why);
  fprintf(f, ",\n     \"pci\": ");
  if (r->pci[0]) json_string(f, r->pci);
  else fprintf(f, "null");
  fprintf(f, ", \"numa_node\": %d, \"binding\": ", r->numa_node);
  json_string(f, r->bind_source);
  fprintf(f, ", \"cpuset\": ");
  json_string(f, r->cpuset);
  fprintf(f, ", \"cores\": %d, \"binding_note\": ", r->ncores);
  json_string(f, r->bind_note);
  fprintf(f, ", \"binding_warning\": ");
  if (r->bind_warning[0]) json_string(f, r->bind_warning);
  else fprintf(f, "null");
  fprintf(f, ",\n     \"visibility\": ");
  json_string(f, r->visibility);
  fprintf(f, "}");
}

/* --mpi: each rank chooses its device and binds as a distributed run would (include/clmoe/dist.h);
 * rank 0 gathers the reports and prints them in rank order. Returns the exit status. */
static int info_mpi(const char *device, const char *json, int *argc, char ***argv)
{
  clmoe_dist *dist = NULL;
  APP_CHECK(clmoe_dist_init(&dist, argc, argv));
  app_dist = dist;
  int rank = clmoe_dist_rank(dist), size = clmoe_dist_size(dist);
  if (!clmoe_dist_uses_mpi(dist))
    fprintf(stderr, "%s: --mpi: %s; showing this process as the only rank%s\n", app_name,
            clmoe_dist_describe(dist),
            clmoe_dist_built_with_mpi() ? " (start it as: mpirun -np N clmoe-info --mpi)"
                                        : " (re-run configure with --with-mpi=yes and Open MPI "
                                          "installed: apt-get install libopenmpi-dev openmpi-bin)");

  clmoe_device_caps *list = NULL;
  int n = 0, chosen = 0;
  clmoe_rank_report mine;
  APP_CHECK(clmoe_devices_list(&list, &n));
  APP_CHECK(clmoe_dist_place(dist, list, n, device, NULL, &chosen, &mine));
  free(list);
  clmoe_rank_report *all = NULL;
  if (rank == 0 && !(all = calloc((size_t)size, sizeof *all))) {
    fprintf(stderr, "%s: out of host memory for %d rank reports\n", app_name, size);
    clmoe_dist_abort(dist, 1);
    return 1;
  }
  APP_CHECK(clmoe_dist_gather_reports(dist, &mine, all));
  if (rank == 0) {
    if (json) {
      FILE *f = app_open_output(json);
      fprintf(f, "{\n  \"clmoe_version\": \"%s\", \"mpi\": %s, \"ranks_note\": ", clmoe_version(),
              clmoe_dist_uses_mpi(dist) ? "true" : "false");
      json_string(f, clmoe_dist_describe(dist));
      fprintf(f, ",\n  \"ranks\": [\n");
      for (int r = 0; r < size; r++) {
        json_rank(f, &all[r]);
        fprintf(f, "%s\n", r + 1 < size ? "," : "");
      }
      fprintf(f, "  ]\n}\n");
      app_close_output(f);
    }
    if (!json || strcmp(json, "-")) {
      printf("clmoe %s: %s\n", clmoe_version(), clmoe_dist_describe(dist));
      for (int r = 0; r < size; r++) app_print_rank(stdout, &all[r]);
    }
    fflush(stdout);
    char warning[512];
    if (clmoe_dist_binding_warnings(all, size, warning, sizeof warning) > 0)
      fprintf(stderr, "%s: warning: %s\n", app_name, warning);
  }
  free(all);
  app_dist = NULL;
  APP_CHECK(clmoe_dist_finalize(dist));
  return 0;
}

static const char *source_name(clmoe_knob_source s)
{
  return s == CLMOE_KNOB_SET ? "set" : s == CLMOE_KNOB_ENV ? "environment" : "default";
}

/* What an "auto" knob comes to here (NULL: not one that resolves, or not auto): the fast
 * path on this device, MPI under this launch. */
static const char *resolved(clmoe_ctx *ctx, const char *name, const char *value)
{
  if (strcmp(value, "auto")) return NULL;
  if (!strcmp(name, "CLMOE_FASTPATH")) return clmoe_ctx_fastpath(ctx) ? "on" : "off";
  if (!strcmp(name, "CLMOE_MPI")) {
    clmoe_launch l;
    clmoe_launch_detect(&l);
    return l.mpi ? "on" : "off";
  }
  return NULL;
}

/* --knobs: the knob table with each knob's value on a context of the chosen device. */
static int info_knobs(const char *device, const char *json, int probe)
{
  clmoe_device_caps *list = NULL;
  int n = 0, chosen = 0;
  char why[256];
  APP_CHECK(clmoe_devices_list(&list, &n));
  APP_CHECK(clmoe_device_choose(list, n, device, &chosen, why, sizeof why));
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options opts = {.no_probe = !probe};
  APP_CHECK(clmoe_ctx_create_at(&ctx, &list[chosen], &opts));
  const clmoe_device_caps *c = clmoe_ctx_caps(ctx);
  FILE *f = json ? app_open_output(json) : NULL;
  if (f) {
    fprintf(f, "{\n  \"clmoe_version\": \"%s\",\n  \"device\": ", clmoe_version());
    json_string(f, c->device_name);
    fprintf(f, ",\n  \"knobs\": [\n");
  } else {
    printf("clmoe %s: knobs on [%d:%d] %s (README lists the user ones)\n\n", clmoe_version(),
           c->platform_index, c->device_index, c->device_name);
    printf("%-30s %-14s %-8s %-11s %-7s %s\n", "variable", "value", "default", "from", "scope", "what it does");
  }
  const int count = clmoe_knob_count();
  for (int i = 0; i < count; i++) {
    clmoe_knob_info k;
    APP_CHECK(clmoe_knob_describe(i, &k));
    char value[1024];
    clmoe_knob_source src;
    APP_CHECK(clmoe_ctx_knob(ctx, k.name, value, sizeof value, &src));
    const char *now = resolved(ctx, k.name, value);
    if (f) {
      fprintf(f, "    {\"name\": ");
      json_string(f, k.name);
      fprintf(f, ", \"value\": ");
      if (value[0]) json_string(f, value);
      else fprintf(f, "null");
      fprintf(f, ", \"default\": ");
      if (k.def) json_string(f, k.def);
      else fprintf(f, "null");
      if (now) fprintf(f, ", \"resolved\": \"%s\"", now);
      fprintf(f, ", \"from\": \"%s\", \"kind\": ", source_name(src));
      json_string(f, k.kind);
      fprintf(f, ", \"accepts\": ");
      json_string(f, k.accepts);
      fprintf(f, ", \"scope\": ");
      json_string(f, k.scope);
      fprintf(f, ", \"process\": %s, \"doc\": ", k.process ? "true" : "false");
      json_string(f, k.doc);
      fprintf(f, "}%s\n", i + 1 < count ? "," : "");
    } else {
      char shown[1100];
      snprintf(shown, sizeof shown, "%s%s%s%s", value[0] ? value : "(unset)", now ? " (" : "", now ? now : "",
               now ? ")" : "");
      printf("%-30s %-14s %-8s %-11s %-7s %s (%s)\n", k.name, shown, k.def ? k.def : "(unset)", source_name(src),
             k.scope, k.doc, k.accepts);
    }
  }
  if (f) {
    fprintf(f, "  ]\n}\n");
    app_close_output(f);
  }
  clmoe_ctx_destroy(ctx);
  free(list);
  return 0;
}

/* One training step of the model (forward, backward, AdamW) on B x T tokens, then what
 * clmoe-generate runs with its defaults (a chunked prefill of B prompts of T tokens, a
 * decode step and one drawing its tokens on the device): every kernel they use is built
 * for the model's sizes and lands in the cache; nothing else is written. */
static void warm_model(clmoe_ctx *ctx, const char *preset, const char *config,
                       const char *seq_len, const char *batch)
{
  clmoe_config cfg;
  APP_CHECK(preset ? clmoe_config_preset(preset, &cfg) : clmoe_config_load(config, &cfg));
  const int64_t B = batch ? app_parse_int("--batch", batch, 1, 1 << 20) : 1;
  const int64_t T = seq_len ? app_parse_int("--seq-len", seq_len, 1, 1 << 26) : cfg.train.seq_len;
  int32_t *tokens = malloc((size_t)(B * T) * sizeof *tokens);
  int32_t *targets = malloc((size_t)(B * T) * sizeof *targets);
  if (!tokens || !targets) app_die(CLMOE_ERR_OUT_OF_MEMORY, "the warm-up batch");
  for (int64_t i = 0; i < B * T; i++) { /* any tokens: only the kernels matter */
    tokens[i] = (int32_t)(i % cfg.vocab);
    targets[i] = (int32_t)((i + 1) % cfg.vocab);
  }
  clmoe_model *model = NULL;
  double loss = 0.0, norm = 0.0;
  int64_t scored = 0;
  const clmoe_adamw hp = {(float)cfg.train.lr, (float)cfg.train.beta1, (float)cfg.train.beta2,
                          (float)cfg.train.adam_eps, (float)cfg.train.weight_decay, 1.0f, 1};
  APP_CHECK(clmoe_model_create(ctx, &cfg, &model));
  APP_CHECK(clmoe_model_init(model, cfg.train.seed));
  APP_CHECK(clmoe_model_forward(model, B, T, tokens, targets, 1, &loss, &scored));
  APP_CHECK(clmoe_model_backward(model));
  APP_CHECK(clmoe_model_balance_update(model));
  APP_CHECK(clmoe_params_adamw(clmoe_model_params(model), &hp, cfg.train.clip, &norm));
  clmoe_gen_state *g = NULL;
  const int32_t **prompts = malloc((size_t)B * sizeof *prompts);
  int64_t *lens = malloc((size_t)B * sizeof *lens);
  float *logits = malloc((size_t)(B * cfg.vocab) * sizeof *logits);
  if (!prompts || !lens || !logits) app_die(CLMOE_ERR_OUT_OF_MEMORY, "the warm-up prompts");
  for (int64_t b = 0; b < B; b++) prompts[b] = tokens + b * T, lens[b] = T;
  APP_CHECK(clmoe_gen_state_create(model, B, NULL, &g));
  APP_CHECK(clmoe_gen_prefill(g, prompts, lens, logits, NULL));
  APP_CHECK(clmoe_gen_step(g, targets, logits)); /* one token per sequence (any) */
  /* and a step drawing its tokens on the device, as clmoe-generate's default sampling does */
  const clmoe_gen_sampling sp = {.temperature = 0.8, .top_p = 0.95, .seed = 1};
  int32_t *next = malloc((size_t)B * sizeof *next);
  if (!next) app_die(CLMOE_ERR_OUT_OF_MEMORY, "the warm-up tokens");
  APP_CHECK(clmoe_gen_decode(g, &sp, targets, 1, 1, next));
  clmoe_gen_state_destroy(g);
  free(prompts), free(lens), free(logits), free(next);
  clmoe_model_destroy(model);
  free(tokens), free(targets);
}

int main(int argc, char **argv)
{
  app_name = "clmoe-info";
  app_flags flags = {.take = APP_FLAGS_ALL, .usage = usage};
  int warm = 0, probe = 1, mpi = 0, knobs = 0;
  const char *preset = NULL, *config = NULL, *seq_len = NULL, *batch = NULL, *v;
  for (int i = 1; i < argc; i++) {
    if (app_standard_flag(argc, argv, &i, &flags)) continue;
    if (app_option(argc, argv, &i, "--preset", &v)) preset = v;
    else if (app_option(argc, argv, &i, "--config", &v)) config = v;
    else if (app_option(argc, argv, &i, "--seq-len", &v)) seq_len = v;
    else if (app_option(argc, argv, &i, "--batch", &v)) batch = v;
    else if (!strcmp(argv[i], "--warm")) {
      warm = 1;
    } else if (!strcmp(argv[i], "--no-probe")) {
      probe = 0;
    } else if (!strcmp(argv[i], "--mpi")) {
      mpi = 1;
    } else if (!strcmp(argv[i], "--knobs")) {
      knobs = 1;
    } else {
      app_usage_error("unknown argument '%s'", argv[i]);
    }
  }
  const char *device = flags.device, *json = flags.json;
  if ((preset || config || seq_len || batch) && !warm)
    app_usage_error("--preset, --config, --seq-len and --batch go with --warm");
  if (warm && !!preset == !!config)
    app_usage_error("--warm needs the model: --preset NAME or --config FILE (kernels are built "
                    "for its sizes)");

  if (knobs) {
    if (warm || mpi) app_usage_error("--knobs goes with --device and --json only");
    return info_knobs(device, json, probe);
  }
  if (mpi) {
    if (warm) app_usage_error("--warm and --mpi do not go together (warm the cache once per node)");
    return info_mpi(device, json, &argc, &argv);
  }
  clmoe_device_caps *list = NULL;
  int n = 0, chosen = 0;
  char why[256];
  APP_CHECK(clmoe_devices_list(&list, &n));
  APP_CHECK(clmoe_device_choose(list, n, device, &chosen, why, sizeof why));
  tile_info *tiles = calloc((size_t)n, sizeof *tiles);
  if (!tiles) app_die(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  /* Probes need a context; run them on every NVIDIA device (the only ones they concern). */
  for (int i = 0; i < n && probe; i++) {
    if (list[i].vendor != CLMOE_VENDOR_NVIDIA && i != chosen) continue;
    clmoe_ctx *ctx = NULL;
    clmoe_status st = clmoe_ctx_create_at(&ctx, &list[i], NULL);
    if (st == CLMOE_OK) {
      tiles[i].probed = 1;
      tiles[i].impl = clmoe_ctx_tile_impl(ctx); /* the mma.sync probe (lib/tile/fastpath.c) */
      tiles[i].fastpath = clmoe_ctx_fastpath(ctx);
      snprintf(tiles[i].reason, sizeof tiles[i].reason, "%s", clmoe_ctx_fastpath_reason(ctx));
      list[i] = *clmoe_ctx_caps(ctx);
      clmoe_ctx_destroy(ctx);
    } else {
      fprintf(stderr, "%s: warning: cannot open device %d:%d: %s\n", app_name,
              list[i].platform_index, list[i].device_index, clmoe_last_error());
    }
  }
  clmoe_locality loc;
  APP_CHECK(clmoe_device_locality(&list[chosen], &loc));
  char cache[4096];
  int cache_on = clmoe_cache_dir(cache, sizeof cache);

  double warm_s = -1.0;
  clmoe_program_stats ps = {0};
  if (warm) {
    clmoe_ctx *ctx = NULL;
    APP_CHECK(clmoe_ctx_create_at(&ctx, &list[chosen], NULL));
    double t0 = app_now();
    warm_model(ctx, preset, config, seq_len, batch);
    warm_s = app_now() - t0;
    clmoe_ctx_program_stats(ctx, &ps);
    clmoe_ctx_destroy(ctx);
  }

  if (json) {
    FILE *f = app_open_output(json);
    fprintf(f, "{\n  \"clmoe_version\": \"%s\",\n  \"build\": ", clmoe_version());
    json_build(f);
    fprintf(f, ",\n  \"devices\": [\n");
    for (int i = 0; i < n; i++) {
      json_device(f, &list[i], i == chosen, &tiles[i]);
      fprintf(f, "%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, "  ],\n  \"chosen\": {\"index\": %d, \"reason\": ", chosen);
    json_string(f, why);
    fprintf(f, "},\n  \"locality\": {\"known\": %s, \"pci\": ", loc.known ? "true" : "false");
    json_string(f, loc.pci_address);
    fprintf(f, ", \"numa_node\": %d, \"cpuset\": ", loc.numa_node);
    json_string(f, loc.cpuset);
    fprintf(f, ", \"cores\": %d, \"machine_cores\": %d, \"note\": ", loc.ncores, loc.machine_cores);
    json_string(f, loc.note);
    fprintf(f, "},\n  \"kernel_cache\": ");
    if (cache_on) json_string(f, cache);
    else fprintf(f, "null");
    if (warm)
      fprintf(f, ",\n  \"warm\": {\"seconds\": %.3f, \"built\": %lu, \"from_cache\": %lu}", warm_s,
              ps.builds, ps.cache_hits);
    fprintf(f, "\n}\n");
    app_close_output(f);
    if (!strcmp(json, "-")) {
      free(list);
      free(tiles);
      return 0;
    }
  }

  printf("clmoe %s: %d OpenCL device%s\n\n", clmoe_version(), n, n == 1 ? "" : "s");
  for (int i = 0; i < n; i++) print_device(&list[i], i == chosen, &tiles[i]);
  const clmoe_device_caps *c = &list[chosen];
  printf("\nChosen: [%d:%d] %s - %s\n", c->platform_index, c->device_index, c->device_name, why);
  if (loc.known)
    printf("Locality: PCI %s, NUMA node %d, %d nearby cores: %s (of %d)\n", loc.pci_address,
           loc.numa_node, loc.ncores, loc.cpuset, loc.machine_cores);
  else {
    printf("Locality: unknown - cores %s (%d)\n", loc.cpuset, loc.ncores);
    fprintf(stderr, "%s: warning: locality of the chosen device is unknown: %s\n", app_name, loc.note);
  }
  if (cache_on) printf("Kernel cache: %s\n", cache);
  else printf("Kernel cache: off (CLMOE_CACHE=0)\n");
  if (warm)
    printf("Warm-up: %.2f s, %lu programs built, %lu loaded from the cache\n", warm_s, ps.builds,
           ps.cache_hits);
  free(list);
  free(tiles);
  return 0;
}
