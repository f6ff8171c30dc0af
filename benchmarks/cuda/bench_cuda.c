/* bench_cuda: the GPU figures of devbuf.cuda, measured in one run.
 *
 *   bench_cuda [--plugin PATH] [--device N] [--iters N] [--pairs N]
 *              [--max-size BYTES] [--json PATH]
 *
 * 1. Device->host and host->device bandwidth through devbuf.cuda (copy_d2h /
 *    copy_h2d, then stream_synchronize) against raw cuMemcpyDtoH /
 *    cuMemcpyHtoD, each into (from) pinned memory and pageable (malloc)
 *    memory, interleaved so that all four see the same clocks and bus. The
 *    plugin's pinned side is the staging memory its host_alloc gives, the
 *    raw side cuMemHostAlloc memory.
 *    Goals: D2H pinned >= 0.95x raw, and >= 0.85 x 63 GB/s
 *    (PCIe Gen5 x16).
 * 2. Allocate+free: mem_alloc + mem_free on one stream, in a loop,
 *    microseconds per pair; with the plugin's pool, against raw
 *    cuMemAllocAsync + cuMemFreeAsync (the device's default pool), and with
 *    DEVBUF_CUDA_NO_POOL=1 (cuMemAlloc/cuMemFree). Goal: pooled <= 1 us.
 *
 * Prints Markdown (for docs/benchmarks.md); --json also writes the figures
 * and the goals as JSON (scripts/gpu-check.sh). --max-size caps the transfer
 * sizes: over the fake driver (tests/gpu/fake_cuda.c, `gpu-check.sh --fake`)
 * the figures mean nothing, only the paths are exercised. Needs libcuda.so.1
 * (or DEVBUF_CUDA_LIBRARY); the raw path opens it itself (cuda.h only for
 * types), as the plugin does. No figure is checked against a goal here: the
 * goals are reported, never asserted. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devbuf/plugin.h"

#ifndef DEVBUF_BENCH_CUDA_PLUGIN
#define DEVBUF_BENCH_CUDA_PLUGIN "devbuf_plugin_cuda.so"
#endif

#define STR_(x) #x
#define STR(x) STR_(x)

/* The raw driver calls, resolved like the plugin does (versioned names). */
#define RAW_API(X)             \
  X(cuInit)                    \
  X(cuDeviceGet)               \
  X(cuDriverGetVersion)        \
  X(cuDevicePrimaryCtxRetain)  \
  X(cuDevicePrimaryCtxRelease) \
  X(cuCtxPushCurrent)          \
  X(cuCtxPopCurrent)           \
  X(cuMemHostAlloc)            \
  X(cuMemFreeHost)             \
  X(cuMemcpyDtoH)              \
  X(cuMemcpyHtoD)              \
  X(cuMemAllocAsync)           \
  X(cuMemFreeAsync)            \
  X(cuStreamCreate)            \
  X(cuStreamDestroy)           \
  X(cuStreamSynchronize)       \
  X(cuGetErrorName)

#define RAW_FIELD(name) __typeof__(&name) p_##name;
static struct {
  RAW_API(RAW_FIELD)
} raw;
#undef RAW_FIELD

static const devbuf_plugin_table *T;
static FILE *J; /* --json, or NULL */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *why) {
  fprintf(stderr, "bench_cuda: %s: %s\n", what, why);
  exit(1);
}

#define PLUGIN(call)                                     \
  do {                                                   \
    devbuf_error_clear(&err);                            \
    if ((call) != DEVBUF_OK) die(#call, err.message);    \
  } while (0)

#define RAW(call)                                                       \
  do {                                                                  \
    CUresult r_ = (call);                                               \
    if (r_ != CUDA_SUCCESS) {                                           \
      const char *n_ = "?";                                             \
      raw.p_cuGetErrorName(r_, &n_);                                    \
      die(#call, n_);                                                   \
    }                                                                   \
  } while (0)

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A JSON string (names come from the driver: quote what must be). */
static void json_str(const char *s) {
  fputc('"', J);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(J, "\\%c", c);
    else if (c < 0x20)
      fprintf(J, "\\u%04x", c);
    else
      fputc(c, J);
  }
  fputc('"', J);
}

static void size_label(char *out, size_t cap, size_t n) {
  if (n >= ((size_t)1 << 20))
    snprintf(out, cap, "%zu MiB", n >> 20);
  else if (n >= 1024)
    snprintf(out, cap, "%zu KiB", n >> 10);
  else
    snprintf(out, cap, "%zu B", n);
}

static void *load_plugin(const char *path) {
  devbuf_plugin_entry_fn entry;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) die("dlopen plugin", dlerror());
  *(void **)(&entry) = dlsym(h, DEVBUF_PLUGIN_ENTRY_NAME);
  if (entry == NULL || (T = entry()) == NULL) die(path, "no entry symbol");
  return h;
}

