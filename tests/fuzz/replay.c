/* Replays a fuzz target over its checked-in corpus when the build is not
 * a libFuzzer build: every file named on the command line, and every
 * regular file in every directory named, in name order.  A crash or a
 * failed property aborts, which fails the test. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

/* Corpus files are small by design; a bigger one is a mistake. */
#define REPLAY_MAX_INPUT (16u << 20)

static int replay_file(int dirfd, const char *name, const char *shown)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	struct stat st;
	uint8_t *buf;
	size_t len = 0;

	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "replay: cannot open \"%s\": %s\n", shown, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > REPLAY_MAX_INPUT) {
		fprintf(stderr, "replay: \"%s\" is not a corpus file\n", shown);
		close(fd);
		return -1;
	}
	/* an exact-size heap copy, so ASan sees reads past the end */
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		close(fd);
		return -1;
	}
	while (len < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);

		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	LLVMFuzzerTestOneInput(buf, len);
	free(buf);
	return 0;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay_dir(const char *path, unsigned *count)
{
	DIR *d = opendir(path);
	struct dirent *de;
	char **names = NULL;
	size_t n = 0, cap = 0;
	int r = 0;

	if (!d) {
		fprintf(stderr, "replay: cannot open \"%s\": %s\n", path, strerror(errno));
		return -1;
	}
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (n == cap) {
			char **nn = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof(*nn));
			if (!nn)
				abort();
			names = nn;
		}
		names[n] = strdup(de->d_name);
		if (!names[n++])
			abort();
	}
	qsort(names, n, sizeof(*names), name_cmp);
	for (size_t i = 0; i < n; i++) {
		char shown[4096];

		snprintf(shown, sizeof(shown), "%s/%s", path, names[i]);
		fprintf(stderr, "replay: %s\n", shown);
		if (replay_file(dirfd(d), names[i], shown) < 0)
			r = -1;
		else
			(*count)++;
		free(names[i]);
	}
	free(names);
	closedir(d);
	return r;
}

int main(int argc, char **argv)
{
	unsigned count = 0;
	int r = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR|FILE...\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		struct stat st;

		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "replay: \"%s\": %s\n", argv[i], strerror(errno));
			r = -1;
		} else if (S_ISDIR(st.st_mode)) {
			if (replay_dir(argv[i], &count) < 0)
				r = -1;
		} else if (replay_file(AT_FDCWD, argv[i], argv[i]) < 0) {
			r = -1;
		} else {
			count++;
		}
	}
	fprintf(stderr, "replay: %u inputs\n", count);
	/* an empty corpus would make the test pass while testing nothing */
	return r < 0 || count == 0 ? 1 : 0;
}
