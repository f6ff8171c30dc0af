/* bench_cuda: the GPU figures of issue 8, measured in one run.
 *
 *   bench_cuda [--plugin PATH] [--device N] [--iters N] [--pairs N]
 *
 * 1. Device->host bandwidth through devbuf.cuda (copy_d2h into the pinned
 *    staging memory its host_alloc gives, then stream_synchronize), against a
 *    raw cuMemcpyDtoH into cuMemHostAlloc memory from the same device buffer,
 *    interleaved so that both see the same clocks and bus. Also the plugin
 *    into pageable (malloc) memory, to show what staging buys.
 *    Goals: plugin >= 0.95x raw, and >= 0.85 x 63 GB/s (PCIe Gen5 x16).
 * 2. Pooled allocate+free: mem_alloc + mem_free on one stream, in a loop,
 *    microseconds per pair; with the plugin's pool and with
 *    DEVBUF_CUDA_NO_POOL=1 (cuMemAlloc/cuMemFree). Goal: pooled <= 2 us.
 *
 * Prints Markdown ready for docs/benchmarks.md. Needs a GPU and libcuda.so.1;
 * the raw path opens libcuda itself (cuda.h only for types), as the plugin. */
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
  X(cuGetErrorName)

#define RAW_FIELD(name) __typeof__(&name) p_##name;
static struct {
  RAW_API(RAW_FIELD)
} raw;
#undef RAW_FIELD

static const devbuf_plugin_table *T;

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

static void bandwidth(void *st, int dev, int iters) {
  static const size_t sizes[] = {(size_t)1 << 20, (size_t)16 << 20, (size_t)64 << 20,
                                 (size_t)256 << 20, (size_t)1 << 30};
  devbuf_error err;
  CUdevice cudev;
  CUcontext ctx, popped;
  RAW(raw.p_cuDeviceGet(&cudev, dev));
  RAW(raw.p_cuDevicePrimaryCtxRetain(&ctx, cudev));

  printf("### Device to host\n\n");
  printf("| size | plugin, pinned staging (GB/s) | raw cuMemcpyDtoH, pinned (GB/s) | ratio | "
         "vs 63 GB/s | plugin, pageable (GB/s) |\n");
  printf("|---:|---:|---:|---:|---:|---:|\n");
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    void *d = NULL, *s = NULL, *staged = NULL, *pinned = NULL;
    unsigned char *pageable = malloc(n), *pattern = malloc(n);
    double *tp = calloc((size_t)iters, sizeof *tp), *tr = calloc((size_t)iters, sizeof *tr);
    double *tg = calloc((size_t)iters, sizeof *tg);
    if (!pageable || !pattern || !tp || !tr || !tg) die("malloc", "out of host memory");
    for (size_t i = 0; i < n; i++) pattern[i] = (unsigned char)(i * 131u + (i >> 12));

    PLUGIN(T->stream_create(st, dev, &s, &err));
    if (T->mem_alloc(st, dev, n, 0, s, &d, &err) != DEVBUF_OK) {
      printf("| %zu MiB | skipped: %s | | | | |\n", n >> 20, err.message);
      T->stream_destroy(st, dev, s, &err);
      free(pageable), free(pattern), free(tp), free(tr), free(tg);
      continue;
    }
    PLUGIN(T->host_alloc(st, dev, n, &staged, &err));
    PLUGIN(T->copy_h2d(st, dev, d, 0, pattern, n, s, &err));
    PLUGIN(T->stream_synchronize(st, dev, s, &err));
    RAW(raw.p_cuCtxPushCurrent(ctx));
    RAW(raw.p_cuMemHostAlloc(&pinned, n, CU_MEMHOSTALLOC_PORTABLE));
    RAW(raw.p_cuCtxPopCurrent(&popped));

    /* Warm-up, then alternate so drift hits both sides alike. */
    for (int w = 0; w < 2; w++) {
      PLUGIN(T->copy_d2h(st, dev, staged, d, 0, n, s, &err));
      PLUGIN(T->stream_synchronize(st, dev, s, &err));
      RAW(raw.p_cuCtxPushCurrent(ctx));
      RAW(raw.p_cuMemcpyDtoH(pinned, (CUdeviceptr)(uintptr_t)d, n));
      RAW(raw.p_cuCtxPopCurrent(&popped));
    }
    for (int i = 0; i < iters; i++) {
      double t0 = now_s();
      PLUGIN(T->copy_d2h(st, dev, staged, d, 0, n, s, &err));
      PLUGIN(T->stream_synchronize(st, dev, s, &err));
      double t1 = now_s();
      RAW(raw.p_cuCtxPushCurrent(ctx));
      RAW(raw.p_cuMemcpyDtoH(pinned, (CUdeviceptr)(uintptr_t)d, n));
      RAW(raw.p_cuCtxPopCurrent(&popped));
      double t2 = now_s();
      PLUGIN(T->copy_d2h(st, dev, pageable, d, 0, n, s, &err));
      PLUGIN(T->stream_synchronize(st, dev, s, &err));
      double t3 = now_s();
      tp[i] = t1 - t0;
      tr[i] = t2 - t1;
      tg[i] = t3 - t2;
    }
    if (memcmp(staged, pattern, n) != 0 || memcmp(pinned, pattern, n) != 0 ||
        memcmp(pageable, pattern, n) != 0)
      die("verify", "a copy returned wrong bytes");
    double gp = (double)n / median(tp, iters) / 1e9, gr = (double)n / median(tr, iters) / 1e9;
    double gg = (double)n / median(tg, iters) / 1e9;
    printf("| %zu MiB | %.1f | %.1f | %.3f | %.2f | %.1f |\n", n >> 20, gp, gr, gp / gr, gp / 63.0,
           gg);
    fflush(stdout);

    RAW(raw.p_cuCtxPushCurrent(ctx));
    RAW(raw.p_cuMemFreeHost(pinned));
    RAW(raw.p_cuCtxPopCurrent(&popped));
    PLUGIN(T->host_free(st, dev, staged, &err));
    PLUGIN(T->mem_free(st, dev, d, s, &err));
    PLUGIN(T->stream_synchronize(st, dev, s, &err));
    PLUGIN(T->stream_destroy(st, dev, s, &err));
    free(pageable), free(pattern), free(tp), free(tr), free(tg);
  }
  raw.p_cuDevicePrimaryCtxRelease(cudev);
  printf("\nMedian of %d interleaved runs per size; GB = 1e9 bytes; each figure includes the "
         "stream synchronization.\n\n",
         iters);
}

