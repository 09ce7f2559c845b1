// Kernel sets are compiled from the same headers with different instruction-set flags. Inline
// functions in those headers live in an inline namespace named after the set, so the linker can
// never substitute an AVX2-compiled copy into generic code (or the reverse).
#pragma once

#ifndef POLYQUANT_TARGET_NAMESPACE
#define POLYQUANT_TARGET_NAMESPACE generic
#endif
