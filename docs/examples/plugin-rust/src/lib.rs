//! A devbuf plugin in Rust, with the standard library only: one device of
//! host memory under the identifier "example.rust". Like the C guide's
//! first.c it writes device_count, device_props, mem_alloc and mem_free and
//! leaves the copy, stream, event and device_info slots NULL, which the
//! runtime then runs itself (ABI 1.1, host-accessible devices).
//!
//! What a Rust author must get right, each marked below:
//! - every struct shared with devbuf is `#[repr(C)]`, field for field as in
//!   devbuf/plugin.h (module `abi`; `cargo test` checks it against the C
//!   compiler's layout of the header, see layout.c);
//! - strings are NUL-terminated and static: `c"..."` literals;
//! - no panic unwinds into C: every slot runs inside `guard`, which turns a
//!   panic into DEVBUF_EBACKEND and a message;
//! - the header's `static inline` helpers are not in any library: the one
//!   needed here, devbuf_error_set, is ported as `error_set`;
//! - cargo names the file libdevbuf_plugin_rust.so (see Cargo.toml).
//!
//! Build: cargo build --offline --release
//! Try:   DEVBUF_PLUGINS=$PWD/target/release/libdevbuf_plugin_rust.so devbuf_conformance example.rust

use std::alloc::{alloc, dealloc, Layout};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null;
use std::sync::Mutex;

/// Mirrors of devbuf/plugin.h, devbuf/error.h. Order, types and sizes must
/// match the C declarations exactly: without `#[repr(C)]` rustc may reorder
/// fields, and devbuf refuses the table as "not a devbuf plugin table".
pub mod abi {
    use std::ffi::{c_char, c_int, c_void};

    pub const ABI_MAJOR: u16 = 1;
    pub const ABI_MINOR: u16 = 1;
    pub const ERROR_MESSAGE_SIZE: usize = 512;
    pub const OK: c_int = 0;
    pub const EINVAL: c_int = 1;
    pub const ENOMEM: c_int = 2;
    pub const ENODEV: c_int = 3;
    pub const EBACKEND: c_int = 5;
    pub const DEVICE_HOST_ACCESSIBLE: u32 = 0x1;
    pub const DL_CPU: i32 = 1;

    #[repr(C)]
    pub struct Error {
        pub code: c_int,
        pub backend_code: c_int,
        pub message: [c_char; ERROR_MESSAGE_SIZE],
    }

    #[repr(C)]
    pub struct DeviceProps {
        pub struct_size: u32,
        pub flags: u32,
        pub name: [c_char; 128],
        pub vendor: [c_char; 64],
        pub total_memory: u64,
        pub free_memory: u64,
        pub alloc_alignment: u32,
        pub dlpack_device_type: i32,
        pub dlpack_device_id: i32,
        pub reserved0: u32,
        pub reserved: [u64; 6],
    }

    type State = *mut c_void;
    type Err = *mut Error;

