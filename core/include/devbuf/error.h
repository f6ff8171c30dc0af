/* SPDX-License-Identifier: BSD-3-Clause */
/* devbuf/error.h: status codes and the error record.
 *
 * Every fallible function in devbuf and in a plugin returns an int status
 * (DEVBUF_OK == 0, errno-style) and, when given a non-NULL devbuf_error*,
 * fills it with the same code and a message that names the operation, the
 * backend's own error name, and detail:
 *
 *     "cuMemAllocAsync: CUDA_ERROR_OUT_OF_MEMORY: 4294967296 bytes on device 0"
 *
 * The record is caller-owned, fixed-size and needs no cleanup (as nanoarrow's
 * ArrowError), so it can live on the stack and cross any boundary.
 * Self-contained: this header includes only the C standard library. */
#ifndef DEVBUF_ERROR_H
#define DEVBUF_ERROR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. Append-only: values never change meaning. */
enum devbuf_status {
  DEVBUF_OK = 0,
  DEVBUF_EINVAL = 1,      /* bad argument from the caller */
  DEVBUF_ENOMEM = 2,      /* host or device memory exhausted */
  DEVBUF_ENODEV = 3,      /* no such device / plugin has no device */
  DEVBUF_ENOTSUP = 4,     /* operation not supported by this backend */
  DEVBUF_EBACKEND = 5,    /* the vendor library reported an error */
  DEVBUF_EABI = 6,        /* plugin ABI mismatch or malformed table */
  DEVBUF_ELOAD = 7,       /* dlopen / entry symbol failure */
  DEVBUF_EBUSY = 8,       /* resource in use (e.g. exported buffer) */
  DEVBUF_EFORMAT = 9,     /* malformed format string */
  DEVBUF_ENOTFOUND = 10,  /* unknown identifier, dtype id, ... */
  DEVBUF_EEXIST = 11,     /* already registered */
  DEVBUF_ETIMEDOUT = 12,  /* an operation did not finish in time */
  DEVBUF_EINIT = 13,      /* plugin init failed */
  DEVBUF_EINTERNAL = 14,  /* a bug in devbuf: please report */
  DEVBUF_ECALLBACK = 15   /* a foreign-language callback raised */
};

#define DEVBUF_ERROR_MESSAGE_SIZE 512

typedef struct devbuf_error {
  int code;           /* an enum devbuf_status value */
  int backend_code;   /* the vendor's numeric code (CUresult, cl_int...), 0 if none */
  char message[DEVBUF_ERROR_MESSAGE_SIZE]; /* NUL-terminated, possibly truncated */
} devbuf_error;

/* Fill *err (if non-NULL) and return code, so that callers can write
 * `return devbuf_error_set(err, DEVBUF_EINVAL, "op: %s", why);`.
 * Inline so that plugins need not link libdevbuf. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static inline int devbuf_error_set(devbuf_error *err, int code, const char *fmt, ...) {
  if (err != NULL) {
    va_list ap;
    err->code = code;
    err->backend_code = 0;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* Reset to "no error". */
static inline void devbuf_error_clear(devbuf_error *err) {
  if (err != NULL) {
    err->code = DEVBUF_OK;
    err->backend_code = 0;
    err->message[0] = '\0';
  }
}

/* Prefix the message with "what: " (used when an error travels up a layer). */
static inline void devbuf_error_prefix(devbuf_error *err, const char *what) {
  if (err != NULL && what != NULL) {
    size_t cap = sizeof err->message;
    size_t wlen = strlen(what);
    /* memchr, not POSIX strnlen: the header must compile under plain -std=c11. */
    const char *nul = (const char *)memchr(err->message, '\0', cap - 1);
    size_t mlen = nul != NULL ? (size_t)(nul - err->message) : cap - 1;
    if (wlen + 2 >= cap) wlen = cap - 3;
    if (wlen + 2 + mlen >= cap) mlen = cap - 1 - wlen - 2; /* truncate the tail */
    memmove(err->message + wlen + 2, err->message, mlen);
    memcpy(err->message, what, wlen);
    err->message[wlen] = ':';
    err->message[wlen + 1] = ' ';
    err->message[wlen + 2 + mlen] = '\0';
  }
}

#ifdef __cplusplus
}
#endif

#endif /* DEVBUF_ERROR_H */
