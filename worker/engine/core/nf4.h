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
/* Double quantization (QLoRA's §3.3; bitsandbytes' compress_statistics, Transformers'
 * bnb_4bit_use_double_quant): a matrix's absmax values, less their mean (the offset, fp32), are
 * quantized again in blocks of 256, each to the index (a byte) of the nearest value of
 * bitsandbytes' signed dynamic map (colo_nf4_dq_map, its create_dynamic_map()) after scaling by
 * the fp32 reciprocal of its block's largest magnitude (absmax2, fp32). An absmax comes back as
 * map[q]·absmax2 + offset, rounded to fp32 after the product and again after the sum (as
 * bitsandbytes' dequantize_blockwise, then += offset): 1 + 4/256 bits where it took 32. */
#define COLO_NF4_DQ_BLOCK 256
/* bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), sorted: for
 * each exponent e in −6…0, 2^(e+6) fractions, the midpoints of linspace(0.1, 1, 2^(e+6) + 1)
 * times 10^e, with either sign, then 0 and 1 (engine_qlora builds it in PyTorch and compares);
 * an initializer, for the CUDA backend's constant memory too */
#define COLO_NF4_DQ_MAP                                                                            \
  {                                                                                                \
    -0.992968738f, -0.978906214f, -0.96484375f, -0.950781226f, -0.936718702f, -0.922656238f,       \
        -0.908593774f, -0.89453125f, -0.880468726f, -0.866406202f, -0.852343738f, -0.838281214f,   \
        -0.82421875f, -0.810156226f, -0.796093702f, -0.782031238f, -0.767968774f, -0.75390625f,    \
        -0.739843786f, -0.725781262f, -0.711718798f, -0.697656274f, -0.68359375f, -0.669531286f,   \
        -0.655468762f, -0.641406238f, -0.627343774f, -0.61328125f, -0.599218726f, -0.585156262f,   \
        -0.571093798f, -0.557031274f, -0.54296875f, -0.528906226f, -0.514843762f, -0.500781238f,   \
        -0.486718774f, -0.47265625f, -0.458593726f, -0.444531262f, -0.430468738f, -0.416406214f,   \
        -0.40234375f, -0.388281226f, -0.374218762f, -0.360156238f, -0.346093714f, -0.33203125f,    \
        -0.317968726f, -0.303906262f, -0.289843738f, -0.275781274f, -0.26171875f, -0.247656256f,   \
        -0.233593762f, -0.219531253f, -0.205468744f, -0.19140625f, -0.177343741f, -0.163281247f,   \
        -0.149218753f, -0.135156244f, -0.12109375f, -0.107031256f, -0.0985937491f, -0.0957812443f, \
        -0.0929687545f, -0.0901562497f, -0.0873437524f, -0.0845312476f, -0.0817187428f,            \
        -0.078906253f, -0.0760937482f, -0.0732812509f, -0.0704687461f, -0.0676562563f,             \
        -0.0648437515f, -0.0620312467f, -0.0592187531f, -0.0564062484f, -0.053593751f,             \
        -0.05078125f, -0.047968749f, -0.0451562516f, -0.0423437469f, -0.0395312496f,               \
        -0.0367187522f, -0.0339062475f, -0.0310937501f, -0.0282812472f, -0.0254687499f,            \
        -0.0226562507f, -0.0198437497f, -0.0170312505f, -0.0142187504f, -0.0114062503f,            \
        -0.00971874967f, -0.00915624946f, -0.00859375019f, -0.00803124998f, -0.00746874977f,       \
        -0.00690625003f, -0.00634374982f, -0.00578125007f, -0.00521875033f, -0.00465624966f,       \
        -0.00409374991f, -0.00353124971f, -0.00296874996f, -0.00240624999f, -0.00184375001f,       \
        -0.00128124992f, -0.000943750085f, -0.000831249985f, -0.00071875006f, -0.000606250076f,    \
        -0.000493750034f, -0.000381250022f, -0.000268750038f, -0.000156250011f, -8.87499991e-05f,  \
        -6.62500024e-05f, -4.37499984e-05f, -2.12499981e-05f, -7.7499999e-06f, -3.25000019e-06f,   \
        -5.50000038e-07f, 0.0f, 5.50000038e-07f, 3.25000019e-06f, 7.7499999e-06f, 2.12499981e-05f, \
        4.37499984e-05f, 6.62500024e-05f, 8.87499991e-05f, 0.000156250011f, 0.000268750038f,       \
        0.000381250022f, 0.000493750034f, 0.000606250076f, 0.00071875006f, 0.000831249985f,        \
        0.000943750085f, 0.00128124992f, 0.00184375001f, 0.00240624999f, 0.00296874996f,           \
        0.00353124971f, 0.00409374991f, 0.00465624966f, 0.00521875033f, 0.00578125007f,            \
        0.00634374982f, 0.00690625003f, 0.00746874977f, 0.00803124998f, 0.00859375019f,            \
        0.00915624946f, 0.00971874967f, 0.0114062503f, 0.0142187504f, 0.0170312505f,               \
        0.0198437497f, 0.0226562507f, 0.0254687499f, 0.0282812472f, 0.0310937501f, 0.0339062475f,  \
        0.0367187522f, 0.0395312496f, 0.0423437469f, 0.0451562516f, 0.047968749f, 0.05078125f,     \
        0.053593751f, 0.0564062484f, 0.0592187531f, 0.0620312467f, 0.0648437515f, 0.0676562563f,   \
        0.0704687461f, 0.0732812509f, 0.0760937482f, 0.078906253f, 0.0817187428f, 0.0845312476f,   \
        0.0873437524f, 0.0901562497f, 0.0929687545f, 0.0957812443f, 0.0985937491f, 0.107031256f,   \
        0.12109375f, 0.135156244f, 0.149218753f, 0.163281247f, 0.177343741f, 0.19140625f,          \
        0.205468744f, 0.219531253f, 0.233593762f, 0.247656256f, 0.26171875f, 0.275781274f,         \
        0.289843738f, 0.303906262f, 0.317968726f, 0.33203125f, 0.346093714f, 0.360156238f,         \
        0.374218762f, 0.388281226f, 0.40234375f, 0.416406214f, 0.430468738f, 0.444531262f,         \
        0.458593726f, 0.47265625f, 0.486718774f, 0.500781238f, 0.514843762f, 0.528906226f,         \
        0.54296875f, 0.557031274f, 0.571093798f, 0.585156262f, 0.599218726f, 0.61328125f,          \
        0.627343774f, 0.641406238f, 0.655468762f, 0.669531286f, 0.68359375f, 0.697656274f,         \
        0.711718798f, 0.725781262f, 0.739843786f, 0.75390625f, 0.767968774f, 0.782031238f,         \
        0.796093702f, 0.810156226f, 0.82421875f, 0.838281214f, 0.852343738f, 0.866406202f,         \
        0.880468726f, 0.89453125f, 0.908593774f, 0.922656238f, 0.936718702f, 0.950781226f,         \
        0.96484375f, 0.978906214f, 0.992968738f, 1.0f                                              \
  }
