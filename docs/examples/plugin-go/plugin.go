// Package main is an example devbuf device plugin written in Go with cgo:
// device identifier "example.go", one device whose memory is host memory
// (C.posix_memalign) and whose streams are synchronous (every operation is
// complete when it returns, so stream and event handles are placeholders).
//
// Build (see build.sh): go build -buildmode=c-shared with CGO_CFLAGS naming
// devbuf's include directory and CGO_LDFLAGS the export list exports.map.
//
// What a Go author must know (docs/plugin-authors.md, "Go"):
//   - memory handed to devbuf is C memory (C.malloc, C.posix_memalign), and
//     the table is a C static (table.c): Go's collector may move or free Go
//     memory, and cgo forbids C from keeping a Go pointer;
//   - a Go panic that leaves an exported function aborts the host process:
//     every exported function recovers (guard) and returns DEVBUF_EBACKEND;
//   - devbuf_error_set is variadic, which cgo cannot call: use
//     devbuf_error_set_message;
//   - the Go runtime starts its threads when the library is loaded, so the
//     plugin must never be used in a process forked after loading it.
package main

/*
#include <stdlib.h>
#include <string.h>
#include "devbuf/plugin.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

const (
	alignment = 64 // what mem_alloc guarantees, and device_props reports
	name      = "example Go host-memory device"
	vendor    = "devbuf example"
)

// fail sets err (a C struct owned by the caller) and returns code.
func fail(err *C.devbuf_error, code C.int, format string, args ...interface{}) C.int {
	msg := C.CString(fmt.Sprintf(format, args...))
	defer C.free(unsafe.Pointer(msg))
	return C.devbuf_error_set_message(err, code, msg)
}

// guard turns a panic into an error: deferred by every exported function
// with its named result, so that no panic unwinds into devbuf's C frames.
func guard(op string, err *C.devbuf_error, rc *C.int) {
	if r := recover(); r != nil {
		*rc = fail(err, C.DEVBUF_EBACKEND, "%s: Go panic: %v", op, r)
	}
}

func checkDevice(op string, device C.int, err *C.devbuf_error) C.int {
	if device != 0 {
		return fail(err, C.DEVBUF_ENODEV, "%s: example.go has one device (0), not %d", op, device)
	}
	return C.DEVBUF_OK
}

// setString copies s into a fixed C char array, always NUL-terminated.
func setString(dst []C.char, s string) {
	n := len(s)
	if n > len(dst)-1 {
		n = len(dst) - 1
	}
	for i := 0; i < n; i++ {
		dst[i] = C.char(s[i])
	}
	dst[n] = 0
}

//export goDeviceCount
func goDeviceCount(state unsafe.Pointer, count *C.int, err *C.devbuf_error) (rc C.int) {
	defer guard("device_count", err, &rc)
	*count = 1
	return C.DEVBUF_OK
}

//export goDeviceProps
func goDeviceProps(state unsafe.Pointer, device C.int, p *C.devbuf_device_props, err *C.devbuf_error) (rc C.int) {
	defer guard("device_props", err, &rc)
	if rc := checkDevice("device_props", device, err); rc != C.DEVBUF_OK {
		return rc
	}
	setString(p.name[:], name)
	setString(p.vendor[:], vendor)
	p.flags = C.DEVBUF_DEVICE_HOST_ACCESSIBLE | C.DEVBUF_DEVICE_UNIFIED
	p.alloc_alignment = alignment
	p.dlpack_device_type = C.DEVBUF_DL_CPU // it is host memory
	p.dlpack_device_id = 0
	return C.DEVBUF_OK
}

//export goMemAlloc
func goMemAlloc(state unsafe.Pointer, device C.int, size C.size_t, align C.size_t, stream unsafe.Pointer, ptr *unsafe.Pointer, err *C.devbuf_error) (rc C.int) {
	defer guard("mem_alloc", err, &rc)
	if rc := checkDevice("mem_alloc", device, err); rc != C.DEVBUF_OK {
		return rc
	}
	if align < alignment {
		align = alignment
	}
	if align&(align-1) != 0 {
		return fail(err, C.DEVBUF_EINVAL, "mem_alloc: alignment %d is not a power of two", align)
	}
	if size == 0 {
		size = 1 // size 0 still gets a unique pointer
	}
	// C memory: *ptr outlives this call, and Go must never move or free it.
	if C.posix_memalign(ptr, align, size) != 0 {
		*ptr = nil
		return fail(err, C.DEVBUF_ENOMEM, "mem_alloc: posix_memalign: cannot allocate %d bytes", size)
	}
	return C.DEVBUF_OK
}

//export goMemFree
func goMemFree(state unsafe.Pointer, device C.int, ptr unsafe.Pointer, stream unsafe.Pointer, err *C.devbuf_error) (rc C.int) {
	defer guard("mem_free", err, &rc)
	if rc := checkDevice("mem_free", device, err); rc != C.DEVBUF_OK {
		return rc
	}
	if ptr == nil {
		return fail(err, C.DEVBUF_EINVAL, "mem_free: NULL pointer")
	}
	C.free(ptr)
	return C.DEVBUF_OK
}

func copyBytes(op string, device C.int, dst, src unsafe.Pointer, n C.size_t, err *C.devbuf_error) C.int {
	if rc := checkDevice(op, device, err); rc != C.DEVBUF_OK {
		return rc
	}
	if n != 0 && (dst == nil || src == nil) {
		return fail(err, C.DEVBUF_EINVAL, "%s: NULL pointer with %d bytes", op, n)
	}
	if n != 0 {
		C.memmove(dst, src, n)
	}
	return C.DEVBUF_OK
}

//export goCopyH2D
func goCopyH2D(state unsafe.Pointer, device C.int, dst unsafe.Pointer, dstOff C.size_t, src unsafe.Pointer, n C.size_t, stream unsafe.Pointer, err *C.devbuf_error) (rc C.int) {
	defer guard("copy_h2d", err, &rc)
	return copyBytes("copy_h2d", device, unsafe.Add(dst, dstOff), src, n, err)
}

//export goCopyD2H
func goCopyD2H(state unsafe.Pointer, device C.int, dst unsafe.Pointer, src unsafe.Pointer, srcOff C.size_t, n C.size_t, stream unsafe.Pointer, err *C.devbuf_error) (rc C.int) {
	defer guard("copy_d2h", err, &rc)
	return copyBytes("copy_d2h", device, dst, unsafe.Add(src, srcOff), n, err)
}

//export goCopyD2D
func goCopyD2D(state unsafe.Pointer, device C.int, dst unsafe.Pointer, dstOff C.size_t, src unsafe.Pointer, srcOff C.size_t, n C.size_t, stream unsafe.Pointer, err *C.devbuf_error) (rc C.int) {
	defer guard("copy_d2d", err, &rc)
	return copyBytes("copy_d2d", device, unsafe.Add(dst, dstOff), unsafe.Add(src, srcOff), n, err)
}

// Streams: synchronous, so the created stream is the default one (NULL).

//export goStreamCreate
func goStreamCreate(state unsafe.Pointer, device C.int, stream *unsafe.Pointer, err *C.devbuf_error) (rc C.int) {
	defer guard("stream_create", err, &rc)
	if rc := checkDevice("stream_create", device, err); rc != C.DEVBUF_OK {
		return rc
	}
	*stream = nil
	return C.DEVBUF_OK
}

//export goStreamDestroy
func goStreamDestroy(state unsafe.Pointer, device C.int, stream unsafe.Pointer, err *C.devbuf_error) (rc C.int) {
	defer guard("stream_destroy", err, &rc)
	return checkDevice("stream_destroy", device, err)
}

//export goStreamSynchronize
func goStreamSynchronize(state unsafe.Pointer, device C.int, stream unsafe.Pointer, err *C.devbuf_error) (rc C.int) {
	defer guard("stream_synchronize", err, &rc)
	return checkDevice("stream_synchronize", device, err)
}

// Events: a byte of C memory each, always complete.

//export goEventCreate
func goEventCreate(state unsafe.Pointer, device C.int, event *unsafe.Pointer, err *C.devbuf_error) (rc C.int) {
	defer guard("event_create", err, &rc)
	if rc := checkDevice("event_create", device, err); rc != C.DEVBUF_OK {
		return rc
	}
	*event = C.malloc(1)
	if *event == nil {
		return fail(err, C.DEVBUF_ENOMEM, "event_create: out of memory")
	}
	return C.DEVBUF_OK
}

//export goEventDestroy
func goEventDestroy(state unsafe.Pointer, device C.int, event unsafe.Pointer, err *C.devbuf_error) (rc C.int) {
	defer guard("event_destroy", err, &rc)
	if event == nil {
		return fail(err, C.DEVBUF_EINVAL, "event_destroy: NULL event")
	}
	C.free(event)
	return C.DEVBUF_OK
}

func checkEvent(op string, device C.int, event unsafe.Pointer, err *C.devbuf_error) C.int {
	if rc := checkDevice(op, device, err); rc != C.DEVBUF_OK {
		return rc
	}
	if event == nil {
		return fail(err, C.DEVBUF_EINVAL, "%s: NULL event", op)
	}
	return C.DEVBUF_OK
}

//export goEventRecord
func goEventRecord(state unsafe.Pointer, device C.int, event unsafe.Pointer, stream unsafe.Pointer, err *C.devbuf_error) (rc C.int) {
	defer guard("event_record", err, &rc)
	return checkEvent("event_record", device, event, err)
}

//export goStreamWaitEvent
func goStreamWaitEvent(state unsafe.Pointer, device C.int, stream unsafe.Pointer, event unsafe.Pointer, err *C.devbuf_error) (rc C.int) {
	defer guard("stream_wait_event", err, &rc)
	return checkEvent("stream_wait_event", device, event, err)
}

//export goEventSynchronize
func goEventSynchronize(state unsafe.Pointer, device C.int, event unsafe.Pointer, err *C.devbuf_error) (rc C.int) {
	defer guard("event_synchronize", err, &rc)
	return checkEvent("event_synchronize", device, event, err)
}

//export goEventQuery
func goEventQuery(state unsafe.Pointer, device C.int, event unsafe.Pointer, err *C.devbuf_error) (rc C.int) {
	defer guard("event_query", err, &rc)
	return checkEvent("event_query", device, event, err)
}

func main() {} // required by -buildmode=c-shared; never called
