/* The fuzz targets compile the engine's sources themselves (so that
 * libFuzzer sees their coverage) instead of linking libdevbuf. The registry
 * needs nothing of the core; these stand in for the core's side:
 * its public format entry points (core/src/registry_entry.c, which would
 * start the runtime first) and the runtime functions core/src/dlpack.c
 * calls. No plugins are ever loaded. */
#include "devbuf/runtime.h"
#include "registry.h"

int devbuf_format_parse(const char *fmt, size_t len, uint32_t flags, devbuf_format *out,
                        devbuf_error *err) {
  return devbuf__format_parse(fmt, len, flags, out, err);
}

int devbuf_format_parse_alloc(const char *fmt, size_t len, uint32_t flags, devbuf_format **out,
                              size_t *error_offset, devbuf_error *err) {
  return devbuf__format_parse_alloc(fmt, len, flags, out, error_offset, err);
}

int devbuf_format_itemsize(const char *fmt, size_t len, uint32_t flags, uint64_t *itemsize,
                           uint64_t *alignment, size_t *error_offset, devbuf_error *err) {
  return devbuf__format_itemsize(fmt, len, flags, itemsize, alignment, error_offset, err);
}

/* core/src/dlpack.c asks the runtime for a plugin's DLPack device type when
 * an identifier is not in its built-in table: here no plugin is loaded. */
int devbuf_device_open_ordinal(const char *identifier, int ordinal, devbuf_device *out,
                               devbuf_error *err) {
  (void)out;
  return devbuf_error_set(err, DEVBUF_ENOTFOUND, "fuzz stub: no plugin implements '%s' (%d)",
                          identifier ? identifier : "(null)", ordinal);
}

int devbuf_device_props_get(const devbuf_device *dev, devbuf_device_props *props,
                            devbuf_error *err) {
  (void)dev;
  (void)props;
  return devbuf_error_set(err, DEVBUF_ENODEV, "fuzz stub: no device");
}
