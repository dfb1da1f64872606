/* The progress of "pullfsctl pull": a thread per image does the lookup
 * through the mount while the main thread polls the status document and
 * draws either a redrawn block of lines on a terminal or plain lines. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errname.h"
#include "pullfsctl.h"
#include "units.h"

void *job_run(void *p)
{
	struct job *j = p;
	struct stat st;
	int err = 0;

	if (stat(j->path, &st) < 0)
		err = -errno;
	else if (!S_ISDIR(st.st_mode))
		err = -ENOTDIR;
	j->err = err;
	j->finished = now_monotonic();
	__atomic_store_n(&j->phase, JOB_DONE, __ATOMIC_RELEASE);
	return NULL;
}

/* The rate from bytes done, smoothed; restart: a new count begins.  Until
 * a window of its own has passed, the rate is average (the bytes per
 * second since the transfer began, when known, else 0), so that a pull
 * shorter than a window shows one too. */
static void job_rate(struct job *j, double done, double now, bool restart, double average)
{
	if (restart || done < j->rate_bytes) {
		j->rate_bytes = done;
		j->rate_time = now;
		j->rate_measured = false;
	} else if (now - j->rate_time >= 0.5) {
		double r = (done - j->rate_bytes) / (now - j->rate_time);
		j->rate = j->rate_measured ? 0.5 * j->rate + 0.5 * r : r;
		j->rate_measured = true;
		j->rate_bytes = done;
		j->rate_time = now;
	}
	if (!j->rate_measured)
		j->rate = average > 0 ? average : 0;
}

void job_update(struct job *j, const json_t *status, double now)
{
	json_t *pulls = json_object_get(status, "pulls"), *p;
	size_t i;

	json_array_foreach(pulls, i, p)
	{
		const char *ref = jstr(p, "reference"), *state = jstr(p, "state");
		double done;

		if (!ref || strcmp(ref, j->reference))
			continue;
		done = jnum(p, "bytes_done");
		double elapsed = jnum(p, "elapsed_s");
		job_rate(j, done, now, !j->seen, elapsed > 0 ? done / elapsed : 0);
		j->seen = true;
		snprintf(j->state, sizeof(j->state), "%s", state ? state : "pulling");
		j->bytes_done = done;
		j->bytes_total = jnum(p, "bytes_total");
		j->layers_done = jnum(p, "layers_done");
		j->layers_total = jnum(p, "layers_total");
		return;
	}
}

/* Tells the daemon that someone waits for the whole image: its completion
 * starts (or tries again) now, not after the start-up window or back-off
 * that leave the link to the image's readers.  Only root may ask (the
 * control socket); for others the window ends on its own. */
static void job_hurry(struct job *j)
{
	_cleanup_json_ json_t *req =
		json_pack("{s:s, s:s}", "op", "pull", "reference", j->reference);
	_cleanup_json_ json_t *a = NULL;

	j->hurried = true;
	if (req)
		(void)control_call(req, &a);
}

