/* The table, in C memory: a C static, never a Go value. The runtime keeps a
 * pointer to the table and to its strings until shutdown, and Go's garbage
 * collector may move or free Go memory that C holds (cgo forbids C from
 * keeping a Go pointer). The slots are the //export functions of plugin.go,
 * declared in the _cgo_export.h that `go build` generates. */
#include "devbuf/plugin.h"
#include "_cgo_export.h"

/* cgo declares every pointer without const; these three match the table's
 * signatures exactly instead of casting function pointers. */
static int copy_h2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                    size_t n, void *stream, devbuf_error *err) {
  return goCopyH2D(state, device, dst, dst_offset, (void *)src, n, stream, err);
}
static int copy_d2h(void *state, int device, void *dst, const void *src, size_t src_offset,
                    size_t n, void *stream, devbuf_error *err) {
  return goCopyD2H(state, device, dst, (void *)src, src_offset, n, stream, err);
}
static int copy_d2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                    size_t src_offset, size_t n, void *stream, devbuf_error *err) {
  return goCopyD2D(state, device, dst, dst_offset, (void *)src, src_offset, n, stream, err);
}

static const char *const identifiers[] = {"example.go", NULL};

static const devbuf_plugin_table table = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = "hostmem_go",
    .version = "0.1.0",
    .description = "example plugin in Go (cgo): host memory, synchronous streams",
    .identifiers = identifiers,
    .device_count = goDeviceCount,
    .device_props = goDeviceProps,
    .mem_alloc = goMemAlloc,
    .mem_free = goMemFree,
    .copy_h2d = copy_h2d,
    .copy_d2h = copy_d2h,
    .copy_d2d = copy_d2d,
    .stream_create = goStreamCreate,
    .stream_destroy = goStreamDestroy,
    .stream_synchronize = goStreamSynchronize,
    .event_create = goEventCreate,
    .event_destroy = goEventDestroy,
    .event_record = goEventRecord,
    .stream_wait_event = goStreamWaitEvent,
    .event_synchronize = goEventSynchronize,
    .event_query = goEventQuery,
};

/* The one exported symbol (exports.map hides the rest). Plain C: it runs
 * no Go code, so it is cheap whatever the Go runtime is doing. */
DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &table; }
