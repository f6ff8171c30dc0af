# Included right after find_package(Python3 ... Development.Module): every
# extension target (Python3_add_library links Python3::Module) then compiles
# against the interpreter's own pyconfig.h.
#
# Debian's debug interpreter (python3.X-dbg) has an include folder of its own,
# /usr/include/python3.Xd, whose pyconfig.h is a real file (it defines
# Py_DEBUG) while Python.h and every other header there are symbolic links
# into the release interpreter's /usr/include/python3.X. CMake hands an
# imported target's include folders to the compiler as -isystem, and GCC
# canonicalizes the paths of system headers (resolves the links): Python.h's
# own #include "pyconfig.h" then finds the RELEASE pyconfig.h next to the
# link's target. The extension loads (the two builds share an ABI) but is
# compiled without Py_DEBUG: none of CPython's debug checks in the inline
# API, and Py_INCREF/Py_DECREF left out of sys.gettotalrefcount(), so that
# every object the extension makes through the C API and frees itself (a
# DeviceView dropped on an error path) reads as a leaked reference there,
# and the leak hunt's reference counts say nothing about devbuf.
# -fno-canonical-system-headers keeps the path as named. Clang does not
# canonicalize.
if(TARGET Python3::Module AND CMAKE_C_COMPILER_ID STREQUAL "GNU")
  include(CheckCCompilerFlag)
  check_c_compiler_flag(-fno-canonical-system-headers DEVBUF_HAVE_NO_CANONICAL_SYSTEM_HEADERS)
  if(DEVBUF_HAVE_NO_CANONICAL_SYSTEM_HEADERS)
    get_target_property(_devbuf_py_opts Python3::Module INTERFACE_COMPILE_OPTIONS)
    if(NOT _devbuf_py_opts MATCHES "no-canonical-system-headers")
      set_property(TARGET Python3::Module APPEND PROPERTY INTERFACE_COMPILE_OPTIONS
        $<$<COMPILE_LANG_AND_ID:C,GNU>:-fno-canonical-system-headers>
        $<$<COMPILE_LANG_AND_ID:CXX,GNU>:-fno-canonical-system-headers>)
    endif()
  endif()
endif()
