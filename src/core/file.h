/* Whole-file reads for small files (configs, index JSON) and paths. */
#ifndef RG_CORE_FILE_H
#define RG_CORE_FILE_H
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "ragged.h"

/* Read the regular file `path` into *buf (malloc'd, NUL-terminated, caller frees) of *len bytes.
 * Errors (message names the path): RG_ERR_IO when missing, not a regular file or unreadable;
 * RG_ERR_FORMAT when larger than limit bytes; RG_ERR_OOM. On error *buf is NULL. */
rg_status rg_file_read(const char *path, off_t limit, char **buf, size_t *len);

/* Open the regular file `path` read-only (O_CLOEXEC) and fill *sb. Never blocks on a FIFO: a path
 * that is not a regular file (FIFO, device, directory, socket) is refused. Returns the descriptor
 * (caller closes), or -1 with RG_ERR_IO set (rg_last_error() names the path). */
int rg_file_open_regular(const char *path, struct stat *sb);

/* "<dir>/<name>", malloc'd (caller frees); NULL when out of memory. */
char *rg_path_join(const char *dir, const char *name);
#endif
