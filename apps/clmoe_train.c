/* clmoe-train: the model's trainer. This first part reads presets and config files,
 * prints them, and counts parameters by component (--count-params); the training loop
 * lands with the model (issue 6). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "app_common.h"

static void usage(void)
{
  printf("Usage: clmoe-train (--preset NAME | --config FILE) [--count-params] [--print-config]\n"
         "                   [--json FILE|-]\n"
         "\n"
         "  --preset NAME   a shipped model: tiny, demo, gpu, k3, kimi-linear-48b\n"
         "  --config FILE   a config file (format: docs/user-guide.md, `clmoe-train --preset tiny\n"
         "                  --print-config` prints a complete example)\n"
         "  --count-params  total and active (per token) parameters by component; active counts\n"
         "                  the top-k routed experts and the output head, not the embedding table\n"
         "  --print-config  the config as parsed, in the file format\n"
         "  --json FILE     the counts as JSON (- for stdout)\n"
         "  --help, --version\n"
         "\n"
         "Training itself is not built yet (issue 6).\n");
}

static void human(char *buf, size_t len, double v)
{
  if (v >= 1e12) snprintf(buf, len, "%.3fT", v / 1e12);
  else if (v >= 1e9) snprintf(buf, len, "%.2fB", v / 1e9);
  else if (v >= 1e6) snprintf(buf, len, "%.2fM", v / 1e6);
  else if (v >= 1e3) snprintf(buf, len, "%.1fK", v / 1e3);
  else snprintf(buf, len, "%.0f", v);
}

static void count_params(const clmoe_config *c, const char *json)
{
  clmoe_param_count p;
  clmoe_config_count_params(c, &p);
  const struct { const char *name; double total, active; } rows[] = {
      {"embedding", p.embedding, 0.0},
      {"output head", p.head, p.head},
      {"KDA layers", p.kda, p.kda},
      {"MLA layers", p.mla, p.mla},
      {"dense FFN", p.dense_ffn, p.dense_ffn},
      {"MoE routed experts", p.moe_experts, p.active_moe_experts},
      {"MoE shared experts", p.moe_shared, p.moe_shared},
      {"MoE routers", p.moe_router, p.moe_router},
      {"MoE latent projections", p.moe_latent, p.moe_latent},
      {"RMSNorm gains", p.norms, p.norms},
      {"Block AttnRes", p.attn_res, p.attn_res},
  };
  const size_t n = sizeof rows / sizeof rows[0];
  if (json) {
    FILE *f = app_open_output(json);
    fprintf(f, "{\n  \"model\": ");
    json_string(f, c->name);
    fprintf(f, ",\n  \"components\": [\n");
    for (size_t i = 0; i < n; i++) {
      fprintf(f, "    {\"name\": ");
      json_string(f, rows[i].name);
      fprintf(f, ", \"total\": %.0f, \"active\": %.0f}%s\n", rows[i].total, rows[i].active, i + 1 < n ? "," : "");
    }
    fprintf(f, "  ],\n  \"total\": %.0f,\n  \"active\": %.0f\n}\n", p.total, p.active);
    app_close_output(f);
    if (!strcmp(json, "-")) return;
  }
  char a[32], b[32];
  printf("%s: %d layers (%d MLA), d %lld, vocab %lld\n", c->name, c->layers, clmoe_config_mla_count(c),
         (long long)c->d_model, (long long)c->vocab);
  printf("%-24s %12s %12s\n", "component", "total", "active");
  for (size_t i = 0; i < n; i++) {
    human(a, sizeof a, rows[i].total);
    human(b, sizeof b, rows[i].active);
    printf("%-24s %12s %12s\n", rows[i].name, a, b);
  }
  human(a, sizeof a, p.total);
  human(b, sizeof b, p.active);
  printf("%-24s %12s %12s   (%.0f / %.0f)\n", "all", a, b, p.total, p.active);
}

int main(int argc, char **argv)
{
  app_name = "clmoe-train";
  const char *preset = NULL, *config = NULL, *json = NULL;
  int count = 0, print = 0;
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage();
      return 0;
    } else if (!strcmp(argv[i], "--version")) {
      printf("clmoe-train %s\n", clmoe_version());
      return 0;
    } else if (app_option(argc, argv, &i, "--preset", &v)) preset = v;
    else if (app_option(argc, argv, &i, "--config", &v)) config = v;
    else if (app_option(argc, argv, &i, "--json", &v)) json = v;
    else if (!strcmp(argv[i], "--count-params")) count = 1;
    else if (!strcmp(argv[i], "--print-config")) print = 1;
    else app_usage_error("unknown argument '%s'", argv[i]);
  }
  if (!preset == !config) app_usage_error("give exactly one of --preset NAME and --config FILE");
  clmoe_config c;
  clmoe_status st = preset ? clmoe_config_preset(preset, &c) : clmoe_config_load(config, &c);
  if (st != CLMOE_OK) {
    fprintf(stderr, "%s: %s\n", app_name, clmoe_last_error());
    return preset ? 2 : 1;
  }
  if (print && clmoe_config_write(&c, stdout) != 0) app_die(CLMOE_ERR_IO, "writing the config");
  if (count) count_params(&c, json);
  if (!count && !print) app_usage_error("training is not built yet (issue 6): use --count-params or --print-config");
  return 0;
}
