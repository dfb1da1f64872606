/* pullfsctl: the operator's command line for a running pullfs.  It reads
 * MOUNT/.pullfs/status and the events log, pulls by looking images up
 * through the mount (so the daemon's policy, back-off and throttle apply),
 * and asks the control socket for the operations that change the cache.
 * The contract with the daemon is docs/control.md. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "errname.h"
#include "fileio.h"
#include "macro.h"
#include "reference.h"
#include "units.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2

#define DEFAULT_MOUNT "/run/pullfs"
#define FUSE_SUPER_MAGIC 0x65735546
/* Caps on what the daemon may send us: a status document or a control
 * answer larger than this is not something we want to hold. */
#define STATUS_MAX (64u << 20)
#define EVENT_LINE_MAX (1u << 20)

static const char *arg_mount;
static const char *arg_socket;

/* jansson's own json_decrefp() is declared only with its json_auto_t. */
static inline void json_unrefp(json_t **p)
{
	json_decref(*p);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(FILE *, fclose);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct reference *, reference_free);
#define _cleanup_json_ _cleanup_(json_unrefp)
#define _cleanup_fclose_ _cleanup_(fclosep)
#define _cleanup_reference_ _cleanup_(reference_freep)

static void err_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void err_msg(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("pullfsctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fputs("pullfsctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see pullfsctl %s%s--help)\n", cmd ? cmd : "", cmd ? " " : "");
	return EXIT_USAGE;
}

/* ------------------------------------------------------------ formatting */

