/* Device resolution: "identifier[:N]" to a device handle, through the
 * identifier lookup (registry_entry.c, which starts the runtime) and the
 * plugin's device-count probe (runtime.c). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int devbuf_device_open_ordinal(const char *identifier, int ordinal, devbuf_device *out,
                               devbuf_error *err) {
  const char *in = NULL;
  size_t idx = 0;
  int rc = devbuf_identifier_lookup(identifier, &in, &idx, err);
  if (rc) return rc;
  devbuf_backend *b = devbuf__backend_get(idx);
  int n = 0;
  rc = devbuf__backend_device_count(b, &n, err);
  if (rc) {
    if (err) devbuf_error_prefix(err, identifier);
    return rc;
  }
  if (ordinal < 0 || ordinal >= n)
    return devbuf_error_set(err, DEVBUF_ENODEV, "%s:%d: no such device (plugin '%s' has %d device%s)",
                            identifier, ordinal, b->name, n, n == 1 ? "" : "s");
  if (out) {
    out->identifier = in;
    out->ordinal = ordinal;
    out->backend = b;
  }
  return DEVBUF_OK;
}

/* The deprecated old name (devbuf/runtime.h says why it stays exported). */
int devbuf_device_open2(const char *identifier, int ordinal, devbuf_device *out,
                               devbuf_error *err) {
  return devbuf_device_open_ordinal(identifier, ordinal, out, err);
}

int devbuf_device_open(const char *spec, devbuf_device *out, devbuf_error *err) {
  if (spec == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device spec is NULL");
  const char *colon = strchr(spec, ':');
  if (colon == NULL) return devbuf_device_open_ordinal(spec, 0, out, err);
  size_t len = (size_t)(colon - spec);
  if (len == 0 || len > DEVBUF_IDENTIFIER_MAX)
    return devbuf_error_set(err, DEVBUF_EINVAL, "device spec '%s': bad identifier before ':'", spec);
  char id[DEVBUF_IDENTIFIER_MAX + 1];
  memcpy(id, spec, len);
  id[len] = '\0';
  const char *num = colon + 1;
  char *end = NULL;
  if (*num < '0' || *num > '9')
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "device spec '%s': expected a device ordinal after ':' at offset %zu",
                            spec, len + 1);
  long v = strtol(num, &end, 10);
  if (*end != '\0' || v > 1 << 20)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "device spec '%s': bad device ordinal '%s' (want 'identifier:N')",
                            spec, num);
  return devbuf_device_open_ordinal(id, (int)v, out, err);
}

int devbuf_device_count(const char *identifier, int *count, devbuf_error *err) {
  size_t idx = 0;
  if (count) *count = 0;
  int rc = devbuf_identifier_lookup(identifier, NULL, &idx, err);
  if (rc) return rc;
  return devbuf__backend_device_count(devbuf__backend_get(idx), count, err);
}

size_t devbuf_device_plugin_index(const devbuf_device *dev) {
  return dev && dev->backend ? dev->backend->index : (size_t)-1;
}

int devbuf_device_is_live(const devbuf_device *dev) {
  return dev != NULL && dev->backend != NULL && dev->backend->state == DEVBUF_PLUGIN_LOADED;
}
