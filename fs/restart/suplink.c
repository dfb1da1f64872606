/* The serving process's end of the supervisor's socket (suplink.h). */
#include "suplink.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

void suplink_init(struct suplink *l, int fd)
{
	l->fd = fd;
	pthread_mutex_init(&l->lock, NULL);
}

void suplink_done(struct suplink *l)
{
	pthread_mutex_destroy(&l->lock);
}

static int send_locked(struct suplink *l, const char *msg)
{
	if (l->fd < 0)
		return -ENOTCONN;
	return send(l->fd, msg, strlen(msg), MSG_NOSIGNAL) < 0 ? -errno : 0;
}

int suplink_tell(struct suplink *l, const char *msg)
{
	int r;

	pthread_mutex_lock(&l->lock);
	r = send_locked(l, msg);
	pthread_mutex_unlock(&l->lock);
	return r;
}

int suplink_upgrade(struct suplink *l, char *answer, size_t len)
{
	char ans[2200];
	ssize_t n = 0;
	int r;

	pthread_mutex_lock(&l->lock);
	r = send_locked(l, "upgrade");
	if (r == 0) {
		do
			n = recv(l->fd, ans, sizeof(ans) - 1, 0);
		while (n < 0 && errno == EINTR);
		r = n < 0 ? -errno : n == 0 ? -ECONNRESET : 0;
	}
	pthread_mutex_unlock(&l->lock);
	if (r < 0)
		return r;
	ans[n] = '\0';
	if (strncmp(ans, "ok", 2) != 0) {
		snprintf(answer, len, "%s",
			 strncmp(ans, "err ", 4) == 0 ? ans + 4 : "refused by the supervisor");
		return -ENOEXEC;
	}
	snprintf(answer, len, "%s", ans[2] == ' ' ? ans + 3 : "");
	return 0;
}

int suplink_swap_log(int fd, void *userdata)
{
	struct suplink *l = userdata;
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { .iov_base = "log", .iov_len = 3 };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	char ans[64];
	ssize_t n = 0;
	int r = 0;

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	pthread_mutex_lock(&l->lock);
	if (l->fd < 0)
		r = -ENOTCONN;
	else if (sendmsg(l->fd, &mh, MSG_NOSIGNAL) < 0)
		r = -errno;
	while (r == 0 && (n = recv(l->fd, ans, sizeof(ans) - 1, 0)) < 0 && errno == EINTR)
		;
	pthread_mutex_unlock(&l->lock);
	if (r < 0)
		return r;
	if (n <= 0)
		return n < 0 ? -errno : -ECONNRESET;
	ans[n] = '\0';
	return !strcmp(ans, "log ok") ? 0 : -EIO;
}
