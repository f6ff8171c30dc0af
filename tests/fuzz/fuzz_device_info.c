/* libFuzzer target: device_info validation, for every registered device
 * identifier (cpu, devbuf.sim, devbuf.opencl, devbuf.cuda, ...).
 *
 * The input bytes become a device_info handed to devbuf_device_info_import
 * as a producer would hand it over. The plugin contract says import must
 * reject what it cannot prove sane (size, version, ordinal, reserved bytes,
 * flags, handles), so the runtime and every plugin must answer with an error
 * or a sane description, never crash or read outside the struct_size the
 * writer declared.
 *
 * Input layout (short inputs are padded with zero bytes):
 *   0      identifier: index into the registered identifiers (bit 7 set:
 *          the identifier is instead the NUL-terminated text at byte 2..)
 *   1      bit0: substitute the event field by a handle token (see below)
 *          bit1: substitute the stream field by a handle token
 *   2..    the device_info bytes, laid out as devbuf_device_info
 * The buffer handed over is as long as its struct_size says (clamped to
 * 4 .. 64 KiB) or as the input, whichever is longer, zero-padded.
 *
 * Handle tokens: small values of the event/stream field are replaced by real
 * handles made at start-up (a live event or stream of this identifier's
 * device 0, a destroyed one, an allocation, a handle of another plugin, a
 * host pointer), so that the fuzzer reaches the handle checks with the
 * handles a confused producer would really pass. Only handles of this
 * process ever get dereferenced by a correct plugin; a plugin that accepts a
 * foreign handle (OpenCL, CUDA and Level Zero events from other libraries)
 * must not touch it during import.
 *
 * After a successful import: the description names a device that exists,
 * export -> import round-trips for plugins that validate their handles, and
 * a sim event proven live can be queried. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/runtime.h"

#define REQUIRE(c)                                                              \
  do {                                                                          \
    if (!(c)) {                                                                 \
      fprintf(stderr, "fuzz_device_info: property failed: %s (line %d)\n", #c,  \
              __LINE__);                                                        \
      abort();                                                                  \
    }                                                                           \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAX_IDS 32
#define NTOKENS 10

typedef struct ident {
  const char *id;      /* interned */
  int usable;          /* device 0 opened */
  devbuf_device dev;
  void *tokens[NTOKENS];
  int validates;       /* the plugin proves its handles live (no foreign ones) */
} ident;

static ident g_ids[MAX_IDS];
static size_t g_nids;
static int g_host_byte;

static ident *find_ident(const char *name) {
  for (size_t i = 0; i < g_nids; i++)
    if (strcmp(g_ids[i].id, name) == 0) return &g_ids[i];
  return NULL;
}

/* Make the handles once: drivers initialise outside any input, so their
 * one-time allocations are not taken for per-input leaks. */
