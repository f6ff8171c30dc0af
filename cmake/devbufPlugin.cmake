# devbuf_add_plugin(<name> <sources>...): build a devbuf plugin the way devbuf
# builds its own. Installed with the CMake package; needs the devbuf::plugin
# target (from devbufConfig.cmake).
#
# The result is MODULE target devbuf_plugin_<name>, file
# devbuf_plugin_<name>.so (the runtime loads only files named
# devbuf_plugin_*.so from a directory). It sees only devbuf's public headers,
# exports only devbuf_plugin_entry, and must resolve every symbol at link time
# (-Wl,--no-undefined): a plugin never links libdevbuf, and it dlopens its
# vendor library itself. Add your own dependencies with
# target_link_libraries(devbuf_plugin_<name> PRIVATE ...).
#
# To install it where the runtime looks by default:
#   install(TARGETS devbuf_plugin_<name> LIBRARY DESTINATION ${DEVBUF_PLUGIN_DIR})
include_guard(GLOBAL)

function(devbuf_add_plugin name)
  if(NOT ARGN)
    message(FATAL_ERROR "devbuf_add_plugin(${name}): no source files given")
  endif()
  if(NOT name MATCHES "^[A-Za-z0-9_]+$")
    message(FATAL_ERROR "devbuf_add_plugin(${name}): use letters, digits and '_' only")
  endif()
  find_package(Threads REQUIRED)
  set(target devbuf_plugin_${name})
  add_library(${target} MODULE ${ARGN})
  target_link_libraries(${target} PRIVATE devbuf::plugin Threads::Threads ${CMAKE_DL_LIBS})
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    OUTPUT_NAME devbuf_plugin_${name}
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
endfunction()
