/* Internal functions that the Python test-suite and the benchmarks call through ctypes (the
 * tokenizer, the CPU backend's probes, single ops and the backend's graph capture). They are
 * exported by build/libragged_internal.so, which the tests load, and not by the public
 * build/libragged.so, whose version script (generated from include/ragged.h's RG_API
 * declarations) keeps only the public API. Everything else in the library is hidden
 * (-fvisibility=hidden). */
#ifndef RG_CORE_EXPORT_H
#define RG_CORE_EXPORT_H
#if defined(__GNUC__)
#define RG_TEST_API __attribute__((visibility("default")))
#else
#define RG_TEST_API
#endif
#endif
