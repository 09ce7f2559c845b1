// Symbol visibility: everything not marked POLYQUANT_API stays hidden in the shared library.
#pragma once

#if defined(_WIN32)
#define POLYQUANT_API
#else
#define POLYQUANT_API __attribute__((visibility("default")))
#endif
