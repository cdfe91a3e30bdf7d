/*
 * fa_info.c: `fa-info` prints what the library knows about its backends, as fa_backend_info()
 * reports it: the first thing to run when a backend is not used, because the reason is there. Then,
 * for each kind of memory, the backend AUTO picks for a small plain forward there (what
 * fa_plan_forward answers, the decision a call makes) or why none can run it.
 *
 * Usage: fa-info
 * Exit status: 0 when at least one backend is available, 1 when none is, 2 on an API error.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "flash_attn.h"

enum { MAX_BACKENDS = 16 };

/* Prints a list the library joins with `sep`: short items (feature names) wrapped to the terminal
   width, long ones (each unsupported feature with its reason) one per line, so neither turns into
   one unreadable line. */
static void print_list(const char *label, const char *list, char sep, int one_per_line) {
  const int indent = 23, width = 100;
  printf("    %-18s ", label);
  if (!list[0]) {
    printf("-\n");
    return;
  }
  int col = indent;
  const char *p = list;
  while (*p) {
    while (*p == ' ') ++p;
    const char *end = strchr(p, sep);
    int len = end ? (int)(end - p) : (int)strlen(p);
    if (col > indent && (one_per_line || col + len + 2 > width)) {
      printf("\n%*s", indent, "");
      col = indent;
    } else if (col > indent) {
      printf(" ");
      col += 1;
    }
    printf("%.*s%s", len, p, end && !one_per_line ? "," : "");
    col += len + 1;
    p = end ? end + 1 : p + len;
  }
  printf("\n");
}

/* A contiguous tensor at a made-up address: fa_plan_forward validates and decides without reading
   or writing any data, and each tensor gets an address range of its own as in a real call. */
static fa_tensor planned_tensor(fa_device dev, fa_dtype dtype, int ndim, const int64_t *shape,
                                int index) {
  fa_tensor t;
  memset(&t, 0, sizeof t);
  t.data = (void *)(uintptr_t)(0x10000000u + 0x1000000u * (unsigned)index);
  t.device = dev;
  t.dtype = dtype;
  t.ndim = ndim;
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}

/* AUTO's choice for a bf16 forward of [1, 128, 4, 64] with lse on device 0 of each memory kind. */
static void print_auto_choices(void) {
  static const struct {
    fa_device_kind kind;
    const char *label;
  } kinds[] = {{FA_DEVICE_CPU, "host memory"},
               {FA_DEVICE_CUDA, "CUDA memory"},
               {FA_DEVICE_HIP, "HIP memory"},
               {FA_DEVICE_OPENCL, "OpenCL buffers"}};
  const int64_t shape[4] = {1, 128, 4, 64}, lse_shape[3] = {1, 4, 128};
  printf("\nAUTO's choice for a bf16 forward of [1, 128, 4, 64] (fa_plan_forward), per memory:\n");
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; ++i) {
    fa_device dev = {kinds[i].kind, 0};
    fa_tensor q = planned_tensor(dev, FA_BF16, 4, shape, 0);
    fa_tensor k = planned_tensor(dev, FA_BF16, 4, shape, 1);
    fa_tensor v = planned_tensor(dev, FA_BF16, 4, shape, 2);
    fa_tensor out = planned_tensor(dev, FA_BF16, 4, shape, 3);
    fa_tensor lse = planned_tensor(dev, FA_F32, 3, lse_shape, 4);
    fa_params p;
    fa_params_init(&p);
    fa_run_info plan;
    fa_run_info_init(&plan);
    fa_status st = fa_plan_forward(&p, &q, &k, &v, &out, &lse, &plan);
    printf("  %-16s ", kinds[i].label);
    if (st != FA_OK) {
      printf("none: %s\n", fa_last_error());
      continue;
    }
    printf("%s, kernel %s, tile %dx%d\n", plan.backend_name, plan.kernel, (int)plan.tile_m,
           (int)plan.tile_n);
    if (plan.rejected[0]) printf("  %-16s passed over: %s\n", "", plan.rejected);
  }
}

