# CTest abi.check: the ABI of libflashattn.so against the record kept in this folder.
#   expected_symbols.txt  the dynamic symbols it exports (nm -D --defined-only)
#   expected_layout.txt   sizes of the public structs and enums, array-length constants, enum
#                         values (tests/abi/abi_sizes.c), and the same for the plugin contract
#                         (core/plugin.h: plugin_* lines, governed by FA_PLUGIN_ABI_VERSION)
# Each file records the library version (and plugin ABI version) it describes. A change of a symbol,
# a size or a constant without a version bump fails, saying what changed and what to do: bump the
# version (project(VERSION) in CMakeLists.txt and FA_VERSION_* in api/flash_attn.h; for plugin_*
# lines FA_PLUGIN_ABI_VERSION in core/plugin.h) AND update the record (MODE=update, which refuses
# to record a changed ABI under an unchanged version).
# cmake -DLIB=<libflashattn.so> -DNM=<nm> -DSIZES=<abi_sizes exe> -DVERSION=<project version>
#       -DRECORD=<tests/abi> [-DMODE=check|update] -P check_abi.cmake
foreach(v LIB NM SIZES VERSION RECORD)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check_abi.cmake: -D${v}=... missing")
  endif()
endforeach()
if(NOT MODE)
  set(MODE check)
endif()

# --- what the build has ---
execute_process(COMMAND ${NM} -D --defined-only ${LIB} RESULT_VARIABLE rc OUTPUT_VARIABLE nm_out
                ERROR_VARIABLE nm_err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "FAIL: ${NM} -D --defined-only ${LIB}: ${nm_err}")
endif()
string(REGEX REPLACE "\n$" "" nm_out "${nm_out}")
string(REPLACE "\n" ";" nm_lines "${nm_out}")
set(symbols "")
foreach(l IN LISTS nm_lines)
  # "<address> <type> <name>"; the version-node entries (type A) are not symbols of the API.
  if(l MATCHES "^[0-9a-fA-F]+ ([A-Za-z]) ([^ ]+)$" AND NOT CMAKE_MATCH_1 STREQUAL "A")
    list(APPEND symbols "${CMAKE_MATCH_2}")
  endif()
endforeach()
list(SORT symbols)
execute_process(COMMAND ${SIZES} RESULT_VARIABLE rc OUTPUT_VARIABLE layout_out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "FAIL: ${SIZES} exited ${rc}")
endif()
string(REGEX REPLACE "\n$" "" layout_out "${layout_out}")
string(REPLACE "\n" ";" layout "${layout_out}")
list(GET layout 0 header_version_line)
list(GET layout 1 plugin_abi_line)
list(REMOVE_AT layout 0 1)
string(REPLACE "version " "" header_version "${header_version_line}")
string(REPLACE "plugin_abi " "" plugin_abi "${plugin_abi_line}")
if(NOT header_version STREQUAL VERSION)
  message(FATAL_ERROR "FAIL: api/flash_attn.h declares version ${header_version} (FA_VERSION_*) but "
    "CMakeLists.txt's project() says ${VERSION}: bump both together")
endif()
set(api_layout "")
set(plugin_layout "")
foreach(l IN LISTS layout)
  if(l MATCHES "^plugin_")
    list(APPEND plugin_layout "${l}")
  else()
    list(APPEND api_layout "${l}")
  endif()
endforeach()

# --- what the record says ---
function(read_record file out_version out_plugin_abi out_lines)
  if(NOT EXISTS ${file})
    set(${out_version} "none" PARENT_SCOPE)
    set(${out_plugin_abi} "none" PARENT_SCOPE)
    set(${out_lines} "" PARENT_SCOPE)
    return()
  endif()
  file(STRINGS ${file} lines)
  set(v "none")
  set(p "none")
  set(body "")
  foreach(l IN LISTS lines)
    if(l MATCHES "^#" OR l STREQUAL "")
      continue()
    elseif(l MATCHES "^version (.*)$")
      set(v "${CMAKE_MATCH_1}")
    elseif(l MATCHES "^plugin_abi (.*)$")
      set(p "${CMAKE_MATCH_1}")
    else()
      list(APPEND body "${l}")
    endif()
  endforeach()
  set(${out_version} "${v}" PARENT_SCOPE)
  set(${out_plugin_abi} "${p}" PARENT_SCOPE)
  set(${out_lines} "${body}" PARENT_SCOPE)
endfunction()
read_record(${RECORD}/expected_symbols.txt sym_version unused exp_symbols)
read_record(${RECORD}/expected_layout.txt lay_version lay_plugin_abi exp_layout)
set(exp_api_layout "")
set(exp_plugin_layout "")
foreach(l IN LISTS exp_layout)
  if(l MATCHES "^plugin_")
    list(APPEND exp_plugin_layout "${l}")
  else()
    list(APPEND exp_api_layout "${l}")
  endif()
endforeach()

