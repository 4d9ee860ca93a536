/* Fused causal attention for 16-bit storage: FlashAttention-2's schedule (Dao, 2023) on the
 * tensor cores through WMMA. No T×T matrix exists anywhere, and no atomics: every result is the
 * same from run to run.
 *
 * Tiles are 64 rows of a head's q, k, v or dout (HS values each, 16-bit, in shared memory); a
 * block is four warps, a warp owns 16 of the tile's rows. A warp's products (16×64 scores, 16×HS
 * outputs) come out of the tensor cores as fp32 and go through a staging area in shared memory
 * from which each lane reads its part: a lane owns half of one row (row lane/2, half lane%2).
 *
 * Forward, a block per (query tile, sequence·head): walks the key tiles up to the diagonal with
 * the online softmax (running max and sum per row, the output rescaled as the max grows), and
 * saves each query's log-sum-exp of its scaled scores, as the CPU does.
 *
 * Backward, three kernels: dsum = Σ dout·out per query; a block per key tile walks the query
 * tiles from the diagonal on, its dk and dv accumulating in the tensor cores' registers; a block
 * per query tile walks the key tiles up to the diagonal, its dq accumulating likewise. Both
 * recompute p = exp(score·scale − lse) and the gradient of the scaled scores
 * p·(dout·v − dsum)·scale; seven products in all against FlashAttention-2's five, the price of
 * not adding dq with atomics. As in the batched-product path (cuda.cu), probabilities and score
 * gradients are rounded to the storage type before they are multiplied; the products accumulate
 * in fp32; dqkv is accumulated into (read, added in fp32, rounded), as backend.h asks. */
#include <mma.h>

#include <stdint.h>

#include "cuda_common.cuh"

using namespace nvcuda;

enum { TILE = 64, THREADS = 128 };

/* Shared-memory geometry for head size HS: a 16-bit tile row is HS values and 16 bytes of
 * padding (against bank conflicts); an fp32 staging row is 64 or HS values and 16 bytes; a 16-bit
 * row of probabilities 64 values and 16 bytes. Every region is a multiple of 128 bytes, and every
 * fragment's first element is 32-byte aligned, as WMMA requires. */
template <class E, int HS> struct geo {
  static constexpr int LE = HS + 16 / (int)sizeof(E);
  static constexpr int LF = (HS > TILE ? HS : TILE) + 4;
  static constexpr int LP = TILE + 16 / (int)sizeof(E);
  static constexpr size_t tile = (size_t)TILE * LE * sizeof(E);
  static constexpr size_t ftile = (size_t)TILE * LF * sizeof(float);
  static constexpr size_t ptile = (size_t)TILE * LP * sizeof(E);
};

template <class E> using frag_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major>;
template <class E> using frag_b = wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::row_major>;
/* a row-major tile read as its transpose */
template <class E> using frag_bt = wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major>;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

__device__ __forceinline__ static float pair_max(float v) {
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
}
__device__ __forceinline__ static float pair_sum(float v) {
  return v + __shfl_xor_sync(0xffffffffu, v, 1);
}

/* Rows r0 … r0+63 of a [T][stride] matrix (src: row 0's first value) into a tile, HS values a
 * row, in 16-byte loads (the caller has checked that rows are 16-byte aligned); rows at or past
 * T are zeros. */
template <class E, int HS>
__device__ static void load_tile(E *dst, const E *src, int r0, int T_, size_t stride) {
  constexpr int EV = 16 / sizeof(E), VR = HS / EV;
  for (int i = threadIdx.x; i < TILE * VR; i += THREADS) {
    int r = i / VR, c = (i % VR) * EV;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + r < T_)
      v = *(const uint4 *)(src + (size_t)(r0 + r) * stride + c);
    *(uint4 *)(dst + r * geo<E, HS>::LE + c) = v;
  }
}

