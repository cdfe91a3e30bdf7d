/*
 * strbuf.h: bounded string building without printf, for what every call does (the kernel name a
 * backend decides, the run report's copies): snprintf costs 500-2,000 instructions a call there,
 * most of a small call's host time (callgrind, fa_plan_forward on the CPU backend). Error paths
 * keep their printf formats. Header-only, so that the plugins use it without a new symbol.
 *
 * Every function keeps the buffer NUL-terminated and truncates as snprintf would.
 */
#ifndef FA_CORE_STRBUF_H
#define FA_CORE_STRBUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct fa_strbuf {
  char *s;
  size_t n, len; /* capacity with the NUL; characters kept */
} fa_strbuf;

static inline fa_strbuf fa_strbuf_of(char *s, size_t n) {
  fa_strbuf b = {s, n, 0};
  if (n) s[0] = '\0';
  return b;
}

/* Appends t; NULL appends "(null)", as glibc's printf prints it. */
static inline void fa_strbuf_put(fa_strbuf *b, const char *t) {
  if (!b->n) return;
  if (!t) t = "(null)";
  size_t room = b->n - 1 - b->len, m = strlen(t);
  if (m > room) m = room;
  memcpy(b->s + b->len, t, m);
  b->len += m;
  b->s[b->len] = '\0';
}

static inline void fa_strbuf_int(fa_strbuf *b, int64_t v) {
  char digits[24];
  int i = (int)sizeof digits - 1;
  digits[i] = '\0';
  /* in unsigned arithmetic, so that INT64_MIN has a magnitude */
  uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    digits[--i] = (char)('0' + m % 10);
    m /= 10;
  } while (m);
  if (v < 0) digits[--i] = '-';
  fa_strbuf_put(b, digits + i);
}

/* dst = src, truncated to n - 1 characters (snprintf(dst, n, "%s", src) without the printf). */
static inline void fa_str_copy(char *dst, size_t n, const char *src) {
  fa_strbuf b = fa_strbuf_of(dst, n);
  fa_strbuf_put(&b, src);
}

#endif /* FA_CORE_STRBUF_H */
