/* suplink: the serving process's end of the supervisor's socket, against
 * a supervisor played by the test on the other end of a socket pair: the
 * messages sent, the answers to an upgrade (accepted with the binary's
 * path, refused with the supervisor's reason, an answer of neither form),
 * the swap of a log (its descriptor passed, "log ok" or not), and a
 * process without a supervisor. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "suplink.h"

struct pair {
	struct suplink link;
	int sup; /* the supervisor's end */
};

static int setup(void **state)
{
	static struct pair p;
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	suplink_init(&p.link, sv[0]);
	p.sup = sv[1];
	*state = &p;
	return 0;
}

static int teardown(void **state)
{
	struct pair *p = *state;

	close(p->link.fd);
	close(p->sup);
	suplink_done(&p->link);
	return 0;
}

/* The next message the supervisor got, in a static buffer. */
static const char *received(struct pair *p)
{
	static char buf[256];
	ssize_t n = recv(p->sup, buf, sizeof(buf) - 1, MSG_DONTWAIT);

	assert_true(n >= 0);
	buf[n] = '\0';
	return buf;
}

static void answer(struct pair *p, const char *msg)
{
	assert_int_equal(send(p->sup, msg, strlen(msg), 0), (ssize_t)strlen(msg));
}

static void test_tell(void **state)
{
	struct pair *p = *state;

	assert_int_equal(suplink_tell(&p->link, "ready"), 0);
	assert_int_equal(suplink_tell(&p->link, "drained 3"), 0);
	assert_string_equal(received(p), "ready");
	assert_string_equal(received(p), "drained 3");
}

static void test_upgrade(void **state)
{
	struct pair *p = *state;
	char ans[64];

	/* (the answers wait in the socket before the question is asked) */
	answer(p, "ok /usr/bin/pullfs");
	assert_int_equal(suplink_upgrade(&p->link, ans, sizeof(ans)), 0);
	assert_string_equal(ans, "/usr/bin/pullfs");
	assert_string_equal(received(p), "upgrade");

	answer(p, "ok");
	assert_int_equal(suplink_upgrade(&p->link, ans, sizeof(ans)), 0);
	assert_string_equal(ans, "");

	answer(p, "err cache format 99 is not one this pullfs reads");
	assert_int_equal(suplink_upgrade(&p->link, ans, sizeof(ans)), -ENOEXEC);
	assert_string_equal(ans, "cache format 99 is not one this pullfs reads");

	answer(p, "what");
	assert_int_equal(suplink_upgrade(&p->link, ans, sizeof(ans)), -ENOEXEC);
	assert_string_equal(ans, "refused by the supervisor");

	/* the supervisor gone before it answered */
	shutdown(p->sup, SHUT_WR);
	assert_int_equal(suplink_upgrade(&p->link, ans, sizeof(ans)), -ECONNRESET);
}

/* The descriptor that came with the supervisor's next message, or -1. */
static int received_fd(struct pair *p, char *msg, size_t len)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = msg, .iov_len = len - 1 };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	ssize_t n = recvmsg(p->sup, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL;
	int fd = -1;

	assert_true(n > 0);
	msg[n] = '\0';
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

static void test_swap_log(void **state)
{
	struct pair *p = *state;
	struct stat a, b;
	char msg[16];
	int log = memfd_create("test-suplink", MFD_CLOEXEC), got;

	assert_true(log >= 0);
	answer(p, "log ok");
	assert_int_equal(suplink_swap_log(log, &p->link), 0);
	got = received_fd(p, msg, sizeof(msg));
	assert_string_equal(msg, "log");
	/* the very file, not a copy */
	assert_true(got >= 0);
	assert_int_equal(fstat(log, &a), 0);
	assert_int_equal(fstat(got, &b), 0);
	assert_int_equal(a.st_ino, b.st_ino);
	assert_int_equal(a.st_dev, b.st_dev);
	close(got);

	/* the supervisor keeps the old log */
	answer(p, "log err");
	assert_int_equal(suplink_swap_log(log, &p->link), -EIO);
	close(received_fd(p, msg, sizeof(msg)));
	close(log);
}

static void test_unsupervised(void **state)
{
	struct suplink l;
	char ans[16];

	suplink_init(&l, -1);
	assert_int_equal(suplink_tell(&l, "ready"), -ENOTCONN);
	assert_int_equal(suplink_upgrade(&l, ans, sizeof(ans)), -ENOTCONN);
	assert_int_equal(suplink_swap_log(-1, &l), -ENOTCONN);
	suplink_done(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_tell, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upgrade, setup, teardown),
		cmocka_unit_test_setup_teardown(test_swap_log, setup, teardown),
		cmocka_unit_test(test_unsupervised),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