/* a warp's 16 rows of a tile as the left operand */
template <class E, int HS>
__device__ static void load_rows(frag_a<E> (&a)[HS / 16], const E *tile, int warp) {
#pragma unroll
  for (int k = 0; k < HS / 16; k++)
    wmma::load_matrix_sync(a[k], tile + warp * 16 * geo<E, HS>::LE + k * 16, geo<E, HS>::LE);
}

/* out[16][64] (fp32, row stride LF) = a (16×HS) · tileᵀ (tile: 64 rows of HS) */
template <class E, int HS>
__device__ static void product_t(float *out, const frag_a<E> (&a)[HS / 16], const E *tile) {
  constexpr int LE = geo<E, HS>::LE;
#pragma unroll
  for (int j = 0; j < TILE / 16; j++) {
    frag_c acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < HS / 16; k++) {
      frag_bt<E> b;
      wmma::load_matrix_sync(b, tile + j * 16 * LE + k * 16, LE);
      wmma::mma_sync(acc, a[k], b, acc);
    }
    wmma::store_matrix_sync(out + j * 16, acc, geo<E, HS>::LF, wmma::mem_row_major);
  }
}

/* acc (16×HS) += p (16×64, 16-bit, row stride LP) · tile (64 rows of HS) */
template <class E, int HS>
__device__ static void product_acc(frag_c (&acc)[HS / 16], const E *p, const E *tile) {
  constexpr int LE = geo<E, HS>::LE;
  frag_a<E> a[TILE / 16];
#pragma unroll
  for (int k = 0; k < TILE / 16; k++)
    wmma::load_matrix_sync(a[k], p + k * 16, geo<E, HS>::LP);
#pragma unroll
  for (int d = 0; d < HS / 16; d++)
#pragma unroll
    for (int k = 0; k < TILE / 16; k++) {
      frag_b<E> b;
      wmma::load_matrix_sync(b, tile + k * 16 * LE + d * 16, LE);
      wmma::mma_sync(acc[d], a[k], b, acc[d]);
    }
}

template <int HS> __device__ static void clear(frag_c (&acc)[HS / 16]) {
#pragma unroll
  for (int d = 0; d < HS / 16; d++)
    wmma::fill_fragment(acc[d], 0.0f);
}

/* dst[i] += a warp's accumulated 16×HS rows, through its staging rows: this lane adds its half
 * of row r into dst (when the row exists) */
template <class E, int HS>
__device__ static void add_rows(E *dst, float *stage, frag_c (&acc)[HS / 16], int r, int half,
                                int exists) {
  constexpr int LF = geo<E, HS>::LF;
  __syncwarp();
#pragma unroll
  for (int d = 0; d < HS / 16; d++)
    wmma::store_matrix_sync(stage + d * 16, acc[d], LF, wmma::mem_row_major);
  __syncwarp();
  if (exists) {
    const float *s = stage + r * LF + half * (HS / 2);
    E *o = dst + half * (HS / 2);
#pragma unroll 8
    for (int i = 0; i < HS / 2; i++)
      o[i] = st<E>(ld(o[i]) + s[i]);
  }
}

