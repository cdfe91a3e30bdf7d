/*
 * test_opencl_select.c: tools/device_mem's OpenCL path, checked against the OpenCL API itself.
 *
 *   - the global device list (platforms in clGetPlatformIDs order, devices in
 *     clGetDeviceIDs(CL_DEVICE_TYPE_ALL) order): a buffer devmem allocates on opencl:i lives in a
 *     context whose one device is the i-th device of that list (found through CL_MEM_CONTEXT, as
 * the plugin finds it), and devmem's queue belongs to that context and is in order;
 *   - the default-device rule: FA_OPENCL_DEVICE=N picks N; unset or empty picks the first GPU,
 *     else device 0; an out-of-range or malformed value is an error naming the variable;
 *   - memory: allocation (0 bytes too), fill, a round trip at an unaligned byte offset (the offset
 *     goes to the copy, never onto the cl_mem handle), memset at an offset, a copy from buffer to
 *     buffer (devmem_copy_on_device), out-of-bounds copies and unknown devices refused with a
 *     message, an impossible size refused with the OpenCL error code's name, a first use racing
 *     from several threads, devmem_shutdown and use afterwards.
 *
 * Exits 77 (skipped) when this build has no OpenCL or the machine has no OpenCL device.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_mem.h"

static int g_failed;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) {                                                    \
      g_failed = 1;                                                   \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fputc('\n', stderr);                                            \
    }                                                                 \
  } while (0)

/* The global device list, enumerated here independently of devmem. */
typedef struct {
  cl_device_id id;
  cl_device_type type;
} dev_entry;

static int list_devices(dev_entry *out, int cap) {
  cl_uint np = 0;
  if (clGetPlatformIDs(0, NULL, &np) != CL_SUCCESS || np == 0) return 0;
  cl_platform_id plats[16];
  if (np > 16) np = 16;
  if (clGetPlatformIDs(np, plats, NULL) != CL_SUCCESS) return 0;
  int count = 0;
  for (cl_uint p = 0; p < np; ++p) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0)
      continue;
    cl_device_id devs[64];
    if (nd > 64) nd = 64;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, nd, devs, NULL) != CL_SUCCESS) continue;
    for (cl_uint d = 0; d < nd && count < cap; ++d) {
      out[count].id = devs[d];
      out[count].type = 0;
      clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof out[count].type, &out[count].type, NULL);
      ++count;
    }
  }
  return count;
}

/* The device of the context a buffer lives in (what the plugin reads). */
static cl_device_id buffer_device(cl_mem m, cl_context *ctx_out) {
  cl_context ctx = NULL;
  if (clGetMemObjectInfo(m, CL_MEM_CONTEXT, sizeof ctx, &ctx, NULL) != CL_SUCCESS) return NULL;
  if (ctx_out) *ctx_out = ctx;
  cl_uint nd = 0;
  if (clGetContextInfo(ctx, CL_CONTEXT_NUM_DEVICES, sizeof nd, &nd, NULL) != CL_SUCCESS || nd != 1)
    return NULL;
  cl_device_id d = NULL;
  if (clGetContextInfo(ctx, CL_CONTEXT_DEVICES, sizeof d, &d, NULL) != CL_SUCCESS) return NULL;
  return d;
}

/* devmem_default_device with FA_OPENCL_DEVICE set to value (NULL: unset). */
static int default_with(const char *value, fa_device *dev, char *err, size_t n) {
  if (value)
    setenv("FA_OPENCL_DEVICE", value, 1);
  else
    unsetenv("FA_OPENCL_DEVICE");
  dev->kind = FA_DEVICE_CPU;
  dev->id = -1;
  return devmem_default_device(FA_DEVICE_OPENCL, dev, err, n);
}

