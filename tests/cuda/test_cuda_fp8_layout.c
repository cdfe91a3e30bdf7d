/*
 * test_cuda_fp8_layout.c: the FP8 forward's register and Vᵀ index math (fa3_fp8_layout.h), on the
 * host, against the PTX ISA's layouts written out here as index functions:
 *   - the f32 accumulator of wgmma m64nN (per warp, its 16 rows): element s[4 j + e] of lane l is
 *     row l / 4 + 8 (e / 2), column 8 j + 2 (l % 4) + e % 2;
 *   - the 8-bit A operand of wgmma m64nNk32 from registers (per warp, mma m16n8k32's A fragment):
 *     byte b of register r of lane l is row l / 4 + 8 (r % 2), column 4 (l % 4) + b + 16 (r / 2);
 *   - B K-major: B[k][n] is byte k of row n of the operand (Vᵀ's row n is head-dim column n).
 * Checked: the slot permutation is one; every A byte the kernel packs (fa3_fp8_p_index) is the
 * accumulator element of the same row whose key Vᵀ holds at that slot; the pre-pass (its loops
 * replayed with the kernel's index functions) writes every Vᵀ byte once, V's key at its permuted
 * slot and zeros past seqlen_k; and P V through the fragments and Vᵀ equals P V over the keys,
 * exactly, for integer P and V, for every lane, register and column, at the key tile of 128 and
 * head dims 64, 128 and 256.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/fa3_sm90/fa3_fp8_layout.h"
#include "host_test.h"

enum { BN = 128, ROWS = 16 };

/* The ISA's accumulator element e of lane l: row and column (key). */
static int acc_row(int l, int e) { return l / 4 + 8 * ((e % 4) / 2); }
static int acc_col(int l, int e) { return 8 * (e / 4) + 2 * (l % 4) + e % 2; }
/* The ISA's A byte b of register r of lane l: row and column (slot within the k-step). */
static int a_row(int l, int r) { return l / 4 + 8 * (r % 2); }
static int a_col(int l, int r, int b) { return 4 * (l % 4) + b + 16 * (r / 2); }

/* The pre-pass on one (batch, head) of keys [0, nkeys) of V (v[key * hd + d]) into vt (hd rows of
   vt_keys bytes), replaying fa3_fp8_vt.cu's loops; writes[] counts each Vᵀ byte's writes. */
static void prepass(const int *v, int nkeys, int hd, int vt_keys, int *vt, int *writes) {
  int *tile = (int *)malloc(sizeof(int) * FA3_FP8_VT_TILE * (size_t)hd);
  for (int blk = 0; blk < vt_keys / FA3_FP8_VT_TILE; ++blk) {
    const int key0 = blk * FA3_FP8_VT_TILE;
    for (int r = 0; r < FA3_FP8_VT_TILE; ++r)
      for (int d = 0; d < hd; ++d) tile[r * hd + d] = key0 + r < nkeys ? v[(key0 + r) * hd + d] : 0;
    for (int w = 0; w < hd * FA3_FP8_VT_TILE / 4; ++w) {
      const int d = fa3_fp8_vt_word_row(w), s = fa3_fp8_vt_word_slot(w);
      for (int e = 0; e < 4; ++e) {
        vt[d * vt_keys + key0 + s + e] = tile[fa3_fp8_vt_src(s + e) * hd + d];
        ++writes[d * vt_keys + key0 + s + e];
      }
    }
  }
  free(tile);
}

static unsigned g_rng = 12345u;
static int small_int(void) {
  g_rng = g_rng * 1103515245u + 12345u;
  return (int)((g_rng >> 16) % 15) - 7;
}

