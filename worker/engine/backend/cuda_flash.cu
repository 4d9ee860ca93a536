/* Fused causal attention for 16-bit storage: FlashAttention-2's schedule (Dao, 2023) on the
 * tensor cores, with the scores, probabilities and accumulators in registers. No T×T matrix
 * exists anywhere, and no atomics: every result is the same from run to run.
 *
 * The products are PTX's mma.sync m16n8k16 (16-bit inputs, fp32 accumulators). A block is four
 * warps over a tile of 64 rows of one (sequence, head), a warp owning 16 of them; the other
 * operand's tile (64 rows of HS 16-bit values) sits in shared memory. Fragment layouts, with
 * g = lane/4 and t = lane%4: an accumulator of a 16×8 product holds (g, 2t..2t+1) and
 * (g+8, 2t..2t+1); the left operand (16×16) holds those rows at columns 2t.. and 8+2t..; the right
 * one (16×8) the rows 2t.. and 8+2t.. of column g. So a product's accumulators, rounded to the
 * storage type in pairs, are the next product's left operand as they stand (probabilities times
 * v), and a row-major tile is read as a right operand transposed (k or q against the rows) with
 * ldmatrix, or as it stands (v, dout, q, k against the head's values) with ldmatrix.trans; left
 * operands are read with ldmatrix too, and the one a block keeps for its whole walk is read once
 * into registers. Rows are padded by 16 bytes: no access meets a bank conflict.
 *
 * Forward, a block per (query tile, sequence·head): walks the key tiles up to the diagonal with
 * the online softmax (running max and sum per row, in base 2, the output rescaled as the max
 * grows), and saves each query's log-sum-exp of its scaled scores, as the CPU does.
 *
 * Documents and windows (pos, backend.h): query t sees keys t − pos[t] … t. That first key only
 * moves on down the rows, so a query tile's walk starts at the key tile of its first row's first
 * key, and a key tile's walk over the query tiles ends at the first whose first row starts after
 * it; within the tiles walked, each score is masked by its row's start. Under a window of W a
 * walk covers about W/64 + 1 tiles, not the whole diagonal.
 *
 * Backward, three kernels: dsum = Σ dout·out per query; a block per key tile walks the query
 * tiles from the diagonal on, its dk and dv accumulating in registers; a block per query tile
 * walks the key tiles up to the diagonal, its dq accumulating likewise. Both recompute
 * p = exp(score·scale − lse) and the gradient of the scaled scores p·(dout·v − dsum)·scale; seven
 * products in all against FlashAttention-2's five, the price of not adding dq with atomics. As in
 * the batched-product path (cuda.cu), probabilities and score gradients are rounded to the
 * storage type before they are multiplied; the products accumulate in fp32; dqkv is written (the
 * kernels' dq and dk, dv are disjoint), as backend.h asks. */
#include <stdint.h>

#include "cuda_common.cuh"

enum { TILE = 64, SUB = 32, THREADS = 128 };

/* Blocks an SM should hold of the backward kernels: a bound on their registers. Three for head
 * sizes to 64 (at most 168 registers a thread; at the 124M shapes on an H100 this took the
 * asynchronous backward from 0.33 to 0.31 ms a layer, and with ldmatrix from 0.32 to 0.30:
 * bench/results/engine_gpu_attention.md); head size 128 needs more registers than that bound
 * leaves without spilling, so it is left to the compiler. */
template <int HS> struct bwd_blocks { static constexpr int n = HS <= 64 ? 3 : 1; };

#define LOG2E 1.4426950408889634f

/* a tile's row: HS 16-bit values and 16 bytes of padding */
template <class E, int HS> struct geo {
  static constexpr int LE = HS + 16 / (int)sizeof(E);
  static constexpr size_t tile = (size_t)TILE * LE * sizeof(E);
};

/* ---- the tensor cores' product and the fragments' loads ---- */

/* c += a·b, 16×8×16, in fp32: the storage type's PTX name T */
template <class E>
__device__ __forceinline__ static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                           uint32_t b1);
#define MMA_16816(E, T)                                                                            \
  template <>                                                                                      \
  __device__ __forceinline__ void mma<E>(float(&c)[4], const uint32_t(&a)[4], uint32_t b0,         \
                                         uint32_t b1) {                                            \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0,%1,%2,%3}, "           \
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                                          \
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                  \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                  \
  }
MMA_16816(bf16, "bf16")
MMA_16816(fp16, "f16")
#undef MMA_16816

/* two values rounded to the storage type, the first in the low half */
template <class E> __device__ __forceinline__ static uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<bf16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<fp16>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

