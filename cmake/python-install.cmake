# Install rules for the `devbuf` Python package (included by install.cmake
# when the bindings are part of the build). The bindings' own CMakeLists
# builds the extension; this file only decides where it is installed and with
# which RPATH, so that one layout rule serves both ways of installing:
#
#   cmake --install     <prefix>/<DEVBUF_PYTHON_INSTALL_DIR>/devbuf/
#                       (default <libdir>/pythonX.Y/site-packages/devbuf/)
#   pip (wheel)         <site-packages>/devbuf/, with pyproject.toml setting
#                       DEVBUF_PYTHON_INSTALL_DIR=. and CMAKE_INSTALL_LIBDIR=devbuf/lib
#
# The extension gets RPATH $ORIGIN/<path from the package to libdir>, so it
# loads the libdevbuf installed with it (never one from the build tree or the
# system), and that libdevbuf then finds <libdir>/devbuf/plugins by itself.
set(_devbuf_py_src ${CMAKE_SOURCE_DIR}/bindings/python)

# Every extension module (MODULE or SHARED library) the bindings define.
function(_devbuf_python_modules dir out)
  set(mods)
  get_property(_targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(_t ${_targets})
    get_target_property(_type ${_t} TYPE)
    if(_type STREQUAL "MODULE_LIBRARY" OR _type STREQUAL "SHARED_LIBRARY")
      list(APPEND mods ${_t})
    endif()
  endforeach()
  get_property(_subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(_s ${_subdirs})
    _devbuf_python_modules(${_s} _sub)
    list(APPEND mods ${_sub})
  endforeach()
  set(${out} ${mods} PARENT_SCOPE)
endfunction()

get_property(_devbuf_dirs DIRECTORY ${CMAKE_SOURCE_DIR} PROPERTY SUBDIRECTORIES)
if(NOT "${_devbuf_py_src}" IN_LIST _devbuf_dirs)
  return() # bindings not built (DEVBUF_BUILD_PYTHON=OFF or not there yet)
endif()
_devbuf_python_modules(${_devbuf_py_src} _devbuf_py_modules)
if(NOT _devbuf_py_modules)
  message(WARNING "devbuf: bindings/python defines no extension module; nothing to install")
  return()
endif()

# Where the package goes, relative to the prefix.
if(NOT DEFINED DEVBUF_PYTHON_INSTALL_DIR OR DEVBUF_PYTHON_INSTALL_DIR STREQUAL "")
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_FOUND)
    set(_pyver "${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}")
  else()
    set(_pyver "3")
  endif()
  set(DEVBUF_PYTHON_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/python${_pyver}/site-packages"
    CACHE STRING "Where cmake --install puts the devbuf Python package, relative to the prefix")
endif()
set(_devbuf_pkg "${DEVBUF_PYTHON_INSTALL_DIR}/devbuf")
# "./devbuf" would make the wheel's RECORD paths odd: normalise.
string(REGEX REPLACE "^\\./" "" _devbuf_pkg "${_devbuf_pkg}")

# The extensions: each in the package subfolder it is built in (relative to
# ${CMAKE_BINARY_DIR}/python, where the bindings put the importable tree).
foreach(_m ${_devbuf_py_modules})
  get_target_property(_outdir ${_m} LIBRARY_OUTPUT_DIRECTORY)
  set(_sub "")
  if(_outdir)
    file(RELATIVE_PATH _rel ${CMAKE_BINARY_DIR}/python/devbuf ${_outdir})
    if(NOT _rel MATCHES "^\\.\\.")
      set(_sub "${_rel}")
    endif()
  endif()
  set(_dest "${_devbuf_pkg}")
  if(_sub)
    set(_dest "${_devbuf_pkg}/${_sub}")
  endif()
  file(RELATIVE_PATH _to_lib ${CMAKE_INSTALL_PREFIX}/${_dest} ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR})
  string(REGEX REPLACE "/$" "" _to_lib "${_to_lib}")
  if(_to_lib STREQUAL "")
    set(_to_lib ".")
  endif()
  set_target_properties(${_m} PROPERTIES INSTALL_RPATH "$ORIGIN/${_to_lib}")
  install(TARGETS ${_m} LIBRARY DESTINATION ${_dest} COMPONENT python)
endforeach()

# The pure-Python part of the package: from the source tree if it lives
# there, else whatever the bindings laid out beside the extension.
set(_devbuf_py_pkg_src "")
foreach(_cand ${_devbuf_py_src}/devbuf ${_devbuf_py_src}/src/devbuf ${_devbuf_py_src}/python/devbuf
              ${CMAKE_BINARY_DIR}/python/devbuf)
  if(EXISTS ${_cand}/__init__.py)
    set(_devbuf_py_pkg_src ${_cand})
    break()
  endif()
endforeach()
if(SKBUILD)
  # pip: scikit-build-core takes the .py/.pyi/.pxd files from the source
  # folder itself (wheel.packages in pyproject.toml), which is what lets an
  # editable install (`pip install -e .`) map them to the checkout.
elseif(_devbuf_py_pkg_src)
  install(DIRECTORY ${_devbuf_py_pkg_src}/ DESTINATION ${_devbuf_pkg} COMPONENT python
    FILES_MATCHING PATTERN "*.py" PATTERN "*.pyi" PATTERN "py.typed" PATTERN "*.pxd"
    PATTERN "__pycache__" EXCLUDE)
else()
  # Found at install time, when the build has laid the package out.
  install(DIRECTORY ${CMAKE_BINARY_DIR}/python/devbuf/ DESTINATION ${_devbuf_pkg} COMPONENT python
    FILES_MATCHING PATTERN "*.py" PATTERN "*.pyi" PATTERN "py.typed" PATTERN "*.pxd"
    PATTERN "__pycache__" EXCLUDE)
endif()
# The stub of devbuf._pyplugin, only with the module (bindings/python/pyplugin.cmake).
if(TARGET devbuf_pyplugin)
  install(FILES ${_devbuf_py_src}/stubs/_pyplugin.pyi DESTINATION ${_devbuf_pkg} COMPONENT python)
endif()
# The headers for `cimport devbuf` and C consumers (devbuf.get_include()),
# laid out by the bindings' build in the package's include/ folder; a wheel
# already puts the include dir there (CMAKE_INSTALL_INCLUDEDIR=devbuf/include).
string(REGEX REPLACE "^\\./" "" _devbuf_incdir "${CMAKE_INSTALL_INCLUDEDIR}")
if(NOT _devbuf_incdir STREQUAL "${_devbuf_pkg}/include")
  install(DIRECTORY ${CMAKE_BINARY_DIR}/python/devbuf/include/ DESTINATION ${_devbuf_pkg}/include
    COMPONENT python FILES_MATCHING PATTERN "*.h")
endif()

# The wheel's `devbuf-info` console script is devbuf/_info.py (pyproject.toml), a Python
# file of the package: it finds the native tool in devbuf/bin.
