/* SPDX-License-Identifier: BSD-3-Clause */
/* devbuf/device_info.h: the `device_info` layout of every `devbuf.<name>`
 * device identifier, i.e. what `Py_buffer.device_info` points to when
 * `Py_buffer.device` is "devbuf.sim", "devbuf.cuda", "devbuf.opencl", ...
 *
 * Sync follows the producer-event model of the Arrow C Device interface: if
 * `event` is non-NULL, the consumer must make its own work wait on it (or
 * synchronize it) before touching the data. A NULL event means the data is
 * ready now. What `event` and `stream` are (CUevent/CUstream, cl_event/
 * cl_command_queue, a sim event...) is written in each device's page under
 * docs/devices/.
 *
 * The struct starts with its size and version and keeps reserved space, as
 * the device-extension draft advises. Readers accept any struct_size >= the
 * v1 size and ignore what they do not know; writers zero `reserved`.
 * Self-contained: includes only the C standard library. */
#ifndef DEVBUF_DEVICE_INFO_H
#define DEVBUF_DEVICE_INFO_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DEVBUF_DEVICE_INFO_VERSION 1

/* devbuf_device_info.flags */
#define DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE 0x1u /* host may dereference the pointer */
#define DEVBUF_DEVICE_INFO_READONLY 0x2u        /* producer forbids writes */

typedef struct devbuf_device_info {
  uint32_t struct_size;    /* sizeof(devbuf_device_info) of the writer */
  uint16_t version;        /* DEVBUF_DEVICE_INFO_VERSION */
  uint16_t reserved0;      /* zero */
  int32_t device_ordinal;  /* the plugin's device number, >= 0 */
  uint32_t flags;          /* DEVBUF_DEVICE_INFO_* */
  void *event;             /* producer event to wait on before use, or NULL */
  void *stream;            /* producer stream the data was written on, or NULL */
  uint64_t reserved[6];    /* zero; room for growth */
} devbuf_device_info;

#ifdef __cplusplus
}
#endif

#endif /* DEVBUF_DEVICE_INFO_H */