template <class E, int HS>
__global__ static void __launch_bounds__(THREADS)
    flash_fwd_kernel(E *out, float *lse, const E *qkv, int T_, int C, int NH, float scale) {
  typedef geo<E, HS> G;
  extern __shared__ __align__(128) unsigned char smem[];
  E *qs = (E *)smem, *ks = (E *)(smem + G::tile), *vs = (E *)(smem + 2 * G::tile);
  float *stage = (float *)(smem + 3 * G::tile);
  E *ps = (E *)(smem + 3 * G::tile + G::ftile);
  int qt = gridDim.x - 1 - blockIdx.x; /* the longest walks start first */
  int pair = blockIdx.y, b = pair / NH, h = pair % NH;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  size_t C3 = 3 * (size_t)C;
  const E *q = qkv + (size_t)b * T_ * C3 + h * HS;
  load_tile<E, HS>(qs, q, qt * TILE, T_, C3);
  __syncthreads();
  frag_a<E> qf[HS / 16];
  load_rows<E, HS>(qf, qs, warp);
  float *sw = stage + warp * 16 * G::LF; /* the warp's scores, then its products with v */
  E *pw = ps + warp * 16 * G::LP;        /* its probabilities */
  int row = qt * TILE + warp * 16 + r;   /* this lane's query */
  float o[HS / 2], mx = -INFINITY, sum = 0.0f;
#pragma unroll
  for (int i = 0; i < HS / 2; i++)
    o[i] = 0.0f;
  for (int kt = 0; kt <= qt; kt++) {
    __syncthreads(); /* every warp is done with the previous k and v */
    load_tile<E, HS>(ks, q + C, kt * TILE, T_, C3);
    load_tile<E, HS>(vs, q + 2 * C, kt * TILE, T_, C3);
    __syncthreads();
    product_t<E, HS>(sw, qf, ks);
    __syncwarp();
    /* the online softmax: key k0 + c is seen when it is not after the query. The tile's first
     * key never is, so the row's max is finite from the first tile on. */
    const float *s = sw + r * G::LF + half * 32;
    int k0 = kt * TILE + half * 32;
    float tmax = -INFINITY, tsum = 0.0f;
    for (int c = 0; c < 32; c++)
      if (k0 + c <= row)
        tmax = fmaxf(tmax, s[c]);
    float mnew = fmaxf(mx, pair_max(tmax) * scale), alpha = __expf(mx - mnew);
    E *p = pw + r * G::LP + half * 32;
    for (int c = 0; c < 32; c++) {
      float e = k0 + c <= row ? __expf(s[c] * scale - mnew) : 0.0f;
      tsum += e;
      p[c] = st<E>(e);
    }
    sum = sum * alpha + pair_sum(tsum);
    mx = mnew;
    __syncwarp();
    frag_c acc[HS / 16];
    clear<HS>(acc);
    product_acc<E, HS>(acc, pw, vs);
#pragma unroll
    for (int d = 0; d < HS / 16; d++)
      wmma::store_matrix_sync(sw + d * 16, acc[d], G::LF, wmma::mem_row_major);
    __syncwarp();
    const float *pv = sw + r * G::LF + half * (HS / 2);
#pragma unroll
    for (int i = 0; i < HS / 2; i++)
      o[i] = o[i] * alpha + pv[i];
  }
  if (row < T_) {
    float inv = 1.0f / sum;
    E *dst = out + ((size_t)b * T_ + row) * C + h * HS + half * (HS / 2);
#pragma unroll
    for (int i = 0; i < HS / 2; i++)
      dst[i] = st<E>(o[i] * inv);
    if (half == 0)
      lse[(size_t)pair * T_ + row] = mx + logf(sum);
  }
}

/* dsum[b][h][t] = Σ_i dout·out over head h of token row (b, t): a warp per row */
template <class E>
__global__ static void flash_dsum_kernel(float *dsum, const E *dout, const E *out, int BT, int T_,
                                         int C, int NH) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= BT)
    return;
  int b = row / T_, t = row % T_, hs = C / NH;
  const E *d = dout + (size_t)row * C, *o = out + (size_t)row * C;
  for (int h = 0; h < NH; h++) {
    float s = 0.0f;
    for (int i = lane; i < hs; i += 32)
      s += ld(d[h * hs + i]) * ld(o[h * hs + i]);
    for (int k = 16; k > 0; k >>= 1)
      s += __shfl_xor_sync(0xffffffffu, s, k);
    if (lane == 0)
      dsum[((size_t)b * NH + h) * T_ + t] = s;
  }
}

