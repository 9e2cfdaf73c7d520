/* Names of the public enums (include/ragged.h): one table each, used by the CLI, the server and
 * the library's own messages. */
#include <string.h>

#include "core/error.h"
#include "ragged.h"

const char *rg_device_name(rg_device d)
{
	switch (d) {
	case RG_DEVICE_CPU: return "cpu";
	case RG_DEVICE_CUDA: return "cuda";
	}
	return "?";
}

const char *rg_dtype_name(rg_dtype d)
{
	switch (d) {
	case RG_DTYPE_F32: return "fp32";
	case RG_DTYPE_F16: return "fp16";
	case RG_DTYPE_BF16: return "bf16";
	case RG_DTYPE_AUTO: return "auto";
	}
	return "?";
}

const char *rg_pooling_name(rg_pooling p)
{
	switch (p) {
	case RG_POOL_MEAN: return "mean";
	case RG_POOL_CLS: return "cls";
	case RG_POOL_MAX: return "max";
	case RG_POOL_LAST: return "last_token";
	}
	return "?";
}

rg_status rg_device_parse(const char *s, rg_device *out)
{
	static const rg_device all[] = {RG_DEVICE_CPU, RG_DEVICE_CUDA};

	for (size_t i = 0; s && i < sizeof(all) / sizeof(all[0]); i++)
		if (strcmp(s, rg_device_name(all[i])) == 0) {
			*out = all[i];
			return RG_OK;
		}
	return rg_errorf(RG_ERR_INVALID_INPUT, "device '%s': expected cpu or cuda", s ? s : "(null)");
}

rg_status rg_dtype_parse(const char *s, rg_dtype *out)
{
	static const rg_dtype all[] = {RG_DTYPE_F32, RG_DTYPE_F16, RG_DTYPE_BF16, RG_DTYPE_AUTO};

	for (size_t i = 0; s && i < sizeof(all) / sizeof(all[0]); i++)
		if (strcmp(s, rg_dtype_name(all[i])) == 0) {
			*out = all[i];
			return RG_OK;
		}
	return rg_errorf(RG_ERR_INVALID_INPUT, "dtype '%s': expected fp32, fp16, bf16 or auto",
			 s ? s : "(null)");
}