static void load_raw(void) {
  const char *lib = getenv("DEVBUF_CUDA_LIBRARY");
  void *h = dlopen(lib && lib[0] ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) die("dlopen libcuda.so.1", dlerror());
#define RAW_LOAD(name)                                             \
  *(void **)(&raw.p_##name) = dlsym(h, STR(name));                 \
  if (raw.p_##name == NULL) die("dlsym", STR(name));
  RAW_API(RAW_LOAD)
#undef RAW_LOAD
}

/* One direction's four timings per iteration, in this order. */
enum { PLUGIN_PINNED, RAW_PINNED, PLUGIN_PAGEABLE, RAW_PAGEABLE, NWAYS };

typedef struct {
  void *st, *s, *d, *staged, *pinned;
  unsigned char *pageable;
  CUcontext ctx;
  size_t n;
} xfer;

/* One copy of direction `h2d` by way `w`, timed, stream synchronized. */
static double copy_once(const xfer *x, int dev, int h2d, int w) {
  devbuf_error err;
  CUcontext popped;
  void *host = (w == PLUGIN_PINNED) ? x->staged : (w == RAW_PINNED) ? x->pinned : x->pageable;
  double t0 = now_s();
  if (w == PLUGIN_PINNED || w == PLUGIN_PAGEABLE) {
    if (h2d)
      PLUGIN(T->copy_h2d(x->st, dev, x->d, 0, host, x->n, x->s, &err));
    else
      PLUGIN(T->copy_d2h(x->st, dev, host, x->d, 0, x->n, x->s, &err));
    PLUGIN(T->stream_synchronize(x->st, dev, x->s, &err));
  } else {
    RAW(raw.p_cuCtxPushCurrent(x->ctx));
    if (h2d)
      RAW(raw.p_cuMemcpyHtoD((CUdeviceptr)(uintptr_t)x->d, host, x->n));
    else
      RAW(raw.p_cuMemcpyDtoH(host, (CUdeviceptr)(uintptr_t)x->d, x->n));
    RAW(raw.p_cuCtxPopCurrent(&popped));
  }
  return now_s() - t0;
}

static const char *const WAY_KEYS[NWAYS] = {"plugin_pinned_gbs", "raw_pinned_gbs",
                                            "plugin_pageable_gbs", "raw_pageable_gbs"};

/* Median GB/s of the four ways of one direction, interleaved. */
static void direction(const xfer *x, int dev, int h2d, int iters, double gbs[NWAYS]) {
  double *t[NWAYS];
  for (int w = 0; w < NWAYS; w++)
    if ((t[w] = calloc((size_t)iters, sizeof(double))) == NULL) die("calloc", "out of host memory");
  /* Warm-up, then alternate so that drift hits every way alike. */
  for (int w = 0; w < NWAYS; w++) copy_once(x, dev, h2d, w);
  for (int i = 0; i < iters; i++)
    for (int w = 0; w < NWAYS; w++) t[w][i] = copy_once(x, dev, h2d, w);
  for (int w = 0; w < NWAYS; w++) {
    gbs[w] = (double)x->n / median(t[w], iters) / 1e9;
    free(t[w]);
  }
}

static void bandwidth(void *st, int dev, int iters, size_t max_size) {
  static const size_t sizes[] = {(size_t)1 << 20, (size_t)16 << 20, (size_t)64 << 20,
                                 (size_t)256 << 20, (size_t)1 << 30};
  static const char *const names[2] = {"Device to host", "Host to device"};
  static const char *const keys[2] = {"d2h", "h2d"};
  double res[sizeof sizes / sizeof sizes[0]][2][NWAYS];
  char skipped[sizeof sizes / sizeof sizes[0]][DEVBUF_ERROR_MESSAGE_SIZE];
  size_t nsizes = 0;
  devbuf_error err;
  CUdevice cudev;
  CUcontext popped;
  xfer x;
  memset(&x, 0, sizeof x);
  x.st = st;
  RAW(raw.p_cuDeviceGet(&cudev, dev));
  RAW(raw.p_cuDevicePrimaryCtxRetain(&x.ctx, cudev));

  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && sizes[k] <= max_size; k++, nsizes++) {
    size_t n = x.n = sizes[k];
    unsigned char *pattern = malloc(n);
    skipped[k][0] = '\0';
    x.pageable = malloc(n);
    if (!x.pageable || !pattern) die("malloc", "out of host memory");
    for (size_t i = 0; i < n; i++) pattern[i] = (unsigned char)(i * 131u + (i >> 12));

    PLUGIN(T->stream_create(st, dev, &x.s, &err));
    if (T->mem_alloc(st, dev, n, 0, x.s, &x.d, &err) != DEVBUF_OK) {
      snprintf(skipped[k], sizeof skipped[k], "%s", err.message);
      T->stream_destroy(st, dev, x.s, &err);
      free(x.pageable), free(pattern);
      continue;
    }
    PLUGIN(T->host_alloc(st, dev, n, &x.staged, &err));
    RAW(raw.p_cuCtxPushCurrent(x.ctx));
    RAW(raw.p_cuMemHostAlloc(&x.pinned, n, CU_MEMHOSTALLOC_PORTABLE));
    RAW(raw.p_cuCtxPopCurrent(&popped));

    /* Host to device first: every source holds the pattern, so the device
     * buffer holds it after any of the copies, and D2H can be checked. */
    memcpy(x.staged, pattern, n);
    memcpy(x.pinned, pattern, n);
    memcpy(x.pageable, pattern, n);
    direction(&x, dev, 1, iters, res[k][1]);
    memset(x.staged, 0, n), memset(x.pinned, 0, n), memset(x.pageable, 0, n);
    direction(&x, dev, 0, iters, res[k][0]);
    if (memcmp(x.staged, pattern, n) != 0 || memcmp(x.pinned, pattern, n) != 0 ||
        memcmp(x.pageable, pattern, n) != 0)
      die("verify", "a copy returned wrong bytes");

    RAW(raw.p_cuCtxPushCurrent(x.ctx));
    RAW(raw.p_cuMemFreeHost(x.pinned));
    RAW(raw.p_cuCtxPopCurrent(&popped));
    PLUGIN(T->host_free(st, dev, x.staged, &err));
    PLUGIN(T->mem_free(st, dev, x.d, x.s, &err));
    PLUGIN(T->stream_synchronize(st, dev, x.s, &err));
    PLUGIN(T->stream_destroy(st, dev, x.s, &err));
    free(x.pageable), free(pattern);
  }
  raw.p_cuDevicePrimaryCtxRelease(cudev);

  for (int h2d = 0; h2d < 2; h2d++) {
    printf("### %s\n\n", names[h2d]);
    printf("| size | plugin, pinned staging (GB/s) | raw, pinned (GB/s) | ratio | vs 63 GB/s | "
           "plugin, pageable (GB/s) | raw, pageable (GB/s) | ratio |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    if (J) fprintf(J, "%s  \"%s\": [", h2d ? ",\n" : "", keys[h2d]);
    for (size_t k = 0; k < nsizes; k++) {
      char label[32];
      const double *g = res[k][h2d];
      size_label(label, sizeof label, sizes[k]);
      if (J) fprintf(J, "%s\n    {\"bytes\": %zu", k ? "," : "", sizes[k]);
      if (skipped[k][0]) {
        printf("| %s | skipped: %s | | | | | | |\n", label, skipped[k]);
        if (J) fputs(", \"skipped\": ", J), json_str(skipped[k]), fputc('}', J);
        continue;
      }
      printf("| %s | %.1f | %.1f | %.3f | %.2f | %.1f | %.1f | %.3f |\n", label,
             g[PLUGIN_PINNED], g[RAW_PINNED], g[PLUGIN_PINNED] / g[RAW_PINNED],
             g[PLUGIN_PINNED] / 63.0, g[PLUGIN_PAGEABLE], g[RAW_PAGEABLE],
             g[PLUGIN_PAGEABLE] / g[RAW_PAGEABLE]);
      if (J) {
        for (int w = 0; w < NWAYS; w++) fprintf(J, ", \"%s\": %.3f", WAY_KEYS[w], g[w]);
        fprintf(J, ", \"ratio_pinned\": %.4f, \"ratio_pageable\": %.4f, \"pinned_vs_63gbs\": %.4f}",
                g[PLUGIN_PINNED] / g[RAW_PINNED], g[PLUGIN_PAGEABLE] / g[RAW_PAGEABLE],
                g[PLUGIN_PINNED] / 63.0);
      }
    }
    if (J) fputs("\n  ]", J);
    printf("\n");
  }
  printf("Median of %d interleaved runs per size and way; GB = 1e9 bytes; each figure includes "
         "the stream synchronization (raw cuMemcpy* are synchronous).\n\n",
         iters);
  /* The D2H goals, on the largest size measured. */
  if (J) {
    int last = -1;
    for (size_t k = 0; k < nsizes; k++)
      if (!skipped[k][0]) last = (int)k;
    if (last >= 0) {
      const double *g = res[last][0];
      fprintf(J, ",\n  \"goals_d2h\": {\"at_bytes\": %zu, \"pinned_ratio_ge_0_95\": %s, "
                 "\"pinned_ge_0_85_of_63gbs\": %s}",
              sizes[last], g[PLUGIN_PINNED] / g[RAW_PINNED] >= 0.95 ? "true" : "false",
              g[PLUGIN_PINNED] >= 0.85 * 63.0 ? "true" : "false");
    }
  }
}

/* Microseconds per plugin mem_alloc+mem_free pair, median of 5 batches. */
static double alloc_pairs(void *st, int dev, size_t size, int pairs) {
  devbuf_error err;
  void *s = NULL, *p = NULL;
  double batch[5];
  PLUGIN(T->stream_create(st, dev, &s, &err));
  for (int i = 0; i < 100; i++) { /* warm the pool */
    PLUGIN(T->mem_alloc(st, dev, size, 0, s, &p, &err));
    PLUGIN(T->mem_free(st, dev, p, s, &err));
  }
  PLUGIN(T->stream_synchronize(st, dev, s, &err));
  for (int b = 0; b < 5; b++) {
    double t0 = now_s();
    for (int i = 0; i < pairs; i++) {
      PLUGIN(T->mem_alloc(st, dev, size, 0, s, &p, &err));
      PLUGIN(T->mem_free(st, dev, p, s, &err));
    }
    PLUGIN(T->stream_synchronize(st, dev, s, &err));
    batch[b] = (now_s() - t0) / pairs * 1e6;
  }
  PLUGIN(T->stream_destroy(st, dev, s, &err));
  return median(batch, 5);
}

/* The same with raw cuMemAllocAsync + cuMemFreeAsync (the device's default
 * pool) on a stream of its own: the baseline a pooled allocator is held to. */
static double raw_async_pairs(int dev, size_t size, int pairs) {
  CUdevice cudev;
  CUcontext ctx, popped;
  CUstream s;
  CUdeviceptr p;
  double batch[5];
  RAW(raw.p_cuDeviceGet(&cudev, dev));
  RAW(raw.p_cuDevicePrimaryCtxRetain(&ctx, cudev));
  RAW(raw.p_cuCtxPushCurrent(ctx));
  RAW(raw.p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 100; i++) {
    RAW(raw.p_cuMemAllocAsync(&p, size, s));
    RAW(raw.p_cuMemFreeAsync(p, s));
  }
  RAW(raw.p_cuStreamSynchronize(s));
  for (int b = 0; b < 5; b++) {
    double t0 = now_s();
    for (int i = 0; i < pairs; i++) {
      RAW(raw.p_cuMemAllocAsync(&p, size, s));
      RAW(raw.p_cuMemFreeAsync(p, s));
    }
    RAW(raw.p_cuStreamSynchronize(s));
    batch[b] = (now_s() - t0) / pairs * 1e6;
  }
  RAW(raw.p_cuStreamDestroy(s));
  RAW(raw.p_cuCtxPopCurrent(&popped));
  raw.p_cuDevicePrimaryCtxRelease(cudev);
  return median(batch, 5);
}

static void allocation(void *pooled, void *unpooled, int dev, int pairs) {
  static const size_t sizes[] = {256, 64 << 10, 1 << 20, 64 << 20};
  /* cuMemAlloc/cuMemFree can take 100s of us at 64 MiB: fewer pairs there. */
  int slow_pairs = pairs / 100 > 10 ? pairs / 100 : 10;
  int all_le_1us = 1;
  printf("### Allocate + free\n\n");
  printf("| size | plugin, pooled (us per pair) | raw cuMemAllocAsync + cuMemFreeAsync (us per "
         "pair) | plugin, DEVBUF_CUDA_NO_POOL=1: cuMemAlloc/cuMemFree (us per pair) |\n");
  printf("|---:|---:|---:|---:|\n");
  if (J) fputs(",\n  \"alloc\": [", J);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    char label[32];
    double a = alloc_pairs(pooled, dev, sizes[k], pairs);
    double r = raw_async_pairs(dev, sizes[k], pairs);
    double b = alloc_pairs(unpooled, dev, sizes[k], slow_pairs);
    size_label(label, sizeof label, sizes[k]);
    printf("| %s | %.3f | %.3f | %.2f |\n", label, a, r, b);
    fflush(stdout);
    if (a > 1.0) all_le_1us = 0;
    if (J)
      fprintf(J, "%s\n    {\"bytes\": %zu, \"plugin_pooled_us\": %.4f, "
                 "\"raw_alloc_async_us\": %.4f, \"plugin_unpooled_us\": %.3f}",
              k ? "," : "", sizes[k], a, r, b);
  }
  if (J)
    fprintf(J, "\n  ],\n  \"goals_alloc\": {\"pooled_le_1us_every_size\": %s}",
            all_le_1us ? "true" : "false");
  printf("\nmem_alloc and mem_free (or the raw pair) on one stream, %d pairs per batch (%d for "
         "cuMemAlloc/cuMemFree), median of 5 batches, stream synchronized inside the timing.\n",
         pairs, slow_pairs);
}

