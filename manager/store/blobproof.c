/* Proofs that a pull may have a blob; see blobproof.h. */
#include "blobproof.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "digest.h"
#include "fileio.h"
#include "macro.h"

/* Far more than the repositories of one blob on one node. */
#define PROOF_MAX_BYTES (64u << 10)

struct blobproof {
	int dirfd;
};

int blobproof_open(const char *cache_dir, struct blobproof **ret)
{
	_cleanup_close_ int cfd = open(cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct blobproof *b;

	if (cfd < 0)
		return negative_errno();
	if (mkdirat(cfd, "proofs", 0700) < 0 && errno != EEXIST)
		return negative_errno();
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->dirfd = openat(cfd, "proofs", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (b->dirfd < 0) {
		int r = negative_errno();
		free(b);
		return r;
	}
	*ret = b;
	return 0;
}

void blobproof_close(struct blobproof *b)
{
	if (!b)
		return;
	if (b->dirfd >= 0)
		close(b->dirfd);
	free(b);
}

bool blobproof_line(const char *domain, const char *repo, bool with_credentials, char *buf,
		    size_t len)
{
	int n = with_credentials ? snprintf(buf, len, "%s/%s", domain, repo)
				 : snprintf(buf, len, "*");

	return n > 0 && (size_t)n < len;
}

/* proofs/HEX of a digest: NULL for one that is not "sha256:HEX". */
static const char *file_name(const char *digest)
{
	return digest_is_valid(digest) ? strchr(digest, ':') + 1 : NULL;
}

/* Whether buf holds, as a whole line, "*", or line (when set), or a line
 * that starts with prefix and goes on (when set). */
static bool has_line(const char *buf, size_t len, const char *line, const char *prefix)
{
	size_t ll = line ? strlen(line) : 0, pl = prefix ? strlen(prefix) : 0;

	for (size_t at = 0; at < len;) {
		const char *nl = memchr(buf + at, '\n', len - at);
		size_t n;

		if (!nl)
			break; /* cut short: proves nothing */
		n = (size_t)(nl - (buf + at));
		if ((n == 1 && buf[at] == '*') ||
		    (line && n == ll && !memcmp(buf + at, line, ll)) ||
		    (prefix && n > pl && !memcmp(buf + at, prefix, pl)))
			return true;
		at += n + 1;
	}
	return false;
}

/* The proofs of digest in dirfd (proofs/): 0 with a buffer (empty when
 * there are none). */
static int read_proofs_at(int dirfd, const char *name, char **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0 && errno == ENOENT) {
		*ret = NULL;
		*ret_len = 0;
		return 0;
	}
	if (fd < 0)
		return negative_errno();
	return read_full(fd, PROOF_MAX_BYTES, ret, ret_len);
}

static int read_proofs(struct blobproof *b, const char *name, char **ret, size_t *ret_len)
{
	return read_proofs_at(b->dirfd, name, ret, ret_len);
}

bool blobproof_public_at(int cache_dirfd, const char *digest)
{
	const char *name = file_name(digest);
	_cleanup_close_ int dirfd = -1;
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;

	if (!name)
		return false;
	dirfd = openat(cache_dirfd, "proofs", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	return dirfd >= 0 && read_proofs_at(dirfd, name, &buf, &len) == 0 &&
	       has_line(buf, len, NULL, NULL);
}

bool blobproof_holds(struct blobproof *b, const char *digest, const char *line)
{
	const char *name = file_name(digest);
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;

	return name && read_proofs(b, name, &buf, &len) == 0 && has_line(buf, len, line, NULL);
}

bool blobproof_domain_had(struct blobproof *b, const char *digest, const char *domain)
{
	const char *name = file_name(digest);
	_cleanup_free_ char *buf = NULL, *prefix = NULL;
	size_t len = 0;

	if (!name || !domain[0] || strchr(domain, '/') || asprintf(&prefix, "%s/", domain) < 0)
		return false;
	return read_proofs(b, name, &buf, &len) == 0 && has_line(buf, len, NULL, prefix);
}

int blobproof_note(struct blobproof *b, const char *digest, const char *line)
{
	const char *name = file_name(digest);
	_cleanup_free_ char *buf = NULL, *text = NULL;
	_cleanup_close_ int fd = -1;
	size_t len = 0;
	int r;

	if (!name || strchr(line, '\n'))
		return -EINVAL;
	r = read_proofs(b, name, &buf, &len);
	if (r < 0)
		return r;
	if (has_line(buf, len, line, NULL))
		return 0;
	if (len + strlen(line) + 2 > PROOF_MAX_BYTES)
		return -EFBIG;
	/* A line a crash cut short is ended first, so that it does not
	 * run into this one. */
	if (asprintf(&text, "%s%s\n", len && buf[len - 1] != '\n' ? "\n" : "", line) < 0)
		return -ENOMEM;
	/* One write of a short line in append mode: lines never interleave. */
	fd = openat(b->dirfd, name, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return negative_errno();
	return write_full(fd, text, strlen(text));
}

int blobproof_forget(struct blobproof *b, const char *digest)
{
	const char *name = file_name(digest);

	if (!name)
		return -EINVAL;
	if (unlinkat(b->dirfd, name, 0) < 0 && errno != ENOENT)
		return negative_errno();
	return 0;
}

int blobproof_prune(struct blobproof *b, bool (*present)(void *userdata, const char *digest),
		    void *userdata, unsigned *ret_removed)
{
	char digest[DIGEST_STRING_MAX];
	unsigned removed = 0;
	struct dirent *de;
	DIR *d;
	int r = dir_stream(b->dirfd, &d);

	if (r < 0)
		return r;
	while ((de = readdir(d))) {
		/* not a proof (".", ".."): left alone */
		if (strlen(de->d_name) != DIGEST_HEX_LEN)
			continue;
		memcpy(digest, "sha256:", 7);
		memcpy(digest + 7, de->d_name, DIGEST_HEX_LEN + 1);
		if (!digest_is_valid(digest))
			continue;
		if (present(userdata, digest))
			continue;
		if (unlinkat(b->dirfd, de->d_name, 0) == 0)
			removed++;
		else if (errno != ENOENT && r == 0)
			r = negative_errno();
	}
	closedir(d);
	if (ret_removed)
		*ret_removed = removed;
	return r;
}
