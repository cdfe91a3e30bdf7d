# CTest install.consumer: installs the build tree into a fresh prefix, then builds tests/consumer
# against that prefix twice (a fresh CMake project using find_package(FlashAttn), and a plain
# compiler call with pkg-config's flashattn.pc flags) and runs both programs, plus the installed
# fa-info. Fails on the first step that goes wrong, naming it.
# cmake -DBUILD_DIR=<build tree> -DWORK=<scratch dir> -DSRC=<tests/consumer> -DCC=<C compiler>
#       -DGENERATOR=<generator> [-DCONFIG=<config>] -P run_consumer.cmake
foreach(v BUILD_DIR WORK SRC CC GENERATOR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_consumer.cmake: -D${v}=... missing")
  endif()
endforeach()
unset(ENV{FA_PLUGIN_PATH}) # the installed library must find its plugins by itself
unset(ENV{CMAKE_PREFIX_PATH})

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "FAIL (${what}): exit ${rc}\n${out}\n${err}")
  endif()
  message(STATUS "ok: ${what}")
  set(step_out "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK}/prefix)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(config_args "")
if(CONFIG)
  set(config_args --config ${CONFIG})
endif()
step("cmake --install into ${prefix}" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix}
     ${config_args})

# Where GNUInstallDirs put things (lib or lib64 or lib/<multiarch>): from the installed package.
file(GLOB_RECURSE config_file ${prefix}/*/FlashAttnConfig.cmake)
file(GLOB_RECURSE pc_file ${prefix}/*/flashattn.pc)
file(GLOB_RECURSE plugin ${prefix}/*/flashattn/plugins/libfa_cpu.so)
file(GLOB headers ${prefix}/include/flashattn/*.h)
list(LENGTH headers nheaders)
if(NOT config_file OR NOT pc_file OR NOT plugin OR NOT nheaders EQUAL 2
   OR NOT EXISTS ${prefix}/bin/fa-info)
  message(FATAL_ERROR "FAIL (install layout): FlashAttnConfig.cmake '${config_file}', "
    "flashattn.pc '${pc_file}', <libdir>/flashattn/plugins/libfa_cpu.so '${plugin}', "
    "include/flashattn/*.h '${headers}', bin/fa-info")
endif()
get_filename_component(plugin_dir ${plugin} DIRECTORY)
get_filename_component(libdir ${plugin_dir} DIRECTORY)
get_filename_component(libdir ${libdir} DIRECTORY)
file(GLOB soname_link ${libdir}/libflashattn.so.[0-9]*)
list(LENGTH soname_link nlinks)
if(NOT nlinks EQUAL 2)
  message(FATAL_ERROR "FAIL (install layout): expected libflashattn.so.<major> and "
    "libflashattn.so.<major>.<minor>.<patch> in ${libdir}, found '${soname_link}'")
endif()

# The installed fa-info (RUNPATH $ORIGIN/../<libdir>) must find the library and the CPU plugin.
step("installed fa-info" ${prefix}/bin/fa-info)
if(NOT step_out MATCHES "cpu: available")
  message(FATAL_ERROR "FAIL (installed fa-info): the cpu backend is not available:\n${step_out}")
endif()

# 1. find_package(FlashAttn) in a fresh CMake project.
step("configure the consumer (find_package)" ${CMAKE_COMMAND} -S ${SRC} -B ${WORK}/build
     -G ${GENERATOR} -DCMAKE_C_COMPILER=${CC} -DCMAKE_PREFIX_PATH=${prefix}
     -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(NOT step_out MATCHES "FlashAttn [0-9.]+ from ${prefix}/")
  message(FATAL_ERROR "FAIL (find_package): FlashAttn not found in ${prefix}:\n${step_out}")
endif()
step("build the consumer (find_package)" ${CMAKE_COMMAND} --build ${WORK}/build)
file(GLOB_RECURSE exe ${WORK}/build/consumer ${WORK}/build/*/consumer)
step("run the consumer (find_package)" ${exe} ${plugin_dir})
message("${step_out}")

# 2. pkg-config: the flags of flashattn.pc, the library found at run time through its libdir.
get_filename_component(pc_dir ${pc_file} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "FAIL (pkg-config): pkg-config not found (apt-get install pkg-config)")
endif()
step("pkg-config --cflags --libs flashattn" ${PKG_CONFIG} --cflags --libs flashattn)
string(STRIP "${step_out}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
step("pkg-config --variable=libdir flashattn" ${PKG_CONFIG} --variable=libdir flashattn)
string(STRIP "${step_out}" pc_libdir)
get_filename_component(pc_libdir ${pc_libdir} REALPATH)
get_filename_component(real_libdir ${libdir} REALPATH)
if(NOT pc_libdir STREQUAL real_libdir)
  message(FATAL_ERROR "FAIL (pkg-config): libdir ${pc_libdir} is not the installed ${real_libdir}")
endif()
step("compile the consumer (pkg-config)" ${CC} -std=c11 -o ${WORK}/consumer_pc ${SRC}/consumer.c
     ${flags} -lm -Wl,-rpath,${pc_libdir})
step("run the consumer (pkg-config)" ${WORK}/consumer_pc ${plugin_dir})
message("${step_out}")
message(STATUS "PASS: installed tree usable through find_package and pkg-config")