static double now_realtime(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double now_monotonic(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Parses "2026-11-22T04:36:30.326Z" (also without fraction, with a
 * numeric offset, or a bare "2026-11-22"): seconds since the epoch. */
static int parse_rfc3339(const char *s, double *ret)
{
	struct tm tm = { 0 };
	const char *p;
	double frac = 0;
	long off = 0;

	p = strptime(s, "%Y-%m-%d", &tm);
	if (!p)
		return -EINVAL;
	if (*p == 'T' || *p == 't' || *p == ' ') {
		p = strptime(p + 1, "%H:%M:%S", &tm);
		if (!p)
			return -EINVAL;
		if (*p == '.') {
			char *end;
			frac = strtod(p, &end);
			p = end;
		}
		if (*p == 'Z' || *p == 'z') {
			p++;
		} else if (*p == '+' || *p == '-') {
			int hh, mm;
			if (sscanf(p + 1, "%2d:%2d", &hh, &mm) != 2)
				return -EINVAL;
			off = (hh * 3600L + mm * 60L) * (*p == '-' ? -1 : 1);
			p += 6;
		}
	}
	if (*p)
		return -EINVAL;
	*ret = (double)timegm(&tm) - (double)off + frac;
	return 0;
}

/* Display width of UTF-8 text, counting code points. */
static size_t text_width(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			n++;
	return n;
}

/* ---------------------------------------------------------------- tables */

/* Rows of strings printed in aligned columns, kubectl-style: upper-case
 * headers, three spaces between columns, the last column not padded. */
struct table {
	size_t ncols;
	size_t nrows;
	char **cells;
	size_t *width;
};

static struct table *table_new(size_t ncols, ...)
{
	struct table *t = calloc(1, sizeof(*t));
	va_list ap;

	if (!t)
		return NULL;
	t->ncols = ncols;
	t->width = calloc(ncols, sizeof(*t->width));
	if (!t->width) {
		free(t);
		return NULL;
	}
	va_start(ap, ncols);
	for (size_t i = 0; i < ncols; i++)
		t->width[i] = text_width(va_arg(ap, const char *));
	va_end(ap);
	/* The header is row 0, added by the caller's first table_add. */
	return t;
}

static void table_free(struct table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t->width);
	free(t);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(struct table *, table_free);
#define _cleanup_table_ _cleanup_(table_freep)

static int table_add(struct table *t, const char *const *cells)
{
	char **n = realloc(t->cells, (t->nrows + 1) * t->ncols * sizeof(*n));

	if (!n)
		return -ENOMEM;
	t->cells = n;
	for (size_t i = 0; i < t->ncols; i++) {
		char *c = strdup(cells[i] ? cells[i] : "");
		if (!c) {
			for (size_t j = 0; j < i; j++)
				free(n[t->nrows * t->ncols + j]);
			return -ENOMEM;
		}
		n[t->nrows * t->ncols + i] = c;
		t->width[i] = MAX(t->width[i], text_width(c));
	}
	t->nrows++;
	return 0;
}

static void table_print_row(const struct table *t, const char *const *cells, FILE *f)
{
	for (size_t i = 0; i < t->ncols; i++) {
		const char *c = cells[i] ? cells[i] : "";
		if (i + 1 == t->ncols) {
			fputs(c, f);
			break;
		}
		fputs(c, f);
		for (size_t w = text_width(c); w < t->width[i] + 3; w++)
			fputc(' ', f);
	}
	fputc('\n', f);
}

static void table_print(const struct table *t, FILE *f)
{
	for (size_t r = 0; r < t->nrows; r++)
		table_print_row(t, (const char *const *)&t->cells[r * t->ncols], f);
}

/* ------------------------------------------------------------------ JSON */

static const char *jstr(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : NULL;
}

static double jnum(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_number(v) ? json_number_value(v) : 0;
}

static bool jhas(const json_t *o, const char *key)
{
	return json_is_number(json_object_get(o, key));
}

/* ---------------------------------------------------- talking to pullfs */

static const char *mount_dir(void)
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
static void explain_mount_error(const char *what, int r)
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

/* The status document of the daemon mounted at mount_dir(); caller owns
 * it.  Prints the reason on failure. */
static int status_load(json_t **ret)
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

/* One request on the control socket: one line of JSON out, one back.
 * Blocks until the daemon answers.  Prints the reason when the daemon
 * cannot be reached; an answer with "ok": false is returned as it is. */
static int control_call(json_t *req, json_t **ret)
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
			err_msg("cannot connect to the control socket \"%s\": %s", path, strerror(-r));
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
			err_msg("cannot read from the control socket \"%s\": %s", path, strerror(-r));
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

/* Prints the failure of an answer with "ok": false and returns its errno
 * as a negative number. */
static int control_failure(const char *cmd, const json_t *a)
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

/* Canonical form of a reference as the daemon names it; a reference
 * with neither tag nor digest gets "latest" when default_tag. */
static int canonical_reference(const char *s, bool default_tag, char **ret)
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

/* ---------------------------------------------------------- events log */

struct event_filter {
	char *image;      /* canonical reference, or repository when !image_exact */
	bool image_exact;
	const char *reason;
	double since; /* epoch seconds; 0: no limit */
};

static bool event_matches(const json_t *ev, const struct event_filter *f)
{
	const char *image = jstr(ev, "image"), *reason = jstr(ev, "reason"), *t;
	double when;

	if (f->reason && (!reason || strcasecmp(reason, f->reason)))
		return false;
	if (f->image) {
		size_t n = strlen(f->image);
		if (!image || strncmp(image, f->image, n))
			return false;
		if (f->image_exact ? image[n] != '\0' : (image[n] != ':' && image[n] != '@' && image[n]))
			return false;
	}
	if (f->since > 0) {
		t = jstr(ev, "time");
		if (!t || parse_rfc3339(t, &when) < 0 || when < f->since)
			return false;
	}
	return true;
}

static json_t *event_parse(const char *line)
{
	json_t *j = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);

	if (!json_is_object(j)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

/* The latest failure-like event of image in the log at path: caller owns
 * it; NULL when there is none. */
static json_t *events_last_failure(const char *path, const char *image)
{
	_cleanup_fclose_ FILE *f = NULL;
	_cleanup_free_ char *line = NULL;
	json_t *best = NULL;
	size_t cap = 0;
	struct stat st;

	if (!path)
		return NULL;
	f = fopen(path, "re");
	if (!f)
		return NULL;
	/* Only the tail matters; a log of many megabytes is not read whole. */
	if (fstat(fileno(f), &st) == 0 && st.st_size > (off_t)(4u << 20)) {
		fseeko(f, st.st_size - (off_t)(4u << 20), SEEK_SET);
		if (getline(&line, &cap, f) < 0)
			return NULL;
	}
	while (getline(&line, &cap, f) > 0) {
		json_t *ev;
		const char *im, *reason, *type;

		if (!strstr(line, image))
			continue;
		ev = event_parse(line);
		if (!ev)
			continue;
		im = jstr(ev, "image");
		reason = jstr(ev, "reason");
		type = jstr(ev, "type");
		if (im && !strcmp(im, image) &&
		    ((type && !strcmp(type, "Warning")) || jstr(ev, "errno") ||
		     (reason && (!strcmp(reason, "BackOff") || !strcmp(reason, "Failed"))))) {
			json_decref(best);
			best = ev;
		} else {
			json_decref(ev);
		}
	}
	return best;
}

/* ------------------------------------------------------------------ pull */

enum job_phase {
	JOB_RUNNING,
	JOB_DONE,
};

struct job {
	const char *arg;  /* as given */
	char *reference;  /* canonical */
	char *path;       /* MOUNT/images/<reference> */
	pthread_t thread;
	int phase;        /* enum job_phase; written by the thread, atomically */
	int err;          /* errno of the lookup, valid once JOB_DONE */
	double started, finished;
	double started_real; /* wall clock, to compare with event times */

	/* From the latest status poll; main thread only. */
	bool seen;
	char state[16];
	double bytes_done, bytes_total, layers_done, layers_total;
	double rate, rate_bytes, rate_time;
	/* Plain-line mode: what was printed last. */
	char printed_state[16];
	double printed_layers, printed_time;
	bool reported;
};

static void *job_run(void *p)
{
	struct job *j = p;
	struct stat st;
	int err = 0;

	if (stat(j->path, &st) < 0)
		err = errno;
	else if (!S_ISDIR(st.st_mode))
		err = ENOTDIR;
	j->err = err;
	j->finished = now_monotonic();
	__atomic_store_n(&j->phase, JOB_DONE, __ATOMIC_RELEASE);
	return NULL;
}

static void job_update(struct job *j, const json_t *status, double now)
{
	json_t *pulls = json_object_get(status, "pulls"), *p;
	size_t i;

	json_array_foreach(pulls, i, p) {
		const char *ref = jstr(p, "reference"), *state = jstr(p, "state");
		double done;

		if (!ref || strcmp(ref, j->reference))
			continue;
		done = jnum(p, "bytes_done");
		if (!j->seen || done < j->rate_bytes) {
			j->rate_bytes = done;
			j->rate_time = now;
			j->rate = 0;
		} else if (now - j->rate_time >= 0.5) {
			double r = (done - j->rate_bytes) / (now - j->rate_time);
			j->rate = j->rate > 0 ? 0.5 * j->rate + 0.5 * r : r;
			j->rate_bytes = done;
			j->rate_time = now;
		}
		j->seen = true;
		snprintf(j->state, sizeof(j->state), "%s", state ? state : "pulling");
		j->bytes_done = done;
		j->bytes_total = jnum(p, "bytes_total");
		j->layers_done = jnum(p, "layers_done");
		j->layers_total = jnum(p, "layers_total");
		return;
	}
}

/* Status might not be readable (a daemon without the control view, or
 * one that is busy): progress is then only "running" and the result. */
static json_t *status_try(void)
{
	_cleanup_free_ char *path = NULL, *buf = NULL;

	if (asprintf(&path, "%s/.pullfs/status", mount_dir()) < 0)
		return NULL;
	if (read_file_capped(path, STATUS_MAX, &buf, NULL) < 0)
		return NULL;
	return json_loads(buf, 0, NULL);
}

static const json_t *status_image(const json_t *status, const char *reference)
{
	json_t *images = json_object_get(status, "images"), *im;
	size_t i;

	json_array_foreach(images, i, im) {
		const char *r = jstr(im, "reference");
		if (r && !strcmp(r, reference))
			return im;
	}
	return NULL;
}

static const json_t *status_backoff(const json_t *status, const char *reference)
{
	json_t *b = json_object_get(status, "backoff"), *e;
	size_t i;

	json_array_foreach(b, i, e) {
		const char *r = jstr(e, "reference");
		if (r && !strcmp(r, reference))
			return e;
	}
	return NULL;
}

static int terminal_columns(void)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40)
		return ws.ws_col;
	return 80;
}

/* The progress part of a line, after the reference: bar, percentage,
 * bytes, rate, layers. */
static void job_progress_text(const struct job *j, bool bar, int bar_width, char *buf, size_t len)
{
	char done[32], total[32], rate[32], layers[32] = "";
	size_t o = 0;

	if (!j->seen) {
		snprintf(buf, len, "%s", "waiting for the daemon");
		return;
	}
	if (j->layers_total > 0)
		snprintf(layers, sizeof(layers), "layers %.0f/%.0f", j->layers_done, j->layers_total);
	if (strcmp(j->state, "downloading") || j->bytes_total <= 0) {
		snprintf(buf, len, "%s%s%s", j->state, layers[0] ? "  " : "", layers);
		return;
	}
	format_size(j->bytes_done, done, sizeof(done));
	format_size(j->bytes_total, total, sizeof(total));
	format_size(j->rate, rate, sizeof(rate));
	if (bar) {
		double frac = j->bytes_total > 0 ? j->bytes_done / j->bytes_total : 0;
		int fill = (int)(frac * bar_width);
		if (frac > 1)
			frac = 1;
		if (fill > bar_width)
			fill = bar_width;
		o += (size_t)snprintf(buf + o, len - o, "[");
		for (int i = 0; i < bar_width && o + 2 < len; i++)
			buf[o++] = i < fill ? '=' : (i == fill ? '>' : ' ');
		o += (size_t)snprintf(buf + o, len - o, "] %3.0f%%  ", frac * 100);
	}
	if (!bar)
		o += (size_t)snprintf(buf + o, len - o, "%s  ", j->state);
	if (o < len)
		snprintf(buf + o, len - o, "%s / %s  %s/s  %s", done, total, rate, layers);
}

/* The result part: "done sha256:… 1.0 MiB in 0.4s" or the failure. */
static void job_result_text(const struct job *j, const json_t *status, char *buf, size_t len)
{
	const json_t *im = status ? status_image(status, j->reference) : NULL;
	char size[32] = "", took[32];

	snprintf(took, sizeof(took), "%.1fs", j->finished - j->started);
	if (j->err) {
		snprintf(buf, len, "failed: %s", errno_name(j->err));
		return;
	}
	if (im && jhas(im, "size"))
		format_size(jnum(im, "size"), size, sizeof(size));
	snprintf(buf, len, "done %s%s%s in %s", im && jstr(im, "digest") ? jstr(im, "digest") : "",
		 size[0] ? "  " : "", size, took);
}

static void draw_tty(struct job *jobs, size_t n, const json_t *status, size_t *drawn)
{
	int cols = terminal_columns();
	size_t refw = 0;

	for (size_t i = 0; i < n; i++)
		refw = MAX(refw, strlen(jobs[i].reference));
	refw = MIN(refw, (size_t)cols / 3);
	if (*drawn)
		printf("\033[%zuA", *drawn);
	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		char text[512], ref[256];
		size_t rl = strlen(j->reference);

		if (__atomic_load_n(&j->phase, __ATOMIC_ACQUIRE) == JOB_DONE)
			job_result_text(j, status, text, sizeof(text));
		else
			job_progress_text(j, true, MAX(10, cols - (int)refw - 60), text, sizeof(text));
		if (rl > refw)
			snprintf(ref, sizeof(ref), "…%s", j->reference + rl - refw + 1);
		else
			snprintf(ref, sizeof(ref), "%s", j->reference);
		/* Progress is cut to the width so that redrawing stays in
		 * place; a final result is printed whole. */
		printf("\r\033[K%-*s  %.*s\n", (int)refw, ref,
		       __atomic_load_n(&j->phase, __ATOMIC_ACQUIRE) == JOB_DONE ? (int)sizeof(text)
										: MAX(0, cols - (int)refw - 3),
		       text);
	}
	*drawn = n;
	fflush(stdout);
}

