# Install-time step of a DEVBUF_WHEEL build (included from install.cmake's
# install(CODE)): every ELF file installed so far is split into a stripped
# copy, which stays in the install, and its debug info, which goes to
# ${DEVBUF_DEBUG_DIR}/.build-id/<xx>/<rest>.debug, the layout gdb and
# debuginfod clients look up by build-id. The stripped file keeps a
# .gnu_debuglink naming it too. Needs DEVBUF_OBJCOPY, DEVBUF_READELF and
# DEVBUF_DEBUG_DIR; reads CMAKE_INSTALL_MANIFEST_FILES, which CMake's install
# script fills as it goes.
set(_n 0)
foreach(_f IN LISTS CMAKE_INSTALL_MANIFEST_FILES)
  if(IS_SYMLINK "${_f}" OR NOT EXISTS "${_f}" OR IS_DIRECTORY "${_f}")
    continue()
  endif()
  file(READ "${_f}" _magic LIMIT 4 HEX)
  if(NOT _magic STREQUAL "7f454c46")
    continue()
  endif()
  execute_process(COMMAND "${DEVBUF_READELF}" -n "${_f}" OUTPUT_VARIABLE _notes RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT _notes MATCHES "Build ID: ([0-9a-f][0-9a-f])([0-9a-f]+)")
    message(FATAL_ERROR "split-debug: ${_f} has no GNU build-id note (readelf -n); "
      "a DEVBUF_WHEEL build links with -Wl,--build-id=sha1: was it built with another linker?")
  endif()
  set(_dbg "${DEVBUF_DEBUG_DIR}/.build-id/${CMAKE_MATCH_1}/${CMAKE_MATCH_2}.debug")
  get_filename_component(_dbgdir "${_dbg}" DIRECTORY)
  file(MAKE_DIRECTORY "${_dbgdir}")
  execute_process(COMMAND "${DEVBUF_OBJCOPY}" --only-keep-debug "${_f}" "${_dbg}" RESULT_VARIABLE _rc)
  if(_rc EQUAL 0)
    execute_process(COMMAND "${DEVBUF_OBJCOPY}" --strip-unneeded "--add-gnu-debuglink=${_dbg}" "${_f}"
      RESULT_VARIABLE _rc)
  endif()
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "split-debug: objcopy failed on ${_f} (exit ${_rc})")
  endif()
  math(EXPR _n "${_n} + 1")
endforeach()
message(STATUS "split-debug: ${_n} binaries stripped, debug info in ${DEVBUF_DEBUG_DIR}/.build-id")
