# Run by `cmake --install` (cmake/install.cmake, component python): writes the Python package's
# _libpath.txt, the path of libflashattn from the package's directory, relative where both lie under
# the same prefix (so the tree stays relocatable). In: FA_PY_PKGDIR and FA_LIBDIR (each relative to
# CMAKE_INSTALL_PREFIX or absolute), FA_LIBRARY_NAME (the library's SONAME file name); DESTDIR is
# honoured.
foreach(v FA_PY_PKGDIR FA_LIBDIR)
  if(NOT IS_ABSOLUTE "${${v}}")
    set(${v} "${CMAKE_INSTALL_PREFIX}/${${v}}")
  endif()
  # A relative --prefix is relative to the current directory.
  cmake_path(ABSOLUTE_PATH ${v} NORMALIZE)
  string(REGEX REPLACE "(.)/$" "\\1" ${v} "${${v}}")
endforeach()
file(RELATIVE_PATH fa_rel "${FA_PY_PKGDIR}" "${FA_LIBDIR}/${FA_LIBRARY_NAME}")
set(fa_out "$ENV{DESTDIR}${FA_PY_PKGDIR}/_libpath.txt")
message(STATUS "Installing: ${fa_out}")
file(WRITE "${fa_out}" "${fa_rel}\n")
list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${fa_out}")