static void draw_plain(struct job *jobs, size_t n, double now)
{
	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		char text[512];
		bool changed;

		if (!j->seen || __atomic_load_n(&j->phase, __ATOMIC_ACQUIRE) == JOB_DONE)
			continue;
		changed = strcmp(j->state, j->printed_state) || j->layers_done != j->printed_layers;
		if (!changed && now - j->printed_time < 5)
			continue;
		job_progress_text(j, false, 0, text, sizeof(text));
		printf("%s: %s\n", j->reference, text);
		snprintf(j->printed_state, sizeof(j->printed_state), "%s", j->state);
		j->printed_layers = j->layers_done;
		j->printed_time = now;
	}
	fflush(stdout);
}

/* Prints the failure of one job with the reason the daemon gave. */
static void job_report_failure(const struct job *j, const json_t *status)
{
	_cleanup_json_ json_t *ev = NULL;
	const char *events_log = status ? jstr(status, "events_log") : NULL;
	const char *reason = NULL, *msg = NULL;
	const json_t *b;

	/* The daemon may log the event just after the lookup returned: give
	 * it a moment to appear rather than quote an older one. */
	for (int tries = 0; tries < 20; tries++) {
		const char *t;
		double when;

		json_decref(ev);
		ev = events_last_failure(events_log, j->reference);
		if (ev && (t = jstr(ev, "time")) && parse_rfc3339(t, &when) == 0 &&
		    when >= j->started_real - 1.0)
			break;
		if (!events_log)
			break;
		poll(NULL, 0, 50);
	}
	if (ev) {
		reason = jstr(ev, "reason");
		msg = jstr(ev, "message");
	} else if (status && (b = status_backoff(status, j->reference))) {
		reason = "BackOff";
		msg = jstr(b, "message");
	}
	if (msg)
		err_msg("pull %s: %s: %s: %s", j->reference, errno_name(j->err), reason ? reason : "Failed", msg);
	else
		err_msg("pull %s: %s: %s", j->reference, errno_name(j->err), strerror(j->err));
}

static void pull_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] pull [--plain] [--quiet] [--background] REFERENCE...\n"
	      "\n"
	      "Make sure each image is in the cache, by looking it up through the mount\n"
	      "(MOUNT/images/REFERENCE), so the daemon's pull policy, back-off and\n"
	      "throttle apply as to any other lookup.  All references are looked up at\n"
	      "once; the daemon queues them as it queues any pull.\n"
	      "\n"
	      "A reference with neither tag nor digest gets the tag \"latest\", as docker\n"
	      "does; short names (\"alpine:3.19\") mean docker.io.\n"
	      "\n"
	      "On a terminal, a progress line per image: bytes done and total, rate and\n"
	      "layers.  Otherwise, one plain line per change of state (at most every 5 s\n"
	      "while downloading) and one \"REFERENCE: done DIGEST SIZE in TIME\" line per\n"
	      "image.\n"
	      "\n"
	      "With --background, the daemon is asked over the control socket to pull\n"
	      "each image and the command returns at once, printing \"REFERENCE: present\"\n"
	      "or \"REFERENCE: pulling\": such a pull completes even though no process\n"
	      "waits for it, where a queued pull whose lookups were all interrupted\n"
	      "leaves the queue.  Watch it with pullfsctl status or events.\n"
	      "\n"
	      "Options:\n"
	      "  -b, --background  ask the daemon to pull, do not wait\n"
	      "      --plain    plain lines even on a terminal\n"
	      "  -q, --quiet    print nothing but errors\n"
	      "  -h, --help     show this help\n"
	      "\n"
	      "Exit status: 0 when every image is ready; 1 when one failed, with a line\n"
	      "\"pullfsctl: pull REFERENCE: ERRNO: REASON: MESSAGE\" on stderr, where\n"
	      "REASON and MESSAGE are from the latest failure event of that image in the\n"
	      "events log (ENOENT: unknown repository or tag, EAGAIN: back-off, EACCES:\n"
	      "denied, EHOSTUNREACH: registry unreachable, ...); 2 on bad usage.\n",
	      f);
}

/* pull --background: one control request per reference. */
static int pull_background(int n, char **refs, bool quiet)
{
	int failed = 0;

	for (int i = 0; i < n; i++) {
		_cleanup_json_ json_t *req = json_pack("{s:s, s:s}", "op", "pull",
							"reference", refs[i]);
		_cleanup_json_ json_t *a = NULL;

		if (!req || control_call(req, &a) < 0)
			return EXIT_FAILED;
		if (!json_is_true(json_object_get(a, "ok"))) {
			control_failure("pull", a);
			failed = 1;
			continue;
		}
		if (!quiet)
			printf("%s: %s\n", jstr(a, "reference"),
			       json_is_true(json_object_get(a, "present")) ? "present" : "pulling");
	}
	return failed ? EXIT_FAILED : 0;
}

