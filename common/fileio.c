#include "fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macro.h"

int read_full(int fd, size_t max, char **ret, size_t *ret_len)
{
	_cleanup_free_ char *buf = NULL;
	size_t len = 0, cap = 0;
	struct stat st;

	/* A regular file says how big it is: one allocation, one extra
	 * byte to see the end. */
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
	    (uint64_t)st.st_size <= max)
		cap = (size_t)st.st_size + 1;
	for (;;) {
		ssize_t n;

		if (!buf || len + 1 >= cap) {
			size_t ncap = !buf && cap ? cap : cap ? cap * 2 : 65536;
			char *p;

			if (len > max)
				return -EFBIG;
			if (ncap > max + 2)
				ncap = max + 2;
			p = realloc(buf, ncap);
			if (!p)
				return -ENOMEM;
			buf = p;
			cap = ncap;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return negative_errno();
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > max)
			return -EFBIG;
	}
	buf[len] = '\0';
	*ret = TAKE_PTR(buf);
	if (ret_len)
		*ret_len = len;
	return 0;
}

int write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return negative_errno();
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int dir_stream(int dirfd, DIR **ret)
{
	int fd = dup(dirfd);
	DIR *d;

	if (fd < 0)
		return negative_errno();
	d = fdopendir(fd);
	if (!d) {
		int r = negative_errno();
		close(fd);
		return r;
	}
	rewinddir(d);
	*ret = d;
	return 0;
}

int flush_data(int fd)
{
	return fdatasync(fd) < 0 ? negative_errno() : 0;
}

int flush_dir(int dirfd)
{
	return fsync(dirfd) < 0 ? negative_errno() : 0;
}

int flush_fs(int fd)
{
	return syncfs(fd) < 0 ? negative_errno() : 0;
}

int proc_stat(pid_t pid, char *comm, size_t len)
{
	char path[64], buf[512];
	const char *open_paren, *close_paren;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return negative_errno();
	n = read(fd, buf, sizeof(buf) - 1);
	if (n < 0)
		n = negative_errno();
	close(fd);
	if (n <= 0)
		return n < 0 ? (int)n : -EIO;
	buf[n] = '\0';
	/* "PID (COMM) STATE ...": COMM may hold anything but its last ')' */
	open_paren = strchr(buf, '(');
	close_paren = strrchr(buf, ')');
	if (!open_paren || !close_paren || close_paren < open_paren || close_paren[1] != ' ' ||
	    !close_paren[2])
		return -EIO;
	if (comm && len) {
		size_t l = MIN((size_t)(close_paren - open_paren - 1), len - 1);

		memcpy(comm, open_paren + 1, l);
		comm[l] = '\0';
	}
	return (unsigned char)close_paren[2];
}

void empty_dir(int dfd)
{
	DIR *d;
	struct dirent *de;

	if (dir_stream(dfd, &d) < 0)
		return;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dfd, de->d_name, 0) == 0)
			continue;
		if (errno == EISDIR || errno == EPERM) {
			int sub = openat(dfd, de->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0) {
				empty_dir(sub);
				close(sub);
			}
			unlinkat(dfd, de->d_name, AT_REMOVEDIR);
		}
	}
	closedir(d);
}
