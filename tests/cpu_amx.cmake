# The CPU backend's AMX-BF16 path (backends/cpu/cpu_amx*.c). Included by tests/CMakeLists.txt.
#
# cpu.amx_detect: the detection's decision for made-up CPUID/XCR0 facts and a refused or granted
# permission request (every branch), and on this machine FA_CPU_ISA=amx refused with the reason
# where AMX cannot run (the reason checked against this CPU's CPUID).
add_executable(cpu_amx_detect cpu_amx_detect.c ${PROJECT_SOURCE_DIR}/backends/cpu/cpu_amx_detect.c)
target_include_directories(cpu_amx_detect PRIVATE ${PROJECT_SOURCE_DIR}/backends/cpu)
target_link_libraries(cpu_amx_detect PRIVATE fa_testutil flashattn m)
target_compile_options(cpu_amx_detect PRIVATE ${FA_WARNINGS})
add_test(NAME cpu.amx_detect COMMAND cpu_amx_detect)
set_tests_properties(cpu.amx_detect PROPERTIES LABELS "cpu" ENVIRONMENT FA_CPU_ISA=amx)

# cpu.amx_gemm: cpu_amx.c's tile product on tests/cpu_amx_emu.h (plain C, so on any machine):
# the model on a worked example of the pair layout, then every edge class of the blocking against
# a float64 product.
add_executable(cpu_amx_gemm cpu_amx_gemm.c ${PROJECT_SOURCE_DIR}/backends/cpu/cpu_amx.c)
target_compile_definitions(cpu_amx_gemm PRIVATE CPU_AMX_EMULATE)
target_include_directories(cpu_amx_gemm PRIVATE ${PROJECT_SOURCE_DIR}/backends/cpu
                           ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(cpu_amx_gemm PRIVATE fa_testutil flashattn m)
target_compile_options(cpu_amx_gemm PRIVATE ${FA_WARNINGS})
add_test(NAME cpu.amx_gemm COMMAND cpu_amx_gemm)
set_tests_properties(cpu.amx_gemm PROPERTIES LABELS "cpu")

# Where the plugin has the AMX build: a second libfa_cpu.so, in lib/amx-emulated/, whose cpu_amx.c
# runs on tests/cpu_amx_emu.h (a C model of the tile instructions; never installed), and the bf16
# forward and backward through it with FA_CPU_ISA=amx against a float64 reference
# (test_cpu_bf16dp --isa amx, test_cpu_amx_bwd).
if(TARGET fa_cpu)
  get_target_property(fa_cpu_defs fa_cpu COMPILE_DEFINITIONS)
  if("FA_CPU_HAVE_AMX" IN_LIST fa_cpu_defs)
    get_target_property(fa_cpu_dir fa_cpu SOURCE_DIR)
    get_target_property(fa_cpu_sources fa_cpu SOURCES)
    set(fa_cpu_emulated_sources)
    foreach(src IN LISTS fa_cpu_sources)
      if(src STREQUAL "cpu_amx.c")
        continue() # the real instructions: replaced by the emulated object below
      elseif(src MATCHES "^\\$<")
        list(APPEND fa_cpu_emulated_sources ${src}) # the kernel builds' objects, shared
      else()
        list(APPEND fa_cpu_emulated_sources ${fa_cpu_dir}/${src})
      endif()
    endforeach()
    add_library(fa_cpu_amx_emu_kernel OBJECT ${fa_cpu_dir}/cpu_amx.c)
    target_compile_definitions(fa_cpu_amx_emu_kernel PRIVATE CPU_AMX_EMULATE)
    target_include_directories(fa_cpu_amx_emu_kernel PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
    target_compile_options(fa_cpu_amx_emu_kernel PRIVATE ${FA_WARNINGS} -fPIC)
    target_link_libraries(fa_cpu_amx_emu_kernel PRIVATE flashattn)
    add_library(fa_cpu_amx_emulated MODULE ${fa_cpu_emulated_sources}
                $<TARGET_OBJECTS:fa_cpu_amx_emu_kernel>)
    set_target_properties(fa_cpu_amx_emulated PROPERTIES OUTPUT_NAME fa_cpu PREFIX lib
                          LIBRARY_OUTPUT_DIRECTORY ${CMAKE_LIBRARY_OUTPUT_DIRECTORY}/amx-emulated)
    target_compile_definitions(fa_cpu_amx_emulated PRIVATE ${fa_cpu_defs} FA_CPU_AMX_EMULATED)
    target_include_directories(fa_cpu_amx_emulated PRIVATE ${fa_cpu_dir})
    target_link_libraries(fa_cpu_amx_emulated PRIVATE flashattn OpenMP::OpenMP_C Threads::Threads m)
    target_compile_options(fa_cpu_amx_emulated PRIVATE ${FA_WARNINGS})
    set(fa_amx_emulated_env
        "FA_CPU_ISA=amx;FA_PLUGIN_PATH=${CMAKE_LIBRARY_OUTPUT_DIRECTORY}/amx-emulated")
    add_dependencies(test_cpu_bf16dp fa_cpu_amx_emulated)
    add_test(NAME cpu.amx_emulated COMMAND test_cpu_bf16dp --isa amx)
    set_tests_properties(cpu.amx_emulated PROPERTIES LABELS "cpu" SKIP_RETURN_CODE 77
      ENVIRONMENT "${fa_amx_emulated_env}")
    # cpu.amx_bwd_emulated: the bf16 backward's five products on the tiles (forward then backward,
    # every output against a float64 reference by the conformance rule, the run reports checked).
    fa_test(test_cpu_amx_bwd)
    add_dependencies(test_cpu_amx_bwd fa_cpu_amx_emulated)
    add_test(NAME cpu.amx_bwd_emulated COMMAND test_cpu_amx_bwd)
    set_tests_properties(cpu.amx_bwd_emulated PROPERTIES LABELS "cpu" SKIP_RETURN_CODE 77
      ENVIRONMENT "${fa_amx_emulated_env}")
    # The whole conformance suite with FA_CPU_ISA=amx on the emulated plugin: bf16 fa_forward and
    # fa_backward with even head dims run (and are named) amx, everything else avx512. 2-3.5
    # minutes on the shared 2-core development machine; release_only: under ASan+UBSan it took 27
    # minutes there (598/0), and cpu.amx_bwd_emulated runs the same code under the sanitizers.
    add_test(NAME conformance.cpu.amx_emulated
      COMMAND conformance --backend cpu --require ${FA_REQUIRE_cpu})
    set_tests_properties(conformance.cpu.amx_emulated PROPERTIES
      LABELS "conformance;cpu;release_only" SKIP_RETURN_CODE 77
      ENVIRONMENT "${fa_amx_emulated_env}")
    # The quick subset again with a packed K/V budget of 256 KiB: the bf16 forward's KV heads run
    # in chunks of what fits (cpu_kv_share.h), one head a chunk at the larger head dims.
    add_test(NAME conformance.cpu.amx_emulated.chunks
      COMMAND conformance --backend cpu --quick --require ${FA_REQUIRE_cpu})
    set_tests_properties(conformance.cpu.amx_emulated.chunks PROPERTIES
      LABELS "conformance;cpu" SKIP_RETURN_CODE 77
      ENVIRONMENT "${fa_amx_emulated_env};FA_CPU_KV_SHARE_BUDGET=262144")
  endif()
endif()
