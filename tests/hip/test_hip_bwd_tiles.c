/*
 * test_hip_bwd_tiles.c: the HIP backward's tile from core/plan, without a device.
 *
 *   1. core/plan's backward entry (fa_plan_tiles_bwd): hand-derived values (the arithmetic is in
 *      the comments), and its properties over a grid of budgets, head dims and score sizes:
 *      granule multiples within the maxima, the tiles within the budget whenever more than the
 *      smallest ones are returned, no larger query step that would still fit, Bc never above
 *      the forward's.
 *   2. The HIP family's choice among its compiled tiles (hg_bwd_tiles) for the LDS of each
 *      target (64 KiB: gfx90a, gfx940, gfx1100; the test plugin's 64 KiB less the MFMA
 *      emulation's 4 KiB; 48 and 32 KiB), generic and matrix kernels, every head dim 8..256:
 *      against a table written by hand at the head dims that matter, and everywhere against an
 *      independent derivation here (exhaustive search of the plan, the kernels' shared-memory
 *      layout transcribed from hg_bwd.h); every tile is chosen somewhere; the HIP plugin's
 *      bundle, one tile per class (the larger, but at class 256 the smaller), gets on 64 KiB
 *      what every tile compiled would get, but at class 256.
 *   3. decide reports the tile and run launches that tile's kernel (name, grid, shared memory)
 *      through a recording runtime; a backward that does not fit the LDS even with the smallest
 *      tile is refused, the reason naming the bytes, the tile and the limit, and run answers
 *      FA_ERR_UNSUPPORTED with that reason.
 */
#include <stdio.h>
#include <string.h>

#include "backends/hip/cdna/hg_mfma_layout.h"
#include "backends/hip/generic/hg_host.h"
#include "core/plan.h"
#include "tests/hip/hip_test.h"

/* ---- 1. core/plan ---- */

