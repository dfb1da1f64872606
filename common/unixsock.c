/* Listening Unix sockets at a path (unixsock.h). */
#include "unixsock.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "errname.h"
#include "macro.h"

int unixsock_listen(const char *path, const char *what, bool predecessors, int backlog, int *ret_fd,
		    char *errbuf, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_cleanup_close_ int fd = -1, probe = -1;
	struct stat st;
	mode_t old;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return errbuf_fail(-ENAMETOOLONG, errbuf, errlen,
				   "%s path \"%s\" is longer than %zu bytes", what, path,
				   sizeof(sa.sun_path) - 1);
	strcpy(sa.sun_path, path);
	/* Non-blocking: a connection that goes away between poll(2) and
	 * accept(2) must not leave an acceptor deaf to its stop. */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return negative_errno();

	/* What is there already: a dead daemon's socket goes, anything else
	 * is not ours to remove. */
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return errbuf_fail(-EEXIST, errbuf, errlen,
					   "%s \"%s\" exists and is not a socket", what, path);
		/* Non-blocking: a full backlog (EAGAIN) is someone's too. */
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (!predecessors && probe >= 0 &&
		    (connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EAGAIN))
			return errbuf_fail(-EADDRINUSE, errbuf, errlen,
					   "%s \"%s\" is served by another process", what, path);
		unlink(path);
	}
	old = umask(0177);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0)
		return errbuf_fail(negative_errno(), errbuf, errlen,
				   "cannot bind the %s \"%s\": %s", what, path, strerror(errno));
	if (listen(fd, backlog) < 0) {
		r = negative_errno();
		unlink(path);
		return r;
	}
	*ret_fd = TAKE_FD(fd);
	return 0;
}
