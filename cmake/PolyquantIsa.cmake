# Compile flags of each x86-64 kernel set. They apply only to that set's OBJECT library, so generic
# code never contains instructions the running CPU might lack; dispatch picks a set at run time.
set(POLYQUANT_ISA_FLAGS_avx2 -mavx2 -mf16c -mbmi2)
set(POLYQUANT_ISA_FLAGS_avx512 -mavx512f -mavx512vl -mavx512dq -mavx512bw -mavx2 -mf16c -mbmi2)
set(POLYQUANT_X86 OFF)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
  set(POLYQUANT_X86 ON)
endif()
