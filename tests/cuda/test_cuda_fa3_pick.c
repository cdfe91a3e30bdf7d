/*
 * test_cuda_fa3_pick.c: the FlashAttention-3 host-side choices, no GPU needed: which head dims
 * fa3 runs and at which padded head dim, the forward's configuration per head dim, mask and key
 * count (fa3_tile_size.h), the low-memory configurations where shared memory is smaller, the
 * table's own consistency, GQA packing, the workspace, and a launch with a configuration of
 * another head dim refused before anything reaches the device; and the backward's
 * (fa3_bwd_host.c): its head dims, sizing and shared memory, the persistent grid and its order,
 * and the launch refusing what it has no kernel for. The kernels' entry points (and fa2's
 * backward steps) are stubs here.
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
LAUNCH_STUB(cuda_bwd_prologue, cuda_bwd_args)
LAUNCH_STUB(cuda_bwd_convert_dq_launch, cuda_bwd_args)
void cuda_bwd_carve(cuda_bwd_args *a, void *workspace) {
  (void)a, (void)workspace;
  g_launched = 1;
}
/* The last map asked for (rank 4 here), kept for the checks of what the host describes. */
static struct {
  const void *base;
  uint64_t dims[4], strides[3];
  uint32_t box[4];
} g_map;
int fa_tma_map(void *map, int bf16, const void *base, int rank, const uint64_t *dims,
               const uint64_t *strides, const uint32_t *box, char *err, size_t err_len) {
  (void)map, (void)bf16;
  g_map.base = base;
  for (int i = 0; i < rank && i < 4; ++i) {
    g_map.dims[i] = dims[i];
    g_map.box[i] = box[i];
    if (i < 3) g_map.strides[i] = strides[i];
  }
  snprintf(err, err_len, "stub");
  return -1;
}
int fa_tma_map_u8(void *map, const void *base, int rank, const uint64_t *dims,
                  const uint64_t *strides, const uint32_t *box, uint32_t swizzle_bytes, char *err,
                  size_t err_len) {
  (void)map, (void)base, (void)rank, (void)dims, (void)strides, (void)box, (void)swizzle_bytes;
  snprintf(err, err_len, "stub");
  return -1;
}
/* The FP8 forward's pre-pass, a launch. */
LAUNCH_STUB(fa3_fp8_vt_launch, fa3_fwd_args)
#undef LAUNCH_STUB
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
  const fa3_fwd_config *c = fa3_fwd_config_of(fa3_fwd_tile_size(d, masked, sk, limit));
  return c ? c->name : "(none)";
}

static void expect_pick(int64_t d, int masked, int64_t sk, const char *want) {
  const char *got = pick_name(d, masked, sk, H200_SMEM);
  EXPECT(!strcmp(got, want), "hd%lld masked %d seqlen_k %lld: picked %s, expected %s", (long long)d,
         masked, (long long)sk, got, want);
}

/* 16 heads x 16 x 1024 queries (the sweep's hd128 1k shape), seqlen_k keys, core/math/mask.h's
   window sides (-1: unbounded). */
static cuda_problem problem(int32_t seqlen_k, int64_t left, int64_t right) {
  cuda_problem p;
  memset(&p, 0, sizeof p);
  p.batch = 16, p.heads_q = p.heads_kv = 16, p.seqlen_q = 1024, p.seqlen_k = seqlen_k;
  p.head_dim = 128;
  p.mask.left = left, p.mask.right = right;
  return p;
}

