/* Temporary directories for the cmocka suites: group_setup makes a root with mkdtemp,
 * case_setup gives each test a fresh subdirectory g_dir (so files never leak between cases), and
 * group_teardown removes the whole tree. Define RG_TMP_PREFIX before including; include once. */
#ifndef RG_TEST_TMPDIR_H
#define RG_TEST_TMPDIR_H
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

static char g_root[] = "/tmp/" RG_TMP_PREFIX "_XXXXXX";
static int g_case;
static char g_dir[256];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static int group_setup(void **state)
{
	(void)state;
	return mkdtemp(g_root) ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	return nftw(g_root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static int case_setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof(g_dir), "%s/c%d", g_root, g_case++);
	return mkdir(g_dir, 0700);
}
#endif
