// The competitor: what an extension author writes with nanobind to accept
// any array (buffer protocol or DLPack) and get its data pointer.
#include <cstdint>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

namespace nb = nanobind;

NB_MODULE(_nb_bench, m) {
  m.def("data_ptr", [](nb::ndarray<> a) { return (std::uintptr_t)a.data(); });
}