static void test_default_rule(const dev_entry *list, int count) {
  char err[256], v[32];
  fa_device dev;
  int expect = 0;
  for (int i = count - 1; i >= 0; --i)
    if (list[i].type & CL_DEVICE_TYPE_GPU) expect = i;

  CHECK(default_with(NULL, &dev, err, sizeof err) == 0, "unset: %s", err);
  CHECK(dev.kind == FA_DEVICE_OPENCL && dev.id == expect, "unset: got %d:%d, expected opencl:%d",
        (int)dev.kind, (int)dev.id, expect);
  CHECK(default_with("", &dev, err, sizeof err) == 0, "empty: %s", err);
  CHECK(dev.kind == FA_DEVICE_OPENCL && dev.id == expect, "empty: got opencl:%d, expected %d",
        (int)dev.id, expect);

  for (int i = 0; i < count; ++i) {
    snprintf(v, sizeof v, "%d", i);
    CHECK(default_with(v, &dev, err, sizeof err) == 0, "FA_OPENCL_DEVICE=%s: %s", v, err);
    CHECK(dev.kind == FA_DEVICE_OPENCL && dev.id == i, "FA_OPENCL_DEVICE=%s: got opencl:%d", v,
          (int)dev.id);
  }

  /* Out of range and malformed values: an error naming the variable, dev untouched. */
  snprintf(v, sizeof v, "%d", count);
  const char *bad[] = {v, "999999", "-1", "abc", "1x", "0.5", "0 ", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    err[0] = '\0';
    int r = default_with(bad[i], &dev, err, sizeof err);
    CHECK(r == -1, "FA_OPENCL_DEVICE=%s accepted (opencl:%d)", bad[i], (int)dev.id);
    CHECK(strstr(err, "FA_OPENCL_DEVICE") != NULL, "FA_OPENCL_DEVICE=%s: message '%s'", bad[i],
          err);
    CHECK(dev.kind == FA_DEVICE_CPU && dev.id == -1, "FA_OPENCL_DEVICE=%s: dev written", bad[i]);
  }
  (void)default_with(v, &dev, err, sizeof err);
  printf("default rule: unset -> opencl:%d; FA_OPENCL_DEVICE=%d -> \"%s\"\n", expect, count, err);
  unsetenv("FA_OPENCL_DEVICE");

  /* The other kinds. */
  CHECK(devmem_default_device(FA_DEVICE_CUDA, &dev, err, sizeof err) == 0 &&
            dev.kind == FA_DEVICE_CUDA && dev.id == 0,
        "cuda: %s", err);
  CHECK(devmem_default_device(FA_DEVICE_CPU, &dev, err, sizeof err) == 0 &&
            dev.kind == FA_DEVICE_CPU && dev.id == 0,
        "cpu: %s", err);
}

