// A devbuf plugin in C++17: one device of host memory, "example.cpp".
//
// What a C++ author must get right, each marked below:
// - the table: C's designated initialisers ({.name = ...}) are C++20, and in
//   C++17 fail to compile; a constexpr function that assigns the fields
//   builds the same table at compile time (`make_table`);
// - no exception crosses into devbuf's C code: every slot runs inside
//   `guard`, which turns one into DEVBUF_EBACKEND and a message;
// - one exported symbol: -fvisibility=hidden is not enough once the standard
//   library is used; plugin.map (a version script) exports devbuf_plugin_entry
//   alone;
// - aligned operator new(size, align, nothrow) of libstdc++ answers an
//   absurd size (SIZE_MAX) with a non-NULL pointer: sizes are checked first.
//
// Build: c++ -std=c++17 -Wall -Wextra -Werror -pedantic -fPIC -shared
//          -fvisibility=hidden -Wl,--version-script=plugin.map
//          -I<devbuf>/include -o devbuf_plugin_cpp.so plugin.cpp   (one line)
// Try:   DEVBUF_PLUGINS=$PWD/devbuf_plugin_cpp.so devbuf_conformance example.cpp
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

#include <devbuf/plugin.h>

namespace {

constexpr std::size_t kAlign = 64;  // what mem_alloc guarantees without a request

// A slot's body, with exceptions stopped at the C boundary.
template <typename Body>
int guard(devbuf_error *err, const char *op, Body &&body) noexcept {
  try {
    return body();
  } catch (const std::exception &e) {
    return devbuf_error_set(err, DEVBUF_EBACKEND, "%s: the plugin threw: %s", op, e.what());
  } catch (...) {
    return devbuf_error_set(err, DEVBUF_EBACKEND, "%s: the plugin threw a non-std exception", op);
  }
}

int check_device(int device, const char *op, devbuf_error *err) {
  if (device == 0) return DEVBUF_OK;
  return devbuf_error_set(err, DEVBUF_ENODEV, "%s: example.cpp has one device (0), not %d", op,
                          device);
}

// Live allocations and their alignment, which aligned delete needs back.
std::mutex live_lock;
std::unordered_map<void *, std::size_t> live;

extern "C" int cpp_device_count(void *, int *count, devbuf_error *err) {
  return guard(err, "device_count", [&]() -> int {
    *count = 1;
    return DEVBUF_OK;
  });
}

extern "C" int cpp_device_props(void *, int device, devbuf_device_props *props, devbuf_error *err) {
  return guard(err, "device_props", [&]() -> int {
    if (check_device(device, "device_props", err)) return DEVBUF_ENODEV;
    props->flags = DEVBUF_DEVICE_HOST_ACCESSIBLE;  // the runtime's synchronous defaults apply
    std::snprintf(props->name, sizeof props->name, "host memory (C++ plugin)");
    std::snprintf(props->vendor, sizeof props->vendor, "example");
    props->alloc_alignment = kAlign;
    props->dlpack_device_type = DEVBUF_DL_CPU;
    props->dlpack_device_id = 0;
    return DEVBUF_OK;
  });
}

extern "C" int cpp_mem_alloc(void *, int device, std::size_t size, std::size_t alignment, void *,
                             void **ptr, devbuf_error *err) {
  return guard(err, "mem_alloc", [&]() -> int {
    if (check_device(device, "mem_alloc", err)) return DEVBUF_ENODEV;
    std::size_t align = alignment > kAlign ? alignment : kAlign;  // a power of two (host-checked)
    // libstdc++'s aligned nothrow new returns non-NULL for SIZE_MAX: refuse
    // what no allocator can give before asking.
    if (size > static_cast<std::size_t>(PTRDIFF_MAX) - align)
      return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: %zu bytes: too large", size);
    // Size 0 still gets a unique pointer: 1 byte backs it.
    void *p = ::operator new(size ? size : 1, std::align_val_t{align}, std::nothrow);
    if (p == nullptr)
      return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: cannot allocate %zu bytes", size);
    std::lock_guard<std::mutex> hold(live_lock);
    live.emplace(p, align);  // may throw bad_alloc: guard reports it (p leaks, as it must not be used)
    *ptr = p;
    return DEVBUF_OK;
  });
}

extern "C" int cpp_mem_free(void *, int device, void *ptr, void *, devbuf_error *err) {
  return guard(err, "mem_free", [&]() -> int {
    if (check_device(device, "mem_free", err)) return DEVBUF_ENODEV;
    std::size_t align;
    {
      std::lock_guard<std::mutex> hold(live_lock);
      auto it = live.find(ptr);
      if (it == live.end())
        return devbuf_error_set(err, DEVBUF_EINVAL, "mem_free: %p is not an example.cpp allocation",
                                ptr);
      align = it->second;
      live.erase(it);
    }
    ::operator delete(ptr, std::align_val_t{align});
    return DEVBUF_OK;
  });
}

const char *const identifiers[] = {"example.cpp", nullptr};

// The C++17 idiom for the table: zero every field, assign the ones used.
// constexpr, so the table is built at compile time like C's static initialiser.
constexpr devbuf_plugin_table make_table() {
  devbuf_plugin_table t{};
  t.struct_size = sizeof(devbuf_plugin_table);
  t.abi_major = DEVBUF_ABI_MAJOR;
  t.abi_minor = DEVBUF_ABI_MINOR;  // >= 1: the NULL slots get the runtime's defaults
  t.name = "cpp";
  t.version = "0.1.0";
  t.description = "host memory from C++17 (docs/plugin-authors.md)";
  t.identifiers = identifiers;
  t.device_count = cpp_device_count;
  t.device_props = cpp_device_props;
  t.mem_alloc = cpp_mem_alloc;
  t.mem_free = cpp_mem_free;
  return t;
}

constexpr devbuf_plugin_table table = make_table();

}  // namespace

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &table; }