extern const float colo_nf4_dq_map[256];
static inline size_t colo_nf4_dq_blocks(size_t n) {
  return (colo_nf4_blocks(n) + COLO_NF4_DQ_BLOCK - 1) / COLO_NF4_DQ_BLOCK;
}

/* A matrix packed as words (the model keeps it so, and ZeRO-3's pieces hold it so): its codes,
 * padded to a whole number of 4-byte words, then its scales: without double quantization its
 * absmax values; with it their bytes (padded to words), then the absmax2 values and the offset
 * (colo_nf4_stats_at: where those start, in bytes). colo_nf4_packed_floats: the words for n
 * values; colo_nf4_bytes: the bytes they hold unpadded (what the log reports). */
static inline size_t colo_nf4_codes_padded(size_t n) {
  return (colo_nf4_code_bytes(n) + 3) / 4 * 4;
}
static inline size_t colo_nf4_stats_at(size_t n) {
  return colo_nf4_codes_padded(n) + (colo_nf4_blocks(n) + 3) / 4 * 4;
}
static inline size_t colo_nf4_packed_floats(size_t n, int dq) {
  return dq ? colo_nf4_stats_at(n) / 4 + colo_nf4_dq_blocks(n) + 1
            : colo_nf4_codes_padded(n) / 4 + colo_nf4_blocks(n);
}
static inline size_t colo_nf4_bytes(size_t n, int dq) {
  return colo_nf4_code_bytes(n) +
         (dq ? colo_nf4_blocks(n) + 4 * (colo_nf4_dq_blocks(n) + 1) : 4 * colo_nf4_blocks(n));
}

/* codes[colo_nf4_code_bytes(rows·cols)] and absmax[colo_nf4_blocks(rows·cols)] for w. Each value
 * is scaled by the fp32 reciprocal of its block's absmax and takes the nearest level (the upper
 * at a midpoint); a block of zeros takes level 7. Returns 0, or −1 when w holds a value that is
 * not finite (nothing is meant to be quantized then). */
int colo_nf4_quantize(const float *w, int rows, int cols, uint8_t *codes, float *absmax);
/* w[rows][cols] = the values again, in fp32 (the reference the backends' dequant_nf4 match) */
void colo_nf4_dequantize(const uint8_t *codes, const float *absmax, int rows, int cols, float *w);

/* q[nb] and stats (absmax2[(nb + 255) / 256], then the offset) for absmax[nb] (finite); a block
 * whose values all equal the offset takes absmax2 0 and the map's 0 */
void colo_nf4_dq_quantize(const float *absmax, size_t nb, uint8_t *q, float *stats);
/* absmax[nb] again from q and stats (the reference the backends' dequant_scales match) */
void colo_nf4_dq_dequantize(const uint8_t *q, const float *stats, size_t nb, float *absmax);

/* w[rows][cols] packed (colo_nf4_packed_floats(rows·cols, dq) words, the padding zero), with
 * double quantization when dq. Returns 0, −1 when w holds a value that is not finite, −2 when
 * out of memory (nothing is meant to be packed then). */
int colo_nf4_pack(const float *w, int rows, int cols, int dq, float *packed);
/* w[rows][cols] = the packed matrix's values, in fp32 */
int colo_nf4_unpack(const float *packed, int rows, int cols, int dq, float *w);

#endif
