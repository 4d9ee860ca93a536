/* NF4, the 4-bit NormalFloat of QLoRA (Dettmers et al. 2023), as bitsandbytes stores it: a
 * matrix is cut into blocks of 64 consecutive values, each block keeps its largest magnitude
 * (absmax, fp32) and each value the index (4 bits) of the nearest of 16 levels to value/absmax,
 * two to a byte, the first in the high nibble. A value comes back as level · absmax.
 *
 * A matrix w[rows][cols] in colo's layout (HF Conv1D's [in][out]) is quantized in the order of
 * its transpose, [cols][rows] (nn.Linear's [out][in]): the order bitsandbytes quantizes a Linear's
 * weight in, so each block lies along one output's inputs (within one of Llama's q, k, v, gate or
 * up where rows is a multiple of 64). Host code; the backends dequantize (dequant_nf4). */
#ifndef COLO_NF4_H
#define COLO_NF4_H

#include <stddef.h>
#include <stdint.h>

#define COLO_NF4_BLOCK 64

/* the 16 levels, ascending, from −1 to 1 (level 7 is 0): QLoRA's paper's (appendix E), as
 * bitsandbytes tabulates them; an initializer, for the CUDA backend's constant memory too */
#define COLO_NF4_LEVELS                                                                            \
  {                                                                                                \
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,                      \
        -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,                 \
        0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,    \
        0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f                       \
  }
extern const float colo_nf4_levels[16];

/* bytes of codes and absmax values for n values */
static inline size_t colo_nf4_code_bytes(size_t n) {
  return (n + 1) / 2;
}
static inline size_t colo_nf4_blocks(size_t n) {
  return (n + COLO_NF4_BLOCK - 1) / COLO_NF4_BLOCK;
}
/* A matrix packed as words (ZeRO-3's pieces hold it so): its codes, padded to a whole number of
 * 4-byte words, then its absmax values. colo_nf4_packed_floats: the words for n values. */
static inline size_t colo_nf4_codes_padded(size_t n) {
  return (colo_nf4_code_bytes(n) + 3) / 4 * 4;
}
static inline size_t colo_nf4_packed_floats(size_t n) {
  return colo_nf4_codes_padded(n) / 4 + colo_nf4_blocks(n);
}

/* codes[colo_nf4_code_bytes(rows·cols)] and absmax[colo_nf4_blocks(rows·cols)] for w. Each value
 * is scaled by the fp32 reciprocal of its block's absmax and takes the nearest level (the upper
 * at a midpoint); a block of zeros takes level 7. Returns 0, or −1 when w holds a value that is
 * not finite (nothing is meant to be quantized then). */
int colo_nf4_quantize(const float *w, int rows, int cols, uint8_t *codes, float *absmax);
/* w[rows][cols] = the values again, in fp32 (the reference the backends' dequant_nf4 match) */
void colo_nf4_dequantize(const uint8_t *codes, const float *absmax, int rows, int cols, float *w);

#endif