    /// devbuf_plugin_table. A slot is an `Option` of a function pointer:
    /// `None` is C's NULL (the same size, by Rust's guarantee).
    #[repr(C)]
    pub struct PluginTable {
        pub struct_size: u32,
        pub abi_major: u16,
        pub abi_minor: u16,
        pub name: *const c_char,
        pub version: *const c_char,
        pub description: *const c_char,
        pub identifiers: *const *const c_char,
        pub init: Option<unsafe extern "C" fn(*mut State, Err) -> c_int>,
        pub shutdown: Option<unsafe extern "C" fn(State)>,
        pub device_count: Option<unsafe extern "C" fn(State, *mut c_int, Err) -> c_int>,
        pub device_props: Option<unsafe extern "C" fn(State, c_int, *mut DeviceProps, Err) -> c_int>,
        pub mem_alloc: Option<
            unsafe extern "C" fn(State, c_int, usize, usize, *mut c_void, *mut *mut c_void, Err) -> c_int,
        >,
        pub mem_free: Option<unsafe extern "C" fn(State, c_int, *mut c_void, *mut c_void, Err) -> c_int>,
        pub copy_h2d: Option<
            unsafe extern "C" fn(State, c_int, *mut c_void, usize, *const c_void, usize, *mut c_void, Err) -> c_int,
        >,
        pub copy_d2h: Option<
            unsafe extern "C" fn(State, c_int, *mut c_void, *const c_void, usize, usize, *mut c_void, Err) -> c_int,
        >,
        pub copy_d2d: Option<
            unsafe extern "C" fn(
                State, c_int, *mut c_void, usize, *const c_void, usize, usize, *mut c_void, Err,
            ) -> c_int,
        >,
        pub stream_create: Option<unsafe extern "C" fn(State, c_int, *mut *mut c_void, Err) -> c_int>,
        pub stream_destroy: Option<unsafe extern "C" fn(State, c_int, *mut c_void, Err) -> c_int>,
        pub stream_synchronize: Option<unsafe extern "C" fn(State, c_int, *mut c_void, Err) -> c_int>,
        pub event_create: Option<unsafe extern "C" fn(State, c_int, *mut *mut c_void, Err) -> c_int>,
        pub event_destroy: Option<unsafe extern "C" fn(State, c_int, *mut c_void, Err) -> c_int>,
        pub event_record: Option<unsafe extern "C" fn(State, c_int, *mut c_void, *mut c_void, Err) -> c_int>,
        pub stream_wait_event:
            Option<unsafe extern "C" fn(State, c_int, *mut c_void, *mut c_void, Err) -> c_int>,
        pub event_synchronize: Option<unsafe extern "C" fn(State, c_int, *mut c_void, Err) -> c_int>,
        pub event_query: Option<unsafe extern "C" fn(State, c_int, *mut c_void, Err) -> c_int>,
        pub device_info_export: Option<
            unsafe extern "C" fn(
                State, *const c_char, c_int, *mut c_void, *mut c_void, u32, *mut c_void, usize,
                *mut usize, Err,
            ) -> c_int,
        >,
        /// The last argument is a devbuf_device_info_desc (not mirrored here).
        pub device_info_import:
            Option<unsafe extern "C" fn(State, *const c_char, *const c_void, *mut c_void, Err) -> c_int>,
        /// const devbuf_dtype_namespace *const * (not mirrored here).
        pub dtype_namespaces: *const *const c_void,
        pub host_alloc: Option<unsafe extern "C" fn(State, c_int, usize, *mut *mut c_void, Err) -> c_int>,
        pub host_free: Option<unsafe extern "C" fn(State, c_int, *mut c_void, Err) -> c_int>,
        /// const devbuf_ext_function * (not mirrored here).
        pub ext_functions: *const c_void,
        pub ext_function_count: usize,
    }

    // The table and what it points to are immutable statics.
    unsafe impl Sync for PluginTable {}
}

use abi::*;

/// devbuf_error_set, ported: a `static inline` in error.h, so there is no
/// symbol to link. The message is cut to fit and always NUL-terminated.
pub fn error_set(err: *mut Error, code: c_int, message: &str) -> c_int {
    if let Some(e) = unsafe { err.as_mut() } {
        e.code = code;
        e.backend_code = 0;
        let n = message.len().min(ERROR_MESSAGE_SIZE - 1);
        for (dst, src) in e.message.iter_mut().zip(&message.as_bytes()[..n]) {
            *dst = *src as c_char;
        }
        e.message[n] = 0;
    }
    code
}

type SlotResult = Result<(), (c_int, String)>;

/// Runs a slot's body: a panic must not unwind into devbuf's C frames
/// (undefined behaviour; Rust aborts the host process instead). It becomes
/// DEVBUF_EBACKEND with the panic's message.
pub fn guard(err: *mut Error, op: &str, body: impl FnOnce() -> SlotResult) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => OK,
        Ok(Err((code, why))) => error_set(err, code, &format!("{op}: {why}")),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".to_string());
            error_set(err, EBACKEND, &format!("{op}: the plugin panicked: {what}"))
        }
    }
}

const ALIGN: usize = 64; // what mem_alloc guarantees without a request

fn check_device(device: c_int) -> SlotResult {
    if device == 0 {
        Ok(())
    } else {
        Err((ENODEV, format!("example.rust has one device (0), not {device}")))
    }
}

/// Live allocations and their layouts, which dealloc needs back.
static LIVE: Mutex<BTreeMap<usize, Layout>> = Mutex::new(BTreeMap::new());

