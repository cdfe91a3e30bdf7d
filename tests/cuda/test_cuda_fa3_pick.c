/*
 * test_cuda_fa3_pick.c: the FlashAttention-3 forward's host-side choices
 * (backends/cuda/fa3_sm90/fa3_host.c), no GPU needed: which head dims fa3 runs and at which padded
 * head dim, the default configuration per head dim, mask and key count (the measured rules of
 * bench/NOTES.md), the fallback to a configuration that fits a smaller shared memory, lookups by
 * name, the configuration table's own consistency, and a launch with a configuration of another
 * head dim refused before anything reaches the device; and the backward's (fa3_bwd_host.c): its
 * head dims, sizing and shared memory, and the launch refusing what it has no kernel for. The
 * kernels' entry points (and fa2's backward steps) are stubs here.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/fa3_sm90/fa3_args.h"
#include "backends/cuda/fa3_sm90/tma_map.h"
#include "host_test.h"

/* Stubs for what the kernels' objects and tma_map.c define: a launch here would be a bug. */
static int g_launched = 0;
#define FA3_STUB(name, hd, wgs, bn, flags)           \
  int fa3_fwd_launch_##name(const fa3_fwd_args *a) { \
    (void)a;                                         \
    g_launched = 1;                                  \
    return -1;                                       \
  }                                                  \
  int fa3_fwd_prepare_##name(void) { return -1; }
FA3_FWD_CONFIGS(FA3_STUB)
#undef FA3_STUB
/* The backward's kernels and fa2's steps around them, each a launch. */
#define LAUNCH_STUB(name, arg_type) \
  int name(const arg_type *a) {     \
    (void)a;                        \
    g_launched = 1;                 \
    return -1;                      \
  }
LAUNCH_STUB(fa3_bwd_main_launch_hd64, fa3_bwd_args)
LAUNCH_STUB(fa3_bwd_main_launch_hd128, fa3_bwd_args)
LAUNCH_STUB(fa3_bwd_main_launch_hd256, fa3_bwd_args)
LAUNCH_STUB(fa2_bwd_prologue, fa2_bwd_args)
LAUNCH_STUB(fa2_bwd_convert_dq_launch, fa2_bwd_args)
#undef LAUNCH_STUB
void fa2_bwd_carve(fa2_bwd_args *a, void *workspace) {
  (void)a, (void)workspace;
  g_launched = 1;
}
int fa_tma_map(void *map, int bf16, const void *base, int rank, const uint64_t *dims,
               const uint64_t *strides, const uint32_t *box, char *err, size_t err_len) {
  (void)map, (void)bf16, (void)base, (void)rank, (void)dims, (void)strides, (void)box;
  snprintf(err, err_len, "stub");
  return -1;
}
int fa_tma_map_f32_2d(void *map, const void *base, uint64_t cols, uint64_t rows,
                      uint64_t row_stride_bytes, uint32_t box_cols, uint32_t box_rows, char *err,
                      size_t err_len) {
  (void)map, (void)base, (void)cols, (void)rows, (void)row_stride_bytes, (void)box_cols;
  (void)box_rows;
  snprintf(err, err_len, "stub");
  return -1;
}

enum { H200_SMEM = 232448, A100_SMEM = 166912, SM86_SMEM = 101376 };

static const char *pick_name(int64_t d, int masked, int64_t sk, int64_t limit) {
  const fa3_fwd_config *c = fa3_fwd_pick(d, masked, sk, limit);
  return c ? c->name : "(none)";
}

static void expect_pick(int64_t d, int masked, int64_t sk, const char *want) {
  const char *got = pick_name(d, masked, sk, H200_SMEM);
  EXPECT(!strcmp(got, want), "hd%lld masked %d seqlen_k %lld: picked %s, expected %s", (long long)d,
         masked, (long long)sk, got, want);
}

/* 16 heads x 16 x 1024 queries (the sweep's hd128 1k shape), seqlen_k keys, core/math/mask.h's
   window sides (-1: unbounded). */
static fa2_problem problem(int32_t seqlen_k, int64_t left, int64_t right) {
  fa2_problem p;
  memset(&p, 0, sizeof p);
  p.batch = 16, p.heads_q = p.heads_kv = 16, p.seqlen_q = 1024, p.seqlen_k = seqlen_k;
  p.head_dim = 128;
  p.mask.left = left, p.mask.right = right;
  return p;
}