/* dk and dv of one key tile: a warp's 16 keys against every query tile from the diagonal on */
template <class E, int HS>
__global__ static void __launch_bounds__(THREADS)
    flash_bwd_kv_kernel(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *dsum,
                        int T_, int C, int NH, float scale) {
  typedef geo<E, HS> G;
  extern __shared__ __align__(128) unsigned char smem[];
  E *ks = (E *)smem, *vs = (E *)(smem + G::tile), *qs = (E *)(smem + 2 * G::tile),
    *ds = (E *)(smem + 3 * G::tile);
  float *sf = (float *)(smem + 4 * G::tile), *dpf = (float *)(smem + 4 * G::tile + G::ftile);
  E *pb = (E *)(smem + 4 * G::tile + 2 * G::ftile),
    *gb = (E *)(smem + 4 * G::tile + 2 * G::ftile + G::ptile);
  float *lq = (float *)(smem + 4 * G::tile + 2 * G::ftile + 2 * G::ptile), *dl = lq + TILE;
  int kt = blockIdx.x, nt = gridDim.x; /* the first tiles walk longest, and start first */
  int pair = blockIdx.y, b = pair / NH, h = pair % NH;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  size_t C3 = 3 * (size_t)C;
  const E *q = qkv + (size_t)b * T_ * C3 + h * HS, *d = dout + (size_t)b * T_ * C + h * HS;
  load_tile<E, HS>(ks, q + C, kt * TILE, T_, C3);
  load_tile<E, HS>(vs, q + 2 * C, kt * TILE, T_, C3);
  __syncthreads();
  frag_a<E> kf[HS / 16], vf[HS / 16];
  load_rows<E, HS>(kf, ks, warp);
  load_rows<E, HS>(vf, vs, warp);
  frag_c dk[HS / 16], dv[HS / 16];
  clear<HS>(dk);
  clear<HS>(dv);
  float *sw = sf + warp * 16 * G::LF, *dpw = dpf + warp * 16 * G::LF;
  E *pw = pb + warp * 16 * G::LP, *gw = gb + warp * 16 * G::LP;
  int key = kt * TILE + warp * 16 + r; /* this lane's key */
  for (int qt = kt; qt < nt; qt++) {
    __syncthreads(); /* every warp is done with the previous query tile */
    load_tile<E, HS>(qs, q, qt * TILE, T_, C3);
    load_tile<E, HS>(ds, d, qt * TILE, T_, C);
    for (int i = threadIdx.x; i < TILE; i += THREADS) {
      int t = qt * TILE + i;
      lq[i] = t < T_ ? lse[(size_t)pair * T_ + t] : 0.0f;
      dl[i] = t < T_ ? dsum[(size_t)pair * T_ + t] : 0.0f;
    }
    __syncthreads();
    product_t<E, HS>(sw, kf, qs);  /* scores, transposed: [key][query] */
    product_t<E, HS>(dpw, vf, ds); /* dout·v, transposed */
    __syncwarp();
    for (int c = 0; c < 32; c++) {
      int j = half * 32 + c, query = qt * TILE + j;
      float p = 0.0f, g = 0.0f;
      if (key <= query && query < T_) {
        p = __expf(sw[r * G::LF + j] * scale - lq[j]);
        g = p * (dpw[r * G::LF + j] - dl[j]) * scale;
      }
      pw[r * G::LP + j] = st<E>(p);
      gw[r * G::LP + j] = st<E>(g);
    }
    __syncwarp();
    product_acc<E, HS>(dv, pw, ds); /* dv += pᵀ·dout */
    product_acc<E, HS>(dk, gw, qs); /* dk += (its score gradient)ᵀ·q */
  }
  E *row = dqkv + ((size_t)b * T_ + key) * C3 + h * HS;
  add_rows<E, HS>(row + C, sw, dk, r, half, key < T_);
  add_rows<E, HS>(row + 2 * C, sw, dv, r, half, key < T_);
}