fn live() -> std::sync::MutexGuard<'static, BTreeMap<usize, Layout>> {
    // A panic while it was held leaves it usable: the map is never half-updated.
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn copy_str(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

unsafe extern "C" fn device_count(_state: *mut c_void, count: *mut c_int, err: *mut Error) -> c_int {
    guard(err, "device_count", || {
        unsafe { *count = 1 };
        Ok(())
    })
}

unsafe extern "C" fn device_props(
    _state: *mut c_void,
    device: c_int,
    props: *mut DeviceProps,
    err: *mut Error,
) -> c_int {
    guard(err, "device_props", || {
        check_device(device)?;
        let p = unsafe { props.as_mut() }.ok_or((EINVAL, "props is NULL".to_string()))?;
        p.flags = DEVICE_HOST_ACCESSIBLE; // the runtime's synchronous defaults apply
        copy_str(&mut p.name, "host memory (Rust plugin)");
        copy_str(&mut p.vendor, "example");
        p.alloc_alignment = ALIGN as u32;
        p.dlpack_device_type = DL_CPU;
        p.dlpack_device_id = 0;
        Ok(())
    })
}

unsafe extern "C" fn mem_alloc(
    _state: *mut c_void,
    device: c_int,
    size: usize,
    alignment: usize,
    _stream: *mut c_void,
    ptr: *mut *mut c_void,
    err: *mut Error,
) -> c_int {
    guard(err, "mem_alloc", || {
        check_device(device)?;
        let align = alignment.max(ALIGN); // the host checked: a power of two
        // Size 0 still gets a unique pointer: 1 byte backs it. Sizes beyond
        // isize::MAX are refused here, before the allocator sees them.
        let layout = Layout::from_size_align(size.max(1), align)
            .map_err(|_| (ENOMEM, format!("{size} bytes aligned to {align}: too large")))?;
        let p = unsafe { alloc(layout) };
        if p.is_null() {
            return Err((ENOMEM, format!("cannot allocate {size} bytes")));
        }
        live().insert(p as usize, layout);
        unsafe { *ptr = p.cast() };
        Ok(())
    })
}

unsafe extern "C" fn mem_free(
    _state: *mut c_void,
    device: c_int,
    ptr: *mut c_void,
    _stream: *mut c_void,
    err: *mut Error,
) -> c_int {
    guard(err, "mem_free", || {
        check_device(device)?;
        let layout = live()
            .remove(&(ptr as usize))
            .ok_or((EINVAL, format!("{ptr:p} is not a live allocation of example.rust")))?;
        unsafe { dealloc(ptr.cast(), layout) };
        Ok(())
    })
}

/// A NULL-terminated array of C strings, shareable as a static.
#[repr(transparent)]
struct Identifiers([*const c_char; 2]);
unsafe impl Sync for Identifiers {}

static IDENTIFIERS: Identifiers = Identifiers([c"example.rust".as_ptr(), null()]);

static TABLE: PluginTable = PluginTable {
    struct_size: std::mem::size_of::<PluginTable>() as u32,
    abi_major: ABI_MAJOR,
    abi_minor: ABI_MINOR, // >= 1: the NULL slots below get the runtime's defaults
    name: c"rust".as_ptr(),
    version: c"0.1.0".as_ptr(),
    description: c"host memory from Rust, std only (docs/plugin-authors.md)".as_ptr(),
    identifiers: &IDENTIFIERS.0 as *const *const c_char,
    init: None,
    shutdown: None,
    device_count: Some(device_count),
    device_props: Some(device_props),
    mem_alloc: Some(mem_alloc),
    mem_free: Some(mem_free),
    copy_h2d: None,
    copy_d2h: None,
    copy_d2d: None,
    stream_create: None,
    stream_destroy: None,
    stream_synchronize: None,
    event_create: None,
    event_destroy: None,
    event_record: None,
    stream_wait_event: None,
    event_synchronize: None,
    event_query: None,
    device_info_export: None,
    device_info_import: None,
    dtype_namespaces: null(),
    host_alloc: None,
    host_free: None,
    ext_functions: null(),
    ext_function_count: 0,
};

/// The one exported symbol.
#[no_mangle]
pub extern "C" fn devbuf_plugin_entry() -> *const PluginTable {
    &TABLE
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// What the mirror says for one line of layout.c's output.
    fn ours(kind: &str, name: &str) -> Option<i64> {
        let v = match (kind, name) {
            ("size", "devbuf_error") => size_of::<Error>(),
            ("size", "devbuf_device_props") => size_of::<DeviceProps>(),
            ("size", "devbuf_plugin_table") => size_of::<PluginTable>(),
            ("const", c) => {
                return Some(match c {
                    "DEVBUF_ABI_MAJOR" => ABI_MAJOR as i64,
                    "DEVBUF_ABI_MINOR" => ABI_MINOR as i64,
                    "DEVBUF_ERROR_MESSAGE_SIZE" => ERROR_MESSAGE_SIZE as i64,
                    "DEVBUF_OK" => OK as i64,
                    "DEVBUF_EINVAL" => EINVAL as i64,
                    "DEVBUF_ENOMEM" => ENOMEM as i64,
                    "DEVBUF_ENODEV" => ENODEV as i64,
                    "DEVBUF_EBACKEND" => EBACKEND as i64,
                    "DEVBUF_DEVICE_HOST_ACCESSIBLE" => DEVICE_HOST_ACCESSIBLE as i64,
                    "DEVBUF_DL_CPU" => DL_CPU as i64,
                    _ => return None,
                })
            }
            ("offset", f) => {
                let (ty, field) = f.split_once('.')?;
                macro_rules! off {
                    ($t:ty; $($f:ident),*) => {
                        match field { $(stringify!($f) => offset_of!($t, $f),)* _ => return None }
                    };
                }
                match ty {
                    "devbuf_error" => off!(Error; code, backend_code, message),
                    "devbuf_device_props" => off!(DeviceProps; struct_size, flags, name, vendor,
                        total_memory, free_memory, alloc_alignment, dlpack_device_type,
                        dlpack_device_id, reserved0, reserved),
                    "devbuf_plugin_table" => off!(PluginTable; struct_size, abi_major, abi_minor,
                        name, version, description, identifiers, init, shutdown, device_count,
                        device_props, mem_alloc, mem_free, copy_h2d, copy_d2h, copy_d2d,
                        stream_create, stream_destroy, stream_synchronize, event_create,
                        event_destroy, event_record, stream_wait_event, event_synchronize,
                        event_query, device_info_export, device_info_import, dtype_namespaces,
                        host_alloc, host_free, ext_functions, ext_function_count),
                    _ => return None,
                }
            }
            _ => return None,
        };
        Some(v as i64)
    }

    /// The mirrors against the C compiler's view of plugin.h: every size,
    /// offset and constant layout.c prints must match (DEVBUF_LAYOUT names
    /// its output; the CMake test sets it).
    #[test]
    fn mirrors_match_plugin_h() {
        let path = std::env::var("DEVBUF_LAYOUT")
            .expect("set DEVBUF_LAYOUT to the output of layout.c (the ctest example_rust does)");
        let text = std::fs::read_to_string(&path).expect("read DEVBUF_LAYOUT");
        let mut checked = 0;
        for line in text.lines() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(parts.len(), 3, "malformed line {line:?}");
            let c: i64 = parts[2].parse().expect("a number");
            let r = ours(parts[0], parts[1])
                .unwrap_or_else(|| panic!("{} {}: in plugin.h but not in the mirror", parts[0], parts[1]));
            assert_eq!(r, c, "{} {}: C says {c}, the Rust mirror {r}", parts[0], parts[1]);
            checked += 1;
        }
        assert!(checked >= 50, "only {checked} lines in {path}");
    }

    #[test]
    fn a_panic_becomes_an_error() {
        let mut e = Error { code: 0, backend_code: 0, message: [0; ERROR_MESSAGE_SIZE] };
        let rc = guard(&mut e, "mem_alloc", || panic!("index out of range"));
        assert_eq!(rc, EBACKEND);
        let msg: Vec<u8> = e.message.iter().take_while(|&&b| b != 0).map(|&b| b as u8).collect();
        assert_eq!(String::from_utf8(msg).unwrap(), "mem_alloc: the plugin panicked: index out of range");
    }

    #[test]
    fn long_messages_are_cut_and_terminated() {
        let mut e = Error { code: 0, backend_code: 0, message: [1; ERROR_MESSAGE_SIZE] };
        error_set(&mut e, EINVAL, &"x".repeat(2000));
        assert_eq!(e.message[ERROR_MESSAGE_SIZE - 1], 0);
        assert_eq!(e.message[ERROR_MESSAGE_SIZE - 2], b'x' as c_char);
    }
}
