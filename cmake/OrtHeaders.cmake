# ONNX Runtime C/C++ API headers for the custom-op library, as the INTERFACE target
# `polyquant_ort_headers`.
#
# No ONNX Runtime header is kept in this repository, and the onnxruntime Python wheel ships none.
# The amd-quark wheel (pinned below, checked by SHA-256) carries the ORT 1.17.0 include tree; at
# configure time the four session headers are extracted from it into the build tree:
#
#   POLYQUANT_ORT_INCLUDE_DIR    (cache or environment) a directory that already holds
#                                onnxruntime_c_api.h, onnxruntime_cxx_api.h, onnxruntime_cxx_inline.h
#                                and onnxruntime_float16.h (API version >= 17): nothing is fetched.
#   POLYQUANT_ORT_HEADERS_WHEEL  (cache or environment) a local copy of the pinned wheel, for builds
#                                without network access.
#   otherwise                    the wheel is downloaded with pip (`python -m pip download`, then
#                                `python -I -m pip download` for pip's isolated build environments,
#                                then a pip/pip3 from PATH) into ${CMAKE_BINARY_DIR}/_ort_headers.
#
# The extracted headers are cached in ${CMAKE_BINARY_DIR}/_ort_headers/include and reused by later
# configure runs. The library built against them asks the runtime for API version 17, so it loads
# in ONNX Runtime 1.17 and every later version.

include_guard(GLOBAL)

set(POLYQUANT_ORT_HEADERS_DIST "amd-quark==0.13")
set(POLYQUANT_ORT_HEADERS_WHEEL_NAME "amd_quark-0.13-py3-none-any.whl")
set(POLYQUANT_ORT_HEADERS_WHEEL_SHA256 "3b3e58a4cbbcff20d27815b641aa4de4d698efde3c782306cb4a6a05bcf55c8c")
set(POLYQUANT_ORT_HEADERS_PREFIX
    "quark/onnx/operators/custom_ops/include/onnxruntime-1.17.0/onnxruntime/core/session/")
set(POLYQUANT_ORT_HEADER_FILES
    onnxruntime_c_api.h onnxruntime_cxx_api.h onnxruntime_cxx_inline.h onnxruntime_float16.h)
list(JOIN POLYQUANT_ORT_HEADER_FILES ", " _pq_ort_header_names)

set(_pq_ort_default_dir "")
if(DEFINED ENV{POLYQUANT_ORT_INCLUDE_DIR})
  set(_pq_ort_default_dir "$ENV{POLYQUANT_ORT_INCLUDE_DIR}")
endif()
set(POLYQUANT_ORT_INCLUDE_DIR "${_pq_ort_default_dir}" CACHE PATH
    "Directory with the ONNX Runtime C/C++ API headers (>= 1.17); empty: take them from ${POLYQUANT_ORT_HEADERS_DIST}")
set(_pq_ort_default_wheel "")
if(DEFINED ENV{POLYQUANT_ORT_HEADERS_WHEEL})
  set(_pq_ort_default_wheel "$ENV{POLYQUANT_ORT_HEADERS_WHEEL}")
endif()
set(POLYQUANT_ORT_HEADERS_WHEEL "${_pq_ort_default_wheel}" CACHE FILEPATH
    "Local ${POLYQUANT_ORT_HEADERS_WHEEL_NAME} to take the ONNX Runtime headers from (no download)")

# Sets `out` to TRUE when `dir` holds all four headers.
function(_polyquant_ort_headers_complete dir out)
  set(ok TRUE)
  foreach(h IN LISTS POLYQUANT_ORT_HEADER_FILES)
    if(NOT EXISTS "${dir}/${h}")
      set(ok FALSE)
    endif()
  endforeach()
  set(${out} ${ok} PARENT_SCOPE)
endfunction()

# Fails unless `wheel` is the pinned amd-quark wheel.
function(_polyquant_ort_check_wheel wheel)
  file(SHA256 "${wheel}" digest)
  if(NOT digest STREQUAL POLYQUANT_ORT_HEADERS_WHEEL_SHA256)
    message(FATAL_ERROR
      "polyquant: ${wheel} is not ${POLYQUANT_ORT_HEADERS_WHEEL_NAME} (SHA-256 ${digest}, expected "
      "${POLYQUANT_ORT_HEADERS_WHEEL_SHA256}). Delete it, or set POLYQUANT_ORT_INCLUDE_DIR to a "
      "directory holding the ONNX Runtime headers.")
  endif()
