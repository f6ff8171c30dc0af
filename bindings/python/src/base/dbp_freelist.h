/* dbp_freelist.h: a few freed blocks kept for reuse, on both builds. Not
 * installed. Include after <Python.h>.
 *
 *   DBP_FREELIST(name);                  file-scope storage, starts empty
 *   void *p = dbp_freelist_pop(&name);   a kept block, or NULL
 *   if (!dbp_freelist_push(&name, p)) free it;   kept, or 0 when full
 *
 * With the GIL: a stack of DBP_FREELIST_DEPTH blocks, which the GIL guards
 * (as CPython's own freelists were before 3.13t).
 *
 * Without the GIL (3.13t): one slot per cache line, DBP_FREELIST_SLOTS of
 * them, and each thread uses the slot its thread id hashes to. Taking is an
 * atomic exchange with NULL and giving back a compare-and-swap from NULL, so
 * a block is owned by exactly one thread at a time and no lock is taken; the
 * exchange's ordering publishes the block's contents to the thread that
 * takes it. Two threads whose ids share a slot merely find it taken (or
 * empty) more often and fall back to the allocator. Unlike a thread-local
 * freelist, nothing is stranded when a thread exits: a kept block stays in
 * its slot for the next thread. A loop that makes and drops one object per
 * call (devbuf.view) finds its block in its own slot every time. */
#ifndef DBP_FREELIST_H
#define DBP_FREELIST_H

#ifndef Py_PYTHON_H
#error "include <Python.h> before dbp_freelist.h"
#endif

#include <stdint.h>

#if defined(Py_GIL_DISABLED)
#define DBP_FREELIST_SLOTS 16 /* a power of two */
typedef struct {
  struct {
    void *p;
    char pad[64 - sizeof(void *)]; /* one cache line per slot */
  } slot[DBP_FREELIST_SLOTS];
} dbp_freelist;
#define DBP_FREELIST(name) static dbp_freelist name

static inline void **dbp_freelist_slot_(dbp_freelist *fl) {
  /* The thread pointer: threads' control blocks lie pages apart. */
  uint64_t h = (uint64_t)(_Py_ThreadId() >> 12) * 0x9E3779B97F4A7C15ull;
  return &fl->slot[h >> (64 - 4)].p; /* 4 = log2(DBP_FREELIST_SLOTS) */
}
static inline void *dbp_freelist_pop(dbp_freelist *fl) {
  void **s = dbp_freelist_slot_(fl);
  if (_Py_atomic_load_ptr_relaxed(s) == NULL) return NULL; /* no write to a shared line */
  return _Py_atomic_exchange_ptr(s, NULL);
}
static inline int dbp_freelist_push(dbp_freelist *fl, void *p) {
  void **s = dbp_freelist_slot_(fl);
  void *empty = NULL;
  if (_Py_atomic_load_ptr_relaxed(s) != NULL) return 0;
  return _Py_atomic_compare_exchange_ptr(s, &empty, p);
}
#else
#define DBP_FREELIST_DEPTH 4
typedef struct {
  void *item[DBP_FREELIST_DEPTH];
  int n;
} dbp_freelist;
#define DBP_FREELIST(name) static dbp_freelist name

static inline void *dbp_freelist_pop(dbp_freelist *fl) {
  return fl->n > 0 ? fl->item[--fl->n] : NULL;
}
static inline int dbp_freelist_push(dbp_freelist *fl, void *p) {
  if (fl->n == DBP_FREELIST_DEPTH) return 0;
  fl->item[fl->n++] = p;
  return 1;
}
#endif

#endif /* DBP_FREELIST_H */
