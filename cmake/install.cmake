# Install and export rules for devbuf, included once at the end of the
# top-level CMakeLists.txt (after every target exists).
#
# Layout (all relative to CMAKE_INSTALL_PREFIX, GNUInstallDirs names):
#   include/devbuf/*.h                     public headers (core + registry)
#   <libdir>/libdevbuf.so.<ver>            the runtime, SONAME libdevbuf.so.<major>
#   <libdir>/devbuf/plugins/*.so           plugins; the runtime looks here by itself,
#                                          relative to its own file (core/src/loader.c)
#   <bindir>/devbuf-info ...               tools, RPATH $ORIGIN/<bindir -> libdir>
#   <libdir>/cmake/devbuf/                 find_package(devbuf) package
#   <libdir>/pkgconfig/devbuf.pc           pkg-config, runtime users
#   <libdir>/pkgconfig/devbuf-plugin.pc    pkg-config, plugin authors
#   <datadir>/devbuf/plugin.map            linker version script for plugins
#
# The Python wheel (pyproject.toml) reuses this exact layout with
# CMAKE_INSTALL_LIBDIR=devbuf/lib etc., so everything lands inside the
# package and the same relative rules hold.
include(CMakePackageConfigHelpers)

set(DEVBUF_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/devbuf)
set(DEVBUF_PKGCONFIG_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
set(DEVBUF_MAP_INSTALL_DIR ${CMAKE_INSTALL_DATADIR}/devbuf)

# The plugin ABI major, read from the header so the package never disagrees.
file(STRINGS ${CMAKE_SOURCE_DIR}/core/include/devbuf/plugin.h _abi
  REGEX "^#define DEVBUF_ABI_MAJOR [0-9]+")
string(REGEX REPLACE ".* ([0-9]+).*" "\\1" DEVBUF_ABI_MAJOR_VALUE "${_abi}")

# ---- the runtime ----------------------------------------------------------
if(DEVBUF_WHEEL)
  # One file, libdevbuf.so.<major> (core/CMakeLists.txt): no libdevbuf.so
  # link, which a zip would store as a second full copy. The CMake package
  # names the file itself, and devbuf.pc links it by path (below).
  install(TARGETS devbuf EXPORT devbufTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_SKIP
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
  set(DEVBUF_PC_LIBS "\${libdir}/libdevbuf.so.${PROJECT_VERSION_MAJOR}")
else()
  install(TARGETS devbuf EXPORT devbufTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
  set(DEVBUF_PC_LIBS "-L\${libdir} -ldevbuf")
endif()

# ---- public headers: whole directories, so headers added later are picked
# up without touching this file.
foreach(_dir ${DEVBUF_PUBLIC_INCLUDE_DIRS})
  if(IS_DIRECTORY ${_dir}/devbuf)
    install(DIRECTORY ${_dir}/devbuf DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
      COMPONENT dev FILES_MATCHING PATTERN "*.h")
  endif()
endforeach()

# The header-only backport of the buffer-protocol drafts, for C extensions.
if(IS_DIRECTORY ${CMAKE_SOURCE_DIR}/bindings/python/include)
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/bindings/python/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
    COMPONENT dev FILES_MATCHING PATTERN "*.h")
endif()

# ---- devbuf::plugin: what a plugin needs, and nothing it must not have.
# Include directories, hidden visibility and the version script that leaves
# devbuf_plugin_entry as the only exported symbol. It does NOT link libdevbuf:
# plugins never do. (The dash keeps the name out of devbuf_plugin_<name>.)
add_library(devbuf-plugin-interface INTERFACE)
set_target_properties(devbuf-plugin-interface PROPERTIES EXPORT_NAME plugin)
target_include_directories(devbuf-plugin-interface INTERFACE
  "$<BUILD_INTERFACE:${DEVBUF_PUBLIC_INCLUDE_DIRS}>"
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_options(devbuf-plugin-interface INTERFACE -fvisibility=hidden)
target_link_options(devbuf-plugin-interface INTERFACE
  "$<BUILD_INTERFACE:-Wl,--version-script=${CMAKE_SOURCE_DIR}/plugins/plugin.map>"
  "$<INSTALL_INTERFACE:-Wl,--version-script=$<INSTALL_PREFIX>/${DEVBUF_MAP_INSTALL_DIR}/plugin.map>"
  -Wl,--no-undefined)
add_library(devbuf::plugin ALIAS devbuf-plugin-interface)
install(TARGETS devbuf-plugin-interface EXPORT devbufTargets)
install(FILES ${CMAKE_SOURCE_DIR}/plugins/plugin.map DESTINATION ${DEVBUF_MAP_INSTALL_DIR}
  COMPONENT dev)

# ---- CMake package ----------------------------------------------------------
install(EXPORT devbufTargets NAMESPACE devbuf:: DESTINATION ${DEVBUF_CMAKE_INSTALL_DIR}
  COMPONENT dev)
# The package files are for the install tree only: they are generated under
# cmake/install-only/, and the build tree's cmake/devbufConfig.cmake (where
# -Ddevbuf_DIR=<build>/cmake or CMAKE_PREFIX_PATH=<build> would find one) is
# a guard that says so and how to make an install, instead of a package that
# points at a devbufTargets.cmake and an include/ that do not exist there.
set(DEVBUF_INSTALL_ONLY_DIR ${CMAKE_BINARY_DIR}/cmake/install-only)
configure_file(${CMAKE_CURRENT_LIST_DIR}/devbufConfig-buildtree.cmake.in
  ${CMAKE_BINARY_DIR}/cmake/devbufConfig.cmake @ONLY)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/devbufConfig.cmake.in
  ${DEVBUF_INSTALL_ONLY_DIR}/devbufConfig.cmake
  INSTALL_DESTINATION ${DEVBUF_CMAKE_INSTALL_DIR}
  PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_BINDIR)
# 0.x: a new minor may break the API, so only the same minor is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/devbufConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES
  ${DEVBUF_INSTALL_ONLY_DIR}/devbufConfig.cmake
  ${CMAKE_BINARY_DIR}/cmake/devbufConfigVersion.cmake
  ${CMAKE_CURRENT_LIST_DIR}/devbufPlugin.cmake
  DESTINATION ${DEVBUF_CMAKE_INSTALL_DIR} COMPONENT dev)

# ---- pkg-config: relocatable through ${pcfiledir}, so a prefix moved
# after installation (or unpacked from a wheel) still answers right.
file(RELATIVE_PATH DEVBUF_PC_TO_PREFIX
  ${CMAKE_INSTALL_PREFIX}/${DEVBUF_PKGCONFIG_INSTALL_DIR} ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" DEVBUF_PC_TO_PREFIX "${DEVBUF_PC_TO_PREFIX}")
foreach(_pc devbuf devbuf-plugin)
  # Install-only too: ${pcfiledir} resolves only in an installed prefix.
  configure_file(${CMAKE_CURRENT_LIST_DIR}/${_pc}.pc.in ${DEVBUF_INSTALL_ONLY_DIR}/${_pc}.pc @ONLY)
  install(FILES ${DEVBUF_INSTALL_ONLY_DIR}/${_pc}.pc DESTINATION ${DEVBUF_PKGCONFIG_INSTALL_DIR}
    COMPONENT dev)
endforeach()

# ---- RPATH of installed programs (tools, devbuf_conformance, ...):
# $ORIGIN-relative, so an installed program finds the libdevbuf installed
# beside it wherever the prefix is, with no environment. Set on every
# executable of the project that has none (it only matters once installed).
file(RELATIVE_PATH DEVBUF_BIN_TO_LIB
  ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR} ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR})
