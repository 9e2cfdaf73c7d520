/* Whole-file reads for small files (configs, index JSON) and paths. */
#ifndef RG_CORE_FILE_H
#define RG_CORE_FILE_H
#include <stddef.h>
#include <sys/types.h>
#include "ragged.h"

/* Read the regular file `path` into *buf (malloc'd, NUL-terminated, caller frees) of *len bytes.
 * Errors (message names the path): RG_ERR_IO when missing, not a regular file or unreadable;
 * RG_ERR_FORMAT when larger than limit bytes; RG_ERR_OOM. On error *buf is NULL. */
rg_status rg_file_read(const char *path, off_t limit, char **buf, size_t *len);

/* "<dir>/<name>", malloc'd (caller frees); NULL when out of memory. */
char *rg_path_join(const char *dir, const char *name);
#endif