# "removed: a, b; added: c" between two lists, or "" when they are equal.
function(list_diff expected actual out)
  set(removed ${expected})
  set(added ${actual})
  if(actual)
    list(REMOVE_ITEM removed ${actual})
  endif()
  if(expected)
    list(REMOVE_ITEM added ${expected})
  endif()
  set(text "")
  if(removed)
    list(JOIN removed ", " r)
    string(APPEND text "\n    recorded, now gone or different: ${r}")
  endif()
  if(added)
    list(JOIN added ", " a)
    string(APPEND text "\n    new or different now: ${a}")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
list_diff("${exp_symbols}" "${symbols}" sym_diff)
list_diff("${exp_api_layout}" "${api_layout}" api_diff)
list_diff("${exp_plugin_layout}" "${plugin_layout}" plugin_diff)

set(how "bump the version (project(VERSION) in CMakeLists.txt together with FA_VERSION_MAJOR/MINOR/\
PATCH in api/flash_attn.h: the major for a removed symbol or a changed size or value, which also \
changes the SONAME libflashattn.so.<major>; before 1.0 the minor) AND update the record: \
cmake --build <build dir> --target abi-update")
set(plugin_how "bump FA_PLUGIN_ABI_VERSION in core/plugin.h (plugins of the old ABI are then \
refused at load with the reason) AND update the record: cmake --build <build dir> --target \
abi-update")

set(problems "")
if(sym_diff OR api_diff)
  if(sym_version STREQUAL VERSION OR lay_version STREQUAL VERSION)
    string(APPEND problems "\n  The public ABI of libflashattn.so changed without a version bump \
(the record is for version ${VERSION}, the build is version ${VERSION}):")
    if(sym_diff)
      string(APPEND problems "\n  exported symbols (nm -D --defined-only ${LIB}):${sym_diff}")
    endif()
    if(api_diff)
      string(APPEND problems "\n  public struct sizes / constants (api/flash_attn.h):${api_diff}")
    endif()
    string(APPEND problems "\n  If the change is intended: ${how}.")
  elseif(MODE STREQUAL "check")
    string(APPEND problems "\n  The ABI changed and the version was bumped (record: ${sym_version}, \
build: ${VERSION}): update the record: cmake --build <build dir> --target abi-update.${sym_diff}\
${api_diff}")
  endif()
elseif(MODE STREQUAL "check" AND (NOT sym_version STREQUAL VERSION OR NOT lay_version STREQUAL VERSION))
  string(APPEND problems "\n  The version changed (record: ${sym_version}, build: ${VERSION}) with \
the same ABI: record it for the new version: cmake --build <build dir> --target abi-update")
endif()
if(plugin_diff)
  if(lay_plugin_abi STREQUAL plugin_abi)
    string(APPEND problems "\n  The plugin contract (core/plugin.h) changed without a plugin ABI \
bump (FA_PLUGIN_ABI_VERSION is still ${plugin_abi}):${plugin_diff}\n  If the change is intended: \
${plugin_how}.")
  elseif(MODE STREQUAL "check")
    string(APPEND problems "\n  The plugin contract changed and FA_PLUGIN_ABI_VERSION was bumped \
(${lay_plugin_abi} -> ${plugin_abi}): update the record: cmake --build <build dir> --target \
abi-update.${plugin_diff}")
  endif()
elseif(MODE STREQUAL "check" AND NOT lay_plugin_abi STREQUAL plugin_abi)
  string(APPEND problems "\n  FA_PLUGIN_ABI_VERSION changed (${lay_plugin_abi} -> ${plugin_abi}) \
with the same layout: record it: cmake --build <build dir> --target abi-update")
endif()

if(problems)
  if(MODE STREQUAL "update")
    message(FATAL_ERROR "abi-update: not recording:${problems}")
  endif()
  message(FATAL_ERROR "FAIL: ABI check against ${RECORD}/expected_*.txt:${problems}")
endif()

if(MODE STREQUAL "update")
  list(JOIN symbols "\n" sym_text)
  file(WRITE ${RECORD}/expected_symbols.txt
"# Dynamic symbols exported by libflashattn.so (nm -D --defined-only), version ${VERSION}.
# Checked by tests/abi/check_abi.cmake (CTest abi.check). Do not edit by hand: bump the version,
# then cmake --build <build dir> --target abi-update.
version ${VERSION}
${sym_text}
")
  list(JOIN api_layout "\n" api_text)
  list(JOIN plugin_layout "\n" plugin_text)
  file(WRITE ${RECORD}/expected_layout.txt
"# Sizes of the public structs and enums, array lengths and enum values (tests/abi/abi_sizes.c) of
# version ${VERSION}, and of the plugin contract (plugin_* lines, core/plugin.h) of plugin
# ABI ${plugin_abi}, on x86_64 Linux (LP64). Checked by tests/abi/check_abi.cmake (CTest abi.check).
# Do not edit by hand: bump the version, then cmake --build <build dir> --target abi-update.
version ${VERSION}
plugin_abi ${plugin_abi}
${api_text}
${plugin_text}
")
  message(STATUS "abi-update: recorded the ABI of version ${VERSION}, plugin ABI ${plugin_abi}")
else()
  list(LENGTH symbols nsym)
  list(LENGTH layout nlay)
  message(STATUS "PASS: ${nsym} exported symbols and ${nlay} layout facts match the record of \
version ${VERSION} (plugin ABI ${plugin_abi})")
endif()
