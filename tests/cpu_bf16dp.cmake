# The CPU backend's AVX512-BF16 products, forced through FA_CPU_ISA (test_cpu_bf16dp.c); a skip
# (77, with the reason) on a CPU without AVX512-BF16. Included by tests/CMakeLists.txt.
fa_test(test_cpu_bf16dp)
add_test(NAME cpu.avx512bf16 COMMAND test_cpu_bf16dp)
set_tests_properties(cpu.avx512bf16 PROPERTIES LABELS "cpu" ENVIRONMENT FA_CPU_ISA=avx512bf16
                     SKIP_RETURN_CODE 77)
