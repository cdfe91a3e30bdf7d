# `cmake --install`: the core library (SONAME libflashattn.so.<major>), the public headers, the
# plugins, fa-info and fa-bench, a CMake package (find_package(FlashAttn) -> FlashAttn::flashattn)
# and a pkg-config file (flashattn.pc). Layout under the prefix (GNUInstallDirs):
#   <libdir>/libflashattn.so.<major>.<minor>.<patch> (+ .so.<major>, .so links)
#   <libdir>/flashattn/plugins/libfa_<backend>.so    found by core/registry.c from the library's
#                                                    own directory (FA_PLUGIN_SUBDIR, dladdr)
#   <includedir>/flashattn/flash_attn.h, flash_attn_dlpack.h  (consumers get -I<includedir>/flashattn
#                                                    and write #include <flash_attn.h>)
#   <bindir>/fa-info, fa-bench
#   <libdir>/cmake/FlashAttn/FlashAttnConfig.cmake, ...ConfigVersion.cmake, FlashAttnTargets.cmake
#   <libdir>/pkgconfig/flashattn.pc
#   <FA_INSTALL_PYTHONDIR>/flashattn/*.py           the Python package (component python), with
#                                                    _libpath.txt: where the library is from there
# Everything is relocatable: `cmake --install build --prefix /any/where` works without
# reconfiguring (the package files, the Python package's _libpath.txt and the programs' RUNPATH are
# relative).
#
# Under scikit-build-core (pyproject.toml: `pip install .`, SKBUILD set) the prefix is the Python
# package's own directory: the package's files at its top, the library in lib/ as one file named by
# its SONAME (a wheel keeps no symbolic links), the plugins in lib/flashattn/plugins/.
# Included from the top-level CMakeLists.txt after every target is defined; GNUInstallDirs and
# FA_PLUGIN_SUBDIR come from there (before core/, whose build_config.h carries the subdir).
include(CMakePackageConfigHelpers)

set(FA_INSTALL_PLUGINDIR ${CMAKE_INSTALL_LIBDIR}/${FA_PLUGIN_SUBDIR})
set(FA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/FlashAttn)

# Relative RUNPATHs: programs find the library, plugins find it too (they are dlopen'ed by it, so it
# is loaded already; the RUNPATH is for tools such as ldd).
file(RELATIVE_PATH fa_bin_to_lib /fa/${CMAKE_INSTALL_BINDIR} /fa/${CMAKE_INSTALL_LIBDIR})
file(RELATIVE_PATH fa_plugin_to_lib /fa/${FA_INSTALL_PLUGINDIR} /fa/${CMAKE_INSTALL_LIBDIR})
string(REGEX REPLACE "/$" "" fa_plugin_to_lib "${fa_plugin_to_lib}")

if(SKBUILD)
  # One file, libflashattn.so.<major>, instead of the versioned file and its SONAME link.
  set_target_properties(flashattn PROPERTIES VERSION ${PROJECT_VERSION_MAJOR})
endif()
install(TARGETS flashattn EXPORT FlashAttnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flashattn)
install(FILES ${PROJECT_SOURCE_DIR}/api/flash_attn.h ${PROJECT_SOURCE_DIR}/api/flash_attn_dlpack.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flashattn COMPONENT dev)

# The backends' plugins and the ring's transport plugins (cmake/transports.cmake), side by side.
foreach(b ${FA_BACKENDS} MPI NCCL)
  string(TOLOWER fa_${b} plugin)
  if(TARGET ${plugin})
    set_target_properties(${plugin} PROPERTIES INSTALL_RPATH "$ORIGIN/${fa_plugin_to_lib}")
    if(b STREQUAL "NCCL") # the NCCL it was configured with, loaded at run time (nccl_lib.h)
      set_property(TARGET ${plugin} APPEND PROPERTY INSTALL_RPATH "${FA_NCCL_LIBDIR}")
    endif()
    install(TARGETS ${plugin} LIBRARY DESTINATION ${FA_INSTALL_PLUGINDIR} COMPONENT runtime)
  endif()
endforeach()
foreach(tool fa-info fa-bench)
  if(TARGET ${tool})
    set_target_properties(${tool} PROPERTIES INSTALL_RPATH "$ORIGIN/${fa_bin_to_lib}")
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
  endif()
endforeach()

install(EXPORT FlashAttnTargets NAMESPACE FlashAttn:: DESTINATION ${FA_INSTALL_CMAKEDIR}
  COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/FlashAttnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/FlashAttnConfig.cmake INSTALL_DESTINATION ${FA_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR FA_INSTALL_PLUGINDIR)
# 0.x: every minor version may break the ABI (the SONAME is libflashattn.so.0 for all of 0.x, so
# the package refuses a different minor); from 1.0 on, the same major is compatible.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(fa_compat SameMinorVersion)
else()
  set(fa_compat SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/FlashAttnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${fa_compat})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/FlashAttnConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/FlashAttnConfigVersion.cmake
  DESTINATION ${FA_INSTALL_CMAKEDIR} COMPONENT dev)

# pkg-config: paths relative to the .pc file's own directory (${pcfiledir}) so the file stays right
# wherever the tree is installed; an absolute CMAKE_INSTALL_LIBDIR/INCLUDEDIR is written as is.
file(RELATIVE_PATH fa_pc_to_prefix /fa/${CMAKE_INSTALL_LIBDIR}/pkgconfig /fa)
string(REGEX REPLACE "/$" "" fa_pc_to_prefix "${fa_pc_to_prefix}")
set(FA_PC_PREFIX "\${pcfiledir}/${fa_pc_to_prefix}")
foreach(d LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${d}}")
    set(FA_PC_${d} "${CMAKE_INSTALL_${d}}")
  else()
    set(FA_PC_${d} "\${prefix}/${CMAKE_INSTALL_${d}}")
  endif()
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/flashattn.pc.in ${CMAKE_CURRENT_BINARY_DIR}/flashattn.pc
  @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashattn.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# The Python package (python/flashattn, pure Python over ctypes) into FA_INSTALL_PYTHONDIR/flashattn
# (the top-level CMakeLists.txt sets it), or, under scikit-build-core, into the prefix itself.
# _libpath.txt is written at install time with the library's path relative to the package, which
# python/flashattn/_capi.py loads before looking anywhere else.
if(SKBUILD)
  set(fa_py_pkgdir .)
else()
  set(fa_py_pkgdir ${FA_INSTALL_PYTHONDIR}/flashattn)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/flashattn/ DESTINATION ${fa_py_pkgdir}
  COMPONENT python FILES_MATCHING PATTERN "*.py"
  PATTERN "__pycache__" EXCLUDE)
install(CODE "set(FA_PY_PKGDIR \"${fa_py_pkgdir}\")
set(FA_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
set(FA_LIBRARY_NAME \"$<TARGET_SONAME_FILE_NAME:flashattn>\")
include(\"${PROJECT_SOURCE_DIR}/cmake/install_python_libpath.cmake\")" COMPONENT python)
