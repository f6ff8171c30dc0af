/* Which buffer exports of an object are alive, so that a release that happens
 * twice is caught and reported instead of miscounting.
 *
 * A plain counter (bytearray's discipline) cannot tell a second release of
 * one export from the release of another: a consumer that releases a copied
 * Py_buffer twice brings the count to zero while a memoryview still holds
 * the memory, and DeviceBuffer.free() would then free memory in use. Each
 * export gets a serial number in Py_buffer.internal (the exporter's field);
 * a release whose serial is not alive is reported with
 * PyErr_WriteUnraisable and ignored. Called with the GIL held. */
#ifndef DBP_EXPORT_LEDGER_H
#define DBP_EXPORT_LEDGER_H

#include <Python.h>
#include <stdint.h>

typedef struct DbpLedger {
  uintptr_t *live; /* serials of live exports, unordered; PyMem */
  Py_ssize_t n, cap;
  uintptr_t next;  /* last serial handed out; always even, and 0 is never one (an
                      exporter may hand out odd serials of its own, as DeviceBuffer's
                      lock-free export does without the GIL) */
} DbpLedger;

#if defined(__GNUC__) || defined(__clang__)
#define DBP_LEDGER_COLD __attribute__((noinline, cold, unused))
#define DBP_LEDGER_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define DBP_LEDGER_COLD inline
#define DBP_LEDGER_UNLIKELY(x) (x)
#endif

/* Out of line: the hot paths below stay small (no call, fewer saved
 * registers) in every exporter that inlines them. */
static DBP_LEDGER_COLD int dbp_ledger_grow(DbpLedger *l) {
  Py_ssize_t cap = l->cap ? l->cap * 2 : 4;
  uintptr_t *p = PyMem_Realloc(l->live, (size_t)cap * sizeof *p);
  if (p == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  l->live = p;
  l->cap = cap;
  return 0;
}

/* Record a new export in view->internal when the ledger has room
 * (l->n < l->cap): no call. */
static inline void dbp_ledger_add_room(DbpLedger *l, Py_buffer *view) {
  uintptr_t s = l->next += 2;
  if (DBP_LEDGER_UNLIKELY(s == 0)) s = l->next += 2;
  l->live[l->n++] = s;
  view->internal = (void *)s;
}

/* Record a new export in view->internal. -1 with MemoryError set on failure. */
static inline int dbp_ledger_add(DbpLedger *l, Py_buffer *view) {
  if (DBP_LEDGER_UNLIKELY(l->n == l->cap) && dbp_ledger_grow(l) < 0) return -1;
  dbp_ledger_add_room(l, view);
  return 0;
}

/* 1 if view's export was alive (it is now released); 0 if it was not: a
 * second release, or a Py_buffer this object never filled. That is reported
 * as an unraisable BufferError naming `owner`, and nothing else happens. */
static DBP_LEDGER_COLD int dbp_ledger_remove_slow(DbpLedger *l, Py_buffer *view,
                                                  PyObject *owner, const char *who,
                                                  Py_ssize_t also_live) {
  uintptr_t s = (uintptr_t)view->internal;
  for (Py_ssize_t i = l->n - 1; s != 0 && i >= 0; i--) {
    if (l->live[i] != s) continue;
    l->live[i] = l->live[--l->n];
    view->internal = NULL;
    return 1;
  }
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  PyErr_Format(PyExc_BufferError,
               "%s: a buffer export was released twice (or the Py_buffer was not filled by "
               "this object); the release was ignored, %zd export%s still alive", who,
               l->n + also_live, l->n + also_live == 1 ? " is" : "s are");
  PyErr_WriteUnraisable(owner);
  PyErr_Restore(et, ev, tb);
  return 0;
}

/* The common case of dbp_ledger_remove, exports released last-in first-out:
 * 1 if view's export was the newest live one (it is now released), 0 if not
 * (nothing done; dbp_ledger_remove decides). No call. */
static inline int dbp_ledger_remove_newest(DbpLedger *l, Py_buffer *view) {
  /* 0 is never a live serial, so it cannot match. */
  Py_ssize_t n = l->n;
  if (n > 0 && l->live[n - 1] == (uintptr_t)view->internal) {
    l->n = n - 1;
    view->internal = NULL;
    return 1;
  }
  return 0;
}

static inline int dbp_ledger_remove(DbpLedger *l, Py_buffer *view, PyObject *owner,
                                    const char *who) {
  if (dbp_ledger_remove_newest(l, view)) return 1;
  return dbp_ledger_remove_slow(l, view, owner, who, 0);
}

/* dbp_ledger_remove for an exporter with `also_live` exports alive that the
 * ledger does not hold (counted in the message of a bad release). */
static inline int dbp_ledger_remove_also(DbpLedger *l, Py_buffer *view, PyObject *owner,
                                         const char *who, Py_ssize_t also_live) {
  if (dbp_ledger_remove_newest(l, view)) return 1;
  return dbp_ledger_remove_slow(l, view, owner, who, also_live);
}

static inline void dbp_ledger_forget_all(DbpLedger *l) { l->n = 0; }

static inline void dbp_ledger_free(DbpLedger *l) {
  if (l->live != NULL) PyMem_Free(l->live); /* most views never re-export: no call */
  l->live = NULL;
  l->n = l->cap = 0;
}

#endif /* DBP_EXPORT_LEDGER_H */
