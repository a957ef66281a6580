/* clmoe-plan: does a model fit a cluster, and how many bytes move per step? Memory per GPU
 * and communication per step from the config alone (apps/plan_model.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "app_common.h"
#include "plan_model.h"

static void usage(void)
{
  printf(
    "Usage: clmoe-plan (--preset NAME | --config FILE) --gpus N --gpu-mem SIZE [--nodes N]\n"
    "                  [--ep N] [--batch-tokens T] [--dtype bf16|fp32] [--zero 0|1|3]\n"
    "                  [--reserve F] [--kda-tiles] [--json FILE|-]\n"
    "\n"
    "Plans a training run with experts spread over GPUs (expert parallelism) and every other\n"
    "parameter data-parallel: parameters, memory per GPU, bytes moved per step, and whether\n"
    "it fits. Exit status 0 when it fits, 1 when it does not (with what would make it fit),\n"
    "2 for a bad command line.\n"
    "\n"
    "  --preset NAME       tiny, demo, gpu, k3, kimi-linear-48b (or --config FILE)\n"
    "  --gpus N            GPUs (one MPI rank each)\n"
    "  --gpu-mem SIZE      memory per GPU: bytes, or with K, M, G, T (powers of 1000) or\n"
    "                      Ki, Mi, Gi, Ti (powers of 1024): 141G for an H200\n"
    "  --nodes N           hosts (default: 8 GPUs a node when that divides, else 1)\n"
    "  --ep N              expert-parallel group size, divides --gpus (default: --gpus);\n"
    "                      --gpus / --ep groups each hold a copy of every expert\n"
    "  --batch-tokens T    tokens per GPU per step (default 8192)\n"
    "  --dtype D           bf16 (default) or fp32: weights, gradients, activations, messages\n"
    "  --zero Z            0 (default): dense state on every GPU; 1: dense AdamW moments and\n"
    "                      master weights sharded over the GPUs; 3: all dense state sharded\n"
    "                      (1 and 3 are what-ifs: clmoe does not shard yet)\n"
    "  --reserve F         fraction of GPU memory kept free (default 0.1)\n"
    "  --kda-tiles         the KDA layers train on tensor cores (CLMOE_FASTPATH=1) and keep\n"
    "                      their factors and states between forward and backward\n"
    "  --json FILE         the same numbers as JSON (- for stdout)\n"
    "  --help, --version\n"
    "  (no --device: the plan is computed from the config alone, on no OpenCL device)\n"
    "\n"
    "Model (per GPU; P = parameters held; b = 2 for bf16, 4 for fp32):\n"
    "  experts per GPU      S = ceil(E / ep) of each MoE layer; expert params = S x (routed\n"
    "                       params / E)\n"
    "  dense params         total - routed experts (all of them on every GPU at zero 0)\n"
    "  weights b P, gradients b P, AdamW moments 8 P, fp32 master 4 P (bf16 only)\n"
    "  activations          (values saved per token (a coarse per-layer count, no\n"
    "                       recomputation: docs/distributed.md) x b + 4 vocab) x batch tokens\n"
    "  KDA tile factors     (--kda-tiles) KDA layers x heads x bytes kept per 16-token chunk\n"
    "                       and head (69120 at head size 128) / 16 x batch tokens\n"
    "  all-to-all           tokens x top_k x latent width x b x 2 (dispatch + combine)\n"
    "                       x MoE layers x 2 (forward + backward); off-GPU share (ep-1)/ep\n"
    "  dense all-reduce     2 (N-1)/N x dense params x b (ring; 3 (N-1)/N at zero 3)\n"
    "  expert all-reduce    2 (R-1)/R x expert params x b among the R = gpus/ep copies\n"
    "  fits                 when the sum <= GPU memory x (1 - reserve)\n");
}

static double parse_size(const char *flag, const char *v)
{
  char *end = NULL;
  double x = strtod(v, &end);
  if (!end || end == v || !isfinite(x) || x <= 0) app_usage_error("%s: '%s' is not a size", flag, v);
  static const struct { const char *suffix; double scale; } units[] = {
    {"", 1}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"KB", 1e3}, {"MB", 1e6},
    {"GB", 1e9}, {"TB", 1e12}, {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0},
    {"Ti", 1099511627776.0}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
    {"TiB", 1099511627776.0}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strcmp(end, units[i].suffix)) return x * units[i].scale;
  app_usage_error("%s: unknown unit '%s' in '%s' (use K, M, G, T or Ki, Mi, Gi, Ti)", flag, end, v);
}

static void human(char *buf, size_t len, double v)
{
  if (v >= 1e12) snprintf(buf, len, "%.3fT", v / 1e12);
  else if (v >= 1e9) snprintf(buf, len, "%.2fB", v / 1e9);
  else if (v >= 1e6) snprintf(buf, len, "%.2fM", v / 1e6);
  else snprintf(buf, len, "%.0f", v);
}

static double gb(double bytes) { return bytes / 1e9; }

static void print_plan(const plan_input *in, const plan_result *r)
{
  char t[32], a[32], dn[32], ex[32], eg[32];
  human(t, sizeof t, r->count.total), human(a, sizeof a, r->count.active);
  human(dn, sizeof dn, r->dense_params), human(ex, sizeof ex, r->count.moe_experts);
  human(eg, sizeof eg, r->expert_params_gpu);
  printf("%s on %lld GPUs (%lld node%s x %lld), expert parallel %lld, %lld tokens per GPU per step, "
         "%s, zero %d\n", in->cfg.name, in->gpus, in->nodes, in->nodes == 1 ? "" : "s",
         in->gpus / in->nodes, in->ep, in->batch_tokens, in->bytes == 2 ? "bf16" : "fp32", in->zero);
  printf("parameters            %s total, %s active\n", t, a);
  printf("  dense (data parallel) %s%s\n", dn, in->zero == 3 ? ", sharded over the GPUs" : ", on every GPU");
  printf("  routed experts        %s: %lld per MoE layer x %d layers; %lld per GPU per layer (%s "
         "params), %lld cop%s of each\n", ex, (long long)in->cfg.experts, r->moe_layers, r->slots,
         eg, r->expert_replicas, r->expert_replicas == 1 ? "y" : "ies");
  printf("memory per GPU (GB = 1e9 bytes)\n");
  printf("  weights               %8.2f GB (fp32 %.2f, bf16 %.2f)\n", gb(r->weights),
         gb(r->weights_fp32), gb(r->weights_bf16));
  if (r->master > 0) printf("  fp32 master weights   %8.2f GB\n", gb(r->master));
  printf("  gradients             %8.2f GB\n", gb(r->grads));
  printf("  AdamW moments         %8.2f GB\n", gb(r->moments));
  printf("  activations           %8.2f GB ((%.0f values x %d B + %lld fp32 logits) a token x %lld "
         "tokens)\n", gb(r->activations), r->act_values_token, in->bytes, (long long)in->cfg.vocab,
         in->batch_tokens);
  if (in->kda_tiles)
    printf("  KDA tile factors      %8.2f GB (factors and states kept between forward and backward)\n",
           gb(r->kda_kept));
  printf("  total                 %8.2f GB of %.2f GB usable (%.2f GB less %.0f%%)\n", gb(r->total),
         gb(r->usable), gb(in->gpu_mem), in->reserve * 100.0);
  printf("bytes sent per GPU per step\n");
  printf("  all-to-all            %8.2f GB dispatch + combine, forward + backward; %.2f GB to other "
         "GPUs, %.2f GB to other nodes\n", gb(r->a2a_bytes), gb(r->a2a_off_rank), gb(r->a2a_off_node));
  printf("  dense all-reduce      %8.2f GB\n", gb(r->allreduce_dense));
  printf("  expert all-reduce     %8.2f GB\n", gb(r->allreduce_expert));
}

static void json_plan(FILE *f, const plan_input *in, const plan_result *r)
{
  fprintf(f, "{\n  \"preset\": ");
  json_string(f, in->cfg.name);
  fprintf(f, ", \"gpus\": %lld, \"nodes\": %lld, \"ep\": %lld, \"batch_tokens\": %lld, "
             "\"dtype\": \"%s\", \"zero\": %d,\n", in->gpus, in->nodes, in->ep, in->batch_tokens,
          in->bytes == 2 ? "bf16" : "fp32", in->zero);
  fprintf(f, "  \"gpu_mem_bytes\": %.0f, \"usable_bytes\": %.0f,\n", in->gpu_mem, r->usable);
  fprintf(f, "  \"params_total\": %.0f, \"params_active\": %.0f, \"params_dense\": %.0f, "
             "\"params_routed_experts\": %.0f,\n", r->count.total, r->count.active, r->dense_params,
          r->count.moe_experts);
  fprintf(f, "  \"moe_layers\": %d, \"experts_per_gpu_per_layer\": %lld, \"expert_copies\": %lld, "
             "\"expert_params_per_gpu\": %.0f, \"params_per_gpu\": %.0f,\n", r->moe_layers, r->slots,
          r->expert_replicas, r->expert_params_gpu, r->params_gpu);
  fprintf(f, "  \"bytes\": {\"weights\": %.0f, \"weights_fp32\": %.0f, \"weights_bf16\": %.0f, "
             "\"master\": %.0f, \"gradients\": %.0f, \"moments\": %.0f, \"activations\": %.0f, "
             "\"kda_kept\": %.0f, \"total\": %.0f},\n", r->weights, r->weights_fp32, r->weights_bf16, r->master,
          r->grads, r->moments, r->activations, r->kda_kept, r->total);
  fprintf(f, "  \"activation_values_per_token\": %.0f,\n", r->act_values_token);
  fprintf(f, "  \"step_bytes\": {\"all_to_all\": %.0f, \"all_to_all_off_gpu\": %.0f, "
             "\"all_to_all_off_node\": %.0f, \"dense_allreduce\": %.0f, \"expert_allreduce\": %.0f},\n",
          r->a2a_bytes, r->a2a_off_rank, r->a2a_off_node, r->allreduce_dense, r->allreduce_expert);
  fprintf(f, "  \"fits\": %s\n}\n", r->fits ? "true" : "false");
}

/* What would make a plan that does not fit fit: one change at a time. */
static void suggest(const plan_input *in)
{
  char err[256];
  plan_result r;
  int any = 0;
  printf("what would fit (one change at a time):\n");
  for (int z = in->zero + 1; z <= 3; z++) {
    if (z == 2) continue;
    plan_input t = *in;
    t.zero = z;
    if (plan_compute(&t, &r, err, sizeof err) == 0 && r.fits) {
      printf("  --zero %d (%.2f GB; needs sharded dense state, not in clmoe yet)\n", z, gb(r.total));
      any = 1;
      break;
    }
  }
  for (long long bt = in->batch_tokens / 2; bt >= 256; bt /= 2) {
    plan_input t = *in;
    t.batch_tokens = bt;
    if (plan_compute(&t, &r, err, sizeof err) == 0 && r.fits) {
      printf("  --batch-tokens %lld (%.2f GB)\n", bt, gb(r.total));
      any = 1;
      break;
    }
  }
  for (long long g = in->gpus * 2; g <= in->gpus * 16; g *= 2) {
    plan_input t = *in;
    t.gpus = g, t.ep = in->ep * (g / in->gpus), t.nodes = in->nodes * (g / in->gpus);
    if (plan_compute(&t, &r, err, sizeof err) == 0 && r.fits) {
      printf("  --gpus %lld --ep %lld (%.2f GB)\n", g, t.ep, gb(r.total));
      any = 1;
      break;
    }
  }
  if (!any)
    printf("  nothing simple: the dense parameters alone need more than one GPU holds; shard "
           "them (--zero 3) and add GPUs\n");
}

