/* C microbenchmark of the format engine: thread-CPU nanoseconds per call (robust on a shared machine), best of 25
 * runs of N calls each. Built and run by bench_format.py:
 *   cc -O2 bench_format.c -I core/include -I registry/include -L build/lib -ldevbuf
 * Prints one line per case: "name<TAB>format<TAB>ns_itemsize<TAB>ns_parse". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devbuf/format.h"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static volatile uint64_t sink;

static double bench_itemsize(const char *fmt, size_t len, uint32_t flags, long n) {
  double best = 1e30;
  for (int rep = 0; rep < 25; rep++) {
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
      uint64_t sz = 0;
      if (devbuf_format_itemsize(fmt, len, flags, &sz, NULL, NULL, NULL) != 0) abort();
      sink += sz;
    }
    double dt = (now_ns() - t0) / (double)n;
    if (dt < best) best = dt;
  }
  return best;
}

static double bench_parse(const char *fmt, size_t len, uint32_t flags, long n) {
  double best = 1e30;
  devbuf_format f;
  f.struct_size = sizeof f;
  for (int rep = 0; rep < 25; rep++) {
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
      if (devbuf_format_parse(fmt, len, flags, &f, NULL) != 0) abort();
      sink += f.itemsize;
      devbuf_format_release(&f);
    }
    double dt = (now_ns() - t0) / (double)n;
    if (dt < best) best = dt;
  }
  return best;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  static const struct {
    const char *name, *fmt;
    uint32_t flags;
  } cases[] = {
      {"custom bfloat16", "[devbuf$bfloat16]", 0},
      {"custom, 2nd alternative", "[numpy$x;devbuf$bfloat16]", DEVBUF_FORMAT_NO_PLUGINS},
      {"plain i", "i", 0},
      {"plain <iid", "<iid", 0},
      {"struct mode 10sHHd", "10sHHd", DEVBUF_FORMAT_STRUCT},
      {"PEP 3118 nested", "i:ival:T{H:sval:B:bval:B:cval:}:sub:(16,4)d:data:", 0},
      {"numpy record", "T{<d:x:<d:y:<i:id:5s:name:}", DEVBUF_FORMAT_NUMPY},
      {"struct$ payload", "[struct$<ib]", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t len = strlen(cases[i].fmt);
    double a = bench_itemsize(cases[i].fmt, len, cases[i].flags, n);
    double b = bench_parse(cases[i].fmt, len, cases[i].flags, n);
    printf("%s\t%s\t%.1f\t%.1f\n", cases[i].name, cases[i].fmt, a, b);
  }
  return 0;
}