static void check_plan_values(void) {
  static const struct {
    size_t m;
    int32_t gm, gn, max_m, max_n;
    int64_t d;
    int32_t score;
    int32_t want_m, want_n;
    const char *why;
  } cases[] = {
      /* Bc = 32768 words / 256 = 128 -> 64 (max); 16384 + 512 Br <= 65536: Br <= 96 -> 32 (max) */
      {65536, 16, 32, 32, 64, 64, 4, 32, 64, "64 KiB d64 dS fp32"},
      /* 16384 + (256 + 768) Br <= 65536: Br <= 48 -> 32 */
      {65536, 16, 32, 32, 64, 64, 12, 32, 64, "64 KiB d64 12-byte scores"},
      /* Bc = 32768 / 512 = 64; 32768 + (512 + 256) Br <= 65536: Br <= 42 -> 32 */
      {65536, 16, 32, 32, 64, 128, 4, 32, 64, "64 KiB d128 dS fp32"},
      /* 32768 + (512 + 768) Br <= 65536: Br <= 25 -> 16 */
      {65536, 16, 32, 32, 64, 128, 12, 16, 64, "64 KiB d128 12-byte scores"},
      /* Bc = 32768 / 1024 = 32; 32768 + (1024 + 128) Br <= 65536: Br <= 28 -> 16 (max) */
      {65536, 16, 16, 16, 32, 256, 4, 16, 32, "64 KiB d256"},
      /* Bc = 16384 / 1024 = 16; 16384 + 1088 Br <= 32768: Br <= 15, below a granule, and Bc is
         one granule already: the smallest tiles, which overflow (the caller checks) */
      {32768, 16, 16, 16, 32, 256, 4, 16, 16, "32 KiB d256: nothing fits"},
      /* Bc = 32768 / 256 = 128; 64-byte scores: Br at Bc 128: 32768 / (256 + 8192) = 3, at 96:
         40960 / 6400 = 6, at 64: 49152 / 4352 = 11, at 32: 57344 / 2304 = 24 -> 16 */
      {65536, 16, 32, 64, 128, 64, 64, 16, 32, "Bc steps down for the score tile"},
      /* No score tile: Br = (65536 - 32768) / 256 = 128, capped by max_m 64 */
      {65536, 16, 32, 64, 128, 64, 0, 64, 128, "no score tile"},
      /* No budget: one granule each */
      {0, 16, 32, 64, 128, 64, 4, 16, 32, "no budget"},
      /* head_dim 0 is taken as 1: Bc = 32768 / 4 -> 128; Br = min(Bc, 64) fits */
      {65536, 16, 32, 64, 128, 0, 4, 64, 128, "head dim 0"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    fa_tile_limits lim = {cases[i].m, 2, cases[i].gm, cases[i].gn, cases[i].max_m, cases[i].max_n};
    fa_tile_plan p = fa_plan_tiles_bwd(&lim, cases[i].d, cases[i].score);
    CHECK(p.tile_m == cases[i].want_m && p.tile_n == cases[i].want_n,
          "plan_bwd %s: Br %d Bc %d, expected %d %d", cases[i].why, (int)p.tile_m, (int)p.tile_n,
          (int)cases[i].want_m, (int)cases[i].want_n);
  }
}

static double plan_bytes(int64_t bc, int64_t br, int64_t d, int64_t word, int64_t score) {
  return (double)((2 * bc + 2 * br) * d * word + br * bc * score);
}

static void check_plan_properties(void) {
  static const size_t budgets[] = {0, 4096, 16384, 32768, 49152, 61440, 65536, 98304, 262144};
  static const int32_t scores[] = {0, 4, 12, 64};
  static const int32_t granules[][4] = {{16, 16, 16, 32}, {16, 32, 32, 64}, {8, 8, 64, 128}};
  int runs = 0;
  for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; ++b)
    for (size_t s = 0; s < sizeof scores / sizeof scores[0]; ++s)
      for (size_t g = 0; g < sizeof granules / sizeof granules[0]; ++g)
        for (int64_t d = 8; d <= 512; d += 8) {
          const int32_t gm = granules[g][0], gn = granules[g][1];
          const int32_t max_m = granules[g][2], max_n = granules[g][3];
          fa_tile_limits lim = {budgets[b], 2, gm, gn, max_m, max_n};
          const fa_tile_plan p = fa_plan_tiles_bwd(&lim, d, scores[s]);
          const fa_tile_plan f = fa_plan_tiles(&lim, d);
          const int64_t bm = p.tile_m, bn = p.tile_n, w = 2, sc = scores[s];
          const double m = (double)budgets[b];
          ++runs;
          CHECK(bm >= gm && bm % gm == 0 && bm <= max_m && bn >= gn && bn % gn == 0 &&
                    bn <= max_n && bn <= f.tile_n,
                "M %zu d %lld s %d: Br %lld Bc %lld (forward's Bc %d)", budgets[b], (long long)d,
                (int)sc, (long long)bm, (long long)bn, (int)f.tile_n);
          const int floor_tiles = bm == gm && bn == gn;
          CHECK(floor_tiles || plan_bytes(bn, bm, d, w, sc) <= m,
                "M %zu d %lld s %d: %lld x %lld needs %.0f bytes", budgets[b], (long long)d,
                (int)sc, (long long)bm, (long long)bn, plan_bytes(bn, bm, d, w, sc));
          /* Maximal: one more granule of rows passes Bc or max_m, or does not fit. */
          CHECK(bm + gm > (bn < max_m ? bn : max_m) || plan_bytes(bn, bm + gm, d, w, sc) > m ||
                    (floor_tiles && plan_bytes(bn, bm, d, w, sc) > m),
                "M %zu d %lld s %d: Br %lld could grow", budgets[b], (long long)d, (int)sc,
                (long long)bm);
        }
  printf("plan_bwd: %d budget x score x granule x head dim runs\n", runs);
}

/* ---- 2. the compiled tile, derived independently ---- */

/* The kernels' tiles by class, as the README lists them (checked against HG_BWD_TILES below);
   bundle_tile: the one of each class in the HIP plugin's bundle. */
static const int class_tiles[3][2][2] = {
    {{32, 32}, {64, 32}}, /* class 64: BN x BM */
    {{32, 32}, {64, 16}}, /* class 128 */
    {{16, 16}, {32, 16}}, /* class 256 */
};

static const int bundle_tile[3] = {1, 1, 0};

static int class_of(int d) { return d <= 64 ? 0 : (d <= 128 ? 1 : 2); }

/* hg_bwd_main's shared memory, transcribed from its carve-up in hg_bwd.h: sk, sv [BN][d] and
   sq, sdo [BM][d] of 16 bits; sds [BN][BM], slse [BM], sdsum [BM] of fp32; with MFMA also sdpt
   [BN][BM] fp32 and sp16, sds16 [BN][BM] of 16 bits. */
