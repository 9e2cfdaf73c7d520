/* See f32_shortest.h. C++ only because Dragonbox is a C++ template library; compiled without
 * exceptions or RTTI and with no call into the C++ runtime, so the C objects link it as they
 * link any other (no libstdc++ needed). */
#include "core/f32_shortest.h"

#include <dragonbox/dragonbox.h>

void rg_f32_shortest(float v, uint32_t *digits, int *exp10)
{
	/* defaults kept: trailing zeros removed, round-to-nearest-even both ways */
	auto d = jkj::dragonbox::to_decimal(v, jkj::dragonbox::policy::sign::ignore);

	*digits = d.significand;
	*exp10 = d.exponent;
}