/* dq of one query tile: a warp's 16 queries against every key tile up to the diagonal */
template <class E, int HS>
__global__ static void __launch_bounds__(THREADS)
    flash_bwd_q_kernel(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *dsum,
                       int T_, int C, int NH, float scale) {
  typedef geo<E, HS> G;
  extern __shared__ __align__(128) unsigned char smem[];
  E *qs = (E *)smem, *ds = (E *)(smem + G::tile), *ks = (E *)(smem + 2 * G::tile),
    *vs = (E *)(smem + 3 * G::tile);
  float *sf = (float *)(smem + 4 * G::tile), *dpf = (float *)(smem + 4 * G::tile + G::ftile);
  E *gb = (E *)(smem + 4 * G::tile + 2 * G::ftile);
  int qt = gridDim.x - 1 - blockIdx.x;
  int pair = blockIdx.y, b = pair / NH, h = pair % NH;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  size_t C3 = 3 * (size_t)C;
  const E *q = qkv + (size_t)b * T_ * C3 + h * HS, *d = dout + (size_t)b * T_ * C + h * HS;
  load_tile<E, HS>(qs, q, qt * TILE, T_, C3);
  load_tile<E, HS>(ds, d, qt * TILE, T_, C);
  __syncthreads();
  frag_a<E> qf[HS / 16], df[HS / 16];
  load_rows<E, HS>(qf, qs, warp);
  load_rows<E, HS>(df, ds, warp);
  frag_c dq[HS / 16];
  clear<HS>(dq);
  float *sw = sf + warp * 16 * G::LF, *dpw = dpf + warp * 16 * G::LF;
  E *gw = gb + warp * 16 * G::LP;
  int row = qt * TILE + warp * 16 + r; /* this lane's query */
  float l = row < T_ ? lse[(size_t)pair * T_ + row] : 0.0f;
  float D = row < T_ ? dsum[(size_t)pair * T_ + row] : 0.0f;
  for (int kt = 0; kt <= qt; kt++) {
    __syncthreads();
    load_tile<E, HS>(ks, q + C, kt * TILE, T_, C3);
    load_tile<E, HS>(vs, q + 2 * C, kt * TILE, T_, C3);
    __syncthreads();
    product_t<E, HS>(sw, qf, ks);  /* scores [query][key] */
    product_t<E, HS>(dpw, df, vs); /* dout·v */
    __syncwarp();
    for (int c = 0; c < 32; c++) {
      int j = half * 32 + c, key = kt * TILE + j;
      float g = 0.0f;
      if (key <= row && row < T_) {
        float p = __expf(sw[r * G::LF + j] * scale - l);
        g = p * (dpw[r * G::LF + j] - D) * scale;
      }
      gw[r * G::LP + j] = st<E>(g);
    }
    __syncwarp();
    product_acc<E, HS>(dq, gw, ks); /* dq += (score gradient)·k */
  }
  add_rows<E, HS>(dqkv + ((size_t)b * T_ + row) * C3 + h * HS, sw, dq, r, half, row < T_);
}

/* ---- launches ---- */