void job_follow_completion(struct job *j, const json_t *status, double now)
{
	const json_t *im = status_entry(status, "images", j->reference);
	double local;

	if (j->err || !im || !json_is_false(json_object_get(im, "complete"))) {
		j->settled = true;
		return;
	}
	if (!json_is_true(json_object_get(im, "completing"))) {
		j->err = -EIO;
		j->reported = true;
		j->settled = true;
		j->finished = now;
		err_msg("pull %s: %s: the background completion of the image stopped before it "
			"was complete (see LazyFetchFailed in the events log); its files are "
			"fetched when read",
			j->reference, errno_name(j->err));
		return;
	}
	if (!j->hurried && geteuid() == 0)
		job_hurry(j);
	local = jnum(im, "bytes_local");
	job_rate(j, local, now, strcmp(j->state, "completing") != 0, 0);
	snprintf(j->state, sizeof(j->state), "%s", "completing");
	j->seen = true;
	j->bytes_done = local;
	j->bytes_total = jnum(im, "bytes_total");
	j->layers_total = 0;
	j->finished = now;
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
		snprintf(layers, sizeof(layers), "layers %.0f/%.0f", j->layers_done,
			 j->layers_total);
	if ((strcmp(j->state, "downloading") && strcmp(j->state, "completing")) ||
	    j->bytes_total <= 0) {
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

void job_result_text(const struct job *j, const json_t *status, char *buf, size_t len)
{
	const json_t *im = status ? status_entry(status, "images", j->reference) : NULL;
	char size[48] = "", took[32], dl[96] = "";

	snprintf(took, sizeof(took), "%.1fs", j->finished - j->started);
	if (j->err) {
		snprintf(buf, len, "failed: %s", errno_name(j->err));
		return;
	}
	/* Two sizes, each saying what it counts: the image on disk (as ls
	 * shows it) and what this pull downloaded, with its rate. */
	if (im && jhas(im, "size")) {
		format_size(jnum(im, "size"), size, sizeof(size));
		strncat(size, " on disk", sizeof(size) - strlen(size) - 1);
	}
	if (j->seen && j->bytes_total > 0 && j->finished > j->started) {
		char got[32], rate[32];
		format_size(j->bytes_total, got, sizeof(got));
		format_size(j->bytes_total / (j->finished - j->started), rate, sizeof(rate));
		snprintf(dl, sizeof(dl), "%s%s downloaded at %s/s,", size[0] ? ", " : "", got,
			 rate);
	}
	snprintf(buf, len, "done %s%s%s%s in %s",
		 im && jstr(im, "digest") ? jstr(im, "digest") : "", size[0] || dl[0] ? "  " : "",
		 size, dl, took);
}

void draw_tty(struct job *jobs, size_t n, const json_t *status, size_t *drawn)
{
	int cols = terminal_columns();
	size_t refw = 0;

	for (size_t i = 0; i < n; i++)
		refw = MAX(refw, strlen(esc(jobs[i].reference)));
	refw = MIN(refw, (size_t)cols / 3);
	if (*drawn)
		printf("\033[%zuA", *drawn);
	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		char text[512], ref[256];
		const char *er = esc(j->reference);
		size_t rl = strlen(er);

		if (job_over(j))
			job_result_text(j, status, text, sizeof(text));
		else
			job_progress_text(j, true, MAX(10, cols - (int)refw - 60), text,
					  sizeof(text));
		if (rl > refw)
			snprintf(ref, sizeof(ref), "…%s", er + rl - refw + 1);
		else
			snprintf(ref, sizeof(ref), "%s", er);
		/* Progress is cut to the width so that redrawing stays in
		 * place; a final result is printed whole. */
		printf("\r\033[K%-*s  %.*s\n", (int)refw, ref,
		       job_over(j) ? (int)sizeof(text) : MAX(0, cols - (int)refw - 3), esc(text));
	}
	*drawn = n;
	fflush(stdout);
}

void draw_plain(struct job *jobs, size_t n, double now)
{
	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		char text[512];
		bool changed;

		if (!j->seen || job_over(j))
			continue;
		changed = strcmp(j->state, j->printed_state) || j->layers_done != j->printed_layers;
		if (!changed && now - j->printed_time < 5)
			continue;
		job_progress_text(j, false, 0, text, sizeof(text));
		printf("%s: %s\n", esc(j->reference), esc(text));
		snprintf(j->printed_state, sizeof(j->printed_state), "%s", j->state);
		j->printed_layers = j->layers_done;
		j->printed_time = now;
	}
	fflush(stdout);
}

void job_report_failure(const struct job *j, const json_t *status)
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
	} else if (status && (b = status_entry(status, "backoff", j->reference))) {
		reason = "BackOff";
		msg = jstr(b, "message");
	}
	if (msg)
		err_msg("pull %s: %s: %s: %s", j->reference, errno_name(j->err),
			reason ? reason : "Failed", msg);
	else
		err_msg("pull %s: %s: %s", j->reference, errno_name(j->err), strerror(-j->err));
}