/* P V of one warp's 16 rows over a key tile of BN keys (nkeys of them real), head dim hd. */
static void product_check(int hd, int nkeys) {
  const int vt_keys = (nkeys + BN - 1) / BN * BN;
  int *P = calloc((size_t)ROWS * BN, sizeof(int)), *V = calloc((size_t)nkeys * hd, sizeof(int));
  int *vt = calloc((size_t)hd * vt_keys, sizeof(int)),
      *writes = calloc((size_t)hd * vt_keys, sizeof(int));
  for (int r = 0; r < ROWS; ++r)
    for (int k = 0; k < BN; ++k) P[r * BN + k] = k < nkeys ? small_int() : 0; /* masked: P = 0 */
  for (int i = 0; i < nkeys * hd; ++i) V[i] = small_int();
  prepass(V, nkeys, hd, vt_keys, vt, writes);
  for (int d = 0; d < hd; ++d)
    for (int k = 0; k < vt_keys; ++k) {
      EXPECT(writes[d * vt_keys + k] == 1, "hd %d: Vᵀ[%d][%d] written %d times", hd, d, k,
             writes[d * vt_keys + k]);
      const int key = (k & ~(FA3_FP8_KEY_GROUP - 1)) + fa3_fp8_key_of_slot(k % FA3_FP8_KEY_GROUP);
      const int want = key < nkeys ? V[key * hd + d] : 0;
      EXPECT(vt[d * vt_keys + k] == want, "hd %d: Vᵀ[%d][%d] = %d, V[%d][%d] = %d", hd, d, k,
             vt[d * vt_keys + k], key, d, want);
    }
  /* Each lane's accumulator registers of P (the ISA's accumulator layout), then its A fragments as
     the kernel packs them (fa3_fp8_pack_p), then the product as the tensor core forms it: row
     a_row of the fragments times Vᵀ's K-major rows. */
  long long *D = calloc((size_t)ROWS * hd, sizeof(long long));
  for (int l = 0; l < 32; ++l) {
    int s[BN / 2];
    for (int e = 0; e < BN / 2; ++e) s[e] = P[acc_row(l, e) * BN + acc_col(l, e)];
    for (int kk = 0; kk < BN / 32; ++kk)
      for (int r = 0; r < 4; ++r)
        for (int b = 0; b < 4; ++b) {
          const int a = s[fa3_fp8_p_index(kk, r, b)], row = a_row(l, r), slot = a_col(l, r, b);
          for (int n = 0; n < hd; ++n)
            D[row * hd + n] += (long long)a * vt[n * vt_keys + 32 * kk + slot];
        }
  }
  for (int r = 0; r < ROWS; ++r)
    for (int n = 0; n < hd; ++n) {
      long long want = 0;
      for (int k = 0; k < nkeys; ++k) want += (long long)P[r * BN + k] * V[k * hd + n];
      EXPECT(D[r * hd + n] == want,
             "hd %d, %d keys: (P V)[%d][%d] = %lld through the fragments, %lld", hd, nkeys, r, n,
             D[r * hd + n], want);
    }
  free(P), free(V), free(vt), free(writes), free(D);
}

int main(void) {
  /* The permutation of a group's slots, and of a pre-pass block's, is one. */
  int seen[FA3_FP8_VT_TILE] = {0};
  for (int s = 0; s < FA3_FP8_KEY_GROUP; ++s) {
    const int k = fa3_fp8_key_of_slot(s);
    EXPECT(k >= 0 && k < FA3_FP8_KEY_GROUP && !seen[k]++, "slot %d: key %d", s, k);
  }
  memset(seen, 0, sizeof seen);
  for (int s = 0; s < FA3_FP8_VT_TILE; ++s) {
    const int k = fa3_fp8_vt_src(s);
    EXPECT(k >= 0 && k < FA3_FP8_VT_TILE && !seen[k]++, "block slot %d: key %d", s, k);
  }
  EXPECT(FA3_FP8_VT_TILE % FA3_FP8_KEY_GROUP == 0 && BN % FA3_FP8_VT_TILE == 0,
         "pre-pass blocks of whole groups, key tiles of whole blocks");
  /* Every packed A byte: the accumulator element of its row whose key sits at its slot; every
     accumulator element packed once per k-step's bytes. */
  for (int l = 0; l < 32; ++l) {
    int used[BN / 2] = {0};
    for (int kk = 0; kk < BN / 32; ++kk)
      for (int r = 0; r < 4; ++r)
        for (int b = 0; b < 4; ++b) {
          const int e = fa3_fp8_p_index(kk, r, b);
          EXPECT(e >= 0 && e < BN / 2, "lane %d k-step %d reg %d byte %d: element %d", l, kk, r, b,
                 e);
          if (e < 0 || e >= BN / 2) continue;
          ++used[e];
          const int key = 32 * kk + fa3_fp8_key_of_slot(a_col(l, r, b));
          EXPECT(acc_row(l, e) == a_row(l, r) && acc_col(l, e) == key,
                 "lane %d k-step %d reg %d byte %d: element %d is (row %d, key %d), the slot wants "
                 "(row %d, key %d)",
                 l, kk, r, b, e, acc_row(l, e), acc_col(l, e), a_row(l, r), key);
        }
    for (int e = 0; e < BN / 2; ++e)
      EXPECT(used[e] == 1, "lane %d: element %d packed %d times", l, e, used[e]);
  }
  /* The product, through every index function, at each head dim; whole and partial key tiles. */
  const int dims[] = {64, 128, 256}, keys[] = {128, 100, 33, 1};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) product_check(dims[i], keys[j]);
  printf("test_cuda_fp8_layout: %s\n", g_failed ? "FAILED" : "all passed");
  return g_failed;
}