static int cmd_pull(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "plain", no_argument, NULL, 'p' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "background", no_argument, NULL, 'b' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_free_ struct job *jobs = NULL;
	_cleanup_json_ json_t *last_status = NULL;
	bool plain = false, quiet = false, background = false, tty;
	size_t n, drawn = 0, started = 0;
	int c, failed = 0;
	struct statfs sf;

	while ((c = getopt_long(argc, argv, "+hqb", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			pull_usage(stdout);
			return 0;
		case 'b':
			background = true;
			break;
		case 'p':
			plain = true;
			break;
		case 'q':
			quiet = true;
			break;
		default:
			return usage_error("pull", "bad option");
		}
	}
	if (optind >= argc)
		return usage_error("pull", "pull needs at least one REFERENCE");
	if (background)
		return pull_background(argc - optind, argv + optind, quiet);
	if (statfs(mount_dir(), &sf) < 0 || (uint32_t)sf.f_type != FUSE_SUPER_MAGIC) {
		explain_mount_error(mount_dir(), -ENOTCONN);
		return EXIT_FAILED;
	}
	n = (size_t)(argc - optind);
	jobs = calloc(n, sizeof(*jobs));
	if (!jobs)
		return EXIT_FAILED;
	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		int r;

		j->arg = argv[optind + i];
		r = canonical_reference(j->arg, true, &j->reference);
		if (r < 0) {
			err_msg("pull %s: %s: invalid reference", j->arg, errno_name(r));
			failed = 1;
			j->phase = JOB_DONE;
			j->err = -r;
			j->reported = true;
			continue;
		}
		if (asprintf(&j->path, "%s/images/%s", mount_dir(), j->reference) < 0) {
			j->path = NULL;
			err_msg("out of memory");
			return EXIT_FAILED;
		}
	}
	tty = !plain && !quiet && isatty(STDOUT_FILENO);
	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		int r;

		if (j->phase == JOB_DONE)
			continue;
		j->started = now_monotonic();
		j->started_real = now_realtime();
		r = pthread_create(&j->thread, NULL, job_run, j);
		if (r) {
			err_msg("cannot start a thread: %s", strerror(r));
			j->err = r;
			j->phase = JOB_DONE;
			continue;
		}
		started++;
		if (!quiet && !tty)
			printf("%s: pulling\n", j->reference);
	}
	fflush(stdout);

	for (;;) {
		bool all_done = true;
		double now = now_monotonic();
		json_t *st = status_try();

		if (st) {
			json_decref(last_status);
			last_status = st;
		}
		for (size_t i = 0; i < n; i++) {
			struct job *j = &jobs[i];
			if (__atomic_load_n(&j->phase, __ATOMIC_ACQUIRE) != JOB_DONE) {
				all_done = false;
				if (st)
					job_update(j, st, now);
			}
		}
		if (all_done)
			break;
		if (tty)
			draw_tty(jobs, n, last_status, &drawn);
		else if (!quiet)
			draw_plain(jobs, n, now);
		/* Wait up to 200 ms, returning early if all finished. */
		for (int k = 0; k < 20; k++) {
			bool any_running = false;
			for (size_t i = 0; i < n; i++)
				if (__atomic_load_n(&jobs[i].phase, __ATOMIC_ACQUIRE) != JOB_DONE)
					any_running = true;
			if (!any_running)
				break;
			poll(NULL, 0, 10);
		}
	}
	for (size_t i = 0; i < n; i++)
		if (jobs[i].path && jobs[i].thread)
			pthread_join(jobs[i].thread, NULL);

	/* One last look, for digests and sizes of what was just pulled, and
	 * for the events of failures. */
	{
		json_t *st = status_try();
		if (st) {
			json_decref(last_status);
			last_status = st;
		}
	}
	if (tty) {
		draw_tty(jobs, n, last_status, &drawn);
	} else if (!quiet) {
		for (size_t i = 0; i < n; i++) {
			char text[512];
			if (jobs[i].err || jobs[i].reported)
				continue;
			job_result_text(&jobs[i], last_status, text, sizeof(text));
			printf("%s: %s\n", jobs[i].reference, text);
		}
		fflush(stdout);
	}
	for (size_t i = 0; i < n; i++) {
		if (!jobs[i].err)
			continue;
		failed = 1;
		if (!jobs[i].reported)
			job_report_failure(&jobs[i], last_status);
	}
	for (size_t i = 0; i < n; i++) {
		free(jobs[i].reference);
		free(jobs[i].path);
	}
	return failed ? EXIT_FAILED : 0;
}

/* -------------------------------------------------------------------- ls */

static void ls_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] ls [--json] [--no-trunc]\n"
	      "\n"
	      "List the images in the cache, least recently used last:\n"
	      "REFERENCE, DIGEST (of the manifest, its first 12 hex digits unless\n"
	      "--no-trunc), SIZE (bytes its layers and blobs\n"
	      "take on disk; a layer shared by two images counts for both), LAST USED\n"
	      "(how long ago), IN USE (open files or held by the kernel) and PINNED\n"
	      "(never removed by garbage collection).\n"
	      "\n"
	      "Options:\n"
	      "      --json     the \"images\" array of the status document, as JSON\n"
	      "      --no-trunc show whole digests\n"
	      "  -h, --help     show this help\n",
	      f);
}

static int by_last_used(const void *a, const void *b)
{
	const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	const char *tx = jstr(x, "last_used"), *ty = jstr(y, "last_used");
	int c = strcmp(ty ? ty : "", tx ? tx : "");

	if (c)
		return c;
	return strcmp(jstr(x, "reference") ? jstr(x, "reference") : "",
		      jstr(y, "reference") ? jstr(y, "reference") : "");
}

static void format_age(const char *rfc3339, double now, char *buf, size_t len)
{
	double t;

	if (!rfc3339 || parse_rfc3339(rfc3339, &t) < 0) {
		snprintf(buf, len, "%s", rfc3339 ? rfc3339 : "-");
		return;
	}
	format_duration(now - t, buf, len);
	if (strlen(buf) + 5 < len)
		strcat(buf, " ago");
}

