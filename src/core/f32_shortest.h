/* The shortest decimal form of a float32 that reads back as the same float32, by Dragonbox
 * (Junekey Jeon, "Dragonbox: A New Floating-Point Binary-to-Decimal Conversion Algorithm", 2020;
 * Debian's libdragonbox-dev, header-only part), for the JSON writers of core/buf.h. One C++
 * translation unit (f32_shortest.cc) wraps the template; this header is plain C. */
#ifndef RG_CORE_F32_SHORTEST_H
#define RG_CORE_F32_SHORTEST_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* v = digits * 10^exp10 with digits the fewest decimal digits (1 to 9, no trailing zeros) of any
 * decimal that rounds (to nearest, ties to even: strtof's rule) back to v, and among those the
 * closest to v (ties to even digits). v must be finite and nonzero; the sign is ignored. */
void rg_f32_shortest(float v, uint32_t *digits, int *exp10);

#ifdef __cplusplus
}
#endif
#endif