static long long layout_bytes(int bn, int bm, int d, int mfma) {
  long long b = 2LL * (2 * bn + 2 * bm) * d + 4LL * bn * bm + 4LL * bm + 4LL * bm;
  return mfma ? b + 4LL * bn * bm + 2LL * bn * bm + 2LL * bn * bm : b;
}

/* The plan by exhaustive search: the largest Bc (a multiple of the class's smaller key tile, at
   most its larger, with 4 Bc d 16-bit words within the LDS, as the forward's), and for it the
   largest Br (a multiple of 16, at most Bc and the class's largest query step) with the four
   tiles and the score tile within the LDS; a smaller Bc when no Br fits; else the granules. */
static void search_plan(long long lds, int d, int mfma, int *br_out, int *bc_out) {
  const int c = class_of(d), gn = class_tiles[c][0][0], max_n = class_tiles[c][1][0];
  const int max_m =
      class_tiles[c][0][1] > class_tiles[c][1][1] ? class_tiles[c][0][1] : class_tiles[c][1][1];
  const long long score = mfma ? 12 : 4;
  int bc0 = gn;
  for (int bc = max_n; bc >= gn; bc -= gn)
    if (4LL * bc * d * 2 <= lds) {
      bc0 = bc;
      break;
    }
  for (int bc = bc0; bc >= gn; bc -= gn)
    for (int br = (bc < max_m ? bc : max_m) / 16 * 16; br >= 16; br -= 16)
      if ((2LL * bc + 2LL * br) * d * 2 + br * bc * score <= lds) {
        *br_out = br;
        *bc_out = bc;
        return;
      }
  *br_out = 16;
  *bc_out = gn;
}

/* all: every tile compiled (the test plugin); else the one of the HIP plugin's bundle, fitting
   or not. */
static void expected_tile(long long lds, int d, int mfma, int all, int *bn, int *bm) {
  int br, bc;
  search_plan(lds, d, mfma, &br, &bc);
  const int(*t)[2] = class_tiles[class_of(d)];
  const int wide =
      !all ? bundle_tile[class_of(d)]
           : t[1][0] <= bc && t[1][1] <= br && layout_bytes(t[1][0], t[1][1], d, mfma) <= lds;
  *bn = t[wide][0];
  *bm = t[wide][1];
}

