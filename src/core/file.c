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

rg_status rg_file_read(const char *path, off_t limit, char **buf, size_t *len)
{
	struct stat sb;
	rg_status s = RG_OK;
	size_t got = 0;
	int fd;

	*buf = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return rg_errorf(RG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		s = rg_errorf(RG_ERR_IO, "%s: not a readable regular file", path);
		goto out_close;
	}
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
