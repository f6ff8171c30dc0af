# devbuf._pyplugin: plugin tables, dtype namespaces and extension functions
# written in Python, made into C function pointers with libffi closures
# (docs/python-plugins.md). A separate extension from devbuf._devbuf; the
# user-facing API is bindings/python/devbuf/plugin.py.
#
# Included at the end of bindings/python/CMakeLists.txt, so it sees
# DEVBUF_PYTHON_PACKAGE_DIR and the Python3 package, and its target is
# installed by cmake/python-install.cmake like the other extensions.
# Both are build dependencies of the sdist (docs/install.md): say so, and how
# to build without them, rather than CMake's bare "not found".
find_package(PkgConfig)
if(PkgConfig_FOUND)
  pkg_check_modules(DEVBUF_LIBFFI IMPORTED_TARGET libffi)
endif()
if(NOT PkgConfig_FOUND OR NOT DEVBUF_LIBFFI_FOUND)
  if(PkgConfig_FOUND)
    set(_pp_why "pkg-config (${PKG_CONFIG_EXECUTABLE}) knows no libffi")
  else()
    set(_pp_why "pkg-config is not installed")
  endif()
  message(FATAL_ERROR "devbuf._pyplugin (plugins written in Python) needs libffi's headers, "
    "found through pkg-config, and ${_pp_why}. "
    "Install them (Debian/Ubuntu: apt-get install pkg-config libffi-dev; Fedora: dnf install "
    "pkgconf libffi-devel), or build without that module: "
    "-DDEVBUF_WITH_PYPLUGIN=OFF (pip: --config-settings=cmake.define.DEVBUF_WITH_PYPLUGIN=OFF). "
    "See docs/install.md.")
endif()

set(_pp_dir ${CMAKE_CURRENT_LIST_DIR})
if(NOT DEFINED DEVBUF_PYTHON_PACKAGE_DIR)
  set(DEVBUF_PYTHON_PACKAGE_DIR ${CMAKE_BINARY_DIR}/python/devbuf)
endif()

file(GLOB _pp_sources CONFIGURE_DEPENDS ${_pp_dir}/src/pyplugin/*.c)
# The conformance suite's own source, compiled in with its main renamed, so
# that devbuf.plugin.run_conformance runs exactly the checks of the
# devbuf_conformance executable against plugins that exist only in this
# process (a Python plugin cannot be reached from another process).
set(_pp_conformance ${PROJECT_SOURCE_DIR}/tests/conformance/conformance.c)
set_source_files_properties(${_pp_conformance} PROPERTIES
  COMPILE_DEFINITIONS "main=devbuf_conformance_main")

Python3_add_library(devbuf_pyplugin MODULE WITH_SOABI ${_pp_sources} ${_pp_conformance})
target_include_directories(devbuf_pyplugin PRIVATE ${_pp_dir}/src/pyplugin ${_pp_dir}/src)
target_compile_definitions(devbuf_pyplugin PRIVATE PP_FFI_VERSION="${DEVBUF_LIBFFI_VERSION}")
target_link_libraries(devbuf_pyplugin PRIVATE devbuf PkgConfig::DEVBUF_LIBFFI Threads::Threads)
set_target_properties(devbuf_pyplugin PROPERTIES
  OUTPUT_NAME _pyplugin
  LIBRARY_OUTPUT_DIRECTORY ${DEVBUF_PYTHON_PACKAGE_DIR}
  BUILD_RPATH ${CMAKE_BINARY_DIR}/lib)

# devbuf/plugin.py: the bindings' CMakeLists copies every devbuf/*.py; copy it
# here only if that glob did not (e.g. this file used on its own).
set(_pp_py ${_pp_dir}/devbuf/plugin.py)
if(NOT "${_pp_py}" IN_LIST DEVBUF_PY_SOURCES)
  add_custom_command(OUTPUT ${DEVBUF_PYTHON_PACKAGE_DIR}/plugin.py
    COMMAND ${CMAKE_COMMAND} -E make_directory ${DEVBUF_PYTHON_PACKAGE_DIR}
    COMMAND ${CMAKE_COMMAND} -E copy_if_different ${_pp_py} ${DEVBUF_PYTHON_PACKAGE_DIR}/plugin.py
    DEPENDS ${_pp_py}
    COMMENT "devbuf python: plugin.py"
    VERBATIM)
  add_custom_target(devbuf_pyplugin_files ALL DEPENDS ${DEVBUF_PYTHON_PACKAGE_DIR}/plugin.py)
  add_dependencies(devbuf_pyplugin devbuf_pyplugin_files)
endif()

# Its stub, devbuf/_pyplugin.pyi, lives outside the package folder
# (bindings/python/stubs/) so that it goes only where the module goes: beside
# it in the build tree here, and into an install or a wheel by
# cmake/python-install.cmake; a build with -DDEVBUF_WITH_PYPLUGIN=OFF ships no
# stub for a module it lacks.
set(DEVBUF_PYPLUGIN_STUB ${_pp_dir}/stubs/_pyplugin.pyi)
add_custom_command(OUTPUT ${DEVBUF_PYTHON_PACKAGE_DIR}/_pyplugin.pyi
  COMMAND ${CMAKE_COMMAND} -E make_directory ${DEVBUF_PYTHON_PACKAGE_DIR}
  COMMAND ${CMAKE_COMMAND} -E copy_if_different ${DEVBUF_PYPLUGIN_STUB} ${DEVBUF_PYTHON_PACKAGE_DIR}/_pyplugin.pyi
  DEPENDS ${DEVBUF_PYPLUGIN_STUB}
  COMMENT "devbuf python: _pyplugin.pyi"
  VERBATIM)
target_sources(devbuf_pyplugin PRIVATE ${DEVBUF_PYTHON_PACKAGE_DIR}/_pyplugin.pyi)

# A C plugin with extension functions of every signature letter, for
# tests/python/test_pyplugin_ext.py, written outside the plugin directory so
# that nothing loads it unless a test asks (devbuf.load_plugin). It is created
# at the end of the top-level directory (cmake_language DEFER), not here: every
# module target of this directory is installed into the Python package by
# cmake/python-install.cmake, and a test double must not be.
function(_devbuf_pyplugin_test_targets)
  if(NOT DEVBUF_BUILD_TESTS)
    return()
  endif()
  add_library(devbuf_test_extfn MODULE ${PROJECT_SOURCE_DIR}/tests/python/pyplugin_extfn_plugin.c)
  target_include_directories(devbuf_test_extfn PRIVATE ${DEVBUF_PUBLIC_INCLUDE_DIRS})
  set_target_properties(devbuf_test_extfn PROPERTIES
    PREFIX ""
    OUTPUT_NAME devbuf_plugin_extfn_test
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib/devbuf/test-plugins)
  add_dependencies(devbuf_pyplugin devbuf_test_extfn)
endfunction()
if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.19)
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _devbuf_pyplugin_test_targets)
endif()