static int cmd_ls(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-trunc", no_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *st = NULL;
	_cleanup_table_ struct table *t = NULL;
	_cleanup_free_ json_t **rows = NULL;
	json_t *images, *im;
	bool json = false, no_trunc = false;
	double now = now_realtime();
	size_t i, n;
	int c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			ls_usage(stdout);
			return 0;
		case 'j':
			json = true;
			break;
		case 'n':
			no_trunc = true;
			break;
		default:
			return usage_error("ls", "bad option");
		}
	}
	if (optind < argc)
		return usage_error("ls", "unexpected argument \"%s\"", argv[optind]);
	if (status_load(&st) < 0)
		return EXIT_FAILED;
	images = json_object_get(st, "images");
	if (!json_is_array(images))
		images = NULL;
	if (json) {
		json_dumpf(images ? images : json_array(), stdout, JSON_INDENT(2));
		putchar('\n');
		return 0;
	}
	n = images ? json_array_size(images) : 0;
	rows = calloc(n + 1, sizeof(*rows));
	t = table_new(6, "", "", "", "", "", "");
	if (!rows || !t)
		return EXIT_FAILED;
	json_array_foreach(images, i, im)
		rows[i] = im;
	qsort(rows, n, sizeof(*rows), by_last_used);
	table_add(t, (const char *const[]){ "REFERENCE", "DIGEST", "SIZE", "LAST USED", "IN USE", "PINNED" });
	for (i = 0; i < n; i++) {
		char size[32], age[64], shortdigest[32];
		const char *digest = jstr(rows[i], "digest");
		const json_t *in_use = json_object_get(rows[i], "in_use");
		const json_t *pinned = json_object_get(rows[i], "pinned");

		format_size(jnum(rows[i], "size"), size, sizeof(size));
		format_age(jstr(rows[i], "last_used"), now, age, sizeof(age));
		/* Like docker's IMAGE ID: 12 hex digits are enough to tell
		 * images apart on one node. */
		if (digest && !no_trunc && !strncmp(digest, "sha256:", 7) && strlen(digest) > 19) {
			snprintf(shortdigest, sizeof(shortdigest), "%.19s", digest);
			digest = shortdigest;
		}
		table_add(t, (const char *const[]){ jstr(rows[i], "reference"), digest ? digest : "-", size, age,
						    json_is_true(in_use) ? "yes" : "no",
						    json_is_true(pinned) ? "yes" : "no" });
	}
	table_print(t, stdout);
	return 0;
}

/* --------------------------------------------------------------- inspect */

static void inspect_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] inspect [--json] REFERENCE\n"
	      "\n"
	      "Show what the cache knows of one image (it is not pulled): manifest\n"
	      "digest, the index it was picked from, platform, media type, size on disk,\n"
	      "its layers with digests, sizes and media types, and from its config the\n"
	      "entrypoint, command, working directory, user, environment and labels.\n"
	      "Asks the control socket (op \"inspect\"), which is for root.\n"
	      "\n"
	      "Options:\n"
	      "      --json     the daemon's answer as JSON (with the whole image config)\n"
	      "  -h, --help     show this help\n",
	      f);
}

static void print_string_array(const char *label, const json_t *a)
{
	_cleanup_free_ char *s = NULL;

	if (!a || json_is_null(a))
		return;
	s = json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
	printf("%-12s%s\n", label, s ? s : "?");
}

static int cmd_inspect(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *req = NULL, *a = NULL;
	_cleanup_table_ struct table *t = NULL;
	const json_t *layers, *l, *cfg, *cc, *env, *labels, *v;
	bool json = false;
	char size[32];
	const char *key;
	size_t i;
	int c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			inspect_usage(stdout);
			return 0;
		case 'j':
			json = true;
			break;
		default:
			return usage_error("inspect", "bad option");
		}
	}
	if (argc - optind != 1)
		return usage_error("inspect", "inspect takes one REFERENCE");
	req = json_pack("{s:s, s:s}", "op", "inspect", "reference", argv[optind]);
	if (!req || control_call(req, &a) < 0)
		return EXIT_FAILED;
	if (!json_is_true(json_object_get(a, "ok"))) {
		control_failure("inspect", a);
		return EXIT_FAILED;
	}
	json_object_del(a, "ok");
	if (json) {
		json_dumpf(a, stdout, JSON_INDENT(2));
		putchar('\n');
		return 0;
	}
	format_size(jnum(a, "size"), size, sizeof(size));
	printf("%-12s%s\n", "Reference:", jstr(a, "reference") ? jstr(a, "reference") : argv[optind]);
	printf("%-12s%s\n", "Digest:", jstr(a, "digest") ? jstr(a, "digest") : "-");
	if (jstr(a, "index_digest"))
		printf("%-12s%s\n", "Index:", jstr(a, "index_digest"));
	printf("%-12s%s\n", "Platform:", jstr(a, "platform") ? jstr(a, "platform") : "-");
	printf("%-12s%s\n", "Media type:", jstr(a, "media_type") ? jstr(a, "media_type") : "-");
	printf("%-12s%s\n", "Size:", size);
	cfg = json_object_get(a, "config");
	cc = json_object_get(cfg, "config");
	if (jstr(cfg, "created"))
		printf("%-12s%s\n", "Created:", jstr(cfg, "created"));
	print_string_array("Entrypoint:", json_object_get(cc, "Entrypoint"));
	print_string_array("Cmd:", json_object_get(cc, "Cmd"));
	if (jstr(cc, "WorkingDir") && *jstr(cc, "WorkingDir"))
		printf("%-12s%s\n", "WorkingDir:", jstr(cc, "WorkingDir"));
	if (jstr(cc, "User") && *jstr(cc, "User"))
		printf("%-12s%s\n", "User:", jstr(cc, "User"));
	env = json_object_get(cc, "Env");
	if (json_array_size(env)) {
		printf("Env:\n");
		json_array_foreach(env, i, v)
			if (json_is_string(v))
				printf("  %s\n", json_string_value(v));
	}
	labels = json_object_get(cc, "Labels");
	if (json_object_size(labels)) {
		printf("Labels:\n");
		json_object_foreach((json_t *)labels, key, v)
			printf("  %s=%s\n", key, json_is_string(v) ? json_string_value(v) : "");
	}
	layers = json_object_get(a, "layers");
	printf("Layers:\n");
	t = table_new(3, "", "", "");
	if (!t)
		return EXIT_FAILED;
	table_add(t, (const char *const[]){ "  DIGEST", "SIZE", "MEDIA TYPE" });
	json_array_foreach(layers, i, l) {
		_cleanup_free_ char *d = NULL;
		format_size(jnum(l, "size"), size, sizeof(size));
		if (asprintf(&d, "  %s", jstr(l, "digest") ? jstr(l, "digest") : "-") < 0)
			return EXIT_FAILED;
		table_add(t, (const char *const[]){ d, size, jstr(l, "media_type") });
	}
	table_print(t, stdout);
	return 0;
}

/* ------------------------------------------------------------- rm and gc */

static void rm_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] rm REFERENCE...\n"
	      "\n"
	      "Remove images from the cache, with the layers no other cached image\n"
	      "uses.  Refused (EBUSY) as a whole, removing nothing, when one of them has\n"
	      "open files or a pull in flight.  A later lookup pulls the image again.\n"
	      "Asks the control socket (op \"rm\"), which is for root.\n"
	      "\n"
	      "Options:\n"
	      "  -h, --help     show this help\n",
	      f);
}