int main(void) {
  const fa2_problem open_1k = problem(1024, -1, -1), causal_1k = problem(1024, -1, 0);
  const fa2_problem left_1k = problem(1024, 256, -1), open_128 = problem(128, -1, -1);
  const fa2_problem open_256 = problem(256, -1, -1);
  /* Head dims: 64, 96, 128, 192, 256 (96 and 192 on the 128 and 256 kernels), nothing else. */
  const int64_t dims[][2] = {{64, 64}, {96, 128}, {128, 128}, {192, 256}, {256, 256},
                             {0, 0},   {8, 0},    {32, 0},    {72, 0},    {80, 0},
                             {160, 0}, {200, 0},  {224, 0},   {512, 0},   {-64, 0}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i)
    EXPECT(fa3_fwd_padded_head_dim(dims[i][0]) == dims[i][1], "padded head dim of %lld: %d",
           (long long)dims[i][0], fa3_fwd_padded_head_dim(dims[i][0]));

  /* The measured defaults on an H200 (227 KiB of shared memory). */
  expect_pick(64, 0, 1024, "hd64_3x128_oppqo3rx");
  expect_pick(64, 0, 16384, "hd64_3x128_oppqo3rx");
  expect_pick(64, 1, 512, "hd64_3x128_opdqo3rxt");
  expect_pick(64, 1, 1023, "hd64_3x128_opdqo3rxt");
  expect_pick(64, 1, 1024, "hd64_3x128_opdqo3rxtl");
  expect_pick(64, 1, 16384, "hd64_3x128_opdqo3rxtl");
  expect_pick(128, 0, 512, "hd128_2x128_oppqowx");
  expect_pick(96, 0, 8192, "hd128_2x128_oppqowx");
  expect_pick(128, 0, 8193, "hd128_2x128_oppqowx");
  expect_pick(128, 1, 1024, "hd128_2x128_opdqowx");
  expect_pick(96, 1, 100, "hd128_2x128_opdqowx");
  expect_pick(128, 1, 8192, "hd128_2x128_opdqowx");
  expect_pick(128, 1, 8193, "hd128_2x128_opdqowx");
  expect_pick(256, 0, 8192, "hd256_2x80_opposwx");
  expect_pick(192, 0, 100, "hd256_2x80_opposwx");
  expect_pick(256, 1, 4096, "hd256_2x80_opdosxt");
  expect_pick(192, 1, 1000, "hd256_2x80_opdosxt");
  expect_pick(256, 1, 4097, "hd256_2x80_opdosx");
  expect_pick(256, 1, 8192, "hd256_2x80_opdosx");
  expect_pick(192, 1, 16384, "hd256_2x80_opdosx");
  expect_pick(72, 0, 1024, "(none)");

  /* Every plan core/plan makes is compiled (no silent fallback to another configuration). */
  for (int64_t d = 64; d <= 256; d *= 2)
    for (int masked = 0; masked < 2; ++masked)
      for (int64_t sk = 1; sk <= (1 << 20); sk = sk * 2 + (sk & 1)) {
        const fa3_fwd_config *c = fa3_fwd_planned(d, masked, sk);
        EXPECT(c != NULL, "hd%lld masked %d seqlen_k %lld: the plan has no compiled configuration",
               (long long)d, masked, (long long)sk);
      }

  /* GQA packing: query heads of one K/V head per tile, a power of two dividing the group, while
     each keeps seqlen_q rows and a multiple of 8. */
  const fa3_fwd_config *c128 = fa3_fwd_config_for(128, "hd128_2x128_oppqo");
  const fa3_fwd_config *c192 = fa3_fwd_config_for(64, "hd64_3x128_oppqo3");
  const struct {
    const fa3_fwd_config **c;
    int64_t hq, hkv, sq;
    int want;
  } packs[] = {
      {&c128, 32, 32, 1, 1}, {&c128, 32, 4, 1, 8},  {&c128, 32, 4, 16, 8}, {&c128, 32, 4, 17, 4},
      {&c128, 32, 4, 64, 2}, {&c128, 32, 4, 65, 1}, {&c128, 10, 2, 1, 1},  {&c128, 16, 1, 1, 16},
      {&c128, 32, 1, 1, 16}, {&c128, 12, 2, 1, 2},  {&c192, 16, 1, 1, 8},  {&c192, 16, 1, 24, 8},
      {&c192, 16, 1, 25, 4}, {&c192, 6, 2, 96, 1},  {&c192, 8, 2, 96, 2},  {&c128, 8, 2, 2000, 1},
  };
  for (size_t i = 0; i < sizeof packs / sizeof packs[0]; ++i) {
    const int got = fa3_fwd_pack(*packs[i].c, packs[i].hq, packs[i].hkv, packs[i].sq);
    EXPECT(got == packs[i].want, "pack of %s, heads %lld:%lld, seqlen_q %lld: %d, expected %d",
           (*packs[i].c)->name, (long long)packs[i].hq, (long long)packs[i].hkv,
           (long long)packs[i].sq, got, packs[i].want);
  }

  /* Less shared memory: the first configuration of the head dim that fits, or none. */
  const int64_t limits[] = {A100_SMEM, SM86_SMEM, 80000, 0};
  const int64_t hds[] = {64, 96, 128, 192, 256};
  for (size_t l = 0; l < sizeof limits / sizeof limits[0]; ++l)
    for (size_t h = 0; h < sizeof hds / sizeof hds[0]; ++h)
      for (int masked = 0; masked < 2; ++masked) {
        const fa3_fwd_config *c = fa3_fwd_pick(hds[h], masked, 2048, limits[l]);
        int count, fits = 0;
        const fa3_fwd_config *all = fa3_fwd_configs(&count);
        for (int i = 0; i < count; ++i)
          fits |= all[i].head_dim_padded == fa3_fwd_padded_head_dim(hds[h]) &&
                  (int64_t)all[i].smem_bytes <= limits[l];
        EXPECT(!c == !fits, "hd%lld limit %lld: %s, but a fitting configuration %s",
               (long long)hds[h], (long long)limits[l], c ? c->name : "none",
               fits ? "exists" : "does not exist");
        if (c)
          EXPECT((int64_t)c->smem_bytes <= limits[l] &&
                     c->head_dim_padded == fa3_fwd_padded_head_dim(hds[h]),
                 "hd%lld limit %lld: %s needs %zu bytes", (long long)hds[h], (long long)limits[l],
                 c->name, c->smem_bytes);
      }
  EXPECT(fa3_fwd_pick(128, 0, 1024, A100_SMEM) != NULL, "an A100's limit keeps fa3 at hd128");
  EXPECT(fa3_fwd_pick(256, 0, 1024, A100_SMEM) == NULL, "an A100's limit leaves hd256 to fa2");

  /* Lookups by name: only within the head dim. */
  EXPECT(fa3_fwd_config_for(128, "hd128_2x128_opo") != NULL, "hd128_2x128_opo by name");
  EXPECT(fa3_fwd_config_for(96, "hd128_2x128_opo") != NULL, "hd96 takes the hd128 configurations");
  EXPECT(fa3_fwd_config_for(64, "hd128_2x128_opo") == NULL, "another head dim's name");
  EXPECT(fa3_fwd_config_for(128, "hd128_2x128_op") == NULL, "a prefix of a name");
  EXPECT(fa3_fwd_config_for(128, "nosuch") == NULL, "an unknown name");
  EXPECT(fa3_fwd_config_for(72, NULL) == NULL, "no configuration at hd72");

  /* The table: unique names with their head dim as prefix, tiles wgmma and TMA can take, shared
     memory as the formula says and within an H100/H200's, every flag set overlapping. */
  int count;
  const fa3_fwd_config *all = fa3_fwd_configs(&count);
  EXPECT(count > 0, "no configurations");
  for (int i = 0; i < count; ++i) {
    const fa3_fwd_config *c = &all[i];
    char prefix[16];
    snprintf(prefix, sizeof prefix, "hd%d_", c->head_dim_padded);
    EXPECT(!strncmp(c->name, prefix, strlen(prefix)), "%s: name without its head dim", c->name);
    for (int j = 0; j < i; ++j) EXPECT(strcmp(c->name, all[j].name) != 0, "%s twice", c->name);
    EXPECT(c->tile_m == 64 * c->warpgroups && (c->warpgroups == 2 || c->warpgroups == 3),
           "%s: tile_m %d for %d consumers", c->name, c->tile_m, c->warpgroups);
    EXPECT(c->tile_n % 16 == 0 && c->tile_n >= 16 && c->tile_n <= 256, "%s: tile_n %d", c->name,
           c->tile_n);
    EXPECT(c->smem_bytes == FA3_FWD_SMEM(c->head_dim_padded, c->warpgroups, c->tile_n, c->flags),
           "%s: smem %zu", c->name, c->smem_bytes);
    EXPECT(c->smem_bytes <= H200_SMEM, "%s: %zu bytes of shared memory", c->name, c->smem_bytes);
    EXPECT(c->flags & FA3_OVERLAP, "%s: no overlap", c->name);
    EXPECT(!(c->flags & FA3_DYNAMIC) || (c->flags & FA3_PERSISTENT),
           "%s: dynamic schedule without persistent", c->name);
    /* A dynamic schedule's tile counter, or TAILSPLIT's pieces where it splits, is the only
       forward workspace: none under a mask but the counter. */
    const size_t ws_masked = fa3_fwd_workspace_bytes(c, &causal_1k, 132);
    EXPECT(ws_masked == ((c->flags & FA3_DYNAMIC) ? sizeof(int32_t) : 0),
           "%s: workspace %zu bytes under a mask", c->name, ws_masked);
    if (!(c->flags & FA3_TAILSPLIT)) {
      const size_t ws = fa3_fwd_workspace_bytes(c, &open_1k, 132);
      EXPECT(ws == ((c->flags & FA3_DYNAMIC) ? sizeof(int32_t) : 0), "%s: workspace %zu bytes",
             c->name, ws);
    }
    EXPECT(c->launch && c->prepare, "%s: no entry points", c->name);
    /* OSTAGE: two consumers' outputs in a K and a V stage, stored by the store thread. */
    EXPECT(!(c->flags & FA3_OSTAGE) ||
               ((c->flags & FA3_OSTORE) && c->warpgroups == 2 && c->tile_n >= 64),
           "%s: OSTAGE without OSTORE, two consumers and 64 keys a tile", c->name);
    /* STAGGER replaces the turns of two consumers (the kernel's static_assert says so too). */
    EXPECT(!(c->flags & FA3_STAGGER) || (c->warpgroups == 2 && !(c->flags & FA3_PINGPONG)),
           "%s: STAGGER with turns or without two consumers", c->name);
    /* A pinned configuration keeps its unpinned twin (the A/B that justifies pinning). SPLITMAX
       and TAILSPLIT are left out of the match: each was measured on top of the pinned kernel,
       against the same kernel without it, so the unpinned twin predates them. */
    int twin = !(c->flags & FA3_PINNED);
    for (int j = 0; j < count && !twin; ++j)
      twin = all[j].head_dim_padded == c->head_dim_padded && all[j].tile_m == c->tile_m &&
             all[j].tile_n == c->tile_n &&
             (all[j].flags & ~(FA3_SPLITMAX | FA3_TAILSPLIT)) ==
                 (c->flags & ~(FA3_PINNED | FA3_SPLITMAX | FA3_TAILSPLIT));
    EXPECT(twin, "%s: no unpinned twin", c->name);
  }
  EXPECT(fa3_fwd_workspace_bytes(NULL, &open_1k, 132) == 0, "workspace of no configuration");

  /* TAILSPLIT: hd128 without a mask, 16 heads x 16 x 1k: 2048 tiles of 128 rows on 132 blocks
     leave 68 in the last round, 8 key tiles each; 68 + 132 slots of 128 x 128 fp32 outputs and
     128 LSEs, 68 counters, each part 256-byte aligned. */
  const fa3_fwd_config *k128 = fa3_fwd_config_for(128, "hd128_2x128_oppqowxk");
  EXPECT(k128 && (k128->flags & FA3_TAILSPLIT), "hd128_2x128_oppqowxk: missing");
  if (k128) {
    EXPECT(fa3_fwd_tail_tiles(k128, &open_1k, 132) == 68, "tail of 2048 / 132");
    EXPECT(fa3_fwd_tail_tiles(k128, &causal_1k, 132) == 0, "tail under a mask");
    EXPECT(fa3_fwd_tail_tiles(k128, &left_1k, 132) == 0, "tail under a window");
    EXPECT(fa3_fwd_tail_tiles(k128, &open_1k, 2048) == 0, "tail of one round");
    EXPECT(fa3_fwd_tail_tiles(k128, &open_1k, 128) == 0, "tail of whole rounds");
    /* 68 tail tiles of one key tile each: fewer units than blocks, some piece would be empty */
    EXPECT(fa3_fwd_tail_tiles(k128, &open_128, 132) == 0, "tail, 128 keys");
    EXPECT(fa3_fwd_tail_tiles(k128, &open_256, 132) == 68, "tail, 256 keys");
    const size_t want = 512 + (size_t)200 * 128 * 4 + (size_t)200 * 128 * 128 * 4;
    EXPECT(fa3_fwd_workspace_bytes(k128, &open_1k, 132) == want,
           "hd128_2x128_oppqowxk: workspace %zu bytes, want %zu",
           fa3_fwd_workspace_bytes(k128, &open_1k, 132), want);
  }

  /* A configuration of another head dim is refused before any launch. */
  fa3_fwd_args x;
  memset(&x, 0, sizeof x);
  x.a.p.head_dim = 64;
  x.a.p.seqlen_q = x.a.p.seqlen_k = x.a.p.batch = x.a.p.heads_q = x.a.p.heads_kv = 1;
  char err[200] = "";
  EXPECT(fa3_fwd_launch(&x, fa3_fwd_config_for(128, NULL), err, sizeof err) == -1 &&
             strstr(err, "head_dim 64") != NULL && !g_launched,
         "mismatched configuration: %s", err);
  EXPECT(fa3_fwd_launch(&x, NULL, err, sizeof err) == -1 && !g_launched, "no configuration");

  /* The backward: head dims 64, 128 and 256 on their own kernels, 96 on the 128 kernel and 192 on
     the 256 one; fa2's workspace in the dQ layout the kernel writes (narrow: rotated, its staging;
     wide: fragments, added from registers), one split (deterministic: the splits asked), no
     balanced last wave; the key tile 128 (narrow) or 64 (wide); shared memory within an H200's
     opt-in at every head dim, within an A100's at 64 only (the conformance suite's limited runs
     then refuse hd128/256 on the A100 limit and all on sm_86's). */
  EXPECT(fa3_bwd_padded_head_dim(64) == 64 && fa3_bwd_padded_head_dim(96) == 128 &&
             fa3_bwd_padded_head_dim(128) == 128 && fa3_bwd_padded_head_dim(192) == 256 &&
             fa3_bwd_padded_head_dim(256) == 256,
         "backward head dims 64, 96 (on 128), 128, 192 (on 256), 256");
  EXPECT(!fa3_bwd_padded_head_dim(32) && !fa3_bwd_padded_head_dim(80) &&
             !fa3_bwd_padded_head_dim(160) && !fa3_bwd_padded_head_dim(224) &&
             !fa3_bwd_padded_head_dim(512),
         "backward: no kernel at 32, 80, 160, 224, 512");
  EXPECT(FA3_BWD_TILE_N(64) == 128 && FA3_BWD_TILE_N(128) == 128 && FA3_BWD_TILE_N(256) == 64,
         "backward key tiles");
  EXPECT(FA3_BWD_SMEM(256) <= H200_SMEM && FA3_BWD_SMEM(256) > A100_SMEM &&
             FA3_BWD_SMEM(128) <= H200_SMEM && FA3_BWD_SMEM(128) > A100_SMEM &&
             FA3_BWD_SMEM(64) <= A100_SMEM && FA3_BWD_SMEM(64) > SM86_SMEM,
         "backward shared memory: hd64 %zu, hd128 %zu, hd256 %zu", FA3_BWD_SMEM(64),
         FA3_BWD_SMEM(128), FA3_BWD_SMEM(256));
  fa2_bwd_args sz;
  memset(&sz, 0x5a, sizeof sz); /* poisoned: sizing must set every field it owns */
  sz.p = causal_1k;
  fa3_bwd_sizing(&sz, 0, 5);
  EXPECT(sz.head_dim_padded == 128 && sz.tile_m == FA3_BWD_TILE_M && sz.tile_n == 128 &&
             sz.dq_layout == FA2_DQ_ROTATED && sz.dq_splits == 1 && !sz.deterministic &&
             sz.tail_tiles == 0 && sz.tail_pieces == 0,
         "fa3_bwd_sizing: not deterministic, one accumulator whatever the splits asked");
  memset(&sz, 0x5a, sizeof sz);
  sz.p = causal_1k;
  fa3_bwd_sizing(&sz, 1, 5);
  EXPECT(sz.dq_splits == 5 && sz.deterministic == 1 && sz.tail_tiles == 0,
         "fa3_bwd_sizing: deterministic, five splits");
  fa3_bwd_sizing(&sz, 1, 0);
  EXPECT(sz.dq_splits == 1 && sz.deterministic == 1, "fa3_bwd_sizing: deterministic, one split");
  fa3_bwd_args xb;
  memset(&xb, 0, sizeof xb);
  xb.a.p = causal_1k;
  xb.a.p.head_dim = 160;
  fa3_bwd_sizing(&xb.a, 0, 1);
  EXPECT(fa3_bwd_launch(&xb, NULL, err, sizeof err) == -1 && strstr(err, "head_dim 160") != NULL &&
             !g_launched,
         "backward at head_dim 160: %s", err);
  /* 192 and 256: the wide kernel's sizing (64-key tiles, the fragment layout, 256 columns); an
     accumulator in the narrow kernels' layout, or the narrow key tile, is refused before anything
     runs */
  for (int d = 192; d <= 256; d += 64) {
    xb.a.p.head_dim = d;
    memset(&xb.a.head_dim_padded, 0x5a, sizeof xb.a.head_dim_padded);
    fa3_bwd_sizing(&xb.a, 0, 1);
    EXPECT(xb.a.head_dim_padded == 256 && xb.a.tile_n == 64 && xb.a.dq_layout == FA2_DQ_FRAGMENT,
           "hd%d's sizing: %d columns, key tile %d, layout %d", d, xb.a.head_dim_padded,
           xb.a.tile_n, xb.a.dq_layout);
    EXPECT(fa3_bwd_launch(&xb, NULL, err, sizeof err) == -1 && !strcmp(err, "stub") && !g_launched,
           "backward at head_dim %d reaches the tensor maps: %s", d, err);
    xb.a.dq_layout = FA2_DQ_ROTATED;
    EXPECT(fa3_bwd_launch(&xb, NULL, err, sizeof err) == -1 && strcmp(err, "stub") && !g_launched,
           "backward at head_dim %d with the rotated layout: %s", d, err);
    fa3_bwd_sizing(&xb.a, 0, 1);
    xb.a.tile_n = 128;
    EXPECT(fa3_bwd_launch(&xb, NULL, err, sizeof err) == -1 && strcmp(err, "stub") && !g_launched,
           "backward at head_dim %d with 128-key tiles: %s", d, err);
  }
  /* 96: sized for the 128 kernel (its dQ accumulator 128 columns wide); an accumulator sized
     otherwise is refused before anything runs */
  xb.a.p.head_dim = 96;
  fa3_bwd_sizing(&xb.a, 0, 1);
  EXPECT(xb.a.head_dim_padded == 128, "hd96's accumulator: %d columns", xb.a.head_dim_padded);
  xb.a.head_dim_padded = 96;
  EXPECT(fa3_bwd_launch(&xb, NULL, err, sizeof err) == -1 && !g_launched,
         "backward at head_dim 96 with a 96-column accumulator: %s", err);
  fa3_bwd_sizing(&xb.a, 0, 1);
  EXPECT(fa3_bwd_launch(&xb, NULL, err, sizeof err) == -1 && !strcmp(err, "stub") && !g_launched,
         "backward at head_dim 96 reaches the tensor maps: %s", err);
  xb.a.p.head_dim = 128;
  fa3_bwd_sizing(&xb.a, 0, 1);
  xb.a.dq_splits = 2;
  EXPECT(fa3_bwd_launch(&xb, NULL, err, sizeof err) == -1 && !g_launched,
         "backward with two dQ splits but not deterministic: %s", err);
  /* the tensor maps fail (stubbed here): nothing is carved or launched */
  xb.a.dq_splits = 1;
  EXPECT(fa3_bwd_launch(&xb, NULL, err, sizeof err) == -1 && !strcmp(err, "stub") && !g_launched,
         "backward, maps refused: %s", err);
  fa3_bwd_sizing(&xb.a, 1, 3);
  EXPECT(fa3_bwd_launch(&xb, NULL, err, sizeof err) == -1 && !strcmp(err, "stub") && !g_launched,
         "deterministic backward (three splits), maps refused: %s", err);
  /* the persistent grid: hd64 and hd128, not deterministic, without a mask or under one with at
     most FA3_BWD_PERSISTENT_MASKED_TILES key tiles; at most a block per key tile */
  fa2_bwd_args pg;
  memset(&pg, 0, sizeof pg);
  pg.p = open_1k;
  pg.p.head_dim = 64;
  const int32_t tiles = (pg.p.seqlen_k + 127) / 128 * pg.p.heads_kv * pg.p.batch;
  EXPECT(fa3_bwd_grid_blocks(&pg, 64, 132, 0) == (tiles < 132 ? tiles : 132) &&
             fa3_bwd_grid_blocks(&pg, 64, 2, 0) == 2 &&
             fa3_bwd_grid_blocks(&pg, 64, 1 << 30, 0) == tiles &&
             fa3_bwd_grid_blocks(&pg, 64, 0, 0) == 0 && fa3_bwd_grid_blocks(&pg, 64, -3, 0) == 0,
         "persistent grid at hd64 without a mask (%d key tiles)", tiles);
  EXPECT(fa3_bwd_grid_blocks(&pg, 128, 132, 0) == (tiles < 132 ? tiles : 132) &&
             fa3_bwd_grid_blocks(&pg, 256, 132, 0) == 0,
         "persistent grid at hd128 (one K/V buffer), none at hd256");
  int32_t chunk = -1, reverse = -1;
  fa3_bwd_sched(&pg, 64, &chunk, &reverse);
  EXPECT(chunk == 0 && reverse == 0, "no mask: the key tile fastest (%d, %d)", chunk, reverse);
  pg.deterministic = 1;
  EXPECT(fa3_bwd_grid_blocks(&pg, 64, 132, 0) == 0 && fa3_bwd_grid_blocks(&pg, 64, 132, 1) == 0,
         "no persistent grid when deterministic, fixed or dynamic");
  pg.deterministic = 0;
  pg.p.seqlen_k = 0;
  EXPECT(fa3_bwd_grid_blocks(&pg, 64, 132, 0) == 0, "no persistent grid without keys");
  /* under a mask: up to 8 key tiles (1024 keys) */
  pg.p = causal_1k;
  pg.p.head_dim = 64;
  EXPECT(fa3_bwd_grid_blocks(&pg, 64, 132, 0) == 132, "persistent grid, causal, 1024 keys");
  fa3_bwd_sched(&pg, 64, &chunk, &reverse);
  /* 256 pairs whose Q and dO take 1024 x 64 x 2 x 2 bytes each: 96 of them make 24 MB */
  EXPECT(chunk == 96 && reverse == 0, "causal: chunks of %d pairs, reverse %d", chunk, reverse);
  pg.p.seqlen_k = 1025;
  EXPECT(fa3_bwd_grid_blocks(&pg, 64, 132, 0) == 0, "no fixed deal, causal, 1025 keys");
  /* the dynamic schedule: under a mask at any length, the narrow kernels only, not deterministic */
  pg.p.seqlen_k = 16384;
  EXPECT(fa3_bwd_grid_blocks(&pg, 64, 132, 1) == 132 && fa3_bwd_grid_blocks(&pg, 64, 132, 0) == 0 &&
             fa3_bwd_grid_blocks(&pg, 128, 132, 1) == 132 &&
             fa3_bwd_grid_blocks(&pg, 256, 132, 1) == 0 && fa3_bwd_grid_blocks(&pg, 64, 0, 1) == 0,
         "dynamic schedule, causal, 16384 keys");
  pg.deterministic = 1;
  EXPECT(fa3_bwd_grid_blocks(&pg, 64, 132, 1) == 0, "no dynamic schedule when deterministic");
  pg.deterministic = 0;
  /* its counter: the sizing asks fa2's workspace for one (fa2_bwd_carve places it) */
  fa2_bwd_args ws;
  memset(&ws, 0, sizeof ws);
  ws.p = causal_1k;
  ws.p.head_dim = 64;
  fa3_bwd_sizing(&ws, 0, 1);
  EXPECT(ws.sched_counters == 1, "the dynamic schedule's counter in the sizing (%d)",
         (int)ws.sched_counters);
  pg.p = left_1k; /* a left bound only: the last key tiles are the longest */
  pg.p.head_dim = 64;
  EXPECT(fa3_bwd_grid_blocks(&pg, 64, 132, 0) == 132, "persistent grid, left window, 1024 keys");
  fa3_bwd_sched(&pg, 64, &chunk, &reverse);
  EXPECT(chunk == 96 && reverse == 1, "left window: chunks of %d pairs, reverse %d", chunk,
         reverse);

  printf("%s\n", g_failed ? "cuda.fa3_pick: FAILED" : "cuda.fa3_pick: all passed");
  return g_failed;
}
