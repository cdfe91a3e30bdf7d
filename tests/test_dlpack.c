/* test_dlpack: DLTensor -> fa_tensor views (flash_attn_dlpack.h), and a forward call through them
 * that must match, bit for bit, the same call made with hand-built fa_tensors. */
#include <dlpack/dlpack.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flash_attn_dlpack.h"

static int passed, failed;

static void check(int ok, const char *what) {
  if (ok) {
    passed++;
  } else {
    failed++;
    printf("FAIL: %s\n", what);
  }
}

static DLTensor dl(void *data, int ndim, int64_t *shape, int64_t *strides, uint8_t code,
                   uint8_t bits, int dev_type) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = (DLDeviceType)dev_type;
  t.ndim = ndim;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  t.strides = strides;
  return t;
}

int main(void) {
  const char *why;
  fa_tensor ft;
  int64_t shape[4] = {1, 5, 2, 8};

  DLTensor t = dl(NULL, 4, shape, NULL, kDLFloat, 32, kDLCPU);
  check(fa_tensor_from_dlpack(&t, &ft, &why) == FA_OK, "compact f32 view accepted");
  check(ft.dtype == FA_F32 && ft.device.kind == FA_DEVICE_CPU, "f32 on cpu");
  check(ft.strides[3] == 1 && ft.strides[2] == 8 && ft.strides[1] == 16 && ft.strides[0] == 80,
        "compact strides derived row-major");

  int64_t strides[4] = {1000, 100, 10, 1};
  t = dl(NULL, 4, shape, strides, kDLBfloat, 16, kDLCUDA);
  t.device.device_id = 3;
  t.byte_offset = 64;
  check(fa_tensor_from_dlpack(&t, &ft, &why) == FA_OK, "bf16 cuda view accepted");
  check(ft.dtype == FA_BF16 && ft.device.kind == FA_DEVICE_CUDA && ft.device.id == 3 &&
            ft.byte_offset == 64 && ft.strides[1] == 100,
        "bf16 cuda view fields");

  t = dl(NULL, 4, shape, NULL, kDLFloat, 64, kDLCPU);
  check(fa_tensor_from_dlpack(&t, &ft, &why) == FA_ERR_UNSUPPORTED && strstr(why, "dtype"),
        "float64 refused naming dtype");
  t = dl(NULL, 4, shape, NULL, kDLFloat, 16, kDLVulkan);
  check(fa_tensor_from_dlpack(&t, &ft, &why) == FA_ERR_UNSUPPORTED && strstr(why, "device"),
        "vulkan refused naming device");
  t = dl(NULL, 4, shape, NULL, kDLFloat, 16, kDLCPU);
  t.dtype.lanes = 4;
  check(fa_tensor_from_dlpack(&t, &ft, &why) == FA_ERR_UNSUPPORTED && strstr(why, "lanes"),
        "vector lanes refused");
  check(fa_tensor_from_dlpack(NULL, &ft, &why) == FA_ERR_INVALID_ARGUMENT, "NULL refused");

  /* End to end: a forward through DLPack views equals the same call on direct fa_tensors. */
  enum { N = 1 * 5 * 2 * 8 };
  static float q[N], k[N], v[N], o1[N], o2[N];
  srand((unsigned)time(NULL));
  for (int i = 0; i < N; ++i) {
    q[i] = (float)rand() / RAND_MAX - 0.5f;
    k[i] = (float)rand() / RAND_MAX - 0.5f;
    v[i] = (float)rand() / RAND_MAX - 0.5f;
    o1[i] = o2[i] = NAN;
  }
  DLTensor dq = dl(q, 4, shape, NULL, kDLFloat, 32, kDLCPU);
  DLTensor dk = dl(k, 4, shape, NULL, kDLFloat, 32, kDLCPU);
  DLTensor dv = dl(v, 4, shape, NULL, kDLFloat, 32, kDLCPU);
  DLTensor dout = dl(o1, 4, shape, NULL, kDLFloat, 32, kDLCPU);
  fa_tensor fq, fk, fv, fo;
  int ok = fa_tensor_from_dlpack(&dq, &fq, &why) == FA_OK &&
           fa_tensor_from_dlpack(&dk, &fk, &why) == FA_OK &&
           fa_tensor_from_dlpack(&dv, &fv, &why) == FA_OK &&
           fa_tensor_from_dlpack(&dout, &fo, &why) == FA_OK;
  check(ok, "views of host arrays");
  fa_status st = fa_forward(NULL, &fq, &fk, &fv, &fo, NULL, NULL);
  check(st == FA_OK, "forward through DLPack views");
  if (st != FA_OK) printf("  %s\n", fa_last_error());
  fa_tensor direct = fo;
  direct.data = o2;
  check(fa_forward(NULL, &fq, &fk, &fv, &direct, NULL, NULL) == FA_OK, "forward direct");
  int same = 1;
  for (int i = 0; i < N; ++i) same &= memcmp(&o1[i], &o2[i], sizeof(float)) == 0 && !isnan(o1[i]);
  check(same, "DLPack forward equals direct forward bitwise, every element written");

  printf("test_dlpack: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
