/* The products a LoRA adapter may sit on (train.lora_targets), by their module's name in colo's
 * parameter table: shared by the job-spec checks and the engine (worker/engine/model/lora.h). */
#ifndef COLO_LORATARGET_H
#define COLO_LORATARGET_H

#include <stddef.h>

/* the products an adapter may sit on, by their module's name in the parameter table */
enum {
  COLO_LORA_QKV = 1,     /* attn.c_attn: queries, keys and values */
  COLO_LORA_ATTPROJ = 2, /* attn.c_proj: attention's output projection */
  COLO_LORA_FC = 4,      /* mlp.c_fc: the MLP's first product (LLAMA: gate and up) */
  COLO_LORA_FCPROJ = 8,  /* mlp.c_proj: the MLP's second (LLAMA: down) */
  COLO_LORA_ALL = 15
};
#define COLO_LORA_TARGETS 4

/* "attn.c_attn,mlp.c_proj" or "all" into bits; COLO_EINVAL naming the unknown name. */
int colo_lora_targets_parse(const char *list, unsigned *out, char *err, size_t errlen);
/* The bits as such a list, into buf. */
const char *colo_lora_targets_name(unsigned targets, char *buf, size_t len);
/* the module name of target bit index k (0 … COLO_LORA_TARGETS-1): "attn.c_attn", … */
const char *colo_lora_module(int k);

#endif
