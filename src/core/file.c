/* Reading small whole files (JSON configs, index files) with bounded size. */
#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

int rg_file_open_regular(const char *path, struct stat *sb)
{
	int fd;

	/* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer (forever);
	 * on a regular file the flag changes nothing, and it is cleared anyway */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		rg_errorf(RG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, sb) != 0) {
		rg_errorf(RG_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(sb->st_mode)) {
		rg_errorf(RG_ERR_IO, "%s: not a regular file (a FIFO, device or directory)", path);
		goto out_close;
	}
	if (fcntl(fd, F_SETFL, 0) != 0) {
		rg_errorf(RG_ERR_IO, "%s: fcntl: %s", path, strerror(errno));
		goto out_close;
	}
	return fd;
out_close:
	close(fd);
	return -1;
}

rg_status rg_file_read(const char *path, off_t limit, char **buf, size_t *len)
{
	struct stat sb;
	rg_status s = RG_OK;
	size_t got = 0;
	int fd;

	*buf = NULL;
	fd = rg_file_open_regular(path, &sb);
	if (fd < 0)
		return RG_ERR_IO;
	if (sb.st_size > limit) {
		s = rg_errorf(RG_ERR_FORMAT, "%s: %lld bytes, over the %lld-byte limit", path,
			      (long long)sb.st_size, (long long)limit);
		goto out_close;
	}
	*buf = malloc((size_t)sb.st_size + 1);
	if (!*buf) {
		s = rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
		goto out_close;
	}
	while (got < (size_t)sb.st_size) {
		ssize_t r = read(fd, *buf + got, (size_t)sb.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			s = rg_errorf(RG_ERR_IO, "%s: read failed: %s", path,
				      r < 0 ? strerror(errno) : "file shrank");
			free(*buf);
			*buf = NULL;
			goto out_close;
		}
		got += (size_t)r;
	}
	(*buf)[got] = '\0';
	*len = got;
out_close:
	close(fd);
	return s;
}

char *rg_path_join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}