/* opencl:i is the i-th device of the global list, as the plugin will see it from the buffer. */
static void test_device_list(const dev_entry *list, int count) {
  char err[256], name[512];
  int n = -1;
  CHECK(devmem_opencl_device_count(&n, err, sizeof err) == 0 && n == count,
        "devmem counts %d devices, OpenCL lists %d (%s)", n, count, err);
  for (int i = 0; i < count; ++i) {
    fa_device dev = {FA_DEVICE_OPENCL, i};
    void *p = NULL;
    CHECK(devmem_alloc(dev, 64, &p, err, sizeof err) == 0 && p, "alloc on opencl:%d: %s", i, err);
    if (!p) continue;
    cl_context ctx = NULL;
    cl_device_id d = buffer_device((cl_mem)p, &ctx);
    CHECK(d == list[i].id, "opencl:%d: the buffer's context holds another device", i);
    void *q = NULL;
    CHECK(devmem_stream(dev, &q, err, sizeof err) == 0 && q, "stream of opencl:%d: %s", i, err);
    if (q) {
      cl_context qctx = NULL;
      cl_command_queue_properties props = 0;
      clGetCommandQueueInfo((cl_command_queue)q, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL);
      clGetCommandQueueInfo((cl_command_queue)q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
      CHECK(qctx == ctx, "opencl:%d: devmem's queue is not in the buffer's context", i);
      CHECK(!(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE), "opencl:%d: queue out of order", i);
    }
    /* Same device, same context: the second allocation shares it. */
    void *p2 = NULL;
    CHECK(devmem_alloc(dev, 8, &p2, err, sizeof err) == 0, "second alloc: %s", err);
    cl_context ctx2 = NULL;
    if (p2) buffer_device((cl_mem)p2, &ctx2);
    CHECK(ctx2 == ctx, "opencl:%d: two contexts for one device", i);
    CHECK(devmem_device_name(dev, name, sizeof name, err, sizeof err) == 0, "name: %s", err);
    printf("opencl:%d: %s%s\n", i, name, list[i].type & CL_DEVICE_TYPE_GPU ? " [GPU]" : "");
    CHECK(devmem_free(dev, p2, err, sizeof err) == 0, "free: %s", err);
    CHECK(devmem_free(dev, p, err, sizeof err) == 0, "free: %s", err);
  }
  fa_device none = {FA_DEVICE_OPENCL, count};
  void *p = (void *)1;
  err[0] = '\0';
  CHECK(devmem_alloc(none, 64, &p, err, sizeof err) == -1 && p == NULL, "opencl:%d allocated",
        count);
  CHECK(strstr(err, "does not exist") != NULL, "unknown device: message '%s'", err);
  printf("unknown device: \"%s\"\n", err);
}

static void test_memory(fa_device dev) {
  enum { SIZE = 4096, OFF = 101, LEN = 1003, MOFF = 2051, MLEN = 37 };
  char err[256];
  unsigned char host[SIZE], back[SIZE], part[LEN];
  void *p = NULL;
  CHECK(devmem_alloc(dev, SIZE, &p, err, sizeof err) == 0 && p, "alloc: %s", err);
  if (!p) return;
  size_t size = 0;
  cl_mem_flags flags = 0;
  clGetMemObjectInfo((cl_mem)p, CL_MEM_SIZE, sizeof size, &size, NULL);
  clGetMemObjectInfo((cl_mem)p, CL_MEM_FLAGS, sizeof flags, &flags, NULL);
  CHECK(size == SIZE, "CL_MEM_SIZE %zu", size);
  CHECK((flags & CL_MEM_READ_WRITE) != 0, "not CL_MEM_READ_WRITE");

  /* Fill, then a pattern at an unaligned offset, read back whole and in part. */
  CHECK(devmem_memset(dev, p, 0xab, SIZE, err, sizeof err) == 0, "memset: %s", err);
  for (int i = 0; i < LEN; ++i) part[i] = (unsigned char)(i * 7 + 3);
  CHECK(devmem_copy_to_device_at(dev, p, OFF, part, LEN, err, sizeof err) == 0, "write: %s", err);
  CHECK(devmem_memset_at(dev, p, MOFF, 0x11, MLEN, err, sizeof err) == 0, "memset_at: %s", err);
  memset(back, 0, sizeof back);
  CHECK(devmem_copy_to_host(dev, back, p, SIZE, err, sizeof err) == 0, "read: %s", err);
  for (int i = 0; i < SIZE; ++i) {
    unsigned char want = 0xab;
    if (i >= OFF && i < OFF + LEN) want = part[i - OFF];
    if (i >= MOFF && i < MOFF + MLEN) want = 0x11;
    if (back[i] != want) {
      CHECK(back[i] == want, "byte %d = 0x%02x, expected 0x%02x", i, back[i], want);
      break;
    }
  }
  memset(host, 0, sizeof host);
  CHECK(devmem_copy_to_host_at(dev, host, p, OFF, LEN, err, sizeof err) == 0, "read_at: %s", err);
  CHECK(memcmp(host, part, LEN) == 0, "round trip at offset %d differs", OFF);
  CHECK(devmem_sync(dev, err, sizeof err) == 0, "sync: %s", err);

  /* Out of bounds: refused with a message, nothing written. */
  err[0] = '\0';
  CHECK(devmem_copy_to_device_at(dev, p, SIZE - 10, part, 11, err, sizeof err) == -1,
        "write past the end accepted");
  CHECK(strstr(err, "past the buffer") != NULL, "message '%s'", err);
  printf("out of bounds: \"%s\"\n", err);
  CHECK(devmem_copy_to_host_at(dev, host, p, SIZE + 1, 1, err, sizeof err) == -1,
        "read past the end accepted");
  CHECK(devmem_memset_at(dev, p, 1, 0, SIZE, err, sizeof err) == -1, "memset past end accepted");
  /* Zero bytes: nothing to do. */
  CHECK(devmem_copy_to_device_at(dev, p, SIZE, part, 0, err, sizeof err) == 0, "0 bytes: %s", err);

  /* Device to device: p's bytes into a second buffer, read back; past either end refused. */
  void *q = NULL;
  CHECK(devmem_alloc(dev, SIZE / 2, &q, err, sizeof err) == 0 && q, "alloc: %s", err);
  if (q) {
    CHECK(devmem_copy_on_device(dev, q, p, SIZE / 2, err, sizeof err) == 0, "on device: %s", err);
    memset(host, 0, sizeof host);
    CHECK(devmem_copy_to_host(dev, host, q, SIZE / 2, err, sizeof err) == 0, "read: %s", err);
    CHECK(memcmp(host, back, SIZE / 2) == 0, "device-to-device copy differs");
    err[0] = '\0';
    CHECK(devmem_copy_on_device(dev, q, p, SIZE, err, sizeof err) == -1,
          "device-to-device copy past the destination's end accepted");
    CHECK(strstr(err, "past the buffer") != NULL, "message '%s'", err);
    CHECK(devmem_free(dev, q, err, sizeof err) == 0, "free: %s", err);
  }
  CHECK(devmem_free(dev, p, err, sizeof err) == 0, "free: %s", err);

  /* 0 bytes allocates something real. */
  void *z = NULL;
  CHECK(devmem_alloc(dev, 0, &z, err, sizeof err) == 0 && z, "alloc 0: %s", err);
  CHECK(devmem_free(dev, z, err, sizeof err) == 0, "free: %s", err);
  CHECK(devmem_free(dev, NULL, err, sizeof err) == 0, "free NULL: %s", err);

  /* An impossible size: the OpenCL error code's name, never an abort. */
  void *big = NULL;
  err[0] = '\0';
  int r = devmem_alloc(dev, SIZE_MAX / 2, &big, err, sizeof err);
  if (r == 0) {
    devmem_free(dev, big, NULL, 0);
    printf("note: a %zu-byte buffer was accepted (lazy allocation)\n", SIZE_MAX / 2);
  } else {
    CHECK(strstr(err, "clCreateBuffer") && strstr(err, "CL_"), "message '%s'", err);
    CHECK(big == NULL, "failed allocation left a pointer");
    printf("impossible size: \"%s\"\n", err);
  }
}

/* First use from several threads at once (after a shutdown): one context for the device. */
typedef struct {
  fa_device dev;
  cl_context ctx;
  int ok;
} race_arg;

static void *race(void *a) {
  race_arg *r = (race_arg *)a;
  void *p = NULL;
  char err[256];
  if (devmem_alloc(r->dev, 256, &p, err, sizeof err) != 0) return NULL;
  buffer_device((cl_mem)p, &r->ctx);
  unsigned char b[256];
  memset(b, 0x5a, sizeof b);
  r->ok = devmem_copy_to_device(r->dev, p, b, sizeof b, err, sizeof err) == 0 &&
          devmem_copy_to_host_at(r->dev, b, p, 10, 100, err, sizeof err) == 0 && b[0] == 0x5a;
  devmem_free(r->dev, p, NULL, 0);
  return NULL;
}

static void test_threads(fa_device dev) {
  enum { T = 8 };
  devmem_shutdown();
  pthread_t th[T];
  race_arg args[T];
  for (int i = 0; i < T; ++i) {
    args[i].dev = dev;
    args[i].ctx = NULL;
    args[i].ok = 0;
    CHECK(pthread_create(&th[i], NULL, race, &args[i]) == 0, "pthread_create");
  }
  for (int i = 0; i < T; ++i) pthread_join(th[i], NULL);
  for (int i = 0; i < T; ++i) {
    CHECK(args[i].ok, "thread %d failed", i);
    CHECK(args[i].ctx == args[0].ctx, "thread %d got another context", i);
  }
}

int main(void) {
  char err[256];
  if (!devmem_supported(FA_DEVICE_OPENCL)) {
    void *p = NULL;
    fa_device d = {FA_DEVICE_OPENCL, 0};
    devmem_alloc(d, 1, &p, err, sizeof err);
    printf("SKIP: %s\n", err);
    return 77;
  }
  dev_entry list[64];
  const int count = list_devices(list, 64);
  if (count == 0) {
    printf("SKIP: no OpenCL device on this machine (no platform lists a device)\n");
    return 77;
  }
  printf("%d OpenCL device(s)\n", count);
  test_device_list(list, count);
  test_default_rule(list, count);
  fa_device dev;
  if (devmem_default_device(FA_DEVICE_OPENCL, &dev, err, sizeof err)) {
    fprintf(stderr, "FAIL: default device: %s\n", err);
    return 1;
  }
  test_memory(dev);
  test_threads(dev);
  devmem_shutdown();
  /* Usable again after a shutdown. */
  void *p = NULL;
  CHECK(devmem_alloc(dev, 16, &p, err, sizeof err) == 0, "alloc after shutdown: %s", err);
  CHECK(devmem_free(dev, p, err, sizeof err) == 0, "free: %s", err);
  printf("%s\n", g_failed ? "FAILED" : "passed");
  return g_failed ? 1 : 0;
}
