# Fuzz targets over the whole runtime: device_info import for every
# registered identifier, and plugin-table validation (devbuf_plugin_register).
#
# In every build, <target>_replay runs the checked-in seeds (corpus/<target>)
# and every input that once crashed (regress/<target>) through the harness
# without libFuzzer: a crash found once stays a test, under gcc, ASan, TSan.
#
# With DEVBUF_FUZZ=ON (clang) the libFuzzer binaries are built over an
# instrumented copy of the runtime (compiled into the binary, so libFuzzer
# sees its coverage) and of every plugin this build has, placed in
# <binary dir>/rt/devbuf/plugins where that runtime finds them as its own.
set(_devbuf_rt_fuzzers device_info plugin_table)

# CUDA, HIP and Level Zero run over the fake drivers of tests/gpu when they
# are built, so that their device_info checks past "no device" (ordinals,
# handles) are fuzzed too; without them those plugins report no device.
set(_devbuf_rt_env "DEVBUF_PLUGIN_PATH=" "DEVBUF_PLUGINS=")
set(_devbuf_rt_fakes "")
foreach(p cuda hip level_zero)
  if(TARGET devbuf_fake_${p})
    string(TOUPPER ${p} _up)
    list(APPEND _devbuf_rt_env "DEVBUF_${_up}_LIBRARY=$<TARGET_FILE:devbuf_fake_${p}>")
    list(APPEND _devbuf_rt_fakes devbuf_fake_${p})
  endif()
endforeach()

foreach(t ${_devbuf_rt_fuzzers})
  add_executable(fuzz_${t}_replay fuzz_${t}.c replay_main.c)
  target_link_libraries(fuzz_${t}_replay PRIVATE devbuf)
  set(_inputs ${CMAKE_CURRENT_SOURCE_DIR}/corpus/${t})
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/regress/${t})
    list(APPEND _inputs ${CMAKE_CURRENT_SOURCE_DIR}/regress/${t})
  endif()
  if(_devbuf_rt_fakes)
    add_dependencies(fuzz_${t}_replay ${_devbuf_rt_fakes})
  endif()
  add_test(NAME fuzz_${t}_replay COMMAND fuzz_${t}_replay ${_inputs})
  # Only this build's plugins (and the fake GPU drivers).
  set_tests_properties(fuzz_${t}_replay PROPERTIES
    ENVIRONMENT "${_devbuf_rt_env}"
    LABELS "fuzz_replay;tsan")
endforeach()

if(NOT DEVBUF_FUZZ OR NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  return()
endif()

set(_rt ${CMAKE_CURRENT_BINARY_DIR}/rt)
set(_rt_plugins ${_rt}/devbuf/plugins)
set(_instr -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
           -fno-omit-frame-pointer -g -O1)
set(_fuzz -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
          -fno-omit-frame-pointer -g -O1)

file(GLOB _rt_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/core/src/*.c
                                        ${CMAKE_SOURCE_DIR}/registry/src/*.c)
add_library(devbuf_fuzzrt OBJECT ${_rt_sources})
target_include_directories(devbuf_fuzzrt PRIVATE ${DEVBUF_PUBLIC_INCLUDE_DIRS}
  ${CMAKE_SOURCE_DIR}/core/src ${CMAKE_SOURCE_DIR}/registry/src)
# The runtime inside the fuzz binary takes the binary's directory for its
# build tree, so it loads the instrumented plugins (and may load "cpu").
target_compile_definitions(devbuf_fuzzrt PRIVATE DEVBUF_BUILDING_LIBRARY=1
  DEVBUF_BUILD_PLUGIN_DIR="${_rt_plugins}" DEVBUF_BUILD_LIB_DIR="${_rt}"
  DEVBUF_PLUGIN_INSTALL_REL="devbuf/plugins"
  # Records are never freed (pointers into them stay valid): with the usual
  # 256, fuzz_plugin_table would stop reaching the success path after the
  # 256th successful registration.
  DEVBUF_MAX_PLUGINS=16384)
target_compile_options(devbuf_fuzzrt PRIVATE ${_instr})

set(_fuzz_plugins "")
foreach(p cpu sim opencl cuda hip level_zero)
  if(NOT TARGET devbuf_plugin_${p})
    continue()
  endif()
  get_target_property(_src devbuf_plugin_${p} SOURCES)
  get_target_property(_dir devbuf_plugin_${p} SOURCE_DIR)
  get_target_property(_inc devbuf_plugin_${p} INCLUDE_DIRECTORIES)
  get_target_property(_def devbuf_plugin_${p} COMPILE_DEFINITIONS)
  list(TRANSFORM _src PREPEND ${_dir}/)
  # The GPU plugins link plugins/common statically: compile its sources into
  # the instrumented module too, so the shared slots are fuzzed as well.
  get_target_property(_links devbuf_plugin_${p} LINK_LIBRARIES)
  if(_links AND "devbuf_gpu_common" IN_LIST _links)
    get_target_property(_csrc devbuf_gpu_common SOURCES)
    get_target_property(_cdir devbuf_gpu_common SOURCE_DIR)
    list(TRANSFORM _csrc PREPEND ${_cdir}/)
    list(APPEND _src ${_csrc})
    list(APPEND _inc ${_cdir})
  endif()
  add_library(fuzz_plugin_${p} MODULE ${_src})
  target_include_directories(fuzz_plugin_${p} SYSTEM PRIVATE ${_inc})
  if(_def)
    target_compile_definitions(fuzz_plugin_${p} PRIVATE ${_def})
  endif()
  target_compile_options(fuzz_plugin_${p} PRIVATE ${_instr})
  target_link_libraries(fuzz_plugin_${p} PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
  set_target_properties(fuzz_plugin_${p} PROPERTIES PREFIX "" OUTPUT_NAME devbuf_plugin_${p}
    LIBRARY_OUTPUT_DIRECTORY ${_rt_plugins})
  list(APPEND _fuzz_plugins fuzz_plugin_${p})
endforeach()

math(EXPR _rt_fuzz_timeout "${DEVBUF_FUZZ_SECONDS} + 60")
foreach(t ${_devbuf_rt_fuzzers})
  add_executable(fuzz_${t} fuzz_${t}.c $<TARGET_OBJECTS:devbuf_fuzzrt>)
  target_include_directories(fuzz_${t} PRIVATE ${DEVBUF_PUBLIC_INCLUDE_DIRS})
  target_compile_options(fuzz_${t} PRIVATE ${_fuzz})
  target_link_options(fuzz_${t} PRIVATE ${_fuzz})
  target_link_libraries(fuzz_${t} PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
  set_target_properties(fuzz_${t} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${_rt})
  add_dependencies(fuzz_${t} ${_fuzz_plugins} ${_devbuf_rt_fakes})
  set(_work ${CMAKE_CURRENT_BINARY_DIR}/corpus_${t})
  file(MAKE_DIRECTORY ${_work})
  set(_seeds ${CMAKE_CURRENT_SOURCE_DIR}/corpus/${t})
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/regress/${t})
    list(APPEND _seeds ${CMAKE_CURRENT_SOURCE_DIR}/regress/${t})
  endif()
  add_test(NAME fuzz_${t}
    COMMAND fuzz_${t} -max_total_time=${DEVBUF_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048
            -max_len=2048 -print_final_stats=1 -artifact_prefix=${CMAKE_CURRENT_BINARY_DIR}/${t}-
            ${_work} ${_seeds})
  set_tests_properties(fuzz_${t} PROPERTIES TIMEOUT ${_rt_fuzz_timeout}
    ENVIRONMENT "${_devbuf_rt_env}")
endforeach()
