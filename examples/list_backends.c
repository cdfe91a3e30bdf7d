/*
 * list_backends.c: which backends this machine has, and why the others are not there.
 *
 *   cc list_backends.c $(pkg-config --cflags --libs flashattn) && ./a.out
 *
 * fa_backend_info fills one descriptor per backend the library knows; each says whether it can
 * run here and, when not, exactly why (plugin not built, runtime missing, no device, ...).
 */
#include <stdio.h>

#include "flash_attn.h"

int main(void) {
  fa_backend_desc d[8];
  int32_t count = 0;
  for (int i = 0; i < 8; ++i) fa_backend_desc_init(&d[i]);
  if (fa_backend_info(d, 8, &count) != FA_OK) {
    fprintf(stderr, "fa_backend_info: %s\n", fa_last_error());
    return 1;
  }
  for (int i = 0; i < count && i < 8; ++i) {
    if (d[i].available)
      printf("%-7s available: %s; dtypes %s; features %s\n", d[i].name, d[i].devices, d[i].dtypes,
             d[i].features);
    else
      printf("%-7s unavailable: %s\n", d[i].name, d[i].reason);
  }
  fa_release();
  return 0;
}
