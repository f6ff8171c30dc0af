/* arrow_c.h: the Arrow C data and C device data interfaces, as devbuf uses
 * them. Not installed.
 *
 * Written from the Arrow specification ("The Arrow C data interface", "The
 * Arrow C Device data interface", "The Arrow PyCapsule Interface"): the
 * structs are ABI, so their member order and types follow the spec exactly;
 * the names are devbuf's own (DbpArrow*) so this header never collides with
 * a real arrow/c/abi.h or nanoarrow.h included in the same translation unit.
 *
 * Move semantics, as the spec defines them: whoever holds a struct whose
 * `release` is non-NULL owns it. Moving is a bitwise copy followed by setting
 * the source's `release` to NULL; releasing calls `release`, which must set
 * it to NULL itself. */
#ifndef DBP_ARROW_C_H
#define DBP_ARROW_C_H

#include <stdint.h>

/* ArrowSchema.flags */
#define DBP_ARROW_FLAG_DICTIONARY_ORDERED 1
#define DBP_ARROW_FLAG_NULLABLE 2
#define DBP_ARROW_FLAG_MAP_KEYS_SORTED 4

typedef struct DbpArrowSchema {
  const char *format;   /* "i", "w:16", ... */
  const char *name;     /* may be NULL */
  const char *metadata; /* int32 count, then (int32 len, key, int32 len, value)...; may be NULL */
  int64_t flags;
  int64_t n_children;
  struct DbpArrowSchema **children;
  struct DbpArrowSchema *dictionary;
  void (*release)(struct DbpArrowSchema *);
  void *private_data;
} DbpArrowSchema;

typedef struct DbpArrowArray {
  int64_t length;
  int64_t null_count; /* -1: not computed */
  int64_t offset;     /* in items, into every buffer */
  int64_t n_buffers;
  int64_t n_children;
  const void **buffers; /* primitive layout: [validity bitmap or NULL, values] */
  struct DbpArrowArray **children;
  struct DbpArrowArray *dictionary;
  void (*release)(struct DbpArrowArray *);
  void *private_data;
} DbpArrowArray;

/* Device types: the DLPack DLDeviceType numbers, as the spec fixes them. */
typedef int32_t DbpArrowDeviceType;
#define DBP_ARROW_DEVICE_CPU 1
#define DBP_ARROW_DEVICE_CUDA 2
#define DBP_ARROW_DEVICE_CUDA_HOST 3
#define DBP_ARROW_DEVICE_OPENCL 4
#define DBP_ARROW_DEVICE_VULKAN 7
#define DBP_ARROW_DEVICE_METAL 8
#define DBP_ARROW_DEVICE_VPI 9
#define DBP_ARROW_DEVICE_ROCM 10
#define DBP_ARROW_DEVICE_ROCM_HOST 11
#define DBP_ARROW_DEVICE_EXT_DEV 12
#define DBP_ARROW_DEVICE_CUDA_MANAGED 13
#define DBP_ARROW_DEVICE_ONEAPI 14
#define DBP_ARROW_DEVICE_WEBGPU 15
#define DBP_ARROW_DEVICE_HEXAGON 16

typedef struct DbpArrowDeviceArray {
  DbpArrowArray array;
  int64_t device_id;
  DbpArrowDeviceType device_type;
  /* NULL, or a pointer to the event the consumer waits on: cudaEvent_t*
   * (CUDA), hipEvent_t* (ROCm), cl_event* (OpenCL), ...; owned by `array`
   * and released with it. */
  void *sync_event;
  int64_t reserved[3]; /* zero */
} DbpArrowDeviceArray;

/* PyCapsule names (the PyCapsule interface). */
#define DBP_ARROW_SCHEMA_CAPSULE "arrow_schema"
#define DBP_ARROW_ARRAY_CAPSULE "arrow_array"
#define DBP_ARROW_DEVICE_ARRAY_CAPSULE "arrow_device_array"

/* devbuf's schema metadata keys, the Arrow reader and the Arrow exporter
 * alike. */
#define EXT_NAME_KEY "ARROW:extension:name"
#define EXT_META_KEY "ARROW:extension:metadata"
#define EXT_NAME "devbuf.dtype"
#define DEVICE_KEY "devbuf.device" /* the identifier behind ARROW_DEVICE_EXT_DEV */

#endif /* DBP_ARROW_C_H */
