/*
 * host_scratch.c: the workspace of host calls made without params.workspace, kept between calls.
 *
 * A fresh multi-megabyte block per call comes from mmap and is zero-filled page by page as the
 * threads first touch it: on a 16-core host the CPU backend's 256 x 256 tiles at 1k tokens ran
 * their forward 1.55x slower that way than with the block reused (same build, glibc made to
 * reuse it). So each calling thread keeps its last block and takes it again while it is large
 * enough.
 *
 * Each thread's block is registered in one list, so that fa_release (from any thread) frees every
 * block no call is using, and a thread's exit frees its own (a pthread key's destructor). A call
 * that finds its thread's block in use (a nested call) or needs more than FA_HOST_SCRATCH_KEEP
 * bytes gets a block of its own, freed when it returns.
 */
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"

/* Larger blocks are not kept: a one-off huge call should not pin its memory. */
#define FA_HOST_SCRATCH_KEEP ((size_t)256 << 20)

typedef struct host_scratch {
  void *block;
  size_t bytes;
  int in_use;
  int listed;
  struct host_scratch *prev, *next;
} host_scratch;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static host_scratch *listed; /* every thread's entry that has held a block */
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t key;
static int key_made;
static _Thread_local host_scratch mine;

static void unlink_entry(host_scratch *e) {
  if (e->prev) e->prev->next = e->next;
  if (e->next) e->next->prev = e->prev;
  if (listed == e) listed = e->next;
  e->prev = e->next = NULL;
  e->listed = 0;
}

/* At a thread's exit: its block goes (no call of that thread can be running). */
static void thread_exit(void *entry) {
  host_scratch *e = entry;
  pthread_mutex_lock(&lock);
  if (e->listed) unlink_entry(e);
  free(e->block);
  e->block = NULL;
  e->bytes = 0;
  pthread_mutex_unlock(&lock);
}

static void make_key(void) { key_made = pthread_key_create(&key, thread_exit) == 0; }

void *fa_host_scratch_take(size_t need, void **owned) {
  *owned = NULL;
  pthread_once(&key_once, make_key);
  host_scratch *e = &mine;
  pthread_mutex_lock(&lock);
  /* Without the key a block could outlive its thread: then every call allocates its own. */
  const int keep = key_made && !e->in_use && need <= FA_HOST_SCRATCH_KEEP;
  if (keep && e->bytes < need) {
    free(e->block);
    e->block = malloc(need);
    e->bytes = e->block ? need : 0;
    if (!e->block) {
      pthread_mutex_unlock(&lock);
      return NULL;
    }
  }
  if (keep) {
    if (!e->listed) {
      if (pthread_setspecific(key, e) != 0) {
        free(e->block);
        e->block = NULL;
        e->bytes = 0;
        pthread_mutex_unlock(&lock);
        return *owned = malloc(need);
      }
      e->next = listed;
      if (listed) listed->prev = e;
      listed = e;
      e->listed = 1;
    }
    e->in_use = 1;
    void *block = e->block;
    pthread_mutex_unlock(&lock);
    return block;
  }
  pthread_mutex_unlock(&lock);
  return *owned = malloc(need);
}

void fa_host_scratch_give(void *block, void *owned) {
  if (owned) {
    free(owned);
    return;
  }
  if (!block) return;
  pthread_mutex_lock(&lock);
  mine.in_use = 0;
  pthread_mutex_unlock(&lock);
}

void fa_host_scratch_release(void) {
  pthread_mutex_lock(&lock);
  for (host_scratch *e = listed, *next; e; e = next) {
    next = e->next;
    if (e->in_use) continue; /* a call on another thread holds it: freed at its next release */
    free(e->block);
    e->block = NULL;
    e->bytes = 0;
    unlink_entry(e);
  }
  pthread_mutex_unlock(&lock);
}

/* A library unloaded before its threads exit must not leave them a destructor to call. */
__attribute__((destructor)) static void unload(void) {
  if (key_made) pthread_key_delete(key);
  fa_host_scratch_release();
}