static void gc_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] gc [--to BYTES]\n"
	      "\n"
	      "Collect garbage now: remove least recently used images (never one with\n"
	      "open files or a pull in flight, never a pinned one) until the cache is\n"
	      "below the daemon's low threshold, or below BYTES.  Asks the control\n"
	      "socket (op \"gc\"), which is for root.\n"
	      "\n"
	      "Options:\n"
	      "      --to BYTES  shrink the cache to at most BYTES (suffixes K, M, G, T:\n"
	      "                  binary multiples, e.g. 500M, 2GiB)\n"
	      "  -h, --help      show this help\n",
	      f);
}

static int print_removal(const json_t *a)
{
	const json_t *removed = json_object_get(a, "removed"), *v;
	char freed[32];
	size_t i;

	json_array_foreach(removed, i, v)
		if (json_is_string(v))
			printf("removed %s\n", json_string_value(v));
	format_size(jnum(a, "freed_bytes"), freed, sizeof(freed));
	printf("%zu image%s removed, %s freed\n", json_array_size(removed),
	       json_array_size(removed) == 1 ? "" : "s", freed);
	return 0;
}

static int cmd_rm(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *req = NULL, *a = NULL;
	json_t *refs;
	int c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			rm_usage(stdout);
			return 0;
		default:
			return usage_error("rm", "bad option");
		}
	}
	if (optind >= argc)
		return usage_error("rm", "rm needs at least one REFERENCE");
	refs = json_array();
	req = json_pack("{s:s, s:o}", "op", "rm", "references", refs);
	if (!req)
		return EXIT_FAILED;
	for (int i = optind; i < argc; i++)
		json_array_append_new(refs, json_string(argv[i]));
	if (control_call(req, &a) < 0)
		return EXIT_FAILED;
	if (!json_is_true(json_object_get(a, "ok"))) {
		control_failure("rm", a);
		return EXIT_FAILED;
	}
	return print_removal(a);
}

static int cmd_gc(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "to", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *req = NULL, *a = NULL;
	bool have_to = false;
	uint64_t to = 0;
	int c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			gc_usage(stdout);
			return 0;
		case 't':
			if (parse_size(optarg, &to) < 0)
				return usage_error("gc", "invalid size \"%s\"", optarg);
			have_to = true;
			break;
		default:
			return usage_error("gc", "bad option");
		}
	}
	if (optind < argc)
		return usage_error("gc", "unexpected argument \"%s\"", argv[optind]);
	req = json_pack("{s:s}", "op", "gc");
	if (!req)
		return EXIT_FAILED;
	if (have_to)
		json_object_set_new(req, "to_bytes", json_integer((json_int_t)to));
	if (control_call(req, &a) < 0)
		return EXIT_FAILED;
	if (!json_is_true(json_object_get(a, "ok"))) {
		control_failure("gc", a);
		return EXIT_FAILED;
	}
	return print_removal(a);
}

/* ---------------------------------------------------------------- status */

static void status_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] status [--json]\n"
	      "\n"
	      "Show the state of the daemon: pulls in flight with their progress (state\n"
	      "waiting, resolving or downloading; bytes and layers done; processes\n"
	      "waiting for them), references in back-off with the time left and the\n"
	      "error that put them there, queue lengths, and cache usage with the\n"
	      "garbage collection thresholds.  Reads MOUNT/.pullfs/status.\n"
	      "\n"
	      "Options:\n"
	      "      --json     the status document as the daemon wrote it\n"
	      "  -h, --help     show this help\n",
	      f);
}

static int cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *st = NULL;
	_cleanup_table_ struct table *pt = NULL, *bt = NULL;
	const json_t *q, *cache, *pulls, *backoff, *e;
	char a[32], b[32], d[32];
	bool json = false;
	size_t i;
	int c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			status_usage(stdout);
			return 0;
		case 'j':
			json = true;
			break;
		default:
			return usage_error("status", "bad option");
		}
	}
	if (optind < argc)
		return usage_error("status", "unexpected argument \"%s\"", argv[optind]);
	if (status_load(&st) < 0)
		return EXIT_FAILED;
	if (json) {
		json_dumpf(st, stdout, JSON_INDENT(2));
		putchar('\n');
		return 0;
	}
	printf("Mount:       %s (pullfs %s, pid %.0f)\n",
	       jstr(st, "mountpoint") ? jstr(st, "mountpoint") : mount_dir(),
	       jstr(st, "version") ? jstr(st, "version") : "?", jnum(st, "pid"));
	printf("Events log:  %s\n", jstr(st, "events_log") ? jstr(st, "events_log") : "-");
	cache = json_object_get(st, "cache");
	format_size(jnum(cache, "bytes"), a, sizeof(a));
	printf("Cache:       %s: %s in %.0f image%s, %.0f layer%s\n",
	       jstr(st, "cache_dir") ? jstr(st, "cache_dir") : "?", a, jnum(cache, "images"),
	       jnum(cache, "images") == 1 ? "" : "s", jnum(cache, "layers"),
	       jnum(cache, "layers") == 1 ? "" : "s");
	if (jnum(cache, "fs_bytes") > 0) {
		double used = jnum(cache, "fs_bytes") - jnum(cache, "fs_free_bytes");
		format_size(jnum(cache, "fs_free_bytes"), a, sizeof(a));
		format_size(jnum(cache, "fs_bytes"), b, sizeof(b));
		printf("Filesystem:  %s free of %s (%.0f%% used)\n", a, b,
		       100.0 * used / jnum(cache, "fs_bytes"));
	}
	if (jnum(cache, "max_bytes") > 0) {
		format_size(jnum(cache, "max_bytes"), d, sizeof(d));
		printf("GC:          above %.0f%% (of the filesystem, or of the budget %s), down to %.0f%%\n",
		       jnum(cache, "gc_high_percent"), d, jnum(cache, "gc_low_percent"));
	} else {
		printf("GC:          above %.0f%% of the filesystem, down to %.0f%%\n",
		       jnum(cache, "gc_high_percent"), jnum(cache, "gc_low_percent"));
	}
	q = json_object_get(st, "queues");
	printf("Pulls:       %.0f running (at most %.0f at once), %.0f queued, %.0f waiting for the throttle\n",
	       jnum(q, "pulls_running"), jnum(q, "max_parallel_pulls"), jnum(q, "pulls_queued"),
	       jnum(q, "throttle_waiting"));

	pulls = json_object_get(st, "pulls");
	printf("\nPulls in flight:%s\n", json_array_size(pulls) ? "" : " none");
	if (json_array_size(pulls)) {
		pt = table_new(6, "", "", "", "", "", "");
		if (!pt)
			return EXIT_FAILED;
		table_add(pt, (const char *const[]){ "REFERENCE", "STATE", "PROGRESS", "LAYERS", "ELAPSED",
						     "WAITERS" });
		json_array_foreach(pulls, i, e) {
			char progress[96], layers[32], elapsed[32], waiters[16];
			double total = jnum(e, "bytes_total");
			format_size(jnum(e, "bytes_done"), a, sizeof(a));
			format_size(total, b, sizeof(b));
			if (total > 0)
				snprintf(progress, sizeof(progress), "%s / %s (%.0f%%)", a, b,
					 100.0 * jnum(e, "bytes_done") / total);
			else
				snprintf(progress, sizeof(progress), "%s", "-");
			snprintf(layers, sizeof(layers), "%.0f/%.0f", jnum(e, "layers_done"),
				 jnum(e, "layers_total"));
			snprintf(elapsed, sizeof(elapsed), "%.1fs", jnum(e, "elapsed_s"));
			snprintf(waiters, sizeof(waiters), "%.0f", jnum(e, "waiters"));
			table_add(pt, (const char *const[]){ jstr(e, "reference"), jstr(e, "state"), progress,
							     layers, elapsed, waiters });
		}
		table_print(pt, stdout);
	}

	backoff = json_object_get(st, "backoff");
	printf("\nBack-off:%s\n", json_array_size(backoff) ? "" : " none");
	if (json_array_size(backoff)) {
		bt = table_new(6, "", "", "", "", "", "");
		if (!bt)
			return EXIT_FAILED;
		table_add(bt, (const char *const[]){ "REFERENCE", "TIME LEFT", "DELAY", "FAILURES", "ERRNO",
						     "MESSAGE" });
		json_array_foreach(backoff, i, e) {
			char left[32], delay[32], failures[16];
			snprintf(left, sizeof(left), "%.1fs", jnum(e, "remaining_s"));
			format_duration(jnum(e, "delay_s"), delay, sizeof(delay));
			snprintf(failures, sizeof(failures), "%.0f", jnum(e, "failures"));
			table_add(bt, (const char *const[]){ jstr(e, "reference"), left, delay, failures,
							     jstr(e, "errno"), jstr(e, "message") });
		}
		table_print(bt, stdout);
	}
	return 0;
}

