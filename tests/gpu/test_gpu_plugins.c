/* Tests of the hardware plugins devbuf.cuda, devbuf.hip and devbuf.level_zero
 * through their tables alone (each plugin dlopen'd directly, no libdevbuf):
 *
 *     test_gpu_plugins PLUGIN.so CASE [FAKE_DRIVER.so]
 *
 * Cases that need no hardware: the table, lazy loading (the vendor library
 * is not in the process after init: dlopen(RTLD_NOLOAD) says so), the exact
 * "no device" reason, every slot failing cleanly with DEVBUF_ENODEV, the
 * default library (a device, or a reason), concurrent first use.
 * Cases "fake_*" run devbuf.cuda against tests/gpu/fake_cuda.c, a fake
 * libcuda that is strict about contexts, handles and bounds; "fake_ze_*" run
 * devbuf.level_zero against tests/gpu/fake_level_zero.c, a fake loader;
 * "fake_hip_*" devbuf.hip against tests/gpu/fake_hip.c, a fake runtime. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devbuf/plugin.h"
#include "devbuf_test.h"

typedef struct gpu_desc {
  const char *name;        /* table->name */
  const char *identifier;  /* the one identifier */
  const char *env;         /* library override */
  const char *libs[4];     /* default library names, in the plugin's order */
  const char *init_fn;     /* the driver's init entry point */
  int dl_type;
  const char *node;        /* device node without which the library is not even loaded */
} gpu_desc;

