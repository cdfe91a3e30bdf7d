/* error.c: the thread-local message behind fa_last_error(). */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

static _Thread_local char last_error[FA_REASON_LEN];

void fa_core_clear_error(void) { last_error[0] = '\0'; }

fa_status fa_core_set_error(fa_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return status;
}

const char *fa_last_error(void) { return last_error; }

void fa_core_refuse(fa_decision *out, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->reason, sizeof out->reason, fmt, ap);
  va_end(ap);
  out->supported = 0;
}

const char *fa_status_string(fa_status status) {
  switch (status) {
    case FA_OK:
      return "FA_OK";
    case FA_ERR_INVALID_ARGUMENT:
      return "FA_ERR_INVALID_ARGUMENT";
    case FA_ERR_UNSUPPORTED:
      return "FA_ERR_UNSUPPORTED";
    case FA_ERR_OUT_OF_MEMORY:
      return "FA_ERR_OUT_OF_MEMORY";
    case FA_ERR_BACKEND_UNAVAILABLE:
      return "FA_ERR_BACKEND_UNAVAILABLE";
    case FA_ERR_BACKEND_FAILURE:
      return "FA_ERR_BACKEND_FAILURE";
    case FA_ERR_INTERNAL:
      return "FA_ERR_INTERNAL";
  }
  return "FA_ERR_UNKNOWN";
}