/* ---------------------------------------------------------------- events */

static void events_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] events [-f] [--image REF] [--reason R]\n"
	      "                 [--since T] [--json] [--log FILE]\n"
	      "\n"
	      "Show the events log, one event per line, the way `kubectl get events`\n"
	      "does: LAST SEEN (how long ago), TYPE (Normal or Warning), REASON\n"
	      "(Pulling, Pulled, Failed, BackOff, ErrImageNeverPull, InspectFailed),\n"
	      "OBJECT (image/REFERENCE) and MESSAGE; ERRNO is added to a failure's\n"
	      "message.  The log is the one the daemon names in its status.\n"
	      "\n"
	      "Options:\n"
	      "  -f, --follow       keep printing events as they are written, across log\n"
	      "                     rotation and truncation (like tail -F)\n"
	      "      --image REF    only events of this image; REF without tag or digest\n"
	      "                     means every tag of that repository\n"
	      "      --reason R     only events with this reason (case does not matter)\n"
	      "      --since T      only events since T: a duration back from now (30s,\n"
	      "                     10m, 1h30m, 2d) or a time (2026-11-22T04:36:30Z,\n"
	      "                     2026-11-22)\n"
	      "      --json         the matching events as they are in the log (JSON Lines)\n"
	      "      --log FILE     read FILE instead of the log the daemon names (no\n"
	      "                     daemon needed, e.g. for a rotated log)\n"
	      "  -h, --help         show this help\n",
	      f);
}

static void event_cells(const json_t *ev, double now, char *age, size_t agelen, char **object,
			char **message)
{
	const char *msg = jstr(ev, "message"), *en = jstr(ev, "errno");

	format_age(jstr(ev, "time"), now, age, agelen);
	/* kubectl prints "5m", not "5m ago", in its LAST SEEN column. */
	if (strlen(age) > 4 && !strcmp(age + strlen(age) - 4, " ago"))
		age[strlen(age) - 4] = '\0';
	if (asprintf(object, "image/%s", jstr(ev, "image") ? jstr(ev, "image") : "-") < 0)
		*object = NULL;
	if (en && (!msg || !strstr(msg, en))) {
		if (asprintf(message, "%s (%s)", msg ? msg : "", en) < 0)
			*message = NULL;
	} else {
		*message = strdup(msg ? msg : "");
	}
	/* One event, one line. */
	for (char *p = *message; p && *p; p++)
		if (*p == '\n' || *p == '\r' || *p == '\t')
			*p = ' ';
}

static int event_table_add(struct table *t, const json_t *ev, double now)
{
	_cleanup_free_ char *object = NULL, *message = NULL;
	char age[64];

	event_cells(ev, now, age, sizeof(age), &object, &message);
	return table_add(t, (const char *const[]){ age, jstr(ev, "type"), jstr(ev, "reason"), object,
						   message });
}

/* Follows path like tail -F from offset in fd (which may be -1 if the log
 * did not exist yet).  Never returns except on error. */
static int events_follow(const char *path, int fd, const struct event_filter *f, bool json,
			 struct table *t)
{
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	struct stat st_fd, st_path;

	buf = malloc(EVENT_LINE_MAX + 1);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n;
		char *nl;

		if (fd >= 0) {
			n = read(fd, buf + len, EVENT_LINE_MAX - len);
			if (n < 0 && errno != EINTR)
				return negative_errno();
			if (n > 0) {
				len += (size_t)n;
				while ((nl = memchr(buf, '\n', len))) {
					*nl = '\0';
					json_t *ev = event_parse(buf);
					if (ev && event_matches(ev, f)) {
						if (json) {
							fputs(buf, stdout);
							putchar('\n');
						} else {
							_cleanup_free_ char *object = NULL, *message = NULL;
							char age[64];
							event_cells(ev, now_realtime(), age, sizeof(age), &object,
								    &message);
							table_print_row(t,
									(const char *const[]){
										age, jstr(ev, "type"),
										jstr(ev, "reason"), object,
										message },
									stdout);
						}
						fflush(stdout);
					}
					json_decref(ev);
					len -= (size_t)(nl + 1 - buf);
					memmove(buf, nl + 1, len);
				}
				if (len == EVENT_LINE_MAX)
					len = 0; /* a line that long is not an event */
				continue;
			}
		}
		/* At the end: rotated, truncated, or just nothing new? */
		poll(NULL, 0, 250);
		if (stat(path, &st_path) < 0)
			continue;
		if (fd >= 0 && fstat(fd, &st_fd) == 0) {
			if (st_fd.st_ino == st_path.st_ino && st_fd.st_dev == st_path.st_dev) {
				if (st_path.st_size < lseek(fd, 0, SEEK_CUR)) {
					lseek(fd, 0, SEEK_SET);
					len = 0;
				}
				continue;
			}
			/* Rotated: whatever the old file still had was read
			 * above; carry on with the new one from its start. */
			close(fd);
		}
		fd = open(path, O_RDONLY | O_CLOEXEC);
		len = 0;
	}
}

