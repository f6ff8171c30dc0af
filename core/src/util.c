/* Small helpers: versions, status names, strings. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

const char *devbuf_version(void) { return DEVBUF_VERSION_STRING; }

void devbuf_abi_version(int *major, int *minor) {
  if (major) *major = DEVBUF_ABI_MAJOR;
  if (minor) *minor = DEVBUF_ABI_MINOR;
}

const char *devbuf_status_name(int code) {
  static const char *const names[] = {
      "DEVBUF_OK",       "DEVBUF_EINVAL",    "DEVBUF_ENOMEM",   "DEVBUF_ENODEV",
      "DEVBUF_ENOTSUP",  "DEVBUF_EBACKEND",  "DEVBUF_EABI",     "DEVBUF_ELOAD",
      "DEVBUF_EBUSY",    "DEVBUF_EFORMAT",   "DEVBUF_ENOTFOUND", "DEVBUF_EEXIST",
      "DEVBUF_ETIMEDOUT", "DEVBUF_EINIT",    "DEVBUF_EINTERNAL", "DEVBUF_ECALLBACK"};
  if (code < 0 || (size_t)code >= sizeof names / sizeof names[0]) return "DEVBUF_E?";
  return names[code];
}

int devbuf__status_known(int code) { return strcmp(devbuf_status_name(code), "DEVBUF_E?") != 0; }

/* A plugin's status for a message: its name, or its number when it is not a
 * devbuf_status (a broken plugin must not read as "DEVBUF_E?"). */
const char *devbuf__status_text(int code, char *buf, size_t cap) {
  if (devbuf__status_known(code)) return devbuf_status_name(code);
  snprintf(buf, cap, "status %d (not a devbuf_status)", code);
  return buf;
}

char *devbuf__strdup(const char *s) {
  if (s == NULL) return NULL;
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

char *devbuf__printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  char *p = malloc((size_t)n + 1);
  if (p == NULL) return NULL;
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

/* 1 if s is NUL-terminated within max bytes and all printable ASCII (spaces allowed). */
int devbuf__printable(const char *s, size_t max) {
  if (s == NULL) return 0;
  for (size_t i = 0; i <= max; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == 0) return 1;
    if (c < 0x20 || c > 0x7e) return 0;
  }
  return 0;
}

/* Letters of a value (argument or return) in an extension-function signature. */
#define EXT_VALUE_LETTERS "bBhHiIqQnNfdps"
#define EXT_MAX_ARGS 16

int devbuf_ext_function_check(const devbuf_ext_function *e, devbuf_error *err) {
  if (e == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "ext function entry is NULL");
  if (!devbuf__printable(e->name, 127) || e->name[0] == '\0')
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "name is NULL, empty, not printable ASCII or longer than 127 bytes");
  if (e->fn == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "'%s' has a NULL function pointer", e->name);
  const char *t = e->signature;
  if (t == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "'%s': signature is NULL", e->name);
  if (!devbuf__printable(t, 64))
    return devbuf_error_set(err, DEVBUF_EINVAL, "'%s': signature is not printable ASCII or longer "
                            "than 64 bytes", e->name);
  const char *p = t;
  if (*p == '\0' || (strchr(EXT_VALUE_LETTERS, *p) == NULL && *p != 'v'))
    return devbuf_error_set(err, DEVBUF_EINVAL, "'%s': signature '%s': byte 0: return type must "
                            "be one of v%s", e->name, t, EXT_VALUE_LETTERS);
  if (*++p != '(')
    return devbuf_error_set(err, DEVBUF_EINVAL, "'%s': signature '%s': byte 1: expected '(' after "
                            "the return type", e->name, t);
  int nargs = 0, errs = 0;
  for (p++; *p != ')'; p++) {
    long at = (long)(p - t);
    if (*p == '\0')
      return devbuf_error_set(err, DEVBUF_EINVAL, "'%s': signature '%s': missing ')'", e->name, t);
    int is_out = *p == '*';
    if (is_out) p++;
    char l = *p;
    if (l == '\0' || l == ')' || (strchr(EXT_VALUE_LETTERS, l) == NULL && l != 'e'))
      return devbuf_error_set(err, DEVBUF_EINVAL, "'%s': signature '%s': byte %ld: '%c' is not an "
                              "argument type (%se, or * and one of %s)", e->name, t,
                              (long)(p - t), l ? l : '?', EXT_VALUE_LETTERS, EXT_VALUE_LETTERS);
    if (l == 'e' && (is_out || errs++))
      return devbuf_error_set(err, DEVBUF_EINVAL, "'%s': signature '%s': byte %ld: %s", e->name, t,
                              at, is_out ? "'e' cannot be an out-parameter" : "a second 'e'");
    if (++nargs > EXT_MAX_ARGS)
      return devbuf_error_set(err, DEVBUF_EINVAL, "'%s': signature '%s': more than %d arguments",
                              e->name, t, EXT_MAX_ARGS);
  }
  if (p[1] != '\0')
    return devbuf_error_set(err, DEVBUF_EINVAL, "'%s': signature '%s': byte %ld: text after ')'",
                            e->name, t, (long)(p + 1 - t));
  return DEVBUF_OK;
}