static void setup(void) {
  static int done;
  if (done) return;
  done = 1;
  /* Only the plugins of this build (in a fuzz build: the instrumented
   * copies beside the binary), nothing from the environment. */
  setenv("DEVBUF_PLUGINS", "", 1);
  setenv("DEVBUF_PLUGIN_PATH", "", 1);
  devbuf_error err;
  devbuf_init(&err);
  size_t n = devbuf_identifier_count();
  for (size_t i = 0; i < n && g_nids < MAX_IDS; i++) {
    ident *d = &g_ids[g_nids++];
    d->id = devbuf_identifier_get(i, NULL);
    if (d->id == NULL) {
      g_nids--;
      continue;
    }
    d->validates = strcmp(d->id, "cpu") == 0 || strcmp(d->id, "devbuf.sim") == 0;
    if (devbuf_device_open(d->id, &d->dev, &err) != DEVBUF_OK) continue;
    d->usable = 1;
    void *ev = NULL, *dead_ev = NULL, *st = NULL, *dead_st = NULL, *mem = NULL;
    if (devbuf_event_create(&d->dev, &ev, &err) == DEVBUF_OK)
      devbuf_event_record(&d->dev, ev, NULL, &err);
    if (devbuf_event_create(&d->dev, &dead_ev, &err) == DEVBUF_OK)
      devbuf_event_destroy(&d->dev, dead_ev, &err);
    devbuf_stream_create(&d->dev, &st, &err);
    if (devbuf_stream_create(&d->dev, &dead_st, &err) == DEVBUF_OK && dead_st != NULL)
      devbuf_stream_destroy(&d->dev, dead_st, &err);
    devbuf_mem_alloc(&d->dev, 64, 0, NULL, &mem, &err);
    d->tokens[0] = NULL;
    d->tokens[1] = ev;
    d->tokens[2] = st;
    d->tokens[3] = dead_ev;
    d->tokens[4] = dead_st;
    d->tokens[5] = mem;
    d->tokens[6] = &g_host_byte;
    d->tokens[7] = (void *)(uintptr_t)1;
  }
  fprintf(stderr, "fuzz_device_info: identifiers:");
  for (size_t i = 0; i < g_nids; i++)
    fprintf(stderr, " %s%s", g_ids[i].id, g_ids[i].usable ? "" : "(no device)");
  fprintf(stderr, "\n");
  /* Cross-plugin tokens: the next usable identifier's live event and stream. */
  for (size_t i = 0; i < g_nids; i++) {
    for (size_t k = 1; k < g_nids; k++) {
      ident *o = &g_ids[(i + k) % g_nids];
      if (!o->usable) continue;
      g_ids[i].tokens[8] = o->tokens[1];
      g_ids[i].tokens[9] = o->tokens[2];
      break;
    }
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setup();
  return 0;
}

/* Is the token a handle this identifier's plugin created and still has? */
static int live_token(const ident *d, void *p) {
  return p == NULL || p == d->tokens[1] || p == d->tokens[2];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  setup();
  if (size < 2 || g_nids == 0) return 0;
  const char *idname;
  char textid[80];
  const uint8_t *info_bytes = data + 2;
  size_t info_len = size - 2;
  if (data[0] & 0x80) {
    size_t k = 0;
    while (k < info_len && k < sizeof textid - 1 && info_bytes[k] != 0) {
      textid[k] = (char)info_bytes[k];
      k++;
    }
    textid[k] = '\0';
    idname = textid;
    if (k < info_len) k++; /* the NUL */
    info_bytes += k;
    info_len -= k;
  } else {
    idname = g_ids[data[0] % g_nids].id;
  }
  ident *d = find_ident(idname);

  uint32_t struct_size = 0;
  memcpy(&struct_size, info_bytes, info_len < 4 ? info_len : 4);
  size_t buflen = struct_size;
  if (buflen < 4) buflen = 4;
  if (buflen > 65536) buflen = 65536;
  if (buflen < info_len) buflen = info_len;
  unsigned char *buf = calloc(1, buflen);
  if (buf == NULL) return 0;
  memcpy(buf, info_bytes, info_len);

  int tokenized = 0;
  if (d != NULL && d->usable && buflen >= sizeof(devbuf_device_info)) {
    devbuf_device_info di;
    memcpy(&di, buf, sizeof di);
    if ((data[1] & 1) && (uintptr_t)di.event < 256) {
      di.event = d->tokens[(uintptr_t)di.event % NTOKENS];
      tokenized = 1;
    }
    if ((data[1] & 2) && (uintptr_t)di.stream < 256) {
      di.stream = d->tokens[(uintptr_t)di.stream % NTOKENS];
      tokenized = 1;
    }
    memcpy(buf, &di, sizeof di);
  }
  (void)tokenized;

  devbuf_device_info_desc desc;
  memset(&desc, 0x5a, sizeof desc);
  devbuf_device dev;
  devbuf_error err;
  memset(&err, 0x5a, sizeof err);
  int rc = devbuf_device_info_import(idname, buf, &desc, &dev, &err);
  if (rc != DEVBUF_OK) {
    REQUIRE(rc > 0);
    REQUIRE(err.code == rc);
    REQUIRE(memchr(err.message, '\0', sizeof err.message) != NULL);
    REQUIRE(err.message[0] != '\0');
    /* Every error says which identifier it is about. */
    if (d != NULL) REQUIRE(strstr(err.message, d->id) != NULL);
    free(buf);
    return 0;
  }
  REQUIRE(d != NULL); /* only registered identifiers import */
  REQUIRE(dev.identifier == d->id);
  REQUIRE(dev.ordinal == desc.device_ordinal && desc.device_ordinal >= 0);
  int count = 0;
  REQUIRE(devbuf_device_count(d->id, &count, NULL) == DEVBUF_OK);
  REQUIRE(desc.device_ordinal < count);

  /* A sim event that import accepted is live: a consumer may wait on it. */
  if (strcmp(d->id, "devbuf.sim") == 0 && desc.event != NULL) {
    int q = devbuf_event_query(&dev, desc.event, &err);
    REQUIRE(q == DEVBUF_OK || q == DEVBUF_EBUSY);
  }
  /* Round trip through export, for handles the plugin can vouch for. */
  if (d->validates || (live_token(d, desc.event) && live_token(d, desc.stream))) {
    unsigned char out[512];
    size_t outsz = 0;
    rc = devbuf_device_info_export(&dev, desc.event, desc.stream,
                                   desc.flags & DEVBUF_DEVICE_INFO_READONLY, out, sizeof out,
                                   &outsz, &err);
    if (rc == DEVBUF_OK) {
      REQUIRE(outsz >= 4 && outsz <= sizeof out);
      devbuf_device_info_desc again;
      memset(&again, 0, sizeof again);
      rc = devbuf_device_info_import(d->id, out, &again, NULL, &err);
      REQUIRE(rc == DEVBUF_OK);
      REQUIRE(again.device_ordinal == desc.device_ordinal);
      /* sim puts its own handles in device_info; cpu has nothing to wait
       * on (export writes NULLs); OpenCL, CUDA, HIP and Level Zero put the
       * vendor's (cl_event, CUevent...) and name the default queue for a
       * NULL stream. */
      if (strcmp(d->id, "devbuf.sim") == 0)
        REQUIRE(again.event == desc.event && again.stream == desc.stream);
    } else {
      REQUIRE(rc > 0 && err.message[0] != '\0');
    }
  }
  free(buf);
  return 0;
}