int main(int argc, char **argv)
{
  app_name = "clmoe-plan";
  app_flags flags = {.take = APP_FLAG_HELP | APP_FLAG_VERSION | APP_FLAG_JSON, .usage = usage};
  const char *preset = NULL, *config = NULL, *v;
  plan_input in;
  memset(&in, 0, sizeof in);
  in.batch_tokens = 8192, in.bytes = 2, in.reserve = 0.1, in.nodes = -1, in.ep = -1;
  for (int i = 1; i < argc; i++) {
    if (app_standard_flag(argc, argv, &i, &flags)) continue;
    if (app_option(argc, argv, &i, "--preset", &v)) {
      preset = v;
    } else if (app_option(argc, argv, &i, "--config", &v)) {
      config = v;
    } else if (app_option(argc, argv, &i, "--gpus", &v)) {
      in.gpus = app_parse_int("--gpus", v, 1, 1 << 24);
    } else if (app_option(argc, argv, &i, "--gpu-mem", &v)) {
      in.gpu_mem = parse_size("--gpu-mem", v);
    } else if (app_option(argc, argv, &i, "--nodes", &v)) {
      in.nodes = app_parse_int("--nodes", v, 1, 1 << 24);
    } else if (app_option(argc, argv, &i, "--ep", &v)) {
      in.ep = app_parse_int("--ep", v, 1, 1 << 24);
    } else if (app_option(argc, argv, &i, "--batch-tokens", &v)) {
      in.batch_tokens = app_parse_int("--batch-tokens", v, 1, 1ll << 40);
    } else if (app_option(argc, argv, &i, "--dtype", &v)) {
      if (!strcmp(v, "bf16")) in.bytes = 2;
      else if (!strcmp(v, "fp32")) in.bytes = 4;
      else app_usage_error("--dtype: '%s' (use bf16 or fp32)", v);
    } else if (app_option(argc, argv, &i, "--zero", &v)) {
      in.zero = (int)app_parse_int("--zero", v, 0, 3);
      if (in.zero == 2) app_usage_error("--zero: use 0, 1 or 3");
    } else if (app_option(argc, argv, &i, "--reserve", &v)) {
      char *end = NULL;
      in.reserve = strtod(v, &end);
      if (!end || *end || end == v || !(in.reserve >= 0 && in.reserve < 1))
        app_usage_error("--reserve: '%s' (want a fraction in [0, 1))", v);
    } else if (!strcmp(argv[i], "--kda-tiles")) {
      in.kda_tiles = 1;
    } else {
      app_usage_error("unknown argument '%s'", argv[i]);
    }
  }
  const char *json = flags.json;
  if (!preset == !config) app_usage_error("give exactly one of --preset NAME or --config FILE");
  if (!in.gpus) app_usage_error("--gpus is required");
  if (in.gpu_mem <= 0) app_usage_error("--gpu-mem is required (e.g. 141G)");
  if (preset) APP_CHECK(clmoe_config_preset(preset, &in.cfg));
  else APP_CHECK(clmoe_config_load(config, &in.cfg));
  if (in.nodes < 0) in.nodes = in.gpus % 8 == 0 ? in.gpus / 8 : 1;
  if (in.ep < 0) in.ep = in.gpus;

  plan_result r;
  char err[256];
  if (plan_compute(&in, &r, err, sizeof err) != 0) app_usage_error("%s", err);
  if (json) {
    FILE *f = app_open_output(json);
    json_plan(f, &in, &r);
    app_close_output(f);
  }
  if (!json || strcmp(json, "-")) {
    print_plan(&in, &r);
    if (r.fits) {
      printf("verdict: FITS (%.2f GB of %.2f GB usable per GPU)\n", gb(r.total), gb(r.usable));
    } else {
      printf("verdict: DOES NOT FIT (needs %.2f GB, %.2f GB usable per GPU)\n", gb(r.total), gb(r.usable));
      suggest(&in);
    }
  }
  return r.fits ? 0 : 1;
}