endfunction()

# Downloads the pinned wheel into `dest`; sets `out` to its path, or to "" (and `log` to what every
# attempt printed) when no pip could fetch it.
function(_polyquant_ort_download dest out log)
  set(args download --no-deps --only-binary=:all: --ignore-requires-python --no-input
           --disable-pip-version-check -d "${dest}" "${POLYQUANT_ORT_HEADERS_DIST}")
  set(attempts "")  # each entry: a command line with "|" between its words
  find_package(Python COMPONENTS Interpreter QUIET)
  if(Python_Interpreter_FOUND)
    # 1. The build's own interpreter. 2. The same one with -I: inside pip's isolated build
    # environment (scikit-build-core) the overlay on PYTHONPATH hides the interpreter's own pip.
    list(APPEND attempts "${Python_EXECUTABLE}|-m|pip" "${Python_EXECUTABLE}|-I|-m|pip")
  endif()
  # 3. Whatever pip is on PATH, run without the isolated environment's PYTHONPATH.
  find_program(_pq_ort_pip NAMES pip3 pip)
  if(_pq_ort_pip)
    list(APPEND attempts "${CMAKE_COMMAND}|-E|env|--unset=PYTHONPATH|--unset=PYTHONNOUSERSITE|${_pq_ort_pip}")
  endif()
  unset(_pq_ort_pip CACHE)

  set(all_output "")
  foreach(attempt IN LISTS attempts)
    string(REPLACE "|" ";" cmd "${attempt}")
    string(REPLACE ";" " " shown "${cmd}")
    message(STATUS "polyquant: fetching ONNX Runtime headers: ${shown} download ${POLYQUANT_ORT_HEADERS_DIST}")
    execute_process(COMMAND ${cmd} ${args}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
    if(rc EQUAL 0 AND EXISTS "${dest}/${POLYQUANT_ORT_HEADERS_WHEEL_NAME}")
      set(${out} "${dest}/${POLYQUANT_ORT_HEADERS_WHEEL_NAME}" PARENT_SCOPE)
      return()
    endif()
    string(STRIP "${stderr}" stderr)
    string(APPEND all_output "\n  `${shown} download ...` exited with ${rc}: ${stderr}")
  endforeach()
  if(NOT attempts)
    set(all_output "\n  neither a Python interpreter nor pip/pip3 was found")
  endif()
  set(${out} "" PARENT_SCOPE)
  set(${log} "${all_output}" PARENT_SCOPE)
endfunction()

# Extracts the four session headers of `wheel` into `dest` (and nothing else).
function(_polyquant_ort_extract wheel dest)
  set(tmp "${dest}.partial")
  file(REMOVE_RECURSE "${tmp}")
  file(MAKE_DIRECTORY "${tmp}")
  find_package(Python COMPONENTS Interpreter QUIET)
  if(Python_Interpreter_FOUND)
    set(script "${CMAKE_BINARY_DIR}/_ort_headers/extract.py")
    file(WRITE "${script}" [=[
import os, sys, zipfile
wheel, prefix, dest = sys.argv[1], sys.argv[2], sys.argv[3]
with zipfile.ZipFile(wheel) as z:
    for name in sys.argv[4:]:
        with open(os.path.join(dest, name), "wb") as f:
            f.write(z.read(prefix + name))
]=])
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -I "${script}" "${wheel}" "${POLYQUANT_ORT_HEADERS_PREFIX}" "${tmp}"
              ${POLYQUANT_ORT_HEADER_FILES}
      RESULT_VARIABLE rc ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "polyquant: extracting the ONNX Runtime headers from ${wheel} failed: ${err}")
    endif()
  else()
    set(patterns "")
    foreach(h IN LISTS POLYQUANT_ORT_HEADER_FILES)
      list(APPEND patterns "${POLYQUANT_ORT_HEADERS_PREFIX}${h}")
    endforeach()
    file(ARCHIVE_EXTRACT INPUT "${wheel}" DESTINATION "${tmp}/tree" PATTERNS ${patterns})
    foreach(h IN LISTS POLYQUANT_ORT_HEADER_FILES)
      file(RENAME "${tmp}/tree/${POLYQUANT_ORT_HEADERS_PREFIX}${h}" "${tmp}/${h}")
    endforeach()
    file(REMOVE_RECURSE "${tmp}/tree")
  endif()
  _polyquant_ort_headers_complete("${tmp}" ok)
  if(NOT ok)
    message(FATAL_ERROR "polyquant: ${wheel} lacks some of ${_pq_ort_header_names}")
  endif()
  file(REMOVE_RECURSE "${dest}")
  file(RENAME "${tmp}" "${dest}")
