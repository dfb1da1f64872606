/* statstorm ROOT LIST THREADS ROUNDS: every thread lstat()s every path of
 * LIST (one relative path a line) below ROOT, ROUNDS times, starting at a
 * different offset so the threads do not walk in lockstep.  Prints the
 * number of calls, the failures and the wall time in seconds. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static char **paths;
static size_t n_paths;
static int root_fd, rounds;
static atomic_long failures;

static void *storm(void *arg)
{
	size_t start = (size_t)(uintptr_t)arg % (n_paths ? n_paths : 1);
	struct stat st;
	long bad = 0;

	for (int r = 0; r < rounds; r++)
		for (size_t i = 0; i < n_paths; i++)
			if (fstatat(root_fd, paths[(start + i) % n_paths], &st,
				    AT_SYMLINK_NOFOLLOW) != 0)
				bad++;
	atomic_fetch_add(&failures, bad);
	return NULL;
}

int main(int argc, char **argv)
{
	FILE *f;
	char *line = NULL;
	size_t cap = 0, alloc = 0;
	ssize_t len;
	int threads;
	struct timespec t0, t1;

	if (argc != 5) {
		fprintf(stderr, "usage: statstorm ROOT LIST THREADS ROUNDS\n");
		return 2;
	}
	root_fd = open(argv[1], O_RDONLY | O_DIRECTORY);
	f = fopen(argv[2], "r");
	threads = atoi(argv[3]);
	rounds = atoi(argv[4]);
	if (root_fd < 0 || !f || threads < 1 || rounds < 1) {
		perror("statstorm");
		return 2;
	}
	while ((len = getline(&line, &cap, f)) > 0) {
		if (line[len - 1] == '\n')
			line[--len] = '\0';
		if (!len)
			continue;
		if (n_paths == alloc) {
			alloc = alloc ? 2 * alloc : 1024;
			paths = realloc(paths, alloc * sizeof(*paths));
			if (!paths)
				return 2;
		}
		paths[n_paths++] = strdup(line);
	}
	pthread_t th[threads];
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < threads; i++)
		pthread_create(&th[i], NULL, storm,
			       (void *)(uintptr_t)(i * (n_paths / threads + 1)));
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%ld %ld %.6f\n", (long)n_paths * rounds * threads, atomic_load(&failures),
	       (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	return 0;
}
