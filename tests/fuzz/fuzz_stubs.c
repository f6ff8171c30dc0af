/* The fuzz target compiles the engine's sources itself (so that libFuzzer
 * sees their coverage) instead of linking libdevbuf; these stand in for the
 * runtime functions the dtype registry calls. No plugins are ever loaded. */
#include "devbuf/runtime.h"

size_t devbuf_plugin_count(void) { return 0; }

int devbuf_plugin_info_get(size_t index, devbuf_plugin_info *out, devbuf_error *err) {
  (void)out;
  return devbuf_error_set(err, DEVBUF_EINVAL, "fuzz stub: no plugin #%zu", index);
}

const char *devbuf_status_name(int code) {
  (void)code;
  return "DEVBUF_E?";
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