int main(int argc, char **argv) {
  const char *plugin = DEVBUF_BENCH_CUDA_PLUGIN, *json = NULL;
  int dev = 0, iters = 20, pairs = 100000, count = 0, version = 0;
  size_t max_size = (size_t)1 << 30;
  void *pooled = NULL, *unpooled = NULL;
  devbuf_error err;
  devbuf_device_props props;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--plugin") == 0 && i + 1 < argc)
      plugin = argv[++i];
    else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
      dev = atoi(argv[++i]);
    else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
      iters = atoi(argv[++i]);
    else if (strcmp(argv[i], "--pairs") == 0 && i + 1 < argc)
      pairs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--max-size") == 0 && i + 1 < argc)
      max_size = (size_t)strtoull(argv[++i], NULL, 0);
    else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
      json = argv[++i];
    else {
      fprintf(stderr,
              "usage: %s [--plugin PATH] [--device N] [--iters N] [--pairs N] "
              "[--max-size BYTES] [--json PATH]\n",
              argv[0]);
      return 2;
    }
  }
  if (iters < 1) iters = 1;
  if (pairs < 10) pairs = 10;
  load_plugin(plugin);
  PLUGIN(T->init(&pooled, &err));
  PLUGIN(T->device_count(pooled, &count, &err));
  if (dev < 0 || dev >= count) die("--device", "no such device");
  load_raw();
  RAW(raw.p_cuInit(0));
  raw.p_cuDriverGetVersion(&version);
  memset(&props, 0, sizeof props);
  props.struct_size = sizeof props;
  PLUGIN(T->device_props(pooled, dev, &props, &err));
  /* Opened only once there is a device: no empty file from a failed run. */
  if (json && (J = fopen(json, "w")) == NULL) die(json, "cannot open for writing");
  {
    time_t t = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M", gmtime(&t));
    printf("## CUDA\n\nDevice %d: %s, %.1f GiB; driver API %d.%d; %s (UTC); devbuf.cuda %s\n\n",
           dev, props.name, (double)props.total_memory / (1u << 30), version / 1000,
           (version % 1000) / 10, date, T->version);
    if (J) {
      fputs("{\n  \"tool\": \"bench_cuda\",\n  \"device\": ", J);
      json_str(props.name);
      fprintf(J, ",\n  \"ordinal\": %d,\n  \"total_memory\": %zu,\n  \"driver_api\": \"%d.%d\",\n"
                 "  \"date_utc\": \"%s\",\n  \"plugin_version\": ",
              dev, (size_t)props.total_memory, version / 1000, (version % 1000) / 10, date);
      json_str(T->version);
      fprintf(J, ",\n  \"iters\": %d,\n  \"pairs\": %d,\n  \"max_size\": %zu,\n", iters, pairs,
              max_size);
    }
  }
  bandwidth(pooled, dev, iters, max_size);
  /* A second plugin state with the pool turned off: the variable is read
   * when the state first uses the device, so keep it set until then. */
  setenv("DEVBUF_CUDA_NO_POOL", "1", 1);
  PLUGIN(T->init(&unpooled, &err));
  {
    void *s = NULL;
    PLUGIN(T->stream_create(unpooled, dev, &s, &err));
    PLUGIN(T->stream_destroy(unpooled, dev, s, &err));
  }
  unsetenv("DEVBUF_CUDA_NO_POOL");
  allocation(pooled, unpooled, dev, pairs);
  T->shutdown(unpooled);
  T->shutdown(pooled);
  if (J) {
    fputs("\n}\n", J);
    if (fclose(J) != 0) die(json, "write failed");
  }
  return 0;
}