/* The ring calls' transports (fa_transport_info): which can run, or exactly why not. */
static void print_transports(void) {
  fa_transport_desc t[FA_TRANSPORT_COUNT_];
  for (int i = 0; i < FA_TRANSPORT_COUNT_; ++i) fa_transport_desc_init(&t[i]);
  int32_t count = 0;
  if (fa_transport_info(t, FA_TRANSPORT_COUNT_, &count) != FA_OK) {
    printf("\nring transports: fa_transport_info failed: %s\n", fa_last_error());
    return;
  }
  if (count > FA_TRANSPORT_COUNT_) count = FA_TRANSPORT_COUNT_;
  printf("\nring transports (fa_ring_forward / fa_ring_backward):\n");
  for (int32_t i = 0; i < count; ++i)
    printf("  %s (%s tensors): %s%s%s%s\n", t[i].name, fa_device_kind_name(t[i].memory),
           t[i].available ? "available, " : "unavailable: ",
           t[i].available ? t[i].runtime : t[i].reason, t[i].plugin_path[0] ? "; plugin " : "",
           t[i].plugin_path);
}

int main(int argc, char **argv) {
  (void)argv;
  if (argc > 1) {
    printf(
        "usage: fa-info\nPrints the library version and every backend it knows: whether it is\n"
        "available (or exactly why not), its plugin, devices, kernels, dtypes and features;\n"
        "the ring calls' transports (self, mpi, nccl) and whether each can run;\n"
        "then, for each kind of memory, the backend AUTO picks for a small forward there\n"
        "(or why none can run it).\n");
    return 0;
  }
  int major, minor, patch;
  const char *version = fa_version(&major, &minor, &patch);
  printf("flashattn-c %s (header %d.%d.%d)\n", version, FA_VERSION_MAJOR, FA_VERSION_MINOR,
         FA_VERSION_PATCH);
  if (major != FA_VERSION_MAJOR || minor != FA_VERSION_MINOR)
    printf("note: this tool was built against header %d.%d but runs with library %d.%d\n",
           FA_VERSION_MAJOR, FA_VERSION_MINOR, major, minor);

  fa_backend_desc descs[MAX_BACKENDS];
  for (int i = 0; i < MAX_BACKENDS; ++i) fa_backend_desc_init(&descs[i]);
  int32_t count = 0;
  fa_status st = fa_backend_info(descs, MAX_BACKENDS, &count);
  if (st != FA_OK) {
    fprintf(stderr, "fa-info: fa_backend_info failed: %s: %s\n", fa_status_string(st),
            fa_last_error());
    return 2;
  }
  if (count > MAX_BACKENDS) count = MAX_BACKENDS;

  int available = 0;
  printf("\n%d backends:\n", (int)count);
  for (int32_t i = 0; i < count; ++i) {
    const fa_backend_desc *d = &descs[i];
    available += d->available != 0;
    printf("\n  %s: %s", d->name, d->available ? "available\n" : "unavailable: ");
    if (!d->available) printf("%s\n", d->reason[0] ? d->reason : "(no reason given)");
    printf("    %-18s %s\n", "plugin", d->plugin_path[0] ? d->plugin_path : "-");
    /* A plugin that loaded but found no device still knows its devices' facts: show them. */
    if (d->available || d->device_count > 0 || d->devices[0] || d->arch[0]) {
      printf("    %-18s %d%s%s\n", "devices", (int)d->device_count, d->devices[0] ? ": " : "",
             d->devices);
      printf("    %-18s %s\n", "arch", d->arch[0] ? d->arch : "-");
      printf("    %-18s %s\n", "kernel families", d->kernel_families[0] ? d->kernel_families : "-");
      printf("    %-18s %s\n", "dtypes", d->dtypes[0] ? d->dtypes : "-");
    }
    if (d->available) {
      print_list("features", d->features, ',', 0);
      print_list("unsupported", d->unsupported, ';', 1);
    }
  }
  printf("\n%d of %d backends available.", available, (int)count);
  if (!available) printf(" Set FA_PLUGIN_PATH to the directory holding libfa_<name>.so?");
  printf("\n");
  print_transports();
  print_auto_choices();
  return available ? 0 : 1;
}