static const gpu_desc g_descs[] = {
    {"cuda", "devbuf.cuda", "DEVBUF_CUDA_LIBRARY", {"libcuda.so.1", NULL}, "cuInit",
     DEVBUF_DL_CUDA, NULL},
    {"hip", "devbuf.hip", "DEVBUF_HIP_LIBRARY",
     {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5", NULL}, "hipInit", DEVBUF_DL_ROCM,
     "/dev/kfd"},
    {"level_zero", "devbuf.level_zero", "DEVBUF_LEVEL_ZERO_LIBRARY", {"libze_loader.so.1", NULL},
     "zeInit", DEVBUF_DL_ONEAPI, NULL},
};

static const char *g_plugin_path, *g_fake_path;
static void *g_handle;
static const devbuf_plugin_table *T;
static const gpu_desc *D;

static void load_plugin(void) {
  devbuf_plugin_entry_fn entry;
  g_handle = dlopen(g_plugin_path, RTLD_NOW | RTLD_LOCAL);
  if (g_handle == NULL) {
    fprintf(stderr, "dlopen %s: %s\n", g_plugin_path, dlerror());
    exit(2);
  }
  *(void **)(&entry) = dlsym(g_handle, DEVBUF_PLUGIN_ENTRY_NAME);
  if (entry == NULL || (T = entry()) == NULL) {
    fprintf(stderr, "%s: no usable entry symbol\n", g_plugin_path);
    exit(2);
  }
  for (size_t i = 0; i < sizeof g_descs / sizeof g_descs[0]; i++)
    if (T->name != NULL && strcmp(T->name, g_descs[i].name) == 0) D = &g_descs[i];
  if (D == NULL) {
    fprintf(stderr, "%s: not one of the hardware plugins (name %s)\n", g_plugin_path,
            T->name ? T->name : "(null)");
    exit(2);
  }
}

/* Is any of the vendor library's default names already in the process? */
static int vendor_loaded(void) {
  for (int i = 0; D->libs[i] != NULL; i++) {
    void *h = dlopen(D->libs[i], RTLD_NOW | RTLD_NOLOAD);
    if (h != NULL) {
      dlclose(h);
      return 1;
    }
  }
  return 0;
}

static void *new_state(void) {
  void *st = NULL;
  devbuf_error err;
  devbuf_error_clear(&err);
  CHECK(T->init(&st, &err) == DEVBUF_OK, "init: %s", err.message);
  return st;
}

/* ---- no hardware needed ----------------------------------------------------- */

static void table(void) {
  CHECK(T->struct_size == sizeof(devbuf_plugin_table), "struct_size %u", T->struct_size);
  CHECK(T->struct_size >= DEVBUF_PLUGIN_TABLE_V1_SIZE, "struct_size below v1");
  CHECK(T->abi_major == DEVBUF_ABI_MAJOR, "abi_major %u", T->abi_major);
  CHECK(T->abi_minor == DEVBUF_ABI_MINOR, "abi_minor %u", T->abi_minor);
  CHECK(T->version != NULL && T->version[0] != '\0', "no version");
  CHECK(T->description != NULL && strlen(T->description) > 10, "no description");
  CHECK(T->identifiers != NULL && T->identifiers[0] != NULL, "no identifiers");
  if (T->identifiers != NULL && T->identifiers[0] != NULL) {
    CHECK(strcmp(T->identifiers[0], D->identifier) == 0, "identifier %s", T->identifiers[0]);
    CHECK(T->identifiers[1] == NULL, "more than one identifier: %s", T->identifiers[1]);
  }
  /* Every slot is implemented, optional ones included (dtype namespaces and
   * extension functions excepted: these plugins have none). */
  CHECK(T->init && T->shutdown, "lifecycle slots");
  CHECK(T->device_count && T->device_props, "device slots");
  CHECK(T->mem_alloc && T->mem_free, "memory slots");
  CHECK(T->copy_h2d && T->copy_d2h && T->copy_d2d, "copy slots");
  CHECK(T->stream_create && T->stream_destroy && T->stream_synchronize, "stream slots");
  CHECK(T->event_create && T->event_destroy && T->event_record && T->stream_wait_event &&
            T->event_synchronize && T->event_query,
        "event slots");
  CHECK(T->device_info_export && T->device_info_import, "device_info slots");
  CHECK(T->host_alloc && T->host_free, "host staging slots");
  CHECK(T->dtype_namespaces == NULL, "unexpected dtype namespaces");
  CHECK(T->ext_functions == NULL && T->ext_function_count == 0, "unexpected ext functions");
  /* The version script leaves exactly one symbol visible. */
  CHECK(dlsym(g_handle, "devbuf_error_set") == NULL, "an inline helper leaked out");
}

static void lazy(void) {
  devbuf_error err;
  int count = -1;
  void *st;
  CHECK(!vendor_loaded(), "vendor library loaded before the plugin was even initialised");
  st = new_state();
  CHECK(!vendor_loaded(), "init loaded the vendor library (must wait for first device use)");
  /* First use, pointed at a library that does not exist: still not loaded. */
  setenv(D->env, "/nonexistent/libvendor.so.1", 1);
  CHECK(T->device_count(st, &count, &err) == DEVBUF_ENODEV, "device_count: %s", err.message);
  CHECK(!vendor_loaded(), "the override was ignored: a default library was loaded");
  T->shutdown(st);
  unsetenv(D->env);
}

static void expect_reason(const devbuf_error *err, const char *reason, const char *what) {
  CHECK(err->code == DEVBUF_ENODEV, "%s: err.code %d", what, err->code);
  CHECK(strcmp(err->message, reason) == 0, "%s: message '%s', expected '%s'", what, err->message,
        reason);
}

/* Every slot on a plugin without a device: DEVBUF_ENODEV and the reason,
 * nothing dereferenced (the handles passed are deliberately bogus). */
static void all_slots_fail(void *st, const char *reason) {
  devbuf_error err;
  devbuf_device_props props;
  devbuf_device_info info;
  devbuf_device_info_desc desc;
  unsigned char host[64] = {0}, blob[256];
  void *bogus = (void *)(uintptr_t)0x1000, *out = bogus;
  size_t size = 0;
  int rc;

#define EXPECT_NODEV(call)                                           \
  do {                                                               \
    devbuf_error_clear(&err);                                        \
    rc = (call);                                                     \
    CHECK(rc == DEVBUF_ENODEV, "%s returned %d", #call, rc);         \
    expect_reason(&err, reason, #call);                              \
    CHECK((call) == DEVBUF_ENODEV, "%s with err NULL", #call);       \
  } while (0)
  memset(&props, 0x5a, sizeof props);
  props.struct_size = sizeof props;
  EXPECT_NODEV(T->device_props(st, 0, &props, &err));
  CHECK(props.flags == 0x5a5a5a5au, "device_props wrote into props on failure");
  EXPECT_NODEV(T->mem_alloc(st, 0, 64, 0, NULL, &out, &err));
  CHECK(out == NULL, "mem_alloc left *ptr set on failure");
  EXPECT_NODEV(T->mem_free(st, 0, bogus, NULL, &err));
  EXPECT_NODEV(T->copy_h2d(st, 0, bogus, 0, host, sizeof host, NULL, &err));
  EXPECT_NODEV(T->copy_d2h(st, 0, host, bogus, 0, sizeof host, NULL, &err));
  EXPECT_NODEV(T->copy_d2d(st, 0, bogus, 0, bogus, 8, 8, NULL, &err));
  out = bogus;
  EXPECT_NODEV(T->stream_create(st, 0, &out, &err));
  CHECK(out == NULL, "stream_create left *stream set on failure");
  EXPECT_NODEV(T->stream_destroy(st, 0, bogus, &err));
  EXPECT_NODEV(T->stream_synchronize(st, 0, NULL, &err));
  EXPECT_NODEV(T->stream_synchronize(st, 0, bogus, &err));
  out = bogus;
  EXPECT_NODEV(T->event_create(st, 0, &out, &err));
  CHECK(out == NULL, "event_create left *event set on failure");
  EXPECT_NODEV(T->event_destroy(st, 0, bogus, &err));
  EXPECT_NODEV(T->event_record(st, 0, bogus, NULL, &err));
  EXPECT_NODEV(T->stream_wait_event(st, 0, bogus, bogus, &err));
  EXPECT_NODEV(T->event_synchronize(st, 0, bogus, &err));
  EXPECT_NODEV(T->event_query(st, 0, bogus, &err));
  out = bogus;
  EXPECT_NODEV(T->host_alloc(st, 0, 4096, &out, &err));
  CHECK(out == NULL, "host_alloc left *ptr set on failure");
  EXPECT_NODEV(T->host_free(st, 0, bogus, &err));
  EXPECT_NODEV(T->device_info_export(st, D->identifier, 0, NULL, NULL, 0, blob, sizeof blob,
                                     &size, &err));
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  info.version = DEVBUF_DEVICE_INFO_VERSION;
  desc.struct_size = sizeof desc;
  EXPECT_NODEV(T->device_info_import(st, D->identifier, &info, &desc, &err));
  /* Devices other than 0 fail the same way. */
  EXPECT_NODEV(T->mem_alloc(st, 3, 64, 0, NULL, &out, &err));
  EXPECT_NODEV(T->mem_alloc(st, -1, 64, 0, NULL, &out, &err));
#undef EXPECT_NODEV

  /* Argument checks that need no device still answer first. */
  devbuf_error_clear(&err);
  rc = T->device_info_export(st, "devbuf.other", 0, NULL, NULL, 0, blob, sizeof blob, &size,
                             &err);
  CHECK(rc == DEVBUF_ENOTFOUND, "export of a foreign identifier: %d", rc);
  CHECK_HAS(err.message, "devbuf.other");
  info.struct_size = 8;
  rc = T->device_info_import(st, D->identifier, &info, &desc, &err);
  CHECK(rc == DEVBUF_EINVAL, "import of a truncated device_info: %d", rc);
  CHECK_HAS(err.message, "struct_size 8");
  rc = T->device_count(st, NULL, &err);
  CHECK(rc == DEVBUF_EINVAL, "device_count(NULL): %d", rc);
}

static void no_device(void) {
  const char *lib = "/nonexistent/libvendor.so.1";
  char reason[DEVBUF_ERROR_MESSAGE_SIZE];
  devbuf_error err;
  int count = -1, rc;
  void *st = new_state();
  setenv(D->env, lib, 1);
  devbuf_error_clear(&err);
  rc = T->device_count(st, &count, &err);
  CHECK(rc == DEVBUF_ENODEV, "device_count returned %d", rc);
  CHECK(count == 0, "count %d", count);
  /* dlerror() repeats the name before glibc's text. */
  snprintf(reason, sizeof reason,
           "dlopen %s: %s: cannot open shared object file: No such file or directory", lib, lib);
  expect_reason(&err, reason, "device_count");
  printf("     no device, because %s\n", err.message);
  /* The answer is kept: a second call says the same without retrying. */
  devbuf_error_clear(&err);
  CHECK(T->device_count(st, &count, &err) == DEVBUF_ENODEV, "second device_count");
  expect_reason(&err, reason, "second device_count");
  all_slots_fail(st, reason);
  T->shutdown(st);
  unsetenv(D->env);
}

/* With the default library: a device (a GPU machine), or ENODEV with a reason
 * that says which step failed. */
static void default_library(void) {
  devbuf_error err;
  int count = -1, rc, loadable = -1;
  char first_error[DEVBUF_ERROR_MESSAGE_SIZE] = "";
  void *st;
  unsetenv(D->env);
  st = new_state();
  devbuf_error_clear(&err);
  rc = T->device_count(st, &count, &err);
  /* What the plugin should have seen, found the same way after it. */
  for (int i = 0; D->libs[i] != NULL && loadable < 0; i++) {
    void *h = dlopen(D->libs[i], RTLD_NOW | RTLD_LOCAL);
    if (h != NULL) {
      loadable = i;
      dlclose(h);
    } else if (i == 0) {
      snprintf(first_error, sizeof first_error, "%s", dlerror());
    }
  }
  if (rc == DEVBUF_OK) {
    CHECK(count > 0, "DEVBUF_OK with %d devices", count);
    CHECK(loadable >= 0, "devices without a loadable library?");
    printf("     %d device%s\n", count, count == 1 ? "" : "s");
  } else {
    char prefix[DEVBUF_ERROR_MESSAGE_SIZE + 64];
    CHECK(rc == DEVBUF_ENODEV, "device_count returned %d: %s", rc, err.message);
    CHECK(count == 0, "count %d on failure", count);
    CHECK(err.message[0] != '\0', "no reason given");
    /* No driver device node: the plugin answers without loading the library. */
    int no_node = D->node != NULL && access(D->node, F_OK) != 0;
    if (no_node)
      snprintf(prefix, sizeof prefix, "no %s (", D->node);
    else if (loadable < 0)
      snprintf(prefix, sizeof prefix, "dlopen %s: %s", D->libs[0], first_error);
    else
      snprintf(prefix, sizeof prefix, "%s: ", D->init_fn);
    CHECK(strncmp(err.message, prefix, strlen(prefix)) == 0, "reason '%s' does not start '%s'",
          err.message, prefix);
    printf("     no device, because %s\n", err.message);
    if (no_node) {
      char reason[DEVBUF_ERROR_MESSAGE_SIZE];
      snprintf(reason, sizeof reason, "%s", err.message);
      all_slots_fail(st, reason);
    } else if (loadable >= 0) {
      /* The library was there: the plugin loaded it at first use, not before. */
      CHECK(vendor_loaded(), "device_count did not load the vendor library");
      char reason[DEVBUF_ERROR_MESSAGE_SIZE];
      snprintf(reason, sizeof reason, "%s", err.message);
      all_slots_fail(st, reason);
    }
  }
  T->shutdown(st);
}

typedef struct race_arg {
  void *st;
  int rc, count;
  devbuf_error err;
} race_arg;

static void *race_main(void *p) {
  race_arg *a = p;
  a->rc = T->device_count(a->st, &a->count, &a->err);
  return NULL;
}

static void threads(void) {
  enum { N = 8 };
  pthread_t th[N];
  race_arg args[N];
  void *st = new_state();
  setenv(D->env, "/nonexistent/libvendor.so.1", 1);
  for (int i = 0; i < N; i++) {
    memset(&args[i], 0, sizeof args[i]);
    args[i].st = st;
    CHECK(pthread_create(&th[i], NULL, race_main, &args[i]) == 0, "pthread_create");
  }
  for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < N; i++) {
    CHECK(args[i].rc == DEVBUF_ENODEV, "thread %d: %d", i, args[i].rc);
    CHECK(strcmp(args[i].err.message, args[0].err.message) == 0, "thread %d saw '%s'", i,
          args[i].err.message);
  }
  T->shutdown(st);
  unsetenv(D->env);
}

/* ---- devbuf.cuda against the fake driver ------------------------------------ */

static void *g_fake;
static long (*fake_live)(void);
static long (*fake_pool_live)(void);
static int (*fake_depth)(void);

static void *fake_state(void) {
  if (g_fake_path == NULL) {
    fprintf(stderr, "fake cases need the fake driver's path\n");
    exit(2);
  }
  setenv("DEVBUF_CUDA_LIBRARY", g_fake_path, 1);
  /* The same object the plugin will open; for its inspection functions. */
  g_fake = dlopen(g_fake_path, RTLD_NOW | RTLD_LOCAL);
  if (g_fake == NULL) {
    fprintf(stderr, "dlopen %s: %s\n", g_fake_path, dlerror());
    exit(2);
  }
  *(void **)(&fake_live) = dlsym(g_fake, "fake_cuda_live_allocations");
  *(void **)(&fake_pool_live) = dlsym(g_fake, "fake_cuda_pool_allocations");
  *(void **)(&fake_depth) = dlsym(g_fake, "fake_cuda_ctx_depth");
  if (!fake_live || !fake_pool_live || !fake_depth) {
    fprintf(stderr, "%s: inspection functions missing\n", g_fake_path);
    exit(2);
  }
  return new_state();
}

#define OKC(call)                                                                  \
  do {                                                                             \
    devbuf_error_clear(&err);                                                      \
    int rc_ = (call);                                                              \
    CHECK(rc_ == DEVBUF_OK, "%s returned %d: %s", #call, rc_, err.message);        \
    CHECK(fake_depth() == 0, "%s left %d contexts pushed", #call, fake_depth());   \
  } while (0)

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 31u + i * 7u + (i >> 8));
}

static void fake_props(void) {
  devbuf_error err;
  devbuf_device_props p;
  int count = 0;
  void *st = fake_state();
  OKC(T->device_count(st, &count, &err));
  CHECK(count == 2, "fake has 2 devices, plugin says %d", count);
  for (int d = 0; d < count; d++) {
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    OKC(T->device_props(st, d, &p, &err));
    CHECK(strcmp(p.name, "Fake CUDA Device") == 0, "name '%s'", p.name);
    CHECK(strcmp(p.vendor, "NVIDIA") == 0, "vendor '%s'", p.vendor);
    CHECK(p.total_memory == ((uint64_t)16 << 30), "total %llu", (unsigned long long)p.total_memory);
    /* No context yet: free memory is not invented. */
    CHECK(p.free_memory == 0, "free memory %llu without a context",
          (unsigned long long)p.free_memory);
    CHECK(p.flags == DEVBUF_DEVICE_ASYNC, "flags 0x%x", p.flags);
    CHECK(p.dlpack_device_type == DEVBUF_DL_CUDA && p.dlpack_device_id == d, "dlpack %d/%d",
          p.dlpack_device_type, p.dlpack_device_id);
    CHECK(p.alloc_alignment >= 256, "alignment %u", p.alloc_alignment);
    CHECK(p.struct_size == sizeof p, "struct_size %u", p.struct_size);
  }
  /* Once the device is in use, free memory is reported. */
  void *s = NULL;
  OKC(T->stream_create(st, 0, &s, &err));
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  OKC(T->device_props(st, 0, &p, &err));
  CHECK(p.free_memory == ((uint64_t)8 << 30), "free %llu", (unsigned long long)p.free_memory);
  /* A caller with an older, smaller props struct gets nothing past it. */
  unsigned char small[sizeof p + 16];
  memset(small, 0xEE, sizeof small);
  uint32_t n = (uint32_t)offsetof(devbuf_device_props, total_memory);
  memcpy(small, &n, sizeof n);
  OKC(T->device_props(st, 0, (devbuf_device_props *)(void *)small, &err));
  for (size_t i = n; i < sizeof small; i++) CHECK(small[i] == 0xEE, "wrote byte %zu", i);
  devbuf_error_clear(&err);
  CHECK(T->device_props(st, 2, &p, &err) == DEVBUF_ENODEV, "device 2 of 2");
  CHECK_HAS(err.message, "no device 2");
  OKC(T->stream_destroy(st, 0, s, &err));
  T->shutdown(st);
}

static void fake_roundtrip(void) {
  enum { N = 1 << 16 };
  devbuf_error err;
  unsigned char *h = malloc(N), *g = malloc(N);
  void *st = fake_state();
  CHECK(h && g, "host memory");
  for (int dev = 0; dev < 2; dev++) {
    void *a = NULL, *b = NULL, *s = NULL, *e = NULL, *s2 = NULL;
    fill(h, N, (unsigned)dev + 1);
    memset(g, 0, N);
    OKC(T->stream_create(st, dev, &s, &err));
    OKC(T->stream_create(st, dev, &s2, &err));
    OKC(T->mem_alloc(st, dev, N, 0, s, &a, &err));
    OKC(T->mem_alloc(st, dev, N, 0, s, &b, &err));
    CHECK(a != NULL && b != NULL && a != b, "pointers %p %p", a, b);
    CHECK(fake_pool_live() == 2, "allocations not from the pool: %ld", fake_pool_live());
    /* Halves with offsets, then device-to-device with offsets. */
    OKC(T->copy_h2d(st, dev, a, 0, h, N / 2, s, &err));
    OKC(T->copy_h2d(st, dev, a, N / 2, h + N / 2, N / 2, s, &err));
    OKC(T->copy_d2d(st, dev, b, 100, a, 100, N - 100, s, &err));
    OKC(T->copy_d2d(st, dev, b, 0, a, 0, 100, s, &err));
    OKC(T->event_create(st, dev, &e, &err));
    OKC(T->event_record(st, dev, e, s, &err));
    OKC(T->stream_wait_event(st, dev, s2, e, &err));
    OKC(T->copy_d2h(st, dev, g, b, 0, N, s2, &err));
    OKC(T->stream_synchronize(st, dev, s2, &err));
    CHECK(memcmp(g, h, N) == 0, "device %d: content differs after h2d, d2d, d2h", dev);
    memset(g, 0, N);
    OKC(T->copy_d2h(st, dev, g + 1, a, 4097, 1000, NULL, &err));
    OKC(T->stream_synchronize(st, dev, NULL, &err));
    CHECK(memcmp(g + 1, h + 4097, 1000) == 0, "offset read differs");
    OKC(T->event_synchronize(st, dev, e, &err));
    CHECK(T->event_query(st, dev, e, &err) == DEVBUF_OK, "event_query");
    /* Zero-byte copies are no-ops, even with NULL pointers. */
    OKC(T->copy_h2d(st, dev, a, 0, NULL, 0, s, &err));
    /* Past the end of the allocation: the driver refuses, with its name. */
    devbuf_error_clear(&err);
    CHECK(T->copy_d2h(st, dev, g, a, N - 8, 16, s, &err) == DEVBUF_EINVAL, "out of bounds");
    CHECK_HAS(err.message, "cuMemcpyDtoHAsync: CUDA_ERROR_INVALID_VALUE: invalid argument (");
    CHECK(err.backend_code == 1, "backend_code %d", err.backend_code);
    CHECK(fake_depth() == 0, "failed call left a context pushed");
    OKC(T->event_destroy(st, dev, e, &err));
    OKC(T->mem_free(st, dev, a, s, &err));
    OKC(T->mem_free(st, dev, b, s2, &err));
    OKC(T->stream_destroy(st, dev, s, &err));
    OKC(T->stream_destroy(st, dev, s2, &err));
  }
  CHECK(fake_live() == 0, "%ld allocations leaked", fake_live());
  T->shutdown(st);
  free(h);
  free(g);
}

static void fake_no_pool(void) {
  devbuf_error err;
  void *a = NULL;
  void *st;
  setenv("DEVBUF_CUDA_NO_POOL", "1", 1);
  st = fake_state();
  OKC(T->mem_alloc(st, 0, 1000, 0, NULL, &a, &err));
  CHECK(fake_pool_live() == 0 && fake_live() == 1, "pool %ld live %ld", fake_pool_live(),
        fake_live());
  OKC(T->mem_free(st, 0, a, NULL, &err));
  CHECK(fake_live() == 0, "leaked");
  T->shutdown(st);
  unsetenv("DEVBUF_CUDA_NO_POOL");
  /* The driver may lack pools too. */
  setenv("FAKE_CUDA_NO_POOLS", "1", 1);
  st = new_state();
  OKC(T->mem_alloc(st, 1, 1000, 0, NULL, &a, &err));
  CHECK(fake_pool_live() == 0 && fake_live() == 1, "pool %ld live %ld", fake_pool_live(),
        fake_live());
  OKC(T->mem_free(st, 1, a, NULL, &err));
  T->shutdown(st);
}

static void fake_alloc_edges(void) {
  devbuf_error err;
  void *p0 = NULL, *p1 = NULL, *big = NULL, *al = NULL, *h = NULL;
  void *st = fake_state();
  unsigned char buf[64];
  /* size 0 still gives distinct non-NULL pointers */
  OKC(T->mem_alloc(st, 0, 0, 0, NULL, &p0, &err));
  OKC(T->mem_alloc(st, 0, 0, 0, NULL, &p1, &err));
  CHECK(p0 && p1 && p0 != p1, "size-0 pointers %p %p", p0, p1);
  /* over-aligned: aligned pointer, freed through its base */
  for (size_t align = 512; align <= ((size_t)1 << 16); align <<= 2) {
    OKC(T->mem_alloc(st, 0, 100, align, NULL, &al, &err));
    CHECK(((uintptr_t)al & (align - 1)) == 0, "%p not aligned to %zu", al, align);
    memset(buf, 0x3c, sizeof buf);
    OKC(T->copy_h2d(st, 0, al, 36, buf, 64, NULL, &err));
    OKC(T->mem_free(st, 0, al, NULL, &err));
  }
  devbuf_error_clear(&err);
  CHECK(T->mem_alloc(st, 0, 100, 48, NULL, &al, &err) == DEVBUF_EINVAL, "alignment 48");
  CHECK_HAS(err.message, "not a power of two");
  /* out of memory: the driver's error name reaches the caller */
  devbuf_error_clear(&err);
  CHECK(T->mem_alloc(st, 0, (size_t)1 << 41, 0, NULL, &big, &err) == DEVBUF_ENOMEM, "OOM");
  CHECK(big == NULL, "*ptr set after OOM");
  CHECK(strcmp(err.message, "cuMemAllocFromPoolAsync: CUDA_ERROR_OUT_OF_MEMORY: out of memory "
                            "(2199023255552 bytes on device 0)") == 0,
        "message '%s'", err.message);
  CHECK(err.backend_code == 2, "backend_code %d", err.backend_code);
  CHECK(fake_depth() == 0, "OOM left a context pushed");
  devbuf_error_clear(&err);
  CHECK(T->mem_alloc(st, 0, SIZE_MAX - 10, 4096, NULL, &big, &err) == DEVBUF_ENOMEM, "overflow");
  devbuf_error_clear(&err);
  CHECK(T->mem_free(st, 0, NULL, NULL, &err) == DEVBUF_EINVAL, "free NULL");
  /* pinned host staging */
  OKC(T->host_alloc(st, 1, 1 << 20, &h, &err));
  CHECK(h != NULL, "host_alloc");
  memset(h, 1, 1 << 20); /* host memory: writable */
  OKC(T->host_free(st, 1, h, &err));
  OKC(T->host_alloc(st, 0, 0, &h, &err));
  OKC(T->host_free(st, 0, h, &err));
  OKC(T->mem_free(st, 0, p0, NULL, &err));
  OKC(T->mem_free(st, 0, p1, NULL, &err));
  CHECK(fake_live() == 0, "%ld allocations leaked", fake_live());
  /* NULL handles are refused before the driver sees them */
  devbuf_error_clear(&err);
  CHECK(T->stream_destroy(st, 0, NULL, &err) == DEVBUF_EINVAL, "destroy the default stream");
  CHECK(T->event_record(st, 0, NULL, NULL, &err) == DEVBUF_EINVAL, "record NULL");
  CHECK(T->event_destroy(st, 0, NULL, &err) == DEVBUF_EINVAL, "destroy NULL event");
  CHECK(T->stream_create(st, 0, NULL, &err) == DEVBUF_EINVAL, "stream_create(NULL)");
  CHECK(fake_depth() == 0, "refusals left a context pushed");
  T->shutdown(st);
}

/* The caller's own current context survives every plugin call. */
static void fake_caller_context(void) {
  devbuf_error err;
  int (*retain)(void **, int), (*push)(void *), (*pop)(void **), (*get)(void **);
  void *mine = NULL, *cur = NULL, *p = NULL, *st = fake_state();
  *(void **)(&retain) = dlsym(g_fake, "cuDevicePrimaryCtxRetain");
  *(void **)(&push) = dlsym(g_fake, "cuCtxPushCurrent_v2");
  *(void **)(&pop) = dlsym(g_fake, "cuCtxPopCurrent_v2");
  *(void **)(&get) = dlsym(g_fake, "cuCtxGetCurrent");
  CHECK(retain && push && pop && get, "fake entry points");
  if (!(retain && push && pop && get)) return;
  int count;
  OKC(T->device_count(st, &count, &err)); /* cuInit */
  CHECK(retain(&mine, 1) == 0 && push(mine) == 0, "caller context on device 1");
  devbuf_error_clear(&err);
  CHECK(T->mem_alloc(st, 0, 64, 0, NULL, &p, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(get(&cur) == 0 && cur == mine, "the caller's context was replaced");
  CHECK(fake_depth() == 1, "depth %d", fake_depth());
  /* And when the caller's context is the plugin's own: no push at all. */
  CHECK(T->mem_free(st, 0, p, NULL, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(T->mem_alloc(st, 1, 64, 0, NULL, &p, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(T->mem_free(st, 1, p, NULL, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(get(&cur) == 0 && cur == mine && fake_depth() == 1, "after device 1 calls");
  pop(&cur);
  T->shutdown(st);
}

static void fake_device_info(void) {
  devbuf_error err;
  unsigned char blob[256];
  devbuf_device_info info;
  devbuf_device_info_desc desc;
  size_t size = 0;
  void *e = NULL, *s = NULL, *st = fake_state();
  OKC(T->event_create(st, 1, &e, &err));
  OKC(T->stream_create(st, 1, &s, &err));
  OKC(T->event_record(st, 1, e, s, &err));
  memset(blob, 0xCD, sizeof blob);
  OKC(T->device_info_export(st, "devbuf.cuda", 1, e, s, DEVBUF_DEVICE_INFO_READONLY, blob,
                            sizeof blob, &size, &err));
  CHECK(size == sizeof info, "size %zu", size);
  CHECK(blob[sizeof info] == 0xCD, "wrote past the struct");
  memcpy(&info, blob, sizeof info);
  CHECK(info.struct_size == sizeof info && info.version == 1 && info.device_ordinal == 1,
        "header %u/%u/%d", info.struct_size, info.version, info.device_ordinal);
  CHECK(info.event == e && info.stream == s, "event/stream are the raw CUevent/CUstream");
  CHECK(info.flags == DEVBUF_DEVICE_INFO_READONLY, "flags 0x%x", info.flags);
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  OKC(T->device_info_import(st, "devbuf.cuda", blob, &desc, &err));
  CHECK(desc.device_ordinal == 1 && desc.event == e && desc.stream == s &&
            desc.flags == DEVBUF_DEVICE_INFO_READONLY,
        "desc %d %p %p 0x%x", desc.device_ordinal, desc.event, desc.stream, desc.flags);
  /* The consumer side: wait on the producer's event from another stream. */
  OKC(T->stream_wait_event(st, 1, NULL, desc.event, &err));
  /* refusals */
  info.device_ordinal = 2;
  devbuf_error_clear(&err);
  CHECK(T->device_info_import(st, "devbuf.cuda", &info, &desc, &err) == DEVBUF_ENODEV, "ord 2");
  info.device_ordinal = 0;
  info.version = 2;
  CHECK(T->device_info_import(st, "devbuf.cuda", &info, &desc, &err) == DEVBUF_EINVAL, "ver 2");
  info.version = 1;
  info.reserved[5] = 1;
  CHECK(T->device_info_import(st, "devbuf.cuda", &info, &desc, &err) == DEVBUF_EINVAL, "reserved");
  info.reserved[5] = 0;
  info.flags = 0x80;
  CHECK(T->device_info_import(st, "devbuf.cuda", &info, &desc, &err) == DEVBUF_EINVAL, "flags");
  CHECK(T->device_info_export(st, "devbuf.cuda", 0, NULL, NULL, 0, blob, 16, &size, &err) ==
            DEVBUF_EINVAL,
        "capacity 16");
  OKC(T->event_destroy(st, 1, e, &err));
  OKC(T->stream_destroy(st, 1, s, &err));
  T->shutdown(st);
}

static void fake_init_error(void) {
  devbuf_error err;
  int count = -1;
  void *st;
  setenv("FAKE_CUDA_INIT_ERROR", "100", 1); /* CUDA_ERROR_NO_DEVICE */
  st = fake_state();
  CHECK(T->device_count(st, &count, &err) == DEVBUF_ENODEV, "device_count");
  expect_reason(&err, "cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected",
                "device_count");
  all_slots_fail(st, "cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected");
  T->shutdown(st);
  unsetenv("FAKE_CUDA_INIT_ERROR");
}

static void fake_zero_devices(void) {
  devbuf_error err;
  int count = -1;
  void *st;
  setenv("FAKE_CUDA_DEVICES", "0", 1);
  st = fake_state();
  CHECK(T->device_count(st, &count, &err) == DEVBUF_ENODEV, "device_count");
  expect_reason(&err, "cuDeviceGetCount: the driver reports 0 CUDA devices", "device_count");
  T->shutdown(st);
}

static void fake_missing_symbol(void) {
  /* A library that is not a CUDA driver: the plugin names the first symbol
   * it lacks. libc is in every process and has no cuInit. */
  devbuf_error err;
  int count = -1;
  void *st;
  setenv("DEVBUF_CUDA_LIBRARY", "libc.so.6", 1);
  st = new_state();
  CHECK(T->device_count(st, &count, &err) == DEVBUF_ENODEV, "device_count");
  expect_reason(&err,
                "dlsym cuInit in libc.so.6: symbol not found (driver too old for this plugin)",
                "device_count");
  T->shutdown(st);
}

typedef struct worker_arg {
  void *st;
  int device, failures;
} worker_arg;

static void *worker_main(void *p) {
  worker_arg *a = p;
  enum { N = 4096 };
  unsigned char h[N], g[N];
  devbuf_error err;
  for (int it = 0; it < 200; it++) {
    void *d = NULL, *s = NULL;
    fill(h, N, (unsigned)it);
    if (T->stream_create(a->st, a->device, &s, &err) != DEVBUF_OK ||
        T->mem_alloc(a->st, a->device, N, 0, s, &d, &err) != DEVBUF_OK ||
        T->copy_h2d(a->st, a->device, d, 0, h, N, s, &err) != DEVBUF_OK ||
        T->copy_d2h(a->st, a->device, g, d, 0, N, s, &err) != DEVBUF_OK ||
        T->stream_synchronize(a->st, a->device, s, &err) != DEVBUF_OK || memcmp(g, h, N) != 0 ||
        T->mem_free(a->st, a->device, d, s, &err) != DEVBUF_OK ||
        T->stream_destroy(a->st, a->device, s, &err) != DEVBUF_OK || fake_depth() != 0)
      a->failures++;
  }
  return NULL;
}

static void fake_threads(void) {
  enum { N = 6 };
  pthread_t th[N];
  worker_arg args[N];
  void *st = fake_state();
  for (int i = 0; i < N; i++) {
    args[i].st = st;
    args[i].device = i % 2;
    args[i].failures = 0;
    CHECK(pthread_create(&th[i], NULL, worker_main, &args[i]) == 0, "pthread_create");
  }
  for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < N; i++) CHECK(args[i].failures == 0, "thread %d: %d failures", i, args[i].failures);
  CHECK(fake_live() == 0, "%ld allocations leaked", fake_live());
  T->shutdown(st);
}

/* ---- devbuf.level_zero against the fake loader ------------------------------- */

static long (*fake_ze_live)(void);

static void *fake_ze_state(void) {
  if (g_fake_path == NULL) {
    fprintf(stderr, "fake cases need the fake loader's path\n");
    exit(2);
  }
  setenv("DEVBUF_LEVEL_ZERO_LIBRARY", g_fake_path, 1);
  g_fake = dlopen(g_fake_path, RTLD_NOW | RTLD_LOCAL);
  if (g_fake == NULL) {
    fprintf(stderr, "dlopen %s: %s\n", g_fake_path, dlerror());
    exit(2);
  }
  *(void **)(&fake_ze_live) = dlsym(g_fake, "fake_ze_live_objects");
  if (fake_ze_live == NULL) {
    fprintf(stderr, "%s: fake_ze_live_objects missing\n", g_fake_path);
    exit(2);
  }
  return new_state();
}

#define OKZ(call)                                                                  \
  do {                                                                             \
    devbuf_error_clear(&err);                                                      \
    int rc_ = (call);                                                              \
    CHECK(rc_ == DEVBUF_OK, "%s returned %d: %s", #call, rc_, err.message);        \
  } while (0)

/* Two drivers with a device each: one flat list, a context per driver. */
static void fake_ze_devices(void) {
  enum { N = 10000 };
  devbuf_error err;
  devbuf_device_props p;
  unsigned char h[N], g[N];
  int count = 0;
  void *st = fake_ze_state();
  OKZ(T->device_count(st, &count, &err));
  CHECK(count == 2, "2 drivers x 1 device, plugin says %d", count);
  for (int dev = 0; dev < count; dev++) {
    char name[64];
    void *a = NULL, *b = NULL, *s = NULL, *host = NULL;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    OKZ(T->device_props(st, dev, &p, &err));
    snprintf(name, sizeof name, "Fake Level Zero Device %d", dev);
    CHECK(strcmp(p.name, name) == 0, "name '%s'", p.name);
    CHECK(strcmp(p.vendor, "Intel") == 0, "vendor '%s'", p.vendor);
    CHECK(p.total_memory == ((uint64_t)8 << 30), "total %llu", (unsigned long long)p.total_memory);
    CHECK(p.dlpack_device_type == DEVBUF_DL_ONEAPI && p.dlpack_device_id == dev, "dlpack %d/%d",
          p.dlpack_device_type, p.dlpack_device_id);
    CHECK(p.flags == DEVBUF_DEVICE_ASYNC, "flags 0x%x", p.flags);
    /* Memory of each device comes from its own driver's context (the fake
     * refuses a mismatch). */
    fill(h, N, (unsigned)dev + 5);
    OKZ(T->stream_create(st, dev, &s, &err));
    OKZ(T->mem_alloc(st, dev, N, 4096, s, &a, &err));
    CHECK(((uintptr_t)a & 4095) == 0, "alignment 4096: %p", a);
    OKZ(T->mem_alloc(st, dev, N, 0, NULL, &b, &err));
    OKZ(T->copy_h2d(st, dev, a, 0, h, N, s, &err));
    OKZ(T->copy_d2d(st, dev, b, 10, a, 10, N - 10, s, &err));
    OKZ(T->copy_d2d(st, dev, b, 0, a, 0, 10, s, &err));
    OKZ(T->host_alloc(st, dev, N, &host, &err));
    OKZ(T->copy_d2h(st, dev, host, b, 0, N, s, &err));
    OKZ(T->stream_synchronize(st, dev, s, &err));
    CHECK(memcmp(host, h, N) == 0, "device %d: content differs", dev);
    OKZ(T->copy_d2h(st, dev, g, b, 1, N - 1, NULL, &err));
    OKZ(T->stream_synchronize(st, dev, NULL, &err));
    CHECK(memcmp(g, h + 1, N - 1) == 0, "device %d: offset read differs", dev);
    devbuf_error_clear(&err);
    CHECK(T->copy_d2h(st, dev, g, b, N - 4, 8, s, &err) == DEVBUF_EINVAL, "past the end");
    CHECK_HAS(err.message, "zeCommandListAppendMemoryCopy: ZE_RESULT_ERROR_INVALID_SIZE (0x78000008)");
    OKZ(T->host_free(st, dev, host, &err));
    OKZ(T->mem_free(st, dev, a, s, &err));
    OKZ(T->mem_free(st, dev, b, NULL, &err));
    OKZ(T->stream_destroy(st, dev, s, &err));
  }
  devbuf_error_clear(&err);
  void *big = NULL;
  CHECK(T->mem_alloc(st, 1, (size_t)1 << 41, 0, NULL, &big, &err) == DEVBUF_ENOMEM, "OOM");
  CHECK(strcmp(err.message, "zeMemAllocDevice: ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY "
                            "(0x70000003): 2199023255552 bytes on device 1") == 0,
        "message '%s'", err.message);
  CHECK(T->mem_alloc(st, 0, 64, 3, NULL, &big, &err) == DEVBUF_EINVAL, "alignment 3");
  T->shutdown(st);
  CHECK(fake_ze_live() == 0, "%ld Level Zero objects left after shutdown", fake_ze_live());
}

/* Handles: bad ones refused, raw events of another producer accepted. */
static void fake_ze_handles(void) {
  devbuf_error err;
  devbuf_device_info info;
  devbuf_device_info_desc desc;
  unsigned char blob[128];
  size_t size = 0;
  int local = 0;
  void *s0 = NULL, *s1 = NULL, *e = NULL, *e2 = NULL, *st = fake_ze_state();
  OKZ(T->stream_create(st, 0, &s0, &err));
  OKZ(T->stream_create(st, 1, &s1, &err));
  OKZ(T->event_create(st, 0, &e, &err));
  OKZ(T->event_create(st, 0, &e2, &err));
  devbuf_error_clear(&err);
  CHECK(T->stream_synchronize(st, 0, &local, &err) == DEVBUF_EINVAL, "bogus stream");
  CHECK_HAS(err.message, "is not a live devbuf.level_zero stream");
  CHECK(T->stream_synchronize(st, 0, s1, &err) == DEVBUF_EINVAL, "stream of device 1 on 0");
  CHECK_HAS(err.message, "belongs to device 1");
  CHECK(T->event_record(st, 0, &local, s0, &err) == DEVBUF_EINVAL, "bogus event");
  CHECK(T->event_record(st, 1, e, s1, &err) == DEVBUF_EINVAL, "event of device 0 on 1");
  CHECK(T->event_record(st, 0, e, s1, &err) == DEVBUF_EINVAL, "stream of device 1");
  CHECK(T->event_record(st, 0, s0, s0, &err) == DEVBUF_EINVAL, "a stream as an event");
  CHECK(T->stream_wait_event(st, 0, s0, s0, &err) == DEVBUF_EINVAL, "a stream as an event");
  /* A never-recorded event exports as "ready now" (NULL) and waits on
   * nothing. */
  OKZ(T->device_info_export(st, "devbuf.level_zero", 0, e, NULL, 0, blob, sizeof blob, &size,
                            &err));
  memcpy(&info, blob, sizeof info);
  CHECK(info.event == NULL, "unrecorded event exported as %p", info.event);
  CHECK(info.stream != NULL && info.stream != s0, "default stream exported as %p", info.stream);
  OKZ(T->event_synchronize(st, 0, e, &err));
  OKZ(T->stream_wait_event(st, 0, s0, e, &err));
  /* Recorded: the export carries the raw ze_event_handle_t, not our object. */
  OKZ(T->event_record(st, 0, e, s0, &err));
  OKZ(T->device_info_export(st, "devbuf.level_zero", 0, e, s0, 0, blob, sizeof blob, &size,
                            &err));
  memcpy(&info, blob, sizeof info);
  CHECK(info.event != NULL && info.event != e, "event exported as %p (ours %p)", info.event, e);
  CHECK(info.stream != NULL && info.stream != s0, "stream exported as %p", info.stream);
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  OKZ(T->device_info_import(st, "devbuf.level_zero", blob, &desc, &err));
  CHECK(desc.event == info.event, "import changed the event");
  /* A consumer waits on the raw event through the plugin. */
  OKZ(T->stream_wait_event(st, 0, NULL, desc.event, &err));
  OKZ(T->event_synchronize(st, 0, desc.event, &err));
  CHECK(T->event_query(st, 0, desc.event, &err) == DEVBUF_OK, "query raw: %s", err.message);
  devbuf_error_clear(&err);
  CHECK(T->event_destroy(st, 0, desc.event, &err) == DEVBUF_EINVAL, "destroying a raw event");
  CHECK(T->event_record(st, 0, desc.event, NULL, &err) == DEVBUF_EINVAL, "recording a raw event");
  /* Re-recording resets: query reflects the new capture. */
  OKZ(T->event_record(st, 0, e, NULL, &err));
  CHECK(T->event_query(st, 0, e, &err) == DEVBUF_OK, "query after re-record");
  /* Destroyed handles are refused, not dereferenced. */
  OKZ(T->event_destroy(st, 0, e2, &err));
  devbuf_error_clear(&err);
  CHECK(T->event_destroy(st, 0, e2, &err) == DEVBUF_EINVAL, "double event_destroy");
  OKZ(T->stream_destroy(st, 1, s1, &err));
  CHECK(T->stream_destroy(st, 1, s1, &err) == DEVBUF_EINVAL, "double stream_destroy");
  /* Many events: more than one pool of them, indices recycled. */
  {
    void *many[150];
    for (int i = 0; i < 150; i++) OKZ(T->event_create(st, 0, &many[i], &err));
    for (int i = 0; i < 150; i += 2) OKZ(T->event_destroy(st, 0, many[i], &err));
    for (int i = 0; i < 150; i += 2) OKZ(T->event_create(st, 0, &many[i], &err));
    for (int i = 0; i < 150; i++) OKZ(T->event_destroy(st, 0, many[i], &err));
  }
  OKZ(T->event_destroy(st, 0, e, &err));
  OKZ(T->stream_destroy(st, 0, s0, &err));
  T->shutdown(st);
  CHECK(fake_ze_live() == 0, "%ld Level Zero objects left after shutdown", fake_ze_live());
}

/* ---- devbuf.hip against the fake runtime ------------------------------------- */

static long (*fake_hip_live)(void);
static long (*fake_hip_pool_live)(void);
static int (*fake_hip_device)(void);

static void *fake_hip_state(void) {
  if (g_fake_path == NULL) {
    fprintf(stderr, "fake cases need the fake runtime's path\n");
    exit(2);
  }
  setenv("DEVBUF_HIP_LIBRARY", g_fake_path, 1);
  g_fake = dlopen(g_fake_path, RTLD_NOW | RTLD_LOCAL);
  if (g_fake == NULL) {
    fprintf(stderr, "dlopen %s: %s\n", g_fake_path, dlerror());
    exit(2);
  }
  *(void **)(&fake_hip_live) = dlsym(g_fake, "fake_hip_live_allocations");
  *(void **)(&fake_hip_pool_live) = dlsym(g_fake, "fake_hip_pool_allocations");
  *(void **)(&fake_hip_device) = dlsym(g_fake, "fake_hip_current_device");
  if (!fake_hip_live || !fake_hip_pool_live || !fake_hip_device) {
    fprintf(stderr, "%s: inspection functions missing\n", g_fake_path);
    exit(2);
  }
  return new_state();
}

static void fake_hip_devices(void) {
  enum { N = 50000 };
  devbuf_error err;
  devbuf_device_props p;
  unsigned char *h = malloc(N), *g = malloc(N);
  int count = 0, (*set_device)(int);
  void *st = fake_hip_state();
  CHECK(h && g, "host memory");
  *(void **)(&set_device) = dlsym(g_fake, "hipSetDevice");
  OKZ(T->device_count(st, &count, &err));
  CHECK(count == 2, "count %d", count);
  /* The caller's current device (1) survives calls on device 0. */
  CHECK(set_device != NULL && set_device(1) == 0, "hipSetDevice(1)");
  for (int dev = 0; dev < count; dev++) {
    void *a = NULL, *b = NULL, *s = NULL, *s2 = NULL, *e = NULL, *host = NULL;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    OKZ(T->device_props(st, dev, &p, &err));
    CHECK(strcmp(p.name, "Fake HIP Device") == 0 && strcmp(p.vendor, "AMD") == 0, "%s / %s",
          p.name, p.vendor);
    CHECK(p.total_memory == ((uint64_t)32 << 30), "total %llu", (unsigned long long)p.total_memory);
    /* The fake reports (device+1) x 8 GiB free: the plugin asked with the
     * right device selected. */
    CHECK(p.free_memory == ((uint64_t)8 << 30) * (uint64_t)(dev + 1), "free %llu on device %d",
          (unsigned long long)p.free_memory, dev);
    CHECK(p.dlpack_device_type == DEVBUF_DL_ROCM && p.dlpack_device_id == dev, "dlpack %d/%d",
          p.dlpack_device_type, p.dlpack_device_id);
    CHECK(fake_hip_device() == 1, "caller's device changed to %d", fake_hip_device());
    fill(h, N, (unsigned)dev + 9);
    OKZ(T->stream_create(st, dev, &s, &err));
    OKZ(T->stream_create(st, dev, &s2, &err));
    OKZ(T->event_create(st, dev, &e, &err));
    OKZ(T->mem_alloc(st, dev, N, 0, s, &a, &err));
    OKZ(T->mem_alloc(st, dev, N, 8192, s, &b, &err));
    CHECK(((uintptr_t)b & 8191) == 0, "alignment 8192: %p", b);
    CHECK(fake_hip_pool_live() == 2, "pooled allocations %ld", fake_hip_pool_live());
    OKZ(T->copy_h2d(st, dev, a, 0, h, N, s, &err));
    OKZ(T->copy_d2d(st, dev, b, 3, a, 3, N - 3, s, &err));
    OKZ(T->copy_d2d(st, dev, b, 0, a, 0, 3, s, &err));
    OKZ(T->event_record(st, dev, e, s, &err));
    OKZ(T->stream_wait_event(st, dev, s2, e, &err));
    OKZ(T->host_alloc(st, dev, N, &host, &err));
    OKZ(T->copy_d2h(st, dev, host, b, 0, N, s2, &err));
    OKZ(T->stream_synchronize(st, dev, s2, &err));
    CHECK(memcmp(host, h, N) == 0, "device %d: content differs", dev);
    OKZ(T->copy_d2h(st, dev, g, a, 777, 1000, NULL, &err));
    OKZ(T->stream_synchronize(st, dev, NULL, &err));
    CHECK(memcmp(g, h + 777, 1000) == 0, "offset read");
    OKZ(T->event_synchronize(st, dev, e, &err));
    CHECK(T->event_query(st, dev, e, &err) == DEVBUF_OK, "query");
    devbuf_error_clear(&err);
    CHECK(T->copy_d2h(st, dev, g, a, N - 1, 2, s, &err) == DEVBUF_EINVAL, "past the end");
    CHECK_HAS(err.message, "hipMemcpyDtoHAsync: hipErrorInvalidValue: invalid argument (");
    CHECK(fake_hip_device() == 1, "caller's device changed to %d", fake_hip_device());
    OKZ(T->host_free(st, dev, host, &err));
    OKZ(T->mem_free(st, dev, a, s, &err));
    OKZ(T->mem_free(st, dev, b, s2, &err));
    OKZ(T->event_destroy(st, dev, e, &err));
    OKZ(T->stream_destroy(st, dev, s, &err));
    OKZ(T->stream_destroy(st, dev, s2, &err));
  }
  devbuf_error_clear(&err);
  void *big = NULL;
  CHECK(T->mem_alloc(st, 0, (size_t)1 << 41, 0, NULL, &big, &err) == DEVBUF_ENOMEM, "OOM");
  CHECK(strcmp(err.message, "hipMallocFromPoolAsync: hipErrorOutOfMemory: out of memory "
                            "(2199023255552 bytes on device 0)") == 0,
        "message '%s'", err.message);
  CHECK(fake_hip_live() == 0, "%ld allocations leaked", fake_hip_live());
  T->shutdown(st);
  /* Without pool support: hipMalloc/hipFree. */
  setenv("FAKE_HIP_NO_POOLS", "1", 1);
  st = new_state();
  void *a = NULL;
  OKZ(T->mem_alloc(st, 1, 100, 0, NULL, &a, &err));
  CHECK(fake_hip_pool_live() == 0 && fake_hip_live() == 1, "pool %ld live %ld",
        fake_hip_pool_live(), fake_hip_live());
  OKZ(T->mem_free(st, 1, a, NULL, &err));
  T->shutdown(st);
  unsetenv("FAKE_HIP_NO_POOLS");
  free(h);
  free(g);
}

static void *hip_worker_main(void *p) {
  worker_arg *a = p;
  enum { N = 4096 };
  unsigned char h[N], g[N];
  devbuf_error err;
  for (int it = 0; it < 200; it++) {
    void *d = NULL, *s = NULL;
    fill(h, N, (unsigned)it);
    if (T->stream_create(a->st, a->device, &s, &err) != DEVBUF_OK ||
        T->mem_alloc(a->st, a->device, N, 0, s, &d, &err) != DEVBUF_OK ||
        T->copy_h2d(a->st, a->device, d, 0, h, N, s, &err) != DEVBUF_OK ||
        T->copy_d2h(a->st, a->device, g, d, 0, N, s, &err) != DEVBUF_OK ||
        T->stream_synchronize(a->st, a->device, s, &err) != DEVBUF_OK || memcmp(g, h, N) != 0 ||
        T->mem_free(a->st, a->device, d, s, &err) != DEVBUF_OK ||
        T->stream_destroy(a->st, a->device, s, &err) != DEVBUF_OK)
      a->failures++;
  }
  return NULL;
}

static void fake_hip_threads(void) {
  enum { N = 6 };
  pthread_t th[N];
  worker_arg args[N];
  void *st = fake_hip_state();
  for (int i = 0; i < N; i++) {
    args[i].st = st;
    args[i].device = i % 2;
    args[i].failures = 0;
    CHECK(pthread_create(&th[i], NULL, hip_worker_main, &args[i]) == 0, "pthread_create");
  }
  for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < N; i++)
    CHECK(args[i].failures == 0, "thread %d: %d failures", i, args[i].failures);
  CHECK(fake_hip_live() == 0, "%ld allocations leaked", fake_hip_live());
  T->shutdown(st);
}

/* ---- main ----------------------------------------------------------------- */

static const struct {
  const char *name;
  void (*fn)(void);
} g_cases[] = {
    {"table", table},
    {"lazy", lazy},
    {"no_device", no_device},
    {"default_library", default_library},
    {"threads", threads},
    {"fake_props", fake_props},
    {"fake_roundtrip", fake_roundtrip},
    {"fake_no_pool", fake_no_pool},
    {"fake_alloc_edges", fake_alloc_edges},
    {"fake_caller_context", fake_caller_context},
    {"fake_device_info", fake_device_info},
    {"fake_init_error", fake_init_error},
    {"fake_zero_devices", fake_zero_devices},
    {"fake_missing_symbol", fake_missing_symbol},
    {"fake_threads", fake_threads},
    {"fake_ze_devices", fake_ze_devices},
    {"fake_ze_handles", fake_ze_handles},
    {"fake_hip_devices", fake_hip_devices},
    {"fake_hip_threads", fake_hip_threads},
};

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s PLUGIN.so CASE [FAKE_DRIVER.so]\n", argv[0]);
    return 2;
  }
  g_plugin_path = argv[1];
  g_fake_path = argc > 3 ? argv[3] : NULL;
  load_plugin();
  for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) {
    if (strcmp(argv[2], g_cases[i].name) == 0) {
      devbuf_test_current = g_cases[i].name;
      int before = devbuf_test_failed_checks;
      g_cases[i].fn();
      if (devbuf_test_failed_checks == before) {
        devbuf_test_passed++;
        printf("ok   %s %s\n", D->identifier, g_cases[i].name);
      } else {
        devbuf_test_failed++;
        printf("FAIL %s %s\n", D->identifier, g_cases[i].name);
      }
      return devbuf_test_finish();
    }
  }
  fprintf(stderr, "%s: unknown case '%s'\n", argv[0], argv[2]);
  return 2;
}
