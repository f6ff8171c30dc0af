/* Prints the layout of devbuf/plugin.h as the C compiler sees it, one
 * "name value" line each: sizes, field offsets and the constants a mirror
 * needs. The Rust example's `cargo test` compares its #[repr(C)] mirrors
 * with this (DEVBUF_LAYOUT names the file), so that a change to the header
 * fails the test instead of shifting every field after it. */
#include <stdio.h>

#include <devbuf/plugin.h>

#define SIZE(t) printf("size %s %zu\n", #t, sizeof(t))
#define OFF(t, f) printf("offset %s.%s %zu\n", #t, #f, offsetof(t, f))
#define CONST(c) printf("const %s %lld\n", #c, (long long)(c))

int main(void) {
  SIZE(devbuf_error);
  OFF(devbuf_error, code);
  OFF(devbuf_error, backend_code);
  OFF(devbuf_error, message);
  SIZE(devbuf_device_props);
  OFF(devbuf_device_props, flags);
  OFF(devbuf_device_props, name);
  OFF(devbuf_device_props, vendor);
  OFF(devbuf_device_props, total_memory);
  OFF(devbuf_device_props, free_memory);
  OFF(devbuf_device_props, alloc_alignment);
  OFF(devbuf_device_props, dlpack_device_type);
  OFF(devbuf_device_props, dlpack_device_id);
  OFF(devbuf_device_props, reserved0);
  OFF(devbuf_device_props, reserved);
  SIZE(devbuf_plugin_table);
  OFF(devbuf_plugin_table, abi_major);
  OFF(devbuf_plugin_table, abi_minor);
  OFF(devbuf_plugin_table, name);
  OFF(devbuf_plugin_table, version);
  OFF(devbuf_plugin_table, description);
  OFF(devbuf_plugin_table, identifiers);
  OFF(devbuf_plugin_table, init);
  OFF(devbuf_plugin_table, shutdown);
  OFF(devbuf_plugin_table, device_count);
  OFF(devbuf_plugin_table, device_props);
  OFF(devbuf_plugin_table, mem_alloc);
  OFF(devbuf_plugin_table, mem_free);
  OFF(devbuf_plugin_table, copy_h2d);
  OFF(devbuf_plugin_table, copy_d2h);
  OFF(devbuf_plugin_table, copy_d2d);
  OFF(devbuf_plugin_table, stream_create);
  OFF(devbuf_plugin_table, stream_destroy);
  OFF(devbuf_plugin_table, stream_synchronize);
  OFF(devbuf_plugin_table, event_create);
  OFF(devbuf_plugin_table, event_destroy);
  OFF(devbuf_plugin_table, event_record);
  OFF(devbuf_plugin_table, stream_wait_event);
  OFF(devbuf_plugin_table, event_synchronize);
  OFF(devbuf_plugin_table, event_query);
  OFF(devbuf_plugin_table, device_info_export);
  OFF(devbuf_plugin_table, device_info_import);
  OFF(devbuf_plugin_table, dtype_namespaces);
  OFF(devbuf_plugin_table, host_alloc);
  OFF(devbuf_plugin_table, host_free);
  OFF(devbuf_plugin_table, ext_functions);
  OFF(devbuf_plugin_table, ext_function_count);
  CONST(DEVBUF_ABI_MAJOR);
  CONST(DEVBUF_ABI_MINOR);
  CONST(DEVBUF_ERROR_MESSAGE_SIZE);
  CONST(DEVBUF_OK);
  CONST(DEVBUF_EINVAL);
  CONST(DEVBUF_ENOMEM);
  CONST(DEVBUF_ENODEV);
  CONST(DEVBUF_EBACKEND);
  CONST(DEVBUF_DEVICE_HOST_ACCESSIBLE);
  CONST(DEVBUF_DL_CPU);
  return 0;
}