static void check_tiles(void) {
  /* The compiled tiles are the ones this test expects. */
#define ROW(hc, bn, bm, amd) {hc, bn, bm, amd},
  static const int compiled[][4] = {HG_BWD_TILES(ROW)};
#undef ROW
  CHECK(sizeof compiled / sizeof compiled[0] == 6, "%zu compiled tiles",
        sizeof compiled / sizeof compiled[0]);
  for (int i = 0; i < 6; ++i)
    CHECK(compiled[i][0] == 64 << (i / 2) && compiled[i][1] == class_tiles[i / 2][i % 2][0] &&
              compiled[i][2] == class_tiles[i / 2][i % 2][1] &&
              compiled[i][3] == (bundle_tile[i / 2] == i % 2),
          "HG_BWD_TILES row %d: %d %dx%d in the bundle %d", i, compiled[i][0], compiled[i][1],
          compiled[i][2], compiled[i][3]);
  /* Each layout formula agrees with the transcription, at every head dim. */
  for (int d = 8; d <= 256; d += 8)
    for (int w = 0; w < 2; ++w) {
      const int bn = class_tiles[class_of(d)][w][0], bm = class_tiles[class_of(d)][w][1];
      CHECK((long long)hg_smem(0, 0, d, bn, bm) == layout_bytes(bn, bm, d, 0) &&
                (long long)hg_smem(0, 1, d, bn, bm) == layout_bytes(bn, bm, d, 1),
            "hd%d %dx%d: hg_smem %zu / %zu", d, bn, bm, hg_smem(0, 0, d, bn, bm),
            hg_smem(0, 1, d, bn, bm));
    }

  /* By hand (BN x BM), where the targets differ, with every tile compiled: plan and layout
     arithmetic in the comments. */
  static const struct {
    long long lds;
    int d, mfma, bn, bm;
  } hand[] = {
      /* 64 KiB (gfx90a, gfx940, gfx1100): the wide tile everywhere */
      {65536, 64, 0, 64, 32},  /* plan Br 32 Bc 64; 33,024 bytes */
      {65536, 64, 1, 64, 32},  /* plan Br 32 Bc 64; 49,408 bytes */
      {65536, 8, 0, 64, 32},   /* Bc = 32768 / 32 -> 64 */
      {65536, 128, 0, 64, 16}, /* plan Br 32 Bc 64; 45,184 bytes */
      {65536, 128, 1, 64, 16}, /* plan Br 16 Bc 64; 53,376 bytes */
      {65536, 256, 0, 32, 16}, /* plan Br 16 Bc 32; 51,328 bytes */
      {65536, 256, 1, 32, 16}, /* 55,424 bytes */
      /* the test plugin: 61,440 bytes, 30,720 words */
      {61440, 64, 1, 64, 32},  /* Bc 120 -> 64 */
      {61440, 120, 0, 64, 16}, /* Bc = 30720 / 480 = 64; Br 30720 / 608 -> 32 */
      {61440, 120, 1, 64, 16}, /* Br 30720 / 1248 -> 16; 50,816 bytes */
      {61440, 128, 0, 32, 32}, /* Bc = 30720 / 512 = 60 -> 32 */
      {61440, 128, 1, 32, 32}, /* 45,312 bytes */
      {61440, 200, 0, 32, 16}, /* Bc = 30720 / 800 = 38 -> 32; Br 35840 / 928 -> 16 */
      {61440, 240, 1, 32, 16}, /* Bc 32; Br 30720 / 1344 -> 16; 52,352 bytes */
      {61440, 256, 0, 16, 16}, /* Bc = 30720 / 1024 = 30 -> 16 */
      {61440, 256, 1, 16, 16},
      /* 48 KiB */
      {49152, 64, 0, 64, 32},  /* 33,024 bytes */
      {49152, 64, 1, 32, 32},  /* plan 32 x 64, but the wide MFMA layout is 49,408 > 49,152 */
      {49152, 128, 0, 32, 32}, /* Bc = 24576 / 512 = 48 -> 32 */
      {49152, 256, 1, 16, 16}, /* Bc = 24 -> 16 */
      /* 32 KiB */
      {32768, 64, 0, 32, 32}, /* plan 32 x 64, but 33,024 > 32,768 */
      {32768, 64, 1, 32, 32}, /* plan Br 16: below the wide tile's 32 */
  };
  for (size_t i = 0; i < sizeof hand / sizeof hand[0]; ++i) {
    const hg_tile t = hg_bwd_tiles(hand[i].lds, hand[i].d, hand[i].mfma, 1);
    CHECK(t.bn == hand[i].bn && t.bm == hand[i].bm, "lds %lld hd%d mfma %d: %dx%d, expected %dx%d",
          hand[i].lds, hand[i].d, hand[i].mfma, t.bn, t.bm, hand[i].bn, hand[i].bm);
  }

  /* Everywhere, against the derivation above, every tile compiled and the bundle's; every tile
     of either family is chosen on some target; on 64 KiB the bundle's choice is the one with
     every tile compiled, but at class 256 (the larger tile, not in the bundle). */
  static const long long ldses[] = {65536, 64 * 1024 - HG_MFMA_EMU_SMEM, 49152, 32768};
  int chosen[2][6] = {{0}};
  int runs = 0;
  for (size_t l = 0; l < sizeof ldses / sizeof ldses[0]; ++l)
    for (int mfma = 0; mfma < 2; ++mfma)
      for (int all = 0; all < 2; ++all)
        for (int d = 8; d <= 256; d += 8) {
          int bn, bm;
          expected_tile(ldses[l], d, mfma, all, &bn, &bm);
          const hg_tile t = hg_bwd_tiles(ldses[l], d, mfma, all);
          ++runs;
          CHECK(t.bn == bn && t.bm == bm, "lds %lld hd%d mfma %d all %d: %dx%d, derived %dx%d",
                ldses[l], d, mfma, all, t.bn, t.bm, bn, bm);
          const hg_tile u = hg_bwd_tiles(ldses[l], d, mfma, !all);
          CHECK(ldses[l] != 65536 || d > 128 || (t.bn == u.bn && t.bm == u.bm),
                "64 KiB hd%d mfma %d: %dx%d with every tile, %dx%d with the bundle's", d, mfma,
                all ? t.bn : u.bn, all ? t.bm : u.bm, all ? u.bn : t.bn, all ? u.bm : t.bm);
          for (int w = 0; w < 2; ++w)
            if (t.bn == class_tiles[class_of(d)][w][0] && t.bm == class_tiles[class_of(d)][w][1])
              chosen[mfma][2 * class_of(d) + w] = 1;
        }
  for (int mfma = 0; mfma < 2; ++mfma)
    for (int i = 0; i < 6; ++i)
      CHECK(chosen[mfma][i], "%s tile %dx%d of class %d is never chosen",
            mfma ? "matrix" : "generic", class_tiles[i / 2][i % 2][0], class_tiles[i / 2][i % 2][1],
            64 << (i / 2));
  printf("hg_bwd_tiles: %d LDS x family x tile set x head dim runs\n", runs);
}