string(REGEX REPLACE "/$" "" DEVBUF_BIN_TO_LIB "${DEVBUF_BIN_TO_LIB}")
function(_devbuf_set_tool_rpath dir)
  get_property(_targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(_t ${_targets})
    get_target_property(_type ${_t} TYPE)
    # Type first: CMake 3.18 refuses INSTALL_RPATH queries on INTERFACE
    # libraries (3.19 allows them), and 3.18 is the minimum (bullseye's).
    if(_type STREQUAL "EXECUTABLE")
      get_target_property(_rpath ${_t} INSTALL_RPATH)
      if(NOT _rpath)
        set_target_properties(${_t} PROPERTIES INSTALL_RPATH "$ORIGIN/${DEVBUF_BIN_TO_LIB}")
      endif()
    endif()
  endforeach()
  get_property(_subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(_s ${_subdirs})
    _devbuf_set_tool_rpath(${_s})
  endforeach()
endfunction()
_devbuf_set_tool_rpath(${CMAKE_SOURCE_DIR})

# ---- Python extension (when the bindings are built): see python-install.cmake.
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/python-install.cmake)
  include(${CMAKE_CURRENT_LIST_DIR}/python-install.cmake)
endif()

# ---- release wheels: strip what was installed, keeping the debug info in
# <build>/debug/.build-id/xx/yyyy.debug (gdb's layout: point
# `set debug-file-directory` at <build>/debug). Last, so that it sees every
# installed binary (install rules run in order, CMP0082).
if(DEVBUF_WHEEL)
  find_program(DEVBUF_OBJCOPY NAMES objcopy REQUIRED)
  find_program(DEVBUF_READELF NAMES readelf REQUIRED)
  set(DEVBUF_DEBUG_DIR ${CMAKE_BINARY_DIR}/debug CACHE PATH
    "Where a DEVBUF_WHEEL install puts the split debug files")
  install(CODE "set(DEVBUF_OBJCOPY \"${DEVBUF_OBJCOPY}\")
set(DEVBUF_READELF \"${DEVBUF_READELF}\")
set(DEVBUF_DEBUG_DIR \"${DEVBUF_DEBUG_DIR}\")
include(\"${CMAKE_CURRENT_LIST_DIR}/split-debug.cmake\")")
endif()