int main(void) {
  const cuda_problem causal_1k = problem(1024, -1, 0), left_1k = problem(1024, 256, -1);
  const cuda_problem open_1k = problem(1024, -1, -1);
  /* Head dims: 64, 96, 128, 192, 256 (96 and 192 on the 128 and 256 kernels), nothing else. */
  const int64_t dims[][2] = {{64, 64}, {96, 128}, {128, 128}, {192, 256}, {256, 256},
                             {0, 0},   {8, 0},    {32, 0},    {72, 0},    {80, 0},
                             {160, 0}, {200, 0},  {224, 0},   {512, 0},   {-64, 0}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i)
    EXPECT(fa3_fwd_padded_head_dim(dims[i][0]) == dims[i][1], "padded head dim of %lld: %d",
           (long long)dims[i][0], fa3_fwd_padded_head_dim(dims[i][0]));

  /* The measured picks on an H200 (227 KiB of shared memory). */
  expect_pick(64, 0, 1024, "hd64");
  expect_pick(64, 0, 16384, "hd64");
  expect_pick(64, 1, 512, "hd64_masked_short");
  expect_pick(64, 1, 1023, "hd64_masked_short");
  expect_pick(64, 1, 1024, "hd64_masked");
  expect_pick(64, 1, 16384, "hd64_masked");
  expect_pick(128, 0, 512, "hd128");
  expect_pick(96, 0, 8192, "hd128");
  expect_pick(128, 0, 8193, "hd128");
  expect_pick(128, 1, 1024, "hd128_masked");
  expect_pick(96, 1, 100, "hd128_masked");
  expect_pick(128, 1, 8193, "hd128_masked");
  expect_pick(256, 0, 8192, "hd256");
  expect_pick(192, 0, 100, "hd256");
  expect_pick(256, 1, 512, "hd256_masked_bn64");
  expect_pick(192, 1, 1000, "hd256_masked_bn64");
  expect_pick(256, 1, 1024, "hd256_masked_bn64");
  expect_pick(256, 1, 1025, "hd256_masked_short");
  expect_pick(256, 1, 4096, "hd256_masked_short");
  expect_pick(256, 1, 4097, "hd256_masked");
  expect_pick(192, 1, 16384, "hd256_masked");
  expect_pick(72, 0, 1024, "(none)");
  EXPECT(fa3_fwd_config_of(-1) == NULL && fa3_fwd_config_of(FA3_FWD_CONFIG_COUNT) == NULL,
         "no configuration outside the table");

  /* Every configuration of the table is a pick somewhere (nothing compiled that no call runs):
     the H200's picks over masks and key counts, and the low-memory ones at smaller limits. */
  int picked[FA3_FWD_CONFIG_COUNT] = {0};
  const int64_t limits[] = {H200_SMEM, A100_SMEM, SM86_SMEM, 80000, 0};
  for (size_t l = 0; l < sizeof limits / sizeof limits[0]; ++l)
    for (int64_t d = 64; d <= 256; d *= 2)
      for (int masked = 0; masked < 2; ++masked)
        for (int64_t sk = 1; sk <= (1 << 20); sk = sk * 2 + (sk & 1)) {
          const int id = fa3_fwd_tile_size(d, masked, sk, limits[l]);
          if (id >= 0) picked[id] = 1;
          /* every pick fits the limit and serves the head dim; none where nothing fits */
          const fa3_fwd_config *c = fa3_fwd_config_of(id);
          int fits = 0;
          for (int i = 0; i < FA3_FWD_CONFIG_COUNT; ++i)
            fits |= fa3_fwd_config_of(i)->head_dim_padded == d &&
                    !(fa3_fwd_config_of(i)->flags & FA3_FP8) &&
                    (int64_t)fa3_fwd_config_of(i)->smem_bytes <= limits[l];
          EXPECT(!c == !fits, "hd%lld limit %lld: %s, but a fitting configuration %s", (long long)d,
                 (long long)limits[l], c ? c->name : "none", fits ? "exists" : "does not exist");
          if (c)
            EXPECT((int64_t)c->smem_bytes <= limits[l] && c->head_dim_padded == d,
                   "hd%lld limit %lld: %s needs %zu bytes", (long long)d, (long long)limits[l],
                   c->name, c->smem_bytes);
        }
  EXPECT(!strcmp(pick_name(128, 0, 1024, A100_SMEM), "hd128_low_smem"),
         "an A100's limit keeps fa3 at hd128");
  EXPECT(!strcmp(pick_name(64, 1, 1024, A100_SMEM), "hd64_masked") &&
             !strcmp(pick_name(64, 1, 1024, SM86_SMEM), "hd64_low_smem"),
         "an A100's limit keeps the hd64 picks, sm_86's the low-memory one");
  EXPECT(fa3_fwd_tile_size(256, 0, 1024, A100_SMEM) < 0, "an A100's limit leaves hd256 to fa2");

  /* The forward over sequences: one configuration per kernel head dim, where it fits. */
  const struct {
    int64_t d, limit;
    const char *want;
  } seq_picks[] = {{64, H200_SMEM, "hd64_seqs"},   {96, H200_SMEM, "hd128_seqs"},
                   {128, H200_SMEM, "hd128_seqs"}, {192, H200_SMEM, "hd256_seqs"},
                   {256, H200_SMEM, "hd256_seqs"}, {72, H200_SMEM, "(none)"},
                   {256, A100_SMEM, "(none)"},     {64, SM86_SMEM, "(none)"}};
  for (size_t i = 0; i < sizeof seq_picks / sizeof seq_picks[0]; ++i) {
    const int id = fa3_fwd_seqs_tile_size(seq_picks[i].d, seq_picks[i].limit);
    const fa3_fwd_config *c = fa3_fwd_config_of(id);
    const char *got = c ? c->name : "(none)";
    EXPECT(!strcmp(got, seq_picks[i].want), "sequences at hd%lld, limit %lld: %s, expected %s",
           (long long)seq_picks[i].d, (long long)seq_picks[i].limit, got, seq_picks[i].want);
    if (id >= 0) picked[id] = 1;
  }

  /* The FP8 forward: one configuration at head dims 64, 128 and 256 (no padded head dims: its
     kernel reads no columns past the head dim), FP8 only, where it fits; an H200 and an H100
     take all three, an A100's limit hd64 and hd128 only. */
  const struct {
    int64_t d, limit;
    const char *want;
  } fp8_picks[] = {{64, H200_SMEM, "hd64_fp8"},   {128, H200_SMEM, "hd128_fp8"},
                   {256, H200_SMEM, "hd256_fp8"}, {96, H200_SMEM, "(none)"},
                   {192, H200_SMEM, "(none)"},    {32, H200_SMEM, "(none)"},
                   {256, A100_SMEM, "(none)"},    {128, A100_SMEM, "hd128_fp8"},
                   {64, SM86_SMEM, "hd64_fp8"},   {128, SM86_SMEM, "(none)"}};
  for (size_t i = 0; i < sizeof fp8_picks / sizeof fp8_picks[0]; ++i) {
    const int id = fa3_fwd_fp8_tile_size(fp8_picks[i].d, fp8_picks[i].limit);
    const fa3_fwd_config *c = fa3_fwd_config_of(id);
    const char *got = c ? c->name : "(none)";
    EXPECT(!strcmp(got, fp8_picks[i].want), "FP8 at hd%lld, limit %lld: %s, expected %s",
           (long long)fp8_picks[i].d, (long long)fp8_picks[i].limit, got, fp8_picks[i].want);
    EXPECT(!c || (c->flags & FA3_FP8), "FP8 at hd%lld: %s is no FP8 configuration",
           (long long)fp8_picks[i].d, got);
    if (id >= 0) picked[id] = 1;
  }
  for (int64_t d = 64; d <= 256; d *= 2)
    for (int64_t sk = 1; sk <= (1 << 20); sk = sk * 2 + 1)
      for (int masked = 0; masked < 2; ++masked) {
        const fa3_fwd_config *c = fa3_fwd_config_of(fa3_fwd_tile_size(d, masked, sk, H200_SMEM));
        EXPECT(c && !(c->flags & FA3_FP8), "f16/bf16 hd%lld: picked an FP8 configuration",
               (long long)d);
      }

  for (int i = 0; i < FA3_FWD_CONFIG_COUNT; ++i)
    EXPECT(picked[i], "%s: compiled but never picked", fa3_fwd_config_of(i)->name);

  /* GQA packing: query heads of one K/V head per tile, a power of two dividing the group, while
     each keeps seqlen_q rows and a multiple of 8. */
  const fa3_fwd_config *c128 = fa3_fwd_config_of(FA3_FWD_hd128);
  const fa3_fwd_config *c192 = fa3_fwd_config_of(FA3_FWD_hd64);
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

  /* The table: unique names with their head dim as prefix, in the enum's order, tiles wgmma and
     TMA can take, shared memory as the formula says and within an H100/H200's, the features'
     dependencies as the kernel's static_asserts state them. */
  for (int i = 0; i < FA3_FWD_CONFIG_COUNT; ++i) {
    const fa3_fwd_config *c = fa3_fwd_config_of(i);
    char prefix[16];
    snprintf(prefix, sizeof prefix, "hd%d", c->head_dim_padded);
    EXPECT(!strncmp(c->name, prefix, strlen(prefix)), "%s: name without its head dim", c->name);
    for (int j = 0; j < i; ++j)
      EXPECT(strcmp(c->name, fa3_fwd_config_of(j)->name) != 0, "%s twice", c->name);
    EXPECT(c->tile_m == 64 * c->warpgroups && (c->warpgroups == 2 || c->warpgroups == 3),
           "%s: tile_m %d for %d consumers", c->name, c->tile_m, c->warpgroups);
    EXPECT(c->tile_n % 16 == 0 && c->tile_n >= 16 && c->tile_n <= 256, "%s: tile_n %d", c->name,
           c->tile_n);
    EXPECT(c->smem_bytes == FA3_FWD_SMEM(c->head_dim_padded, c->warpgroups, c->tile_n, c->flags) &&
               c->smem_bytes == fa3_fwd_config_smem(i),
           "%s: smem %zu", c->name, c->smem_bytes);
    EXPECT(c->smem_bytes <= H200_SMEM, "%s: %zu bytes of shared memory", c->name, c->smem_bytes);
    EXPECT(!(c->flags & FA3_DYNAMIC_SCHEDULE) || (c->flags & FA3_PERSISTENT),
           "%s: dynamic schedule without a persistent grid", c->name);
    EXPECT(!(c->flags & FA3_FP8) ||
               (!(c->flags & (FA3_TMA_EPILOGUE | FA3_EPILOGUE_IN_KV_STAGE | FA3_MMA_ROW_SUM |
                              FA3_OWN_KEY_END | FA3_SHORT_BLOCK_FIRST | FA3_SEQS)) &&
                c->tile_n == 128 && strstr(c->name, "_fp8") != NULL),
           "%s: an FP8 configuration stores O from registers, runs dense calls, reads Vᵀ in "
           "128-key rows and says so in its name",
           c->name);
    /* The dynamic schedule's tile counter is the only forward workspace (FP8's Vᵀ comes on top
       of it, cuda_fp8.c). */
    EXPECT(
        fa3_fwd_workspace_bytes(c) == ((c->flags & FA3_DYNAMIC_SCHEDULE) ? 2 * sizeof(int32_t) : 0),
        "%s: workspace %zu bytes", c->name, fa3_fwd_workspace_bytes(c));
    EXPECT(c->launch && c->prepare, "%s: no entry points", c->name);
    EXPECT(!(c->flags & FA3_EPILOGUE_IN_KV_STAGE) ||
               ((c->flags & FA3_TMA_EPILOGUE) && c->warpgroups == 2 && c->tile_n >= 64),
           "%s: O in a K/V stage without the TMA epilogue, two consumers and 64 keys a tile",
           c->name);
    EXPECT(!(c->flags & FA3_SHORT_BLOCK_FIRST) ||
               ((c->flags & FA3_TMA_EPILOGUE) && !(c->flags & FA3_EPILOGUE_IN_KV_STAGE) &&
                c->warpgroups == 3),
           "%s: the short block first needs three consumers and O from the Q buffer", c->name);
    EXPECT(!(c->flags & FA3_OWN_KEY_END) || (c->flags & FA3_TMA_EPILOGUE),
           "%s: a consumer's own key end without the TMA epilogue", c->name);
    EXPECT(!(c->flags & FA3_SEQS) ||
               ((c->flags & FA3_TMA_EPILOGUE) && (c->flags & FA3_DYNAMIC_SCHEDULE) &&
                !(c->flags & FA3_SHORT_BLOCK_FIRST)),
           "%s: sequences need the TMA epilogue and the dynamic schedule, not the short block "
           "first",
           c->name);
    EXPECT(!(c->flags & FA3_MMA_ROW_SUM) ||
               (c->head_dim_padded == 64 && !(c->flags & FA3_PINNED_SOFTMAX)),
           "%s: row sums by the tensor core need V in one box and no pinned softmax", c->name);
  }
  EXPECT(fa3_fwd_workspace_bytes(NULL) == 0, "workspace of no configuration");

  /* A configuration of another head dim is refused before any launch. */
  fa3_fwd_args x;
  memset(&x, 0, sizeof x);
  x.a.p.head_dim = 64;
  x.a.p.seqlen_q = x.a.p.seqlen_k = x.a.p.batch = x.a.p.heads_q = x.a.p.heads_kv = 1;
  char err[200] = "";
  EXPECT(fa3_fwd_launch(&x, fa3_fwd_config_of(FA3_FWD_hd128), err, sizeof err) == -1 &&
             strstr(err, "head_dim 64") != NULL && !g_launched,
         "mismatched configuration: %s", err);
  EXPECT(fa3_fwd_launch(&x, NULL, err, sizeof err) == -1 && !g_launched, "no configuration");

  /* The forward over sequences' views (fa3_seq_views, fa3_seq_tensor_map), as a SEQS launch
     makes them before its maps (here the stub refuses the first map, Q's): packed tensors (batch
     stride 0) span their rows after an extent of the packed total; padded ones their batches'
     rows, the batch stride in rows; a batch stride that is no whole number of rows is refused;
     the map's base moves back by the extent, its outer stride is the row's. */
  const fa3_fwd_config *seqs128 = fa3_fwd_config_of(FA3_FWD_hd128_seqs);
  static int32_t cu[4] = {0, 100, 100, 700};
  memset(&x, 0, sizeof x);
  x.ix.cu_q = x.ix.cu_k = cu;
  x.ix.total_q = 705, x.ix.total_k = 700;
  x.a.p.batch = 3, x.a.p.heads_q = 8, x.a.p.heads_kv = 2, x.a.p.head_dim = 128;
  x.a.p.seqlen_q = x.a.p.seqlen_k = 600;
  const cuda_strides packed_q = {0, 8 * 128, 128}, packed_k = {0, 2 * 128, 128};
  x.a.q_str = x.a.o_str = packed_q;
  x.a.k_str = x.a.v_str = packed_k;
  static uint16_t qbuf[16];
  x.a.q = x.a.k = x.a.v = x.a.out = qbuf + 8; /* 16-byte aligned within qbuf, as TMA needs */
  g_launched = 0;
  EXPECT(fa3_fwd_launch(&x, seqs128, err, sizeof err) == -1 && strstr(err, "stub") && !g_launched &&
             x.q_ext == 705 && x.k_ext == 700 && x.q_batch_rows == 0 && x.k_batch_rows == 0 &&
             x.o_batch_rows == 0 && x.v_batch_rows == 0,
         "packed views: %s", err);
  /* The first map asked is Q's: rows of 128 (no GQA packing at 600 rows), one head a box. */
  EXPECT(g_map.dims[0] == 128 && g_map.dims[1] == 705 && g_map.dims[2] == 8 &&
             g_map.dims[3] == 705 + 1 && g_map.strides[0] == 8 * 128 * 2 &&
             g_map.strides[1] == 128 * 2 && g_map.strides[2] == 8 * 128 * 2 &&
             (const char *)g_map.base == (const char *)x.a.q - 705 * 8 * 128 * 2 &&
             g_map.box[1] == 128 && g_map.box[2] == 1,
         "packed Q view: dims %llu %llu %llu %llu", (unsigned long long)g_map.dims[0],
         (unsigned long long)g_map.dims[1], (unsigned long long)g_map.dims[2],
         (unsigned long long)g_map.dims[3]);
  x.ix.cu_q = x.ix.cu_k = NULL;
  x.ix.total_q = x.ix.total_k = 0;
  const cuda_strides padded = {600 * 8 * 128, 8 * 128, 128},
                     odd = {600 * 8 * 128 + 8, 8 * 128, 128};
  x.a.q_str = x.a.o_str = x.a.k_str = x.a.v_str = padded;
  /* The last batch's sequence of all 600 rows takes the outer coordinate 2 x 600 + 600. */
  EXPECT(fa3_fwd_launch(&x, seqs128, err, sizeof err) == -1 && strstr(err, "stub") &&
             x.q_ext == 600 && x.k_ext == 600 && x.q_batch_rows == 600 && x.v_batch_rows == 600 &&
             g_map.dims[1] == 600 && g_map.dims[3] == 2 * 600 + 600 + 1 && !g_launched,
         "padded views: %s; Q view dims %llu %llu", err, (unsigned long long)g_map.dims[1],
         (unsigned long long)g_map.dims[3]);
  x.a.v_str = odd;
  EXPECT(fa3_fwd_launch(&x, seqs128, err, sizeof err) == -1 && strstr(err, "whole number"),
         "a batch stride of no whole rows: %s", err);
  x.a.p.batch = 1;
  EXPECT(fa3_fwd_launch(&x, seqs128, err, sizeof err) == -1 && strstr(err, "stub") &&
             x.v_batch_rows == 0,
         "one batch: its stride unused (%s)", err);

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
  cuda_bwd_args sz;
  memset(&sz, 0x5a, sizeof sz); /* poisoned: sizing must set every field it owns */
  sz.p = causal_1k;
  fa3_bwd_sizing(&sz, 0, 5);
  EXPECT(sz.head_dim_padded == 128 && sz.tile_m == FA3_BWD_TILE_M && sz.tile_n == 128 &&
             sz.dq_layout == CUDA_DQ_ROTATED && sz.dq_splits == 1 && !sz.deterministic &&
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
    EXPECT(xb.a.head_dim_padded == 256 && xb.a.tile_n == 64 && xb.a.dq_layout == CUDA_DQ_FRAGMENT,
           "hd%d's sizing: %d columns, key tile %d, layout %d", d, xb.a.head_dim_padded,
           xb.a.tile_n, xb.a.dq_layout);
    EXPECT(fa3_bwd_launch(&xb, NULL, err, sizeof err) == -1 && !strcmp(err, "stub") && !g_launched,
           "backward at head_dim %d reaches the tensor maps: %s", d, err);
    xb.a.dq_layout = CUDA_DQ_ROTATED;
    EXPECT(fa3_bwd_launch(&xb, NULL, err, sizeof err) == -1 && strcmp(err, "stub") && !g_launched,
           "backward at head_dim %d with the rotated layout: %s", d, err);
    fa3_bwd_sizing(&xb.a, 0, 1);
    xb.a.tile_n = 128;
    EXPECT(fa3_bwd_launch(&xb, NULL, err, sizeof err) == -1 && strcmp(err, "stub") && !g_launched,
           "backward at head_dim %d with 128-key tiles: %s", d, err);
  }
  /* Over sequences (packed q and k, the views the forward's): the narrow kernels and the wide one
     (192, 256) alike make the views and reach the maps (the stub refuses the first, Q's: boxes of
     the 64-row query tile); deterministic mode is refused before anything. */
  static int32_t cu_bwd[3] = {0, 100, 300};
  static uint16_t bwd_buf[16];
  for (int d = 128; d <= 256; d += 64) {
    fa3_bwd_args xs;
    memset(&xs, 0, sizeof xs);
    xs.a.p = open_1k;
    xs.a.p.batch = 2, xs.a.p.heads_q = 8, xs.a.p.heads_kv = 2, xs.a.p.head_dim = d;
    xs.a.p.seqlen_q = xs.a.p.seqlen_k = 200;
    xs.a.seqs = 1;
    xs.a.ix.cu_q = xs.a.ix.cu_k = cu_bwd;
    xs.a.ix.total_q = xs.a.ix.total_k = 300;
    const cuda_strides pq = {0, 8 * d, d}, pk = {0, 2 * d, d};
    xs.a.q_str = xs.a.do_str = pq;
    xs.a.k_str = xs.a.v_str = pk;
    xs.a.q = xs.a.k = xs.a.v = xs.a.out = xs.a.dout = bwd_buf + 8;
    xs.grid_blocks = 132;
    fa3_bwd_sizing(&xs.a, 0, 1);
    memset(&g_map, 0, sizeof g_map);
    g_launched = 0;
    EXPECT(fa3_bwd_launch(&xs, NULL, err, sizeof err) == -1 && !strcmp(err, "stub") &&
               !g_launched && xs.q_ext == 300 && xs.k_ext == 300 && xs.q_batch_rows == 0 &&
               g_map.dims[1] == 300 && g_map.box[1] == FA3_BWD_TILE_M,
           "backward over sequences at head_dim %d reaches the views' maps: %s (Q rows %llu, box "
           "%u)",
           d, err, (unsigned long long)g_map.dims[1], g_map.box[1]);
    fa3_bwd_sizing(&xs.a, 1, 2);
    EXPECT(fa3_bwd_launch(&xs, NULL, err, sizeof err) == -1 && strstr(err, "deterministic") &&
               !g_launched,
           "deterministic backward over sequences at head_dim %d: %s", d, err);
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
  /* the persistent grid: hd64 and hd128, not deterministic, with or without a mask; at most a
     block per key tile; its blocks take their tiles by the dynamic schedule */
  cuda_bwd_args pg;
  memset(&pg, 0, sizeof pg);
  pg.p = open_1k;
  pg.p.head_dim = 64;
  const int32_t tiles = (pg.p.seqlen_k + 127) / 128 * pg.p.heads_kv * pg.p.batch;
  EXPECT(fa3_bwd_grid_blocks(&pg, 64, 132) == (tiles < 132 ? tiles : 132) &&
             fa3_bwd_grid_blocks(&pg, 64, 2) == 2 &&
             fa3_bwd_grid_blocks(&pg, 64, 1 << 30) == tiles &&
             fa3_bwd_grid_blocks(&pg, 64, 0) == 0 && fa3_bwd_grid_blocks(&pg, 64, -3) == 0,
         "persistent grid at hd64 without a mask (%d key tiles)", tiles);
  EXPECT(fa3_bwd_grid_blocks(&pg, 128, 132) == (tiles < 132 ? tiles : 132) &&
             fa3_bwd_grid_blocks(&pg, 256, 132) == 0,
         "persistent grid at hd128 (one K/V buffer), none at hd256");
  int32_t chunk = -1, reverse = -1;
  fa3_bwd_sched(&pg, 64, &chunk, &reverse);
  EXPECT(chunk == 0 && reverse == 0, "no mask: the key tile fastest (%d, %d)", chunk, reverse);
  pg.deterministic = 1;
  EXPECT(fa3_bwd_grid_blocks(&pg, 64, 132) == 0, "no persistent grid when deterministic");
  pg.deterministic = 0;
  pg.p.seqlen_k = 0;
  EXPECT(fa3_bwd_grid_blocks(&pg, 64, 132) == 0, "no persistent grid without keys");
  pg.p = causal_1k;
  pg.p.head_dim = 64;
  EXPECT(fa3_bwd_grid_blocks(&pg, 64, 132) == 132, "persistent grid, causal, 1024 keys");
  fa3_bwd_sched(&pg, 64, &chunk, &reverse);
  /* 256 pairs whose Q and dO take 1024 x 64 x 2 x 2 bytes each: 96 of them make 24 MB */
  EXPECT(chunk == 96 && reverse == 0, "causal: chunks of %d pairs, reverse %d", chunk, reverse);
  pg.p.seqlen_k = 16384;
  EXPECT(fa3_bwd_grid_blocks(&pg, 64, 132) == 132 && fa3_bwd_grid_blocks(&pg, 128, 132) == 132 &&
             fa3_bwd_grid_blocks(&pg, 256, 132) == 0 && fa3_bwd_grid_blocks(&pg, 64, 0) == 0,
         "persistent grid, causal, 16384 keys");
  /* its counter: the sizing asks fa2's workspace for one (cuda_bwd_carve places it) */
  cuda_bwd_args ws;
  memset(&ws, 0, sizeof ws);
  ws.p = causal_1k;
  ws.p.head_dim = 64;
  fa3_bwd_sizing(&ws, 0, 1);
  EXPECT(ws.sched_counters == 1, "the dynamic schedule's counter in the sizing (%d)",
         (int)ws.sched_counters);
  pg.p = left_1k; /* a left bound only: the last key tiles are the longest */
  pg.p.head_dim = 64;
  EXPECT(fa3_bwd_grid_blocks(&pg, 64, 132) == 132, "persistent grid, left window, 1024 keys");
  fa3_bwd_sched(&pg, 64, &chunk, &reverse);
  EXPECT(chunk == 96 && reverse == 1, "left window: chunks of %d pairs, reverse %d", chunk,
         reverse);

  printf("%s\n", g_failed ? "cuda.fa3_pick: FAILED" : "cuda.fa3_pick: all passed");
  return g_failed;
}