/* ---- 3. decide and run ---- */

typedef struct launch_log {
  int count;
  char names[8][HG_KERNEL_NAME_LEN];
  unsigned gx[8];
  size_t smem[8];
} launch_log;

static fa_status rec_launch(void *ctx, const char *name, unsigned gx, unsigned gy, unsigned gz,
                            size_t smem, void *stream, const hg_params *p) {
  launch_log *log = ctx;
  (void)gy, (void)gz, (void)stream, (void)p;
  if (log->count < 8) {
    snprintf(log->names[log->count], HG_KERNEL_NAME_LEN, "%s", name);
    log->gx[log->count] = gx;
    log->smem[log->count] = smem;
  }
  ++log->count;
  return FA_OK;
}
static fa_status rec_zero(void *ctx, void *ptr, size_t bytes, void *stream) {
  (void)ctx, (void)ptr, (void)bytes, (void)stream;
  return FA_OK;
}
static fa_status rec_alloc(void *ctx, void **ptr, size_t bytes, void *stream) {
  (void)ctx, (void)bytes, (void)stream;
  *ptr = (void *)(uintptr_t)0x100000;
  return FA_OK;
}
static fa_status rec_release(void *ctx, void *ptr, void *stream) {
  (void)ctx, (void)ptr, (void)stream;
  return FA_OK;
}

