/* LoRA's targets by name (loratarget.h). */
#include "loratarget.h"

#include <stdio.h>
#include <string.h>

#include "error.h"

static const char *const MODULES[COLO_LORA_TARGETS] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                                       "mlp.c_proj"};

const char *colo_lora_module(int k) {
  return k >= 0 && k < COLO_LORA_TARGETS ? MODULES[k] : NULL;
}

int colo_lora_targets_parse(const char *list, unsigned *out, char *err, size_t errlen) {
  unsigned bits = 0;
  const char *p = list ? list : "";
  while (*p) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    int k = -1;
    if (n == 3 && !strncmp(p, "all", 3))
      bits |= COLO_LORA_ALL, k = 0;
    for (int i = 0; i < COLO_LORA_TARGETS && k < 0; i++)
      if (strlen(MODULES[i]) == n && !strncmp(p, MODULES[i], n))
        bits |= 1u << i, k = i;
    if (k < 0)
      return colo_fail(err, errlen, COLO_EINVAL,
                       "lora target '%.*s' is not one of attn.c_attn, attn.c_proj, mlp.c_fc, "
                       "mlp.c_proj, all",
                       (int)(n < 64 ? n : 64), p);
    p += n;
    if (*p == ',')
      p++;
  }
  if (!bits)
    return colo_fail(err, errlen, COLO_EINVAL, "lora targets: none named");
  *out = bits;
  return 0;
}

const char *colo_lora_targets_name(unsigned targets, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int k = 0; k < COLO_LORA_TARGETS; k++)
    if (targets & (1u << k))
      used += (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%s", used ? "," : "",
                               MODULES[k]);
  return buf;
}
