/*
 * fuzz_ring.c: the ring calls on the same arguments as a forward or backward the target just ran,
 * on one rank (the self transport, no MPI). The ring checks what fa_forward checks and refuses
 * more, so: its status is an fa_status with a message on failure; it fails whenever the plain call
 * failed (but for lack of memory); a failed ring call writes nothing; and the sanitizers watch its
 * own copies, conversions and merges over every layout the decoder makes.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

void fuzz_ring_check(call *c, const fa_params *pp, fa_run_info *info, fa_status plain) {
  slot *s = c->s;
  for (int i = 0; i < S_COUNT; ++i)
    if (s[i].snap) memcpy(s[i].snap, s[i].buf, s[i].bytes); /* as the plain call left them */
  fa_ring_args ring;
  fa_ring_args_init(&ring);
  ring.transport = FA_TRANSPORT_SELF;
  ring.layout = (c->op & 1) ^ (s[S_Q].t.ndim & 1) ? FA_RING_ZIGZAG : FA_RING_CONTIGUOUS;
  const fa_tensor *t[S_COUNT];
  fa_tensor *w[S_COUNT];
  for (int i = 0; i < S_COUNT; ++i) t[i] = w[i] = s[i].used ? &s[i].t : NULL;
  const char *what = c->op == 0 ? "fa_ring_forward" : "fa_ring_backward";
  fa_status st = c->op == 0
                     ? fa_ring_forward(pp, &ring, t[S_Q], t[S_K], t[S_V], w[S_OUT], w[S_LSE], info)
                     : fa_ring_backward(pp, &ring, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE],
                                        t[S_DOUT], w[S_DQ], w[S_DK], w[S_DV], info);
  if (st < FA_OK || st > FA_ERR_INTERNAL) FAIL("%s returned %d, not an fa_status", what, (int)st);
  if (st == FA_ERR_INTERNAL) FAIL("%s: FA_ERR_INTERNAL: %s", what, fa_last_error());
  if (st != FA_OK && fa_last_error()[0] == '\0') FAIL("%s failed (%d) without a message", what, st);
  if (st == FA_OK && plain != FA_OK && plain != FA_ERR_OUT_OF_MEMORY)
    FAIL("%s succeeded where the plain call failed with %s", what, fa_status_string(plain));
  if (st != FA_OK)
    for (int i = 0; i < S_COUNT; ++i)
      if (s[i].snap && memcmp(s[i].snap, s[i].buf, s[i].bytes) != 0)
        FAIL("%s failed (%s: %s) but changed tensor slot %d", what, fa_status_string(st),
             fa_last_error(), i);
}