static void check_decide_run(void) {
  char names[64][HG_KERNEL_NAME_LEN];
  const int n_names = hg_kernel_names(names, 64, 1);
  /* all: the test plugin's tiles, else the HIP plugin's bundle. */
  static const struct {
    long long lds;
    int d, mfma, det, all;
  } cases[] = {{65536, 128, 1, 0, 0}, {65536, 64, 0, 1, 0},  {65536, 256, 0, 0, 0},
               {61440, 256, 1, 0, 1}, {61440, 200, 0, 0, 1}, {49152, 64, 1, 0, 1},
               {49152, 96, 0, 0, 1},  {32768, 64, 0, 0, 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    const int d = cases[i].d, mfma = cases[i].mfma;
    const hg_target t = {"hip.generic", FA_DEVICE_HIP,  "the test's device",
                         cases[i].lds,  HG_MATRIX_MFMA, cases[i].all};
    req_store s;
    make_req(&s, FA_OP_BACKWARD, d, 4, 2, FA_DEVICE_HIP);
    s.p.kernel_family = mfma ? "mfma" : NULL;
    s.p.deterministic = cases[i].det;
    fa_decision dec;
    hg_decide(&s.r, &t, &dec);
    int bn, bm;
    expected_tile(cases[i].lds, d, mfma, cases[i].all, &bn, &bm);
    CHECK(dec.supported && dec.tile_n == bn && dec.tile_m == bm,
          "lds %lld hd%d mfma %d: supported %d tile %dx%d (expected %dx%d) %s", cases[i].lds, d,
          mfma, dec.supported, dec.tile_n, dec.tile_m, bn, bm, dec.reason);
    launch_log log;
    memset(&log, 0, sizeof log);
    const hg_runtime rt = {&log, rec_launch, rec_zero, rec_alloc, rec_release};
    CHECK(hg_run(&rt, &s.r, &dec, NULL) == FA_OK && log.count == 3, "run: %d launches", log.count);
    char want[HG_KERNEL_NAME_LEN];
    snprintf(want, sizeof want, "hg_bwd_main_%sbf16_hd%d_n%d_m%d", mfma ? "mfma_" : "",
             64 << class_of(d), bn, bm);
    /* seqlen_k 70: ceil(70 / BN) key tiles, or one block per KV head when deterministic */
    const unsigned gx = cases[i].det ? 1u : (unsigned)((70 + bn - 1) / bn);
    CHECK(!strcmp(log.names[1], want) && log.gx[1] == gx &&
              (long long)log.smem[1] == layout_bytes(bn, bm, d, mfma),
          "launched %s grid %u smem %zu, expected %s %u %lld", log.names[1], log.gx[1], log.smem[1],
          want, gx, layout_bytes(bn, bm, d, mfma));
    int known = 0;
    for (int k = 0; k < n_names && k < 64; ++k) known |= !strcmp(names[k], want);
    CHECK(cases[i].all || known, "%s is not among the kernels the HIP plugin loads", want);
  }

  /* Unfittable: the backward at head dim 256 needs 33,920 bytes with its smallest tile. */
  const hg_target small = {"cuda.hipgen", FA_DEVICE_CUDA, "a 32 KiB LDS", 32768, HG_MATRIX_MFMA, 1};
  req_store s;
  make_req(&s, FA_OP_BACKWARD, 256, 2, 2, FA_DEVICE_CUDA);
  fa_decision dec;
  hg_decide(&s.r, &small, &dec);
  CHECK(!dec.supported && strstr(dec.reason, "backward at head_dim 256 needs 33920 bytes") &&
            strstr(dec.reason, "smallest tile (16 queries x 16 keys)") &&
            strstr(dec.reason, "a 32 KiB LDS allows 32768"),
        "hd256 on 32 KiB: supported %d, reason '%s'", dec.supported, dec.reason);
  launch_log log;
  memset(&log, 0, sizeof log);
  const hg_runtime rt = {&log, rec_launch, rec_zero, rec_alloc, rec_release};
  const fa_status st = hg_run(&rt, &s.r, &dec, NULL);
  CHECK(st == FA_ERR_UNSUPPORTED && log.count == 0 && strstr(fa_last_error(), "shared memory"),
        "run of the refused decision: %s, %d launches, '%s'", fa_status_string(st), log.count,
        fa_last_error());
  /* The MFMA backward at head dim 128 on 40 KiB: 45,312 bytes with 32 x 32; refused. */
  const hg_target lds40 = {"cuda.hipgen", FA_DEVICE_CUDA, "a 40 KiB LDS", 40960, HG_MATRIX_MFMA, 1};
  make_req(&s, FA_OP_BACKWARD, 128, 2, 2, FA_DEVICE_CUDA);
  s.p.kernel_family = "mfma";
  hg_decide(&s.r, &lds40, &dec);
  CHECK(!dec.supported && strstr(dec.reason, "needs 45312 bytes") &&
            strstr(dec.reason, "(32 queries x 32 keys)"),
        "mfma hd128 on 40 KiB: supported %d, reason '%s'", dec.supported, dec.reason);
  /* The HIP plugin's bundle on 40 KiB: its only tile at head dim 128, 64 x 16, needs 45,184
     bytes in the generic kernel; refused, naming that tile. */
  const hg_target b40 = {"hip.generic", FA_DEVICE_HIP, "a 40 KiB LDS", 40960, HG_MATRIX_MFMA, 0};
  make_req(&s, FA_OP_BACKWARD, 128, 2, 2, FA_DEVICE_HIP);
  hg_decide(&s.r, &b40, &dec);
  CHECK(!dec.supported && strstr(dec.reason, "needs 45184 bytes") &&
            strstr(dec.reason, "(16 queries x 64 keys)") && strstr(dec.reason, "allows 40960"),
        "bundle hd128 on 40 KiB: supported %d, reason '%s'", dec.supported, dec.reason);
}

int main(void) {
  check_plan_values();
  check_plan_properties();
  check_tiles();
  check_decide_run();
  printf("test_hip_bwd_tiles: %s (%d failure%s)\n", hip_test_failures ? "FAILED" : "passed",
         hip_test_failures, hip_test_failures == 1 ? "" : "s");
  return hip_test_failures ? 1 : 0;
}