endfunction()

if(POLYQUANT_ORT_INCLUDE_DIR)
  _polyquant_ort_headers_complete("${POLYQUANT_ORT_INCLUDE_DIR}" _pq_ort_ok)
  if(NOT _pq_ort_ok)
    message(FATAL_ERROR
      "polyquant: POLYQUANT_ORT_INCLUDE_DIR=${POLYQUANT_ORT_INCLUDE_DIR} must hold "
      "${_pq_ort_header_names} (ONNX Runtime >= 1.17)")
  endif()
  set(_pq_ort_include "${POLYQUANT_ORT_INCLUDE_DIR}")
else()
  set(_pq_ort_root "${CMAKE_BINARY_DIR}/_ort_headers")
  set(_pq_ort_include "${_pq_ort_root}/include")
  _polyquant_ort_headers_complete("${_pq_ort_include}" _pq_ort_ok)
  if(NOT _pq_ort_ok)
    if(POLYQUANT_ORT_HEADERS_WHEEL)
      if(NOT EXISTS "${POLYQUANT_ORT_HEADERS_WHEEL}")
        message(FATAL_ERROR "polyquant: POLYQUANT_ORT_HEADERS_WHEEL=${POLYQUANT_ORT_HEADERS_WHEEL} does not exist")
      endif()
      set(_pq_ort_wheel "${POLYQUANT_ORT_HEADERS_WHEEL}")
    elseif(EXISTS "${_pq_ort_root}/wheel/${POLYQUANT_ORT_HEADERS_WHEEL_NAME}")
      set(_pq_ort_wheel "${_pq_ort_root}/wheel/${POLYQUANT_ORT_HEADERS_WHEEL_NAME}")
    else()
      _polyquant_ort_download("${_pq_ort_root}/wheel" _pq_ort_wheel _pq_ort_log)
      if(NOT _pq_ort_wheel)
        message(FATAL_ERROR
          "polyquant: could not fetch the ONNX Runtime C/C++ API headers (needed by POLYQUANT_BUILD_ORT). "
          "They are taken from the ${POLYQUANT_ORT_HEADERS_DIST} wheel, downloaded with pip:"
          "${_pq_ort_log}\n"
          "Fix one of: make pip and the package index reachable; download the wheel yourself "
          "(`pip download --no-deps ${POLYQUANT_ORT_HEADERS_DIST} -d DIR`) and pass "
          "-DPOLYQUANT_ORT_HEADERS_WHEEL=DIR/${POLYQUANT_ORT_HEADERS_WHEEL_NAME}; or pass "
          "-DPOLYQUANT_ORT_INCLUDE_DIR=<dir with ${_pq_ort_header_names}> (ONNX Runtime >= 1.17). "
          "Both also work as environment variables; or configure with -DPOLYQUANT_BUILD_ORT=OFF.")
      endif()
    endif()
    _polyquant_ort_check_wheel("${_pq_ort_wheel}")
    _polyquant_ort_extract("${_pq_ort_wheel}" "${_pq_ort_include}")
    message(STATUS "polyquant: ONNX Runtime 1.17.0 headers extracted to ${_pq_ort_include}")
  endif()
endif()

if(NOT TARGET polyquant_ort_headers)
  add_library(polyquant_ort_headers INTERFACE)
  # SYSTEM: the vendored headers are not held to the project's warning flags.
  target_include_directories(polyquant_ort_headers SYSTEM INTERFACE "${_pq_ort_include}")
endif()
message(STATUS "polyquant: ONNX Runtime headers: ${_pq_ort_include}")