static int cmd_events(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "follow", no_argument, NULL, 'f' },
		{ "image", required_argument, NULL, 'i' },
		{ "reason", required_argument, NULL, 'r' },
		{ "since", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "log", required_argument, NULL, 'l' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *st = NULL;
	_cleanup_table_ struct table *t = NULL;
	_cleanup_free_ char *line = NULL, *image = NULL;
	_cleanup_fclose_ FILE *f = NULL;
	struct event_filter filt = { 0 };
	const char *log = NULL;
	bool follow = false, json = false;
	double now = now_realtime();
	size_t cap = 0;
	ssize_t n;
	int c, fd = -1;

	while ((c = getopt_long(argc, argv, "+hf", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			events_usage(stdout);
			return 0;
		case 'f':
			follow = true;
			break;
		case 'i': {
			_cleanup_reference_ struct reference *r = NULL;
			if (reference_parse(optarg, 0, &r) < 0)
				return usage_error("events", "invalid reference \"%s\"", optarg);
			free(image);
			if (r->tag || r->digest) {
				image = reference_to_string(r);
				filt.image_exact = true;
			} else {
				image = reference_repository(r);
				filt.image_exact = false;
			}
			if (!image)
				return EXIT_FAILED;
			filt.image = image;
			break;
		}
		case 'r':
			filt.reason = optarg;
			break;
		case 's': {
			double d;
			if (parse_duration(optarg, &d) == 0)
				filt.since = now - d;
			else if (parse_rfc3339(optarg, &d) == 0)
				filt.since = d;
			else
				return usage_error("events", "invalid --since \"%s\" (a duration like 10m or a time like 2026-11-22T04:36:30Z)", optarg);
			break;
		}
		case 'j':
			json = true;
			break;
		case 'l':
			log = optarg;
			break;
		default:
			return usage_error("events", "bad option");
		}
	}
	if (optind < argc)
		return usage_error("events", "unexpected argument \"%s\"", argv[optind]);
	if (!log) {
		if (status_load(&st) < 0)
			return EXIT_FAILED;
		log = jstr(st, "events_log");
		if (!log) {
			err_msg("the daemon at \"%s\" writes no events log", mount_dir());
			return EXIT_FAILED;
		}
	}
	t = table_new(5, "LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE");
	if (!t)
		return EXIT_FAILED;
	table_add(t, (const char *const[]){ "LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE" });

	f = fopen(log, "re");
	if (!f && (errno != ENOENT || !follow)) {
		if (errno == ENOENT && !json) {
			/* No event yet is not an error. */
			if (!follow)
				return 0;
		}
		err_msg("cannot read the events log \"%s\": %s", log, strerror(errno));
		return EXIT_FAILED;
	}
	while (f && (n = getline(&line, &cap, f)) > 0) {
		json_t *ev;
		if (line[n - 1] != '\n') {
			/* A line still being written: leave it for -f. */
			fseeko(f, -n, SEEK_CUR);
			break;
		}
		line[n - 1] = '\0';
		ev = event_parse(line);
		if (!ev)
			continue;
		if (event_matches(ev, &filt)) {
			if (json)
				printf("%s\n", line);
			else
				event_table_add(t, ev, now);
		}
		json_decref(ev);
	}
	if (!json && (t->nrows > 1 || follow))
		table_print(t, stdout);
	if (!json && t->nrows == 1 && !follow)
		fprintf(stderr, "No events found.\n");
	fflush(stdout);
	if (!follow)
		return 0;
	if (f) {
		fd = dup(fileno(f));
		if (fd >= 0)
			lseek(fd, ftello(f), SEEK_SET);
	}
	{
		int r = events_follow(log, fd, &filt, json, t);
		err_msg("following \"%s\": %s", log, strerror(-r));
	}
	return EXIT_FAILED;
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] COMMAND [ARGS...]\n"
	      "Control a running pullfs: pre-pull images, see what is cached, why a\n"
	      "pull failed and how pulls progress, and clean up the cache.\n"
	      "\n"
	      "Commands:\n"
	      "  pull REFERENCE...   pull images through the mount, with progress\n"
	      "  ls [--json]         list cached images (digest, size, last use, pinned)\n"
	      "  inspect REFERENCE   show an image's digest, platform, layers and config\n"
	      "  rm REFERENCE...     remove images from the cache\n"
	      "  gc [--to BYTES]     remove least recently used images now\n"
	      "  status [--json]     pulls in flight, back-off, queues, cache usage\n"
	      "  events [-f] [--image REF] [--reason R] [--since T]\n"
	      "                      the events log, like `kubectl get events`\n"
	      "  help [COMMAND]      show this help, or a command's\n"
	      "\n"
	      "Options:\n"
	      "  -m, --mount MOUNT   where pullfs is mounted (default: $PULLFS_MOUNT,\n"
	      "                      else " DEFAULT_MOUNT ")\n"
	      "  -s, --socket PATH   the control socket (default: the one the daemon\n"
	      "                      names in MOUNT/.pullfs/status)\n"
	      "  -h, --help          show this help\n"
	      "  -V, --version       show the version\n"
	      "\n"
	      "pull, ls, status and events read the mount and work for every user the\n"
	      "mount lets in; inspect, rm and gc use the control socket, root only.\n"
	      "`pullfsctl COMMAND --help` describes each command.  Exit status: 0 on\n"
	      "success, 1 on failure, 2 on bad usage.\n",
	      f);
}

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	void (*help)(FILE *f);
};

static const struct command commands[] = {
	{ "pull", cmd_pull, pull_usage },
	{ "ls", cmd_ls, ls_usage },
	{ "inspect", cmd_inspect, inspect_usage },
	{ "rm", cmd_rm, rm_usage },
	{ "gc", cmd_gc, gc_usage },
	{ "status", cmd_status, status_usage },
	{ "events", cmd_events, events_usage },
};

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "mount", required_argument, NULL, 'm' },
		{ "socket", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	const struct command *cmd;
	int c;

	arg_mount = getenv("PULLFS_MOUNT");
	if (!arg_mount || !*arg_mount)
		arg_mount = DEFAULT_MOUNT;
	/* "+": stop at the command, whose options are its own. */
	while ((c = getopt_long(argc, argv, "+hVm:s:", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("pullfsctl %s\n", PULLFS_VERSION);
			return 0;
		case 'm':
			arg_mount = optarg;
			break;
		case 's':
			arg_socket = optarg;
			break;
		default:
			return usage_error(NULL, "bad option");
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[optind], "help")) {
		if (optind + 1 < argc) {
			cmd = find_command(argv[optind + 1]);
			if (!cmd)
				return usage_error(NULL, "unknown command \"%s\"", argv[optind + 1]);
			cmd->help(stdout);
		} else {
			usage(stdout);
		}
		return 0;
	}
	cmd = find_command(argv[optind]);
	if (!cmd)
		return usage_error(NULL, "unknown command \"%s\"", argv[optind]);
	argc -= optind;
	argv += optind;
	optind = 1;
	return cmd->run(argc, argv);
}