/* Microseconds per mem_alloc+mem_free pair, median of 5 batches. */
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

static void allocation(void *pooled, void *unpooled, int dev, int pairs) {
  static const size_t sizes[] = {256, 64 << 10, 1 << 20, 64 << 20};
  printf("### Allocate + free\n\n");
  printf("| size | pooled (us per pair) | cuMemAlloc/cuMemFree (us per pair) |\n");
  printf("|---:|---:|---:|\n");
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    double a = alloc_pairs(pooled, dev, sizes[k], pairs);
    double b = alloc_pairs(unpooled, dev, sizes[k], pairs / 10 > 0 ? pairs / 10 : 1);
    if (sizes[k] >= (1 << 20))
      printf("| %zu MiB | %.2f | %.2f |\n", sizes[k] >> 20, a, b);
    else if (sizes[k] >= 1024)
      printf("| %zu KiB | %.2f | %.2f |\n", sizes[k] >> 10, a, b);
    else
      printf("| %zu B | %.2f | %.2f |\n", sizes[k], a, b);
    fflush(stdout);
  }
  printf("\nmem_alloc and mem_free on one stream, %d pairs per batch (a tenth of that "
         "unpooled), median of 5 batches, stream synchronized inside the timing.\n",
         pairs);
}

int main(int argc, char **argv) {
  const char *plugin = DEVBUF_BENCH_CUDA_PLUGIN;
  int dev = 0, iters = 20, pairs = 100000, count = 0, version = 0;
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
    else {
      fprintf(stderr, "usage: %s [--plugin PATH] [--device N] [--iters N] [--pairs N]\n",
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
  {
    time_t t = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&t));
    printf("## CUDA\n\nDevice %d: %s, %.1f GiB; driver API %d.%d; %s (UTC); devbuf.cuda %s\n\n",
           dev, props.name, (double)props.total_memory / (1u << 30), version / 1000,
           (version % 1000) / 10, date, T->version);
  }
  bandwidth(pooled, dev, iters);
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
  return 0;
}
