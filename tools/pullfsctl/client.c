/* Talking to a running pullfs: its status document under the mount, and
 * its control socket, one line of JSON each way. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include "fileio.h"
#include "pullfsctl.h"

const char *arg_mount;
const char *arg_socket;

const char *mount_dir(void)
{
	return arg_mount;
}

static int read_file_capped(const char *path, size_t cap, char **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return negative_errno();
	return read_full(fd, cap, ret, ret_len);
}

/* Explains, once, why the mount cannot be talked to. */
void explain_mount_error(const char *what, int r)
{
	struct statfs sf;
	const char *m = mount_dir();

	if (statfs(m, &sf) < 0) {
		err_msg("cannot reach \"%s\": %s (is pullfs mounted there? use -m MOUNT or PULLFS_MOUNT)",
			m, strerror(errno));
		return;
	}
	if ((uint32_t)sf.f_type != FUSE_SUPER_MAGIC) {
		err_msg("no pullfs is mounted at \"%s\" (use -m MOUNT or PULLFS_MOUNT)", m);
		return;
	}
	err_msg("cannot read %s: %s", what, strerror(-r));
}

int status_load(json_t **ret)
{
	_cleanup_free_ char *path = NULL, *buf = NULL;
	json_error_t jerr;
	json_t *j;
	int r;

	if (asprintf(&path, "%s/.pullfs/status", mount_dir()) < 0)
		return -ENOMEM;
	r = read_file_capped(path, STATUS_MAX, &buf, NULL);
	if (r < 0) {
		explain_mount_error(path, r);
		return r;
	}
	j = json_loads(buf, 0, &jerr);
	if (!json_is_object(j)) {
		json_decref(j);
		err_msg("%s is not a JSON object: %s", path, jerr.text);
		return -EBADMSG;
	}
	*ret = j;
	return 0;
}

int control_call(json_t *req, json_t **ret)
{
	_cleanup_json_ json_t *st = NULL;
	_cleanup_free_ char *line = NULL, *answer = NULL;
	_cleanup_close_ int fd = -1;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = arg_socket;
	size_t len = 0, size = 0;
	json_error_t jerr;
	json_t *j;
	int r;

	if (!path) {
		r = status_load(&st);
		if (r < 0)
			return r;
		path = jstr(st, "control_socket");
		if (!path) {
			err_msg("the status of \"%s\" names no control socket", mount_dir());
			return -EPROTO;
		}
	}
	if (strlen(path) >= sizeof(sa.sun_path)) {
		err_msg("control socket path \"%s\" is too long", path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return negative_errno();
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = negative_errno();
		if (r == -EACCES)
			err_msg("control socket \"%s\": permission denied (it is for root)", path);
		else
			err_msg("cannot connect to the control socket \"%s\": %s", path,
				strerror(-r));
		return r;
	}
	line = json_dumps(req, JSON_COMPACT);
	if (!line)
		return -ENOMEM;
	r = write_full(fd, line, strlen(line));
	if (r >= 0)
		r = write_full(fd, "\n", 1);
	if (r < 0) {
		err_msg("cannot send to the control socket \"%s\": %s", path, strerror(-r));
		return r;
	}
	shutdown(fd, SHUT_WR);
	for (;;) {
		ssize_t n;
		if (len + 1 >= size) {
			char *nb;
			if (size >= STATUS_MAX) {
				err_msg("answer of the control socket is too large");
				return -EFBIG;
			}
			size = size ? size * 2 : 65536;
			nb = realloc(answer, size);
			if (!nb)
				return -ENOMEM;
			answer = nb;
		}
		n = read(fd, answer + len, size - len - 1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = negative_errno();
			err_msg("cannot read from the control socket \"%s\": %s", path,
				strerror(-r));
			return r;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	answer[len] = '\0';
	j = json_loads(answer, JSON_DISABLE_EOF_CHECK, &jerr);
	if (!json_is_object(j)) {
		json_decref(j);
		err_msg("the control socket answered something that is not a JSON object: %s",
			len ? jerr.text : "nothing");
		return -EBADMSG;
	}
	*ret = j;
	return 0;
}

int control_failure(const char *cmd, const json_t *a)
{
	const char *en = jstr(a, "errno"), *msg = jstr(a, "error");

	if (en && !strcmp(en, "EBUSY"))
		err_msg("%s: refused: %s", cmd, msg ? msg : "an image is in use");
	else
		err_msg("%s: %s%s%s", cmd, en ? en : "EIO", msg ? ": " : "", msg ? msg : "");
	if (en && !strcmp(en, "EBUSY"))
		return -EBUSY;
	return -EIO;
}

int canonical_reference(const char *s, bool default_tag, char **ret)
{
	_cleanup_reference_ struct reference *r = NULL;
	char *c;
	int k;

	k = reference_parse(s, default_tag ? REFERENCE_DEFAULT_TAG : 0, &r);
	if (k < 0)
		return k;
	c = reference_to_string(r);
	if (!c)
		return -ENOMEM;
	*ret = c;
	return 0;
}

/* Status might not be readable (a daemon without the control view, or
 * one that is busy): progress is then only "running" and the result. */
json_t *status_try(void)
{
	_cleanup_free_ char *path = NULL, *buf = NULL;

	if (asprintf(&path, "%s/.pullfs/status", mount_dir()) < 0)
		return NULL;
	if (read_file_capped(path, STATUS_MAX, &buf, NULL) < 0)
		return NULL;
	return json_loads(buf, 0, NULL);
}

const json_t *status_entry(const json_t *status, const char *array, const char *reference)
{
	json_t *entries = json_object_get(status, array), *e;
	size_t i;

	json_array_foreach(entries, i, e)
	{
		const char *r = jstr(e, "reference");
		if (r && !strcmp(r, reference))
			return e;
	}
	return NULL;
}