/* four 8×8 matrices of 16-bit values, transposed: rows k0 … k0+15 of a row-major tile, columns
 * n0 … n0+15, as the right operands of two products (columns n0 … and n0+8 …), each [b0, b1] */
__device__ __forceinline__ static void ldsm_t(uint32_t (&r)[4], const void *row) {
  uint32_t a = (uint32_t)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

/* four 8×8 matrices of 16-bit values as they stand, lane l giving the address of matrix l/8's
 * row l%8 (16 bytes); each lane gets, of each matrix, row lane/4's values 2·(lane%4) and the
 * next: what a fragment holds */
__device__ __forceinline__ static void ldsm(uint32_t (&r)[4], const void *row) {
  uint32_t a = (uint32_t)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

/* a warp's 16 rows (from r0) of a tile, columns k·16 …, as a left operand: the matrices are
 * rows +0 and +8 (a[0], a[1]) at columns +0, then at +8 (a[2], a[3]) */
template <class E, int HS>
__device__ __forceinline__ static void frag_a(uint32_t (&a)[4], const E *tile, int r0, int k,
                                              int lane) {
  constexpr int LE = geo<E, HS>::LE;
  int m = lane / 8;
  ldsm(a, tile + (r0 + lane % 8 + (m & 1) * 8) * LE + k * 16 + (m >> 1) * 8);
}

/* the right operands of two products, columns j·8 … and j·8+8 … of s = rows·tileᵀ (the tile's
 * rows j·8 …), k-step k: [b0, b1] of the first, then of the second; the matrices are tile rows
 * +0 at columns +0 and +8, then rows +8 likewise */
template <class E, int HS>
__device__ __forceinline__ static void frag_b2(uint32_t (&b)[4], const E *tile, int j, int k,
                                               int lane) {
  constexpr int LE = geo<E, HS>::LE;
  int m = lane / 8;
  ldsm(b, tile + (j * 8 + lane % 8 + (m >> 1) * 8) * LE + k * 16 + (m & 1) * 8);
}

/* a warp's 16 rows (from r0) of a tile, all HS columns, as left operands */
template <class E, int HS>
__device__ __forceinline__ static void frags_a(uint32_t (&a)[HS / 16][4], const E *rows, int r0,
                                               int lane) {
#pragma unroll
  for (int k = 0; k < HS / 16; k++)
    frag_a<E, HS>(a[k], rows, r0, k, lane);
}

/* s[j] (16×8, j over NC/8 column groups) = a warp's 16 rows, as left operands a · tileᵀ, the
 * tile's first NC rows */
template <class E, int HS, int NC = TILE>
__device__ __forceinline__ static void
product_tf(float (&s)[NC / 8][4], const uint32_t (&a)[HS / 16][4], const E *tile, int lane) {
#pragma unroll
  for (int j = 0; j < NC / 8; j++)
    s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
  for (int k = 0; k < HS / 16; k++)
#pragma unroll
    for (int j = 0; j < NC / 8; j += 2) {
      uint32_t b[4];
      frag_b2<E, HS>(b, tile, j, k, lane);
      mma<E>(s[j], a[k], b[0], b[1]);
      mma<E>(s[j + 1], a[k], b[2], b[3]);
    }
}

/* acc (16×HS) += p (16×NC: its accumulator layout, rounded to the storage type) · tile (its first
 * NC rows of HS) */
template <class E, int HS, int NC = TILE>
__device__ __forceinline__ static void
product_acc(float (&acc)[HS / 8][4], const float (&p)[NC / 8][4], const E *tile, int lane) {
  constexpr int LE = geo<E, HS>::LE;
#pragma unroll
  for (int k = 0; k < NC / 16; k++) {
    uint32_t a[4] = {pack2<E>(p[2 * k][0], p[2 * k][1]), pack2<E>(p[2 * k][2], p[2 * k][3]),
                     pack2<E>(p[2 * k + 1][0], p[2 * k + 1][1]),
                     pack2<E>(p[2 * k + 1][2], p[2 * k + 1][3])};
#pragma unroll
    for (int n = 0; n < HS / 16; n++) {
      uint32_t b[4];
      ldsm_t(b, tile + (k * 16 + lane % 16) * LE + n * 16 + (lane / 16) * 8);
      mma<E>(acc[2 * n], a, b[0], b[1]);
      mma<E>(acc[2 * n + 1], a, b[2], b[3]);
    }
  }
}

/* dst (a [T][stride] matrix's row r's head) = a warp's accumulated rows r0 = g and r0 + 8, each
 * lane its pairs of values, rounded; rows at or past T are left alone */
template <class E, int HS>
__device__ __forceinline__ static void
store_rows(E *dst, size_t stride, const float (&acc)[HS / 8][4], int r0, int T_, int lane) {
#pragma unroll
  for (int half = 0; half < 2; half++) {
    int r = r0 + lane / 4 + 8 * half;
    if (r >= T_)
      continue;
    E *o = dst + (size_t)r * stride + 2 * (lane % 4);
#pragma unroll
    for (int n = 0; n < HS / 8; n++)
      *reinterpret_cast<uint32_t *>(o + n * 8) = pack2<E>(acc[n][2 * half], acc[n][2 * half + 1]);
  }
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

/* ---- asynchronous loads (cp.async, sm_80 on): the next tile comes in while this one is used ----
 * A copy of 16 (or 4) bytes from global to shared memory that the thread does not wait for;
 * an invalid one reads nothing and writes zeros. A block commits its copies as a group, and
 * waits until at most N of its newest groups are still in flight; a __syncthreads then makes
 * every thread's copies visible to all. */
__device__ __forceinline__ static void cp16(void *dst, const void *src, bool valid) {
  uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ static void cp4(void *dst, const void *src, bool valid) {
  uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ static void cp_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N> __device__ __forceinline__ static void cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* load_tile's copies, asynchronous: rows at or past T read row r0 (a valid address) and write
 * zeros */
template <class E, int HS>
__device__ static void load_tile_async(E *dst, const E *src, int r0, int T_, size_t stride) {
  constexpr int EV = 16 / sizeof(E), VR = HS / EV;
  for (int i = threadIdx.x; i < TILE * VR; i += THREADS) {
    int r = i / VR, c = (i % VR) * EV;
    bool in = r0 + r < T_;
    cp16(dst + r * geo<E, HS>::LE + c, src + (size_t)(in ? r0 + r : r0) * stride + c, in);
  }
}

/* key tile kt's k and v (q: the head's first query row of qkv), asynchronously */
template <class E, int HS>
__device__ static void load_kv_async(E *ks, E *vs, const E *q, int kt, int T_, int C) {
  load_tile_async<E, HS>(ks, q + C, kt * TILE, T_, 3 * (size_t)C);
  load_tile_async<E, HS>(vs, q + 2 * C, kt * TILE, T_, 3 * (size_t)C);
}

/* TILE 4-byte values (floats, or ints) of a row vector from t0 on, asynchronously; those at or
 * past T are zeros */
template <class V> __device__ static void load_row_async(V *dst, const V *src, int t0, int T_) {
  for (int i = threadIdx.x; i < TILE; i += THREADS) {
    bool in = t0 + i < T_;
    cp4(dst + i, src + (in ? t0 + i : t0), in);
  }
}

/* the largest of a row's values over the four lanes that hold it */
__device__ __forceinline__ static float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ static float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* Streamed tiles: ASYNC (COLO_CUDA_ATTENTION=flash-async) keeps two stages of them and loads
 * the next while the block works on this one; otherwise the block loads a tile, then works. */
template <bool ASYNC> __device__ __forceinline__ static int stage_of(int i) {
  return ASYNC ? (i & 1) : 0;
}

template <class E, int HS, bool ASYNC>
__global__ static void __launch_bounds__(THREADS)
    flash_fwd_kernel(E *out, float *lse, const E *qkv, int T_, int C, int NH, float scale,
                     const int *pos) {
  typedef geo<E, HS> G;
  extern __shared__ __align__(128) unsigned char smem[];
  /* q, then k and v of each stage */
  E *qs = (E *)smem;
#define KS(st) ((E *)(smem + (1 + 2 * (st)) * G::tile))
#define VS(st) ((E *)(smem + (2 + 2 * (st)) * G::tile))
  int qt = gridDim.x - 1 - blockIdx.x; /* the longest walks start first */
  int pair = blockIdx.y, b = pair / NH, h = pair % NH;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t4 = lane % 4;
  size_t C3 = 3 * (size_t)C;
  const E *q = qkv + (size_t)b * T_ * C3 + h * HS;
  const int *ps = pos ? pos + (size_t)b * T_ : NULL; /* the sequence's positions */
  /* the first key tile: that of the tile's first row's document */
  const int kt0 = ps ? (qt * TILE - ps[qt * TILE]) / TILE : 0;
  if (ASYNC) { /* q and the first k and v: group 0 */
    load_tile_async<E, HS>(qs, q, qt * TILE, T_, C3);
    load_kv_async<E, HS>(KS(0), VS(0), q, kt0, T_, C);
    cp_commit();
  } else {
    load_tile<E, HS>(qs, q, qt * TILE, T_, C3);
  }
  const float sl2 = scale * LOG2E; /* scores in base 2 */
  const int r0 = warp * 16, row[2] = {qt * TILE + r0 + lane / 4, qt * TILE + r0 + lane / 4 + 8};
  int from[2]; /* each row's first key */
#pragma unroll
  for (int i = 0; i < 2; i++)
    from[i] = ps && row[i] < T_ ? row[i] - ps[row[i]] : 0;
  float o[HS / 8][4] = {}, mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};
  uint32_t fq[HS / 16][4]; /* q's fragments, loaded once */
  for (int kt = kt0; kt <= qt; kt++) {
    const int st = stage_of<ASYNC>(kt - kt0);
    E *ks = KS(st), *vs = VS(st);
    if (ASYNC) {
      if (kt < qt) /* into the other stage, which every warp finished with last time round */
        load_kv_async<E, HS>(KS(st ^ 1), VS(st ^ 1), q, kt + 1, T_, C);
      cp_commit();  /* (an empty group on the last tile keeps the count) */
      cp_wait<1>(); /* this tile's group is in */
      __syncthreads();
    } else {
      __syncthreads(); /* every warp is done with the previous k and v */
      load_tile<E, HS>(ks, q + C, kt * TILE, T_, C3);
      load_tile<E, HS>(vs, q + 2 * C, kt * TILE, T_, C3);
      __syncthreads();
    }
    if (kt == kt0) /* q is in */
      frags_a<E, HS>(fq, qs, r0, lane);
    float s[TILE / 8][4];
    product_tf<E, HS>(s, fq, ks, lane);
    /* the online softmax: key k is seen when it is not after the query nor before its
     * document. Without documents the first tile's first key always is, so a row's max is
     * finite from the first tile on; with them a row may see nothing in a tile, and its max
     * stays −∞ until it does (m, a finite stand-in, keeps exp2 from −∞ − −∞) */
    float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < TILE / 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int key = kt * TILE + j * 8 + 2 * t4 + (e & 1);
        bool seen = (kt < qt || key <= row[e / 2]) && key >= from[e / 2];
        float v = seen ? s[j][e] * sl2 : -INFINITY;
        s[j][e] = v;
        tmax[e / 2] = fmaxf(tmax[e / 2], v);
      }
    float alpha[2], m[2], tsum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 2; i++) {
      float mnew = fmaxf(mx[i], quad_max(tmax[i]));
      m[i] = mnew == -INFINITY ? 0.0f : mnew;
      alpha[i] = exp2f(mx[i] - m[i]);
      mx[i] = mnew;
    }
#pragma unroll
    for (int j = 0; j < TILE / 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float p = exp2f(s[j][e] - m[e / 2]);
        s[j][e] = p;
        tsum[e / 2] += p;
      }
#pragma unroll
    for (int i = 0; i < 2; i++)
      sum[i] = sum[i] * alpha[i] + tsum[i]; /* this lane's part of the row's sum */
#pragma unroll
    for (int n = 0; n < HS / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        o[n][e] *= alpha[e / 2];
    product_acc<E, HS>(o, s, vs, lane);
    if (ASYNC)
      __syncthreads(); /* every warp is done with this stage before it is loaded again */
  }
#undef KS
#undef VS
  E *dst = out + (size_t)b * T_ * C + h * HS + 2 * t4;
#pragma unroll
  for (int i = 0; i < 2; i++) {
    float all = quad_sum(sum[i]);
    if (row[i] >= T_)
      continue;
    float inv = 1.0f / all;
#pragma unroll
    for (int n = 0; n < HS / 8; n++)
      *reinterpret_cast<uint32_t *>(dst + (size_t)row[i] * C + n * 8) =
          pack2<E>(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
    if (t4 == 0)
      lse[(size_t)pair * T_ + row[i]] = (mx[i] + log2f(all)) / LOG2E;
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

/* The backward kernels take a tile's 64 columns (queries for dk and dv, keys for dq) in halves
 * of SUB, which halves the scores and their gradients held in registers: the dk-dv kernel went
 * from 192 registers a thread (two blocks an SM) to fewer, and more blocks share an SM.
 *
 * A half's probabilities and score gradients. MASK: the causal mask and T; without it (a tile
 * wholly below the diagonal) every pair is taken: rows at or past T in such a tile were loaded
 * as zeros, with a log-sum-exp and dsum of zero, so their p is 1 and every gradient they add
 * is 0·something. dk-dv's, transposed: s and dp are [key][query]; lq the query tile's
 * log-sum-exps (times l2 in base 2) and dl its dsums; keys key[0], key[1], queries q0 + c0 on.
 * With documents, pq holds the query tile's positions (NULL: none), and a key before a query's
 * document is masked, MASK or not. */
template <bool MASK, int SUB>
__device__ __forceinline__ static void score_grads(float (&s)[SUB / 8][4], float (&dp)[SUB / 8][4],
                                                   const float *lq, const float *dl, const int *pq,
                                                   float l2, int c0, int q0, const int (&key)[2],
                                                   int T_, float sl2, float scale, int t4) {
#pragma unroll
  for (int j = 0; j < SUB / 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      int qi = c0 + j * 8 + 2 * t4 + (e & 1), query = q0 + qi;
      float p = 0.0f, g = 0.0f;
      if ((!MASK || (key[e / 2] <= query && query < T_)) && (!pq || key[e / 2] >= query - pq[qi])) {
        p = exp2f(s[j][e] * sl2 - lq[qi] * l2);
        g = p * (dp[j][e] - dl[qi]) * scale;
      }
      s[j][e] = p;
      dp[j][e] = g;
    }
}

/* dq's: s and dp are [query][key], the rows row[0], row[1] with their log-sum-exps l (base 2),
 * dsums D and first keys from (0 without documents), keys k0 on; s becomes the score gradient */
template <bool MASK, int SUB>
__device__ __forceinline__ static void
query_grads(float (&s)[SUB / 8][4], const float (&dp)[SUB / 8][4], const float (&l)[2],
            const float (&D)[2], const int (&from)[2], int k0, const int (&row)[2], int T_,
            float sl2, float scale, int t4) {
#pragma unroll
  for (int j = 0; j < SUB / 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      int key = k0 + j * 8 + 2 * t4 + (e & 1), i = e / 2;
      float g = 0.0f;
      if ((!MASK || (key <= row[i] && row[i] < T_)) && key >= from[i])
        g = exp2f(s[j][e] * sl2 - l[i]) * (dp[j][e] - D[i]) * scale;
      s[j][e] = g;
    }
}

/* dk and dv of one key tile: a warp's 16 keys against every query tile from the diagonal on
 * (with documents, up to the first whose queries all start their documents after it) */
template <class E, int HS, bool ASYNC>
__global__ static void __launch_bounds__(THREADS, bwd_blocks<HS>::n)
    flash_bwd_kv_kernel(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *dsum,
                        int T_, int C, int NH, float scale, const int *pos) {
  typedef geo<E, HS> G;
  extern __shared__ __align__(128) unsigned char smem[];
  /* k and v, then q and dout of each stage, then each stage's log-sum-exps and dsums, then (with
   * documents) each stage's positions */
  E *ks = (E *)smem, *vs = (E *)(smem + G::tile);
  constexpr int NS = ASYNC ? 2 : 1;
#define QS(st) ((E *)(smem + (2 + 2 * (st)) * G::tile))
#define DS(st) ((E *)(smem + (3 + 2 * (st)) * G::tile))
#define LQ(st) ((float *)(smem + (2 + 2 * NS) * G::tile) + 2 * TILE * (st))
#define DL(st) (LQ(st) + TILE)
#define PQ(st) ((int *)LQ(NS) + TILE * (st))
  int kt = blockIdx.x, nt = gridDim.x; /* the first tiles walk longest, and start first */
  int pair = blockIdx.y, b = pair / NH, h = pair % NH;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t4 = lane % 4;
  size_t C3 = 3 * (size_t)C;
  const E *q = qkv + (size_t)b * T_ * C3 + h * HS, *d = dout + (size_t)b * T_ * C + h * HS;
  const float *lse_p = lse + (size_t)pair * T_, *dsum_p = dsum + (size_t)pair * T_;
  const int *ps = pos ? pos + (size_t)b * T_ : NULL; /* the sequence's positions */
  if (ASYNC) {                                       /* k, v and the first query tile's: group 0 */
    load_kv_async<E, HS>(ks, vs, q, kt, T_, C);
    load_tile_async<E, HS>(QS(0), q, kt * TILE, T_, C3);
    load_tile_async<E, HS>(DS(0), d, kt * TILE, T_, C);
    load_row_async(LQ(0), lse_p, kt * TILE, T_);
    load_row_async(DL(0), dsum_p, kt * TILE, T_);
    if (ps)
      load_row_async(PQ(0), ps, kt * TILE, T_);
    cp_commit();
  } else {
    load_tile<E, HS>(ks, q + C, kt * TILE, T_, C3);
    load_tile<E, HS>(vs, q + 2 * C, kt * TILE, T_, C3);
  }
  const float sl2 = scale * LOG2E;
  const int r0 = warp * 16, key[2] = {kt * TILE + r0 + lane / 4, kt * TILE + r0 + lane / 4 + 8};
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  uint32_t fk[HS / 16][4], fv[HS / 16][4]; /* k's and v's fragments, loaded once */
  for (int qt = kt; qt < nt; qt++) {
    /* documents: this tile's first query, and so every later one, starts after these keys */
    if (ps && qt * TILE - ps[qt * TILE] >= (kt + 1) * TILE)
      break;
    const int st = stage_of<ASYNC>(qt - kt);
    E *qs = QS(st), *ds = DS(st);
    float *lq = LQ(st), *dl = DL(st);
    int *pq = ps ? PQ(st) : NULL;
    if (ASYNC) {
      if (qt + 1 < nt) {
        load_tile_async<E, HS>(QS(st ^ 1), q, (qt + 1) * TILE, T_, C3);
        load_tile_async<E, HS>(DS(st ^ 1), d, (qt + 1) * TILE, T_, C);
        load_row_async(LQ(st ^ 1), lse_p, (qt + 1) * TILE, T_);
        load_row_async(DL(st ^ 1), dsum_p, (qt + 1) * TILE, T_);
        if (ps)
          load_row_async(PQ(st ^ 1), ps, (qt + 1) * TILE, T_);
      }
      cp_commit();
      cp_wait<1>();
      __syncthreads();
    } else {
      __syncthreads(); /* every warp is done with the previous query tile */
      load_tile<E, HS>(qs, q, qt * TILE, T_, C3);
      load_tile<E, HS>(ds, d, qt * TILE, T_, C);
      for (int i = threadIdx.x; i < TILE; i += THREADS) {
        int t = qt * TILE + i;
        lq[i] = t < T_ ? lse_p[t] * LOG2E : 0.0f;
        dl[i] = t < T_ ? dsum_p[t] : 0.0f;
        if (pq)
          pq[i] = t < T_ ? ps[t] : 0;
      }
      __syncthreads();
    }
    if (qt == kt) { /* k and v are in */
      frags_a<E, HS>(fk, ks, r0, lane);
      frags_a<E, HS>(fv, vs, r0, lane);
    }
    /* the query tile in two halves: half its scores in registers at a time */
#pragma unroll 1
    for (int c0 = 0; c0 < TILE; c0 += SUB) {
      float s[SUB / 8][4], dp[SUB / 8][4];
      product_tf<E, HS, SUB>(s, fk, qs + c0 * G::LE, lane);  /* scores, transposed */
      product_tf<E, HS, SUB>(dp, fv, ds + c0 * G::LE, lane); /* dout·v, transposed */
      /* the async loads bring the log-sum-exp as it is stored */
      if (qt > kt)
        score_grads<false, SUB>(s, dp, lq, dl, pq, ASYNC ? LOG2E : 1.0f, c0, qt * TILE, key, T_,
                                sl2, scale, t4);
      else
        score_grads<true, SUB>(s, dp, lq, dl, pq, ASYNC ? LOG2E : 1.0f, c0, qt * TILE, key, T_, sl2,
                               scale, t4);
      product_acc<E, HS, SUB>(dv, s, ds + c0 * G::LE, lane);  /* dv += pᵀ·dout */
      product_acc<E, HS, SUB>(dk, dp, qs + c0 * G::LE, lane); /* dk += (score gradient)ᵀ·q */
    }
    if (ASYNC)
      __syncthreads();
  }
  if (ASYNC)
    cp_wait<0>(); /* a walk cut short by documents leaves the next tile's copies in flight */
#undef QS
#undef DS
#undef LQ
#undef DL
#undef PQ
  E *base = dqkv + (size_t)b * T_ * C3 + h * HS;
  store_rows<E, HS>(base + C, C3, dk, kt * TILE + r0, T_, lane);
  store_rows<E, HS>(base + 2 * C, C3, dv, kt * TILE + r0, T_, lane);
}

/* dq of one query tile: a warp's 16 queries against every key tile up to the diagonal (with
 * documents, from that of the tile's first row's document) */
template <class E, int HS, bool ASYNC>
__global__ static void __launch_bounds__(THREADS, bwd_blocks<HS>::n)
    flash_bwd_q_kernel(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *dsum,
                       int T_, int C, int NH, float scale, const int *pos) {
  typedef geo<E, HS> G;
  extern __shared__ __align__(128) unsigned char smem[];
  /* q and dout, then k and v of each stage */
  E *qs = (E *)smem, *ds = (E *)(smem + G::tile);
#define KS(st) ((E *)(smem + (2 + 2 * (st)) * G::tile))
#define VS(st) ((E *)(smem + (3 + 2 * (st)) * G::tile))
  int qt = gridDim.x - 1 - blockIdx.x;
  int pair = blockIdx.y, b = pair / NH, h = pair % NH;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t4 = lane % 4;
  size_t C3 = 3 * (size_t)C;
  const E *q = qkv + (size_t)b * T_ * C3 + h * HS, *d = dout + (size_t)b * T_ * C + h * HS;
  const int *ps = pos ? pos + (size_t)b * T_ : NULL;
  const int kt0 = ps ? (qt * TILE - ps[qt * TILE]) / TILE : 0;
  if (ASYNC) { /* q, dout and the first k and v: group 0 */
    load_tile_async<E, HS>(qs, q, qt * TILE, T_, C3);
    load_tile_async<E, HS>(ds, d, qt * TILE, T_, C);
    load_kv_async<E, HS>(KS(0), VS(0), q, kt0, T_, C);
    cp_commit();
  } else {
    load_tile<E, HS>(qs, q, qt * TILE, T_, C3);
    load_tile<E, HS>(ds, d, qt * TILE, T_, C);
  }
  const float sl2 = scale * LOG2E;
  const int r0 = warp * 16, row[2] = {qt * TILE + r0 + lane / 4, qt * TILE + r0 + lane / 4 + 8};
  float l[2], D[2];
  int from[2];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    l[i] = row[i] < T_ ? lse[(size_t)pair * T_ + row[i]] * LOG2E : 0.0f;
    D[i] = row[i] < T_ ? dsum[(size_t)pair * T_ + row[i]] : 0.0f;
    from[i] = ps && row[i] < T_ ? row[i] - ps[row[i]] : 0;
  }
  float dq[HS / 8][4] = {};
  uint32_t fq[HS / 16][4], fd[HS / 16][4]; /* q's and dout's fragments, loaded once */
  for (int kt = kt0; kt <= qt; kt++) {
    const int st = stage_of<ASYNC>(kt - kt0);
    E *ks = KS(st), *vs = VS(st);
    if (ASYNC) {
      if (kt < qt)
        load_kv_async<E, HS>(KS(st ^ 1), VS(st ^ 1), q, kt + 1, T_, C);
      cp_commit();
      cp_wait<1>();
      __syncthreads();
    } else {
      __syncthreads();
      load_tile<E, HS>(ks, q + C, kt * TILE, T_, C3);
      load_tile<E, HS>(vs, q + 2 * C, kt * TILE, T_, C3);
      __syncthreads();
    }
    if (kt == kt0) { /* q and dout are in */
      frags_a<E, HS>(fq, qs, r0, lane);
      frags_a<E, HS>(fd, ds, r0, lane);
    }
    /* the key tile in two halves, as above */
#pragma unroll 1
    for (int c0 = 0; c0 < TILE; c0 += SUB) {
      float s[SUB / 8][4], dp[SUB / 8][4];
      product_tf<E, HS, SUB>(s, fq, ks + c0 * G::LE, lane);  /* scores [query][key] */
      product_tf<E, HS, SUB>(dp, fd, vs + c0 * G::LE, lane); /* dout·v */
      if (kt < qt)
        query_grads<false, SUB>(s, dp, l, D, from, kt * TILE + c0, row, T_, sl2, scale, t4);
      else
        query_grads<true, SUB>(s, dp, l, D, from, kt * TILE + c0, row, T_, sl2, scale, t4);
      product_acc<E, HS, SUB>(dq, s, ks + c0 * G::LE, lane); /* dq += (score gradient)·k */
    }
    if (ASYNC)
      __syncthreads();
  }
#undef KS
#undef VS
  store_rows<E, HS>(dqkv + (size_t)b * T_ * C3 + h * HS, C3, dq, qt * TILE + r0, T_, lane);
}

/* ---- launches ---- */

/* A kernel may use more than 48 KiB of shared memory only once told so. */
template <class K> static void allow_smem(K kernel, size_t bytes) {
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <class E, int HS, bool ASYNC>
static void fwd(void *out, float *lse, const void *qkv, int B, int T_, int C, int NH,
                const int *pos, cudaStream_t stream) {
  typedef geo<E, HS> G;
  static const size_t bytes = (ASYNC ? 5 : 3) * G::tile;
  static int allowed;
  if (!allowed)
    allow_smem(flash_fwd_kernel<E, HS, ASYNC>, bytes), allowed = 1;
  dim3 grid((T_ + TILE - 1) / TILE, B * NH);
  flash_fwd_kernel<E, HS, ASYNC><<<grid, THREADS, bytes, stream>>>(
      (E *)out, lse, (const E *)qkv, T_, C, NH, 1.0f / sqrtf((float)HS), pos);
  LAUNCHED();
}

template <class E, int HS, bool ASYNC>
static void bwd(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                float *dsum, int B, int T_, int C, int NH, const int *pos, cudaStream_t stream) {
  typedef geo<E, HS> G;
  constexpr int NS = ASYNC ? 2 : 1; /* stages of the streamed tiles */
  static const size_t kv_bytes = (2 + 2 * NS) * G::tile + NS * 3 * TILE * 4,
                      q_bytes = (2 + 2 * NS) * G::tile;
  static int allowed;
  if (!allowed) {
    allow_smem(flash_bwd_kv_kernel<E, HS, ASYNC>, kv_bytes);
    allow_smem(flash_bwd_q_kernel<E, HS, ASYNC>, q_bytes);
    allowed = 1;
  }
  float scale = 1.0f / sqrtf((float)HS);
  int BT = B * T_;
  flash_dsum_kernel<E>
      <<<(BT + 7) / 8, 256, 0, stream>>>(dsum, (const E *)dout, (const E *)out, BT, T_, C, NH);
  LAUNCHED();
  dim3 grid((T_ + TILE - 1) / TILE, B * NH);
  flash_bwd_kv_kernel<E, HS, ASYNC><<<grid, THREADS, kv_bytes, stream>>>(
      (E *)dqkv, (const E *)dout, (const E *)qkv, lse, dsum, T_, C, NH, scale, pos);
  LAUNCHED();
  flash_bwd_q_kernel<E, HS, ASYNC><<<grid, THREADS, q_bytes, stream>>>(
      (E *)dqkv, (const E *)dout, (const E *)qkv, lse, dsum, T_, C, NH, scale, pos);
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

template <class E, bool ASYNC>
static int fwd_hs(void *out, float *lse, const void *qkv, int B, int T_, int C, int NH,
                  const int *pos, cudaStream_t s) {
  switch (C / NH) {
  case 32:
    fwd<E, 32, ASYNC>(out, lse, qkv, B, T_, C, NH, pos, s);
    return 1;
  case 64:
    fwd<E, 64, ASYNC>(out, lse, qkv, B, T_, C, NH, pos, s);
    return 1;
  case 128:
    fwd<E, 128, ASYNC>(out, lse, qkv, B, T_, C, NH, pos, s);
    return 1;
  }
  return 0;
}

template <class E, bool ASYNC>
static int bwd_hs(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                  float *dsum, int B, int T_, int C, int NH, const int *pos, cudaStream_t s) {
  switch (C / NH) {
  case 32:
    bwd<E, 32, ASYNC>(dqkv, dout, qkv, out, lse, dsum, B, T_, C, NH, pos, s);
    return 1;
  case 64:
    bwd<E, 64, ASYNC>(dqkv, dout, qkv, out, lse, dsum, B, T_, C, NH, pos, s);
    return 1;
  case 128:
    bwd<E, 128, ASYNC>(dqkv, dout, qkv, out, lse, dsum, B, T_, C, NH, pos, s);
    return 1;
  }
  return 0;
}

int flash_attention_fwd(colo_dtype_t t, int async, void *out, float *lse, const void *qkv, int B,
                        int T_, int C, int NH, const int *pos, cudaStream_t stream) {
  const void *p[] = {out, qkv};
  if (!handles(t, B, T_, C, NH, p, 2))
    return 0;
  if (t == COLO_DTYPE_BF16)
    return async ? fwd_hs<bf16, true>(out, lse, qkv, B, T_, C, NH, pos, stream)
                 : fwd_hs<bf16, false>(out, lse, qkv, B, T_, C, NH, pos, stream);
  return async ? fwd_hs<fp16, true>(out, lse, qkv, B, T_, C, NH, pos, stream)
               : fwd_hs<fp16, false>(out, lse, qkv, B, T_, C, NH, pos, stream);
}

int flash_attention_bwd(colo_dtype_t t, int async, void *dqkv, const void *dout, const void *qkv,
                        const void *out, const float *lse, float *dsum, int B, int T_, int C,
                        int NH, const int *pos, cudaStream_t stream) {
  const void *p[] = {dqkv, dout, qkv, out};
  if (!handles(t, B, T_, C, NH, p, 4))
    return 0;
  if (t == COLO_DTYPE_BF16)
    return async ? bwd_hs<bf16, true>(dqkv, dout, qkv, out, lse, dsum, B, T_, C, NH, pos, stream)
                 : bwd_hs<bf16, false>(dqkv, dout, qkv, out, lse, dsum, B, T_, C, NH, pos, stream);
  return async ? bwd_hs<fp16, true>(dqkv, dout, qkv, out, lse, dsum, B, T_, C, NH, pos, stream)
               : bwd_hs<fp16, false>(dqkv, dout, qkv, out, lse, dsum, B, T_, C, NH, pos, stream);
}
