/* clmoe-train's checkpoints (train_run.h): the model's parameters and optimizer state with
 * the config, step, data source and expert map as metadata, written every N steps and at the
 * end of the run (or on SIGINT/SIGTERM, --stop-at, --time-limit) as DIR/checkpoint-STEP
 * .safetensors, then published (train_dir.c: the latest link, old ones pruned); under --ep-rebalance the
 * experts are re-placed by their measured loads at each checkpoint. */
#include <stdlib.h>
#include <string.h>

#include "train_run.h"

static void config_text(const clmoe_config *cfg, char **text)
{
  size_t len = 0;
  FILE *f = open_memstream(text, &len);
  if (!f || clmoe_config_write(cfg, f) != 0) app_die(CLMOE_ERR_OUT_OF_MEMORY, "writing the config");
  fclose(f);
}

/* --ep-rebalance: a map that packs the experts by their measured loads (no replicas:
 * training keeps each expert on one rank), if it lowers the busiest rank's load by more than
 * 1%; NULL otherwise. Every rank computes the same map from the same summed counts. */
static clmoe_expert_map *rebalanced_map(run *r)
{
  const int E = r->map->experts, N = r->map->ranks;
  double before, after, *rank_load = malloc((size_t)N * sizeof *rank_load);
  clmoe_expert_map *m = NULL;
  if (!rank_load) app_die(CLMOE_ERR_OUT_OF_MEMORY, "rank loads");
  APP_CHECK(clmoe_expert_map_pack(r->loads, E, N, r->map->slots, &m));
  before = clmoe_expert_map_imbalance(r->map, r->loads, rank_load);
  after = clmoe_expert_map_imbalance(m, r->loads, rank_load);
  free(rank_load);
  if (!(after < before * 0.99)) {
    clmoe_expert_map_destroy(m);
    return NULL;
  }
  if (r->rank == 0) /* (reported like a checkpoint, also under --quiet) */
    fprintf(stderr, "%s: step %lld: experts re-placed by their loads: busiest rank at %.3f x the mean, was %.3f\n",
            app_name, (long long)r->step, after, before);
  memset(r->loads, 0, (size_t)E * sizeof *r->loads);
  return m;
}

/* After a checkpoint written with a new map: the model rebuilt on it and the checkpoint
 * read back (the file holds whole tensors: each rank takes its new experts' rows). */
static void apply_map(run *r, clmoe_expert_map *m, const char *path)
{
  clmoe_model_destroy(r->model);
  r->model = NULL;
  clmoe_expert_map_destroy(r->map);
  r->map = m;
  APP_CHECK(clmoe_model_create_ep(r->ctx, r->cfg, r->dist, r->map, &r->model));
  APP_CHECK(clmoe_params_load_dist(clmoe_model_params(r->model), r->dist, path, NULL));
}

/* Writes the checkpoint; under --ep-rebalance first re-places the experts (the new map goes
 * into the file) and, unless the run ends here, goes on with the new placement. */
void train_save(run *r, const char *why, int last)
{
  clmoe_expert_map *next = r->loads ? rebalanced_map(r) : NULL;
  const clmoe_expert_map *write_map = next ? next : r->map;
  if (train_metrics_sync(r)) app_die(CLMOE_ERR_IO, "the metrics file");
  char path[4096], val[64];
  train_dir_ckpt_path(path, sizeof path, r->o->out_dir, r->step);
  clmoe_ckpt_meta meta = {0};
  char *text = NULL;
  config_text(r->cfg, &text);
  snprintf(val, sizeof val, "%lld", (long long)r->step);
  APP_CHECK(clmoe_ckpt_meta_set(&meta, "config", text));
  APP_CHECK(clmoe_ckpt_meta_set(&meta, "step", val));
  APP_CHECK(clmoe_ckpt_meta_set(&meta, "data", r->o->data ? r->o->data : r->o->task));
  APP_CHECK(clmoe_ckpt_meta_set(&meta, "next_batch", val)); /* batches are drawn by (seed, index) */
  free(text);
  if (write_map) { /* where the experts go (the file holds them whole: any rank count resumes) */
    char *m = clmoe_expert_map_to_string(write_map);
    if (!m) app_die(CLMOE_ERR_OUT_OF_MEMORY, "the expert map");
    APP_CHECK(clmoe_ckpt_meta_set(&meta, "expert_map", m));
    free(m);
  }
  /* Ranks on different OpenCL implementations round the optimizer step differently: the
   * file holds rank 0's replicas, and every rank goes on from them. */
  int differed = 0;
  if (r->dist) {
    clmoe_grad_allreduce_opts go = {.no_average = 1};
    APP_CHECK(clmoe_dist_sync_replicas(r->dist, clmoe_model_params(r->model), &go, &differed));
  }
  clmoe_status st = clmoe_params_save_dist(clmoe_model_params(r->model), r->dist, path, &meta);
  clmoe_ckpt_meta_free(&meta);
  if (st != CLMOE_OK) app_die(st, "writing the checkpoint");
  r->saved_step = r->step;
  if (r->rank == 0) {
    train_dir_publish(r->o->out_dir, r->step, r->cfg->train.keep_checkpoints);
    fprintf(stderr, "%s: checkpoint %s at step %lld (%s)", app_name, path, (long long)r->step, why);
    if (differed)
      fprintf(stderr, "; %d replicated tensors differed between ranks (rounding): rank 0's kept",
              differed);
    fputc('\n', stderr);
  }
  if (next && !last) apply_map(r, next, path);
  else clmoe_expert_map_destroy(next);
}
