/* libFuzzer target for the format-string engine (ASan + UBSan).
 *
 * The first byte picks the mode and flags; the rest is the format. Besides
 * "no crash, no leak, no UB" it checks the engine's own promises:
 *   - the itemsize fast path and the full parse agree on status, size,
 *     alignment, error offset and message;
 *   - an error offset lies inside the string (or at its end);
 *   - the canonical print parses to the same size and alignment and is a
 *     fixed point of print(parse(.));
 *   - the flattened items stay inside the item;
 *   - the caret renderer accepts any offset. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/format.h"

#define REQUIRE(c)                                                        \
  do {                                                                    \
    if (!(c)) {                                                           \
      fprintf(stderr, "fuzz_format: property failed: %s (line %d)\n", #c, \
              __LINE__);                                                  \
      abort();                                                            \
    }                                                                     \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  uint32_t flags = data[0] % 3; /* default, struct, numpy */
  if (data[0] & 0x10) flags |= DEVBUF_FORMAT_ALLOW_UNKNOWN;
  if (data[0] & 0x20) flags |= DEVBUF_FORMAT_NO_CUSTOM;
  flags |= DEVBUF_FORMAT_NO_PLUGINS;
  const char *fmt = (const char *)data + 1;
  size_t len = size - 1;

  devbuf_format f = DEVBUF_FORMAT_INIT;
  devbuf_error e1, e2;
  devbuf_error_clear(&e1);
  devbuf_error_clear(&e2);
  int r1 = devbuf_format_parse(fmt, len, flags, &f, &e1);
  uint64_t sz = 0, al = 0;
  size_t off = 0;
  int r2 = devbuf_format_itemsize(fmt, len, flags, &sz, &al, &off, &e2);
  REQUIRE(r1 == r2);

  char caret[256];
  devbuf_format_caret(fmt, len, (size_t)f.error_offset, caret, sizeof caret);
  devbuf_format_caret(fmt, len, len + 7, caret, sizeof caret);

  if (r1 != DEVBUF_OK) {
    REQUIRE(f.error_offset <= len);
    REQUIRE(off == f.error_offset);
    REQUIRE(strcmp(e1.message, e2.message) == 0);
    REQUIRE(e1.code == r1);
    devbuf_format_release(&f);
    return 0;
  }
  REQUIRE(sz == f.itemsize && al == f.alignment);
  REQUIRE(f.alignment == 0 || (f.alignment & (f.alignment - 1)) == 0);

  size_t need = devbuf_format_print(&f, NULL, 0);
  char *canon = (char *)malloc(need + 1);
  REQUIRE(canon != NULL);
  REQUIRE(devbuf_format_print(&f, canon, need + 1) == need);
  devbuf_format g = DEVBUF_FORMAT_INIT;
  int r3 = devbuf_format_parse(canon, need, flags, &g, &e1);
  if (r3 != DEVBUF_OK) fprintf(stderr, "canonical '%s' of '%.*s': %s\n", canon, (int)len, fmt, e1.message);
  REQUIRE(r3 == DEVBUF_OK);
  REQUIRE(g.itemsize == f.itemsize && g.alignment == f.alignment);
  size_t need2 = devbuf_format_print(&g, NULL, 0);
  REQUIRE(need2 == need);
  char *again = (char *)malloc(need2 + 1);
  REQUIRE(again != NULL);
  devbuf_format_print(&g, again, need2 + 1);
  REQUIRE(memcmp(canon, again, need) == 0);
  free(again);
  free(canon);
  devbuf_format_release(&g);

  size_t count = 0;
  if (devbuf_format_flatten(&f, NULL, 0, &count, NULL) == DEVBUF_OK && count <= 4096) {
    devbuf_format_item items[4096];
    size_t c2 = 0;
    REQUIRE(devbuf_format_flatten(&f, items, count, &c2, NULL) == DEVBUF_OK && c2 == count);
    if (!(f.info & DEVBUF_FORMAT_HAS_UNKNOWN))
      for (size_t i = 0; i < count; i++)
        REQUIRE(items[i].offset + items[i].field->size <= f.itemsize);
  }
  uint8_t c, b;
  uint16_t l;
  (void)devbuf_format_to_dlpack(&f, &c, &b, &l, NULL);
  devbuf_format_release(&f);
  return 0;
}
