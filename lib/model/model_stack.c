/* The schedule of the layer stack (include/clmoe/model.h): which slots of the residual
 * stream each sub-layer's AttnRes mixes and which slot its output goes to, as an iterator,
 * and the views of the stream it names. The training forward (model_run.c) and prefill and
 * decoding (lib/generate/generate_run.c) both walk it, so the two cannot disagree on the
 * bookkeeping. The plain residual ([model] residual = plain) is the degenerate schedule of
 * one slot, the running sum, that every sub-layer reads (through its RMSNorm) and adds to.
 *
 * The stream [nslots, N, d] holds in slot 0 the token embedding and in slot b >= 1 the sum
 * of the sub-layer outputs of block b (attn_res_block layers each). A sub-layer mixes the
 * finished blocks' slots and its own block's partial sum, which is left out while it is
 * empty (the first sub-layer of a block); the final mix before the head is the same rule
 * after the last layer. */
#include "model_internal.h"
#include "clmoe/model_config.h"

int clmoe__model_stack_slots(const clmoe_config *cfg)
{
  if (cfg->residual == CLMOE_RESIDUAL_PLAIN) return 1;
  return 1 + (cfg->layers + cfg->attn_res_block - 1) / cfg->attn_res_block;
}

void clmoe__model_stack_begin(model_stack *it, const clmoe_config *cfg)
{
  it->layers = cfg->layers, it->block = cfg->attn_res_block;
  it->plain = cfg->residual == CLMOE_RESIDUAL_PLAIN;
  it->layer = 0, it->sub = SUB_MIXER;
  it->slot = it->plain ? 0 : 1, it->empty = !it->plain; /* plain: x starts as the embedding */
  it->final = it->layers == 0;
  it->nsrc = it->plain ? 1 : it->slot; /* the embedding alone */
}

void clmoe__model_stack_next(model_stack *it)
{
  if (it->final) return;
  if (it->plain) { /* one slot, always added to */
    it->layer += it->sub == SUB_FFN;
    it->sub = it->sub == SUB_MIXER ? SUB_FFN : SUB_MIXER;
    it->final = it->layer == it->layers;
    return;
  }
  it->empty = 0; /* the step's output went into it->slot */
  if (it->sub == SUB_MIXER) {
    it->sub = SUB_FFN;
  } else {
    it->sub = SUB_MIXER, it->layer++;
    if (it->layer % it->block == 0) it->slot++, it->empty = 1; /* a block is complete */
  }
  it->final = it->layer == it->layers;
  it->nsrc = it->empty ? it->slot : it->slot + 1;
}

clmoe_status clmoe__model_stream_slot(const clmoe_tensor *stream, int slot, clmoe_tensor *v)
{
  const int64_t N = stream->shape[1], d = stream->shape[2];
  return clmoe_tensor_view(stream, v, 2, (int64_t[]){N, d}, (int64_t)slot * N * d);
}

clmoe_status clmoe__model_stream_sources(const clmoe_tensor *stream, int nsrc, clmoe_tensor *v)
{
  return clmoe_tensor_view(stream, v, 3, (int64_t[]){nsrc, stream->shape[1], stream->shape[2]}, 0);
}
