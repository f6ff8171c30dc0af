/* A minimal test harness for devbuf's C tests: named cases, checks that say
 * what failed and where, and the closing line "N passed, N failed". */
#ifndef DEVBUF_TEST_H
#define DEVBUF_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int devbuf_test_failed_checks;
static int devbuf_test_passed, devbuf_test_failed, devbuf_test_skipped;
static const char *devbuf_test_current = "";

#define CHECK(cond, ...)                                                          \
  do {                                                                            \
    if (!(cond)) {                                                                \
      devbuf_test_failed_checks++;                                                \
      fprintf(stderr, "  FAIL %s:%d [%s]: %s: ", __FILE__, __LINE__,              \
              devbuf_test_current, #cond);                                        \
      fprintf(stderr, __VA_ARGS__);                                               \
      fprintf(stderr, "\n");                                                      \
    }                                                                             \
  } while (0)

#define CHECK_OK(expr, errp)                                                      \
  do {                                                                            \
    int rc_ = (expr);                                                             \
    CHECK(rc_ == 0, "%s returned %d: %s", #expr, rc_, (errp)->message);           \
  } while (0)

/* Substring check with the actual text in the failure message. */
#define CHECK_HAS(text, needle)                                                   \
  CHECK((text) != NULL && strstr((text), (needle)) != NULL, "'%s' does not contain '%s'", \
        (text) ? (text) : "(null)", (needle))

#define RUN(fn)                                                                   \
  do {                                                                            \
    int before_ = devbuf_test_failed_checks;                                      \
    devbuf_test_current = #fn;                                                    \
    fn();                                                                         \
    if (devbuf_test_failed_checks == before_) {                                   \
      devbuf_test_passed++;                                                       \
      printf("ok   %s\n", #fn);                                                   \
    } else {                                                                      \
      devbuf_test_failed++;                                                       \
      printf("FAIL %s\n", #fn);                                                   \
    }                                                                             \
    fflush(stdout);                                                               \
  } while (0)

#define SKIP(fn, why)                                                             \
  do {                                                                            \
    devbuf_test_skipped++;                                                        \
    printf("skip %s: %s\n", #fn, why);                                            \
  } while (0)

static inline int devbuf_test_finish(void) {
  printf("%d passed, %d failed", devbuf_test_passed, devbuf_test_failed);
  if (devbuf_test_skipped) printf(", %d skipped", devbuf_test_skipped);
  printf("\n");
  return devbuf_test_failed ? 1 : 0;
}

#endif
