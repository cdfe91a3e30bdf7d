# cmake -DBUNDLER=<clang-offload-bundler> -DOUT=<bundle> -DWORK=<folder>
#       "-DPARTS=<bundle>=<arch>,<arch>|<bundle>=<arch>" -P hip_bundle_merge.cmake
# One offload bundle from the code objects of several hipcc --genco bundles (the CDNA one with
# ROCm's device library, the RDNA one built with -nogpulib), so the plugin embeds one bundle and
# hipModuleLoadData picks the device's code object from it. The host entry (empty under --genco)
# comes from the first part.
file(MAKE_DIRECTORY "${WORK}")
set(targets "")
set(inputs "")
set(first 1)
string(REPLACE "|" ";" parts "${PARTS}")
foreach(part ${parts})
  string(REGEX MATCH "^([^=]+)=(.+)$" ok "${part}")
  if(NOT ok)
    message(FATAL_ERROR "hip_bundle_merge: bad part '${part}'")
  endif()
  set(bundle "${CMAKE_MATCH_1}")
  string(REPLACE "," ";" archs "${CMAKE_MATCH_2}")
  if(first)
    set(host "${WORK}/host.o")
    execute_process(COMMAND "${BUNDLER}" --unbundle --type=o "--input=${bundle}"
      --targets=host-x86_64-unknown-linux "--output=${host}" RESULT_VARIABLE rc ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "hip_bundle_merge: host entry of ${bundle}: ${err}")
    endif()
    list(APPEND targets host-x86_64-unknown-linux)
    list(APPEND inputs "--input=${host}")
    set(first 0)
  endif()
  foreach(arch ${archs})
    set(co "${WORK}/${arch}.co")
    execute_process(COMMAND "${BUNDLER}" --unbundle --type=o "--input=${bundle}"
      "--targets=hipv4-amdgcn-amd-amdhsa--${arch}" "--output=${co}" RESULT_VARIABLE rc
      ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "hip_bundle_merge: ${arch} from ${bundle}: ${err}")
    endif()
    list(APPEND targets "hipv4-amdgcn-amd-amdhsa--${arch}")
    list(APPEND inputs "--input=${co}")
  endforeach()
endforeach()
string(REPLACE ";" "," targets "${targets}")
execute_process(COMMAND "${BUNDLER}" --type=o "--targets=${targets}" ${inputs} "--output=${OUT}"
  RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "hip_bundle_merge: bundling ${targets}: ${err}")
endif()