/* A kernel may use more than 48 KiB of shared memory only once told so. */
template <class K> static void allow_smem(K kernel, size_t bytes) {
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <class E, int HS>
static void fwd(void *out, float *lse, const void *qkv, int B, int T_, int C, int NH,
                cudaStream_t stream) {
  typedef geo<E, HS> G;
  static const size_t bytes = 3 * G::tile + G::ftile + G::ptile;
  static int allowed;
  if (!allowed)
    allow_smem(flash_fwd_kernel<E, HS>, bytes), allowed = 1;
  dim3 grid((T_ + TILE - 1) / TILE, B * NH);
  flash_fwd_kernel<E, HS><<<grid, THREADS, bytes, stream>>>((E *)out, lse, (const E *)qkv, T_, C,
                                                            NH, 1.0f / sqrtf((float)HS));
  LAUNCHED();
}

template <class E, int HS>
static void bwd(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                float *dsum, int B, int T_, int C, int NH, cudaStream_t stream) {
  typedef geo<E, HS> G;
  static const size_t kv_bytes = 4 * G::tile + 2 * G::ftile + 2 * G::ptile + 2 * TILE * 4,
                      q_bytes = 4 * G::tile + 2 * G::ftile + G::ptile;
  static int allowed;
  if (!allowed) {
    allow_smem(flash_bwd_kv_kernel<E, HS>, kv_bytes);
    allow_smem(flash_bwd_q_kernel<E, HS>, q_bytes);
    allowed = 1;
  }
  float scale = 1.0f / sqrtf((float)HS);
  int BT = B * T_;
  flash_dsum_kernel<E>
      <<<(BT + 7) / 8, 256, 0, stream>>>(dsum, (const E *)dout, (const E *)out, BT, T_, C, NH);
  LAUNCHED();
  dim3 grid((T_ + TILE - 1) / TILE, B * NH);
  flash_bwd_kv_kernel<E, HS><<<grid, THREADS, kv_bytes, stream>>>(
      (E *)dqkv, (const E *)dout, (const E *)qkv, lse, dsum, T_, C, NH, scale);
  LAUNCHED();
  flash_bwd_q_kernel<E, HS><<<grid, THREADS, q_bytes, stream>>>(
      (E *)dqkv, (const E *)dout, (const E *)qkv, lse, dsum, T_, C, NH, scale);
  LAUNCHED();
}

/* Whether the fused kernels take this case: 16-bit storage, a head size they are built for, rows
 * that 16-byte loads can read, a grid CUDA can launch. */
static int handles(colo_dtype_t t, int B, int T_, int C, int NH, const void *const *p, int np) {
  if (t == COLO_DTYPE_F32 || NH <= 0 || C % NH || B < 1 || T_ < 1 || (long)B * NH > 65535)
    return 0;
  int hs = C / NH;
  if (hs != 32 && hs != 64 && hs != 128)
    return 0;
  for (int i = 0; i < np; i++)
    if ((uintptr_t)p[i] % 16)
      return 0;
  return 1;
}

template <class E>
static int fwd_hs(void *out, float *lse, const void *qkv, int B, int T_, int C, int NH,
                  cudaStream_t s) {
  switch (C / NH) {
  case 32:
    fwd<E, 32>(out, lse, qkv, B, T_, C, NH, s);
    return 1;
  case 64:
    fwd<E, 64>(out, lse, qkv, B, T_, C, NH, s);
    return 1;
  case 128:
    fwd<E, 128>(out, lse, qkv, B, T_, C, NH, s);
    return 1;
  }
  return 0;
}

template <class E>
static int bwd_hs(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                  float *dsum, int B, int T_, int C, int NH, cudaStream_t s) {
  switch (C / NH) {
  case 32:
    bwd<E, 32>(dqkv, dout, qkv, out, lse, dsum, B, T_, C, NH, s);
    return 1;
  case 64:
    bwd<E, 64>(dqkv, dout, qkv, out, lse, dsum, B, T_, C, NH, s);
    return 1;
  case 128:
    bwd<E, 128>(dqkv, dout, qkv, out, lse, dsum, B, T_, C, NH, s);
    return 1;
  }
  return 0;
}

int flash_attention_fwd(colo_dtype_t t, void *out, float *lse, const void *qkv, int B, int T_,
                        int C, int NH, cudaStream_t stream) {
  const void *p[] = {out, qkv};
  if (!handles(t, B, T_, C, NH, p, 2))
    return 0;
  return t == COLO_DTYPE_BF16 ? fwd_hs<bf16>(out, lse, qkv, B, T_, C, NH, stream)
                              : fwd_hs<fp16>(out, lse, qkv, B, T_, C, NH, stream);
}

int flash_attention_bwd(colo_dtype_t t, void *dqkv, const void *dout, const void *qkv,
                        const void *out, const float *lse, float *dsum, int B, int T_, int C,
                        int NH, cudaStream_t stream) {
  const void *p[] = {dqkv, dout, qkv, out};
  if (!handles(t, B, T_, C, NH, p, 4))
    return 0;
  return t == COLO_DTYPE_BF16 ? bwd_hs<bf16>(dqkv, dout, qkv, out, lse, dsum, B, T_, C, NH, stream)
                              : bwd_hs<fp16>(dqkv, dout, qkv, out, lse, dsum, B, T_, C, NH, stream);
}
