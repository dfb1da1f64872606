/* The daemon's options.  Each is one row of the table below: its name,
 * its kind (which says how a value is checked and stored), where in the
 * settings it goes or the function that applies it, its help and its
 * default as --help shows them.  The command line, "-o key=value" and
 * the config file all look options up in that table, so an option is
 * spelled, checked and documented in one place. */
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "access.h"
#include "config.h"
#include "conffile.h"
#include "errname.h"
#include "hosts.h"
#include "macro.h"
#include "units.h"

#define EXIT_USAGE 2

enum opt_kind {
	KIND_FLAG,     /* bool; as key=value it takes true or false */
	KIND_STRING,   /* char * */
	KIND_PATH,     /* char *, made absolute */
	KIND_UINT,     /* unsigned, digits only, min to max */
	KIND_DURATION, /* unsigned seconds, digits only, min to max */
	KIND_SIZE,     /* uint64_t bytes, units.h's grammar */
	KIND_RATE,     /* double, 0 or 0.001 to 1e6 */
	KIND_LIST,     /* char ** and its size_t count at off_n; repeatable */
};

/* Where an option may be given: every one on the command line (long, or
 * short when it has a letter), most as -o keys and config file keys. */
enum {
	IN_MOUNT = 1 << 0, /* -o key=value */
	IN_FILE = 1 << 1,  /* config file key */
	NO_LONG = 1 << 2,  /* -o itself: a letter only */
	EVERYWHERE = IN_MOUNT | IN_FILE,
};

#define NO_FIELD SIZE_MAX

struct opt {
	const char *name;
	int letter; /* short option, or 0 */
	enum opt_kind kind;
	unsigned where;
	size_t off;   /* of the field in struct settings, or NO_FIELD */
	size_t off_n; /* KIND_LIST: of its count */
	unsigned min, max;
	/* Applies the option instead of storing it at off: v is the value
	 * (absolute for KIND_PATH, NULL for a flag).  Returns 0 or -errno
	 * with the reason in errbuf. */
	int (*set)(struct settings *s, const struct opt *o, const char *v, char *errbuf,
		   size_t errlen);
	const char *arg;  /* the value's name in --help */
	const char *def;  /* the default in --help, or NULL */
	const char *help; /* one sentence, wrapped by --help */
};

static int set_debug(struct settings *s, const struct opt *o, const char *v, char *errbuf,
		     size_t errlen);
static int set_config(struct settings *s, const struct opt *o, const char *v, char *errbuf,
		      size_t errlen);
static int set_pull_policy(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			   size_t errlen);
static int set_insecure(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			size_t errlen);
static int set_lazy(struct settings *s, const struct opt *o, const char *v, char *errbuf,
		    size_t errlen);
static int set_access_rule(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			   size_t errlen);
static int set_connect_timeout(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			       size_t errlen);
static int set_lazy_completion_delay(struct settings *s, const struct opt *o, const char *v,
				     char *errbuf, size_t errlen);
static int set_profile_window(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			      size_t errlen);
static int set_low_speed_timeout(struct settings *s, const struct opt *o, const char *v,
				 char *errbuf, size_t errlen);
static int set_gc_min_age(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			  size_t errlen);
static int set_min_transfer_rate(struct settings *s, const struct opt *o, const char *v,
				 char *errbuf, size_t errlen);
static int set_pull_slot_share(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			       size_t errlen);
static int set_mount_options(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			     size_t errlen);
static int set_nothing(struct settings *s, const struct opt *o, const char *v, char *errbuf,
		       size_t errlen);

#define AT(field) offsetof(struct settings, field)

/* In the order of --help. */
static const struct opt options[] = {
	{ "foreground", 'f', KIND_FLAG, EVERYWHERE, AT(foreground),
	  .help = "stay in the foreground" },
	{ "supervise", 0, KIND_FLAG, EVERYWHERE, AT(supervise),
	  .help = "the default: serve from a process a small supervisor restarts when it dies "
		  "and replaces on `pullfsctl upgrade`, the mount staying up" },
	{ "no-supervise", 0, KIND_FLAG, EVERYWHERE, AT(no_supervise),
	  .help = "serve from one process, without a supervisor: a kill -9 of it leaves the "
		  "mount stale (for debugging)" },
	{ "debug", 'd', KIND_FLAG, EVERYWHERE, NO_FIELD, .set = set_debug,
	  .help = "print every FUSE request (implies -f)" },
	{ "cache", 0, KIND_PATH, EVERYWHERE, AT(mo.cache_dir), .arg = "DIR",
	  .def = "/var/lib/pullfs for root, else $XDG_CACHE_HOME/pullfs",
	  .help = "cache directory" },
	{ "events-log", 0, KIND_PATH, EVERYWHERE, AT(mo.events_log), .arg = "FILE",
	  .def = "CACHE/events.log", .help = "events log, JSON Lines" },
	{ "events-max-bytes", 0, KIND_SIZE, EVERYWHERE, AT(mo.events_max_bytes), .def = "10M",
	  .help = "rename the events log to FILE.1 before a line would take it past this size; "
		  "0 = never" },
	{ "events-keep", 0, KIND_UINT, EVERYWHERE, AT(mo.events_keep), .min = 1, .max = 1000,
	  .def = "1", .help = "rotated events logs kept, FILE.1 (the newest) to FILE.N" },
	{ "events-burst", 0, KIND_UINT, EVERYWHERE, AT(mo.events_burst), .min = 0, .max = 1000000,
	  .def = STRINGIFY(EVENTS_DEFAULT_BURST),
	  .help = "events of one reason a user other than root may cause at once before they are "
		  "dropped and counted; 0 = no limit" },
	{ "events-per-minute", 0, KIND_UINT, EVERYWHERE, AT(mo.events_per_minute), .min = 1,
	  .max = 1000000, .def = STRINGIFY(EVENTS_DEFAULT_PER_MINUTE),
	  .help = "... and then per minute" },
	{ "pull-policy", 0, KIND_STRING, EVERYWHERE, NO_FIELD, .set = set_pull_policy,
	  .arg = "POLICY",
	  .help = "always, if-not-present or never for every image (default: the kubelet rule, "
		  "see README)" },
	{ "insecure-registry", 0, KIND_LIST, EVERYWHERE, AT(mo.insecure_hosts),
	  AT(mo.n_insecure_hosts), .set = set_insecure, .arg = "HOST[:PORT]",
	  .help = "speak plain HTTP to this registry" },
	{ "config", 0, KIND_PATH, IN_MOUNT, NO_FIELD, .set = set_config, .arg = "FILE",
	  .help = "read options from FILE (\"key = value\" lines, keys are the long options)" },
	{ "platform", 0, KIND_STRING, EVERYWHERE, AT(mo.platform), .arg = "OS/ARCH[/VARIANT]",
	  .help = "platform picked from multi-platform images (default: this machine)" },
	{ "max-concurrent-downloads", 0, KIND_UINT, EVERYWHERE, AT(mo.max_concurrent_downloads),
	  .min = 1, .max = 16, .def = "3", .help = "layers downloaded at once per pull" },
	{ "revalidate-interval", 0, KIND_DURATION, EVERYWHERE, AT(mo.revalidate_interval_s),
	  .min = 1, .max = 86400 * 365, .def = STRINGIFY(MANAGER_DEFAULT_REVALIDATE_S),
	  .help = "with pull policy Always, re-resolve a tag at most this often" },
	{ "pull-policy-rule", 0, KIND_LIST, EVERYWHERE, AT(mo.policy_rules), AT(mo.n_policy_rules),
	  .arg = "PATTERN=POLICY",
	  .help = "policy for references matching the glob PATTERN; the first match wins" },
	{ "backoff-initial", 0, KIND_DURATION, EVERYWHERE, AT(mo.backoff_initial_s), .min = 1,
	  .max = 86400, .def = "10", .help = "refuse a failed image for this long" },
	{ "backoff-max", 0, KIND_DURATION, EVERYWHERE, AT(mo.backoff_max_s), .min = 1, .max = 86400,
	  .def = "300", .help = "cap of the doubling back-off" },
	{ "registry-qps", 0, KIND_RATE, EVERYWHERE, AT(mo.registry_qps), .def = "5",
	  .help = "pull starts per second, 0 = no limit" },
	{ "registry-burst", 0, KIND_UINT, EVERYWHERE, AT(mo.registry_burst), .min = 1,
	  .max = 100000, .def = "10", .help = "pull starts allowed at once" },
	{ "pull-qps-fail-fast", 0, KIND_FLAG, EVERYWHERE, AT(mo.pull_qps_fail_fast),
	  .help = "fail pulls over the rate with EAGAIN instead of queueing them (the kubelet's "
		  "behaviour)" },
	{ "no-passthrough", 0, KIND_FLAG, EVERYWHERE, AT(fo.no_passthrough),
	  .help = "read large files through the daemon, not by FUSE passthrough (default: "
		  "passthrough where the kernel and privileges allow)" },
	{ "lazy", 0, KIND_STRING, EVERYWHERE, NO_FIELD, .set = set_lazy, .arg = "MODE",
	  .def = "auto",
	  .help = "auto: eStargz and zstd:chunked layers are published from their table of "
		  "contents and their files fetched when read; off: pulled whole before the "
		  "lookup returns" },
	{ "lazy-rule", 0, KIND_LIST, EVERYWHERE, AT(mo.lazy_rules), AT(mo.n_lazy_rules),
	  .arg = "PATTERN=MODE",
	  .help = "--lazy MODE for references matching the glob PATTERN; the first match wins" },
	{ "lazy-completion-delay", 0, KIND_DURATION, EVERYWHERE, NO_FIELD,
	  .set = set_lazy_completion_delay, .min = 0, .max = 3600,
	  .def = STRINGIFY(MANAGER_DEFAULT_LAZY_DELAY_S),
	  .help = "a lazily started image's background completion begins this long after "
		  "the image became usable (later while its readers fetch, sooner once they "
		  "went quiet), leaving the link to them; 0: at once" },
	{ "profile-window", 0, KIND_DURATION, EVERYWHERE, NO_FIELD, .set = set_profile_window,
	  .min = 0, .max = 600, .def = STRINGIFY(MANAGER_DEFAULT_PROFILE_WINDOW_S),
	  .help = "a lazily started image with no start profile records the files opened this "
		  "long after its first lookup, prefetched at its next cold lookup; 0: no "
		  "recording (stored profiles are still used)" },
	{ "max-parallel-pulls", 0, KIND_UINT, EVERYWHERE, AT(mo.max_parallel_pulls), .min = 1,
	  .max = 64, .def = "1: serialised", .help = "images pulled at once" },
	{ "pull-slot-share-after", 0, KIND_DURATION, EVERYWHERE, NO_FIELD, .min = 0, .max = 86400,
	  .set = set_pull_slot_share, .def = "60",
	  .help = "a pull slot held this long no longer holds back pulls from other registries; "
		  "0: never shared" },
	{ "max-names-per-user", 0, KIND_UINT, EVERYWHERE, AT(mo.max_names_per_user), .min = 1,
	  .max = 1u << 20, .def = STRINGIFY(MANAGER_DEFAULT_NAMES_PER_USER),
	  .help = "image names a user other than root may hold" },
	{ "max-namespace-nodes-per-user", 0, KIND_UINT, EVERYWHERE, AT(fo.max_ns_nodes_per_user),
	  .min = 1, .max = 1u << 24, .def = STRINGIFY(FS_DEFAULT_NS_NODES_PER_USER),
	  .help = "directories below images/ and layers/ that a user other than root may have "
		  "made and the kernel still holds; beyond it their oldest are evicted, and new "
		  "ones are refused to a user who keeps that many open" },
	{ "max-image-entries", 0, KIND_UINT, EVERYWHERE, AT(mo.max_image_entries), .min = 1,
	  .max = 100000000, .def = STRINGIFY(MANAGER_DEFAULT_IMAGE_ENTRIES),
	  .help = "entries an image's layers may have together (its tree's memory); more fail "
		  "with EFBIG" },
	{ "max-pulls-per-user", 0, KIND_UINT, EVERYWHERE, AT(mo.max_pulls_per_user), .min = 1,
	  .max = 1024, .def = STRINGIFY(MANAGER_DEFAULT_PULLS_PER_USER),
	  .help = "pulls a user other than root may start at once" },
	{ "pull-access-rule", 0, KIND_LIST, EVERYWHERE, AT(mo.pull_access_rules),
	  AT(mo.n_pull_access_rules), .set = set_access_rule, .arg = "PATTERN=WHO[,WHO...]",
	  .def = "everybody",
	  .help = "who may cause a pull of a reference matching the glob PATTERN that is not "
		  "cached: users (name or uid), groups (@name or @gid) or *; root always may; the "
		  "first match wins" },
	{ "private-access-rule", 0, KIND_LIST, EVERYWHERE, AT(mo.private_access_rules),
	  AT(mo.n_private_access_rules), .set = set_access_rule, .arg = "PATTERN=WHO[,WHO...]",
	  .def = "root only",
	  .help = "who may see an image matching PATTERN that was pulled with registry "
		  "credentials; the first match wins" },
	{ "auth-file", 0, KIND_PATH, EVERYWHERE, AT(auth_file), .arg = "FILE",
	  .def = "$DOCKER_CONFIG/config.json, else ~/.docker/config.json",
	  .help = "registry credentials, docker config.json format" },
	{ "connect-timeout", 0, KIND_DURATION, EVERYWHERE, NO_FIELD, .min = 1, .max = 3600,
	  .set = set_connect_timeout, .def = "10", .help = "give up connecting to a registry" },
	{ "low-speed-timeout", 0, KIND_DURATION, EVERYWHERE, NO_FIELD, .min = 1, .max = 3600,
	  .set = set_low_speed_timeout, .def = "30",
	  .help = "abort a transfer under 1 KiB/s for this long" },
	{ "min-transfer-rate", 0, KIND_SIZE, EVERYWHERE, NO_FIELD, .set = set_min_transfer_rate,
	  .def = "1K",
	  .help = "fail a blob transfer that brings less than SIZE bytes a second over a window, "
		  "whatever its resumes; 0: no floor" },
	{ "transfer-rate-window", 0, KIND_DURATION, EVERYWHERE, AT(mo.transfer_rate_window_s),
	  .min = 1, .max = 3600, .def = "30",
	  .help = "the window of --min-transfer-rate; at least --low-speed-timeout" },
	{ "cache-max-bytes", 0, KIND_SIZE, EVERYWHERE, AT(mo.cache_max_bytes),
	  .help = "disk budget of the cache (e.g. 20G); default: the size of the cache's "
		  "filesystem" },
	{ "gc-high-percent", 0, KIND_UINT, EVERYWHERE, AT(mo.gc_high_percent), .min = 1, .max = 100,
	  .def = "85", .help = "collect garbage above N % of the budget" },
	{ "gc-low-percent", 0, KIND_UINT, EVERYWHERE, AT(mo.gc_low_percent), .min = 1, .max = 100,
	  .def = "80", .help = "... down to N %" },
	/* 0 is allowed here: "no minimum" (tests, tiny nodes). */
	{ "gc-min-age", 0, KIND_DURATION, EVERYWHERE, NO_FIELD, .min = 0, .max = 86400 * 365,
	  .set = set_gc_min_age, .def = "120", .help = "never collect an image pulled less ago" },
	{ "user-cache-max-bytes", 0, KIND_SIZE, EVERYWHERE, AT(mo.user_cache_max_bytes),
	  .def = "a quarter of the budget",
	  .help = "bytes of images one user other than root may have in the cache (config and "
		  "compressed layers, each layer once per user)" },
	{ "pin-image", 0, KIND_LIST, EVERYWHERE, AT(mo.pins), AT(mo.n_pins), .arg = "PATTERN",
	  .help = "never collect references matching the glob" },
	{ "control-socket", 0, KIND_PATH, EVERYWHERE, AT(control_socket), .arg = "PATH",
	  .def = "CACHE/control.sock", .help = "control socket" },
	{ "snapshotter-socket", 0, KIND_PATH, EVERYWHERE, AT(snapshotter_socket), .arg = "PATH",
	  .help = "serve containerd's snapshots service on this socket, for a proxy plugin "
		  "(docs/containerd.md); its snapshots are kept in CACHE/snapshotter" },
	{ "o", 'o', KIND_STRING, NO_LONG, NO_FIELD, .set = set_mount_options, .arg = "OPTIONS",
	  .help = "FUSE mount options (e.g. allow_other); pullfs's own options too, as key=value "
		  "(cache=DIR, ...)" },
	{ "help", 'h', KIND_FLAG, 0, NO_FIELD, .set = set_nothing, .help = "show this help" },
	{ "version", 'V', KIND_FLAG, 0, NO_FIELD, .set = set_nothing, .help = "show the version" },
};

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("pullfs: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (see pullfs --help)\n", stderr);
	exit(EXIT_USAGE);
}

static void out_of_memory(void) __attribute__((noreturn));

/* Before the daemon runs, nothing is worth going on without memory. */
static void out_of_memory(void)
{
	fputs("pullfs: out of memory\n", stderr);
	exit(1);
}

static char *xstrdup(const char *s)
{
	char *d = strdup(s);

	if (!d)
		out_of_memory();
	return d;
}

/* --------------------------------------------------------------- values */

/* Each parser returns 0, or -EINVAL with the reason in errbuf: the
 * caller says where the value came from. */

static int invalid_value(const char *name, const char *v, char *errbuf, size_t errlen)
{
	return errbuf_fail(-EINVAL, errbuf, errlen, "invalid value \"%s\" for %s", v, name);
}

/* Digits only, o->min to o->max. */
static int option_uint(const struct opt *o, const char *v, unsigned *ret, char *errbuf,
		       size_t errlen)
{
	uint64_t n;
	int r = parse_uint64(v, &n);

	if (r == -EINVAL)
		return invalid_value(o->name, v, errbuf, errlen);
	if (r < 0 || n < o->min || n > o->max)
		return errbuf_fail(-EINVAL, errbuf, errlen,
				   "%s must be between %u and %u, not \"%s\"", o->name, o->min,
				   o->max, v);
	*ret = (unsigned)n;
	return 0;
}

/* Pull starts per second: 0 (no limit), or 0.001 to 1e6 -- below that,
 * the token bucket's interval does not fit its clock. */
static int option_rate(const struct opt *o, const char *v, double *ret, char *errbuf, size_t errlen)
{
	size_t n = decimal_len(v);
	double q;

	if (n == 0 || v[n])
		return invalid_value(o->name, v, errbuf, errlen);
	q = strtod(v, NULL);
	if (q != 0 && (q < 0.001 || q > 1e6))
		return errbuf_fail(-EINVAL, errbuf, errlen,
				   "%s must be 0, or between 0.001 and 1000000, not \"%s\"",
				   o->name, v);
	*ret = q;
	return 0;
}

static int parse_flag(const char *name, const char *v, bool *ret, char *errbuf, size_t errlen)
{
	if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1"))
		*ret = true;
	else if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "0"))
		*ret = false;
	else
		return errbuf_fail(-EINVAL, errbuf, errlen, "%s must be true or false", name);
	return 0;
}

/* Paths are kept absolute, resolved against the working directory at
 * start: the daemon moves to / once it serves, and opens some of them
 * only then (the events log on SIGHUP, the control socket's default). */
static int absolute_path(const char *name, const char *v, char **ret, char *errbuf, size_t errlen)
{
	_cleanup_free_ char *cwd = NULL;

	if (v[0] == '/') {
		*ret = xstrdup(v);
		return 0;
	}
	cwd = getcwd(NULL, 0);
	if (!cwd)
		return errbuf_fail(negative_errno(), errbuf, errlen,
				   "cannot resolve %s \"%s\": working directory: %s", name, v,
				   strerror(errno));
	while (v[0] == '.' && v[1] == '/')
		v += 2 + strspn(v + 2, "/");
	if (!strcmp(v, "."))
		v = "";
	if (asprintf(ret, "%s%s%s", cwd, *v && strcmp(cwd, "/") ? "/" : "", v) < 0)
		out_of_memory();
	return 0;
}

/* ------------------------------------------------------------- storing */

static void *field(struct settings *s, size_t off)
{
	return (char *)s + off;
}

/* The manager's options hold const strings; the settings own them. */
static void set_string(struct settings *s, const struct opt *o, char *v)
{
	char **f = field(s, o->off);

	free(*f);
	*f = v;
}

static void list_append(struct settings *s, const struct opt *o, const char *v)
{
	char ***list = field(s, o->off);
	size_t *n = field(s, o->off_n);
	char **nv = realloc(*list, (*n + 1) * sizeof(**list));

	if (!nv)
		out_of_memory();
	*list = nv;
	(*list)[(*n)++] = xstrdup(v);
}

static int set_debug(struct settings *s, const struct opt *o, const char *v, char *errbuf,
		     size_t errlen)
{
	s->fo.debug = s->foreground = true;
	return 0;
}

static int set_pull_policy(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			   size_t errlen)
{
	if (pull_policy_parse(v, &s->mo.pull_policy) < 0)
		return errbuf_fail(-EINVAL, errbuf, errlen,
				   "invalid pull policy \"%s\" (always, if-not-present, never)", v);
	return 0;
}

static int set_lazy(struct settings *s, const struct opt *o, const char *v, char *errbuf,
		    size_t errlen)
{
	if (strcmp(v, "auto") != 0 && strcmp(v, "off") != 0)
		return errbuf_fail(-EINVAL, errbuf, errlen, "invalid %s mode \"%s\" (auto, off)",
				   o->name, v);
	s->mo.no_lazy = strcmp(v, "off") == 0;
	return 0;
}

static int set_insecure(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			size_t errlen)
{
	if (!hosts_name_is_sane(v))
		return errbuf_fail(-EINVAL, errbuf, errlen, "invalid registry host \"%s\" for %s",
				   v, o->name);
	list_append(s, o, v);
	return 0;
}

static int set_access_rule(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			   size_t errlen)
{
	char why[256];

	if (access_rule_check(v, why, sizeof(why)) < 0)
		return errbuf_fail(-EINVAL, errbuf, errlen, "%s: %s", o->name, why);
	list_append(s, o, v);
	return 0;
}

static int set_connect_timeout(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			       size_t errlen)
{
	unsigned n = 0;
	int r = option_uint(o, v, &n, errbuf, errlen);

	if (r == 0)
		s->mo.connect_timeout_ms = (long)n * 1000;
	return r;
}

static int set_lazy_completion_delay(struct settings *s, const struct opt *o, const char *v,
				     char *errbuf, size_t errlen)
{
	unsigned n = 0;
	int r = option_uint(o, v, &n, errbuf, errlen);

	if (r == 0)
		s->mo.lazy_completion_delay_ms = n ? (long)n * 1000 : -1;
	return r;
}

static int set_profile_window(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			      size_t errlen)
{
	unsigned n = 0;
	int r = option_uint(o, v, &n, errbuf, errlen);

	if (r == 0)
		s->mo.profile_window_ms = n ? (long)n * 1000 : -1;
	return r;
}

static int set_low_speed_timeout(struct settings *s, const struct opt *o, const char *v,
				 char *errbuf, size_t errlen)
{
	unsigned n = 0;
	int r = option_uint(o, v, &n, errbuf, errlen);

	if (r == 0)
		s->mo.low_speed_time_s = n;
	return r;
}

/* The manager reads 0 as its default; "--pull-slot-share-after 0" means
 * never. */
static int set_pull_slot_share(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			       size_t errlen)
{
	unsigned n = 0;
	int r = option_uint(o, v, &n, errbuf, errlen);

	if (r == 0)
		s->mo.pull_slot_share_s = n ? (int64_t)n : -1;
	return r;
}

/* The manager reads 0 as its default; "--min-transfer-rate 0" means
 * none. */
static int set_min_transfer_rate(struct settings *s, const struct opt *o, const char *v,
				 char *errbuf, size_t errlen)
{
	uint64_t n;

	if (parse_size(v, &n) < 0 || n > INT64_MAX)
		return invalid_value(o->name, v, errbuf, errlen);
	s->mo.min_transfer_rate = n ? (int64_t)n : -1;
	return 0;
}

/* The manager reads 0 as its default; "--gc-min-age 0" means none. */
static int set_gc_min_age(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			  size_t errlen)
{
	unsigned n = 0;
	int r = option_uint(o, v, &n, errbuf, errlen);

	if (r == 0) {
		s->mo.gc_min_age_s = n;
		s->mo.gc_no_min_age = n == 0;
	}
	return r;
}

/* --help and --version act in parse_command_line(). */
static int set_nothing(struct settings *s, const struct opt *o, const char *v, char *errbuf,
		       size_t errlen)
{
	return 0;
}

/* One option from the command line, -o or the config file: v is NULL for
 * a flag.  Returns 0, or -errno with a one-line reason in errbuf. */
static int apply_option(struct settings *s, const struct opt *o, const char *v, char *errbuf,
			size_t errlen)
{
	_cleanup_free_ char *path = NULL;
	enum opt_kind kind = o->kind;
	int r;

	if (kind != KIND_FLAG && (!v || !*v))
		return errbuf_fail(-EINVAL, errbuf, errlen, "%s needs a value", o->name);
	if (kind == KIND_PATH) {
		r = absolute_path(o->name, v, &path, errbuf, errlen);
		if (r < 0)
			return r;
		v = path;
	}
	if (o->set)
		return o->set(s, o, v, errbuf, errlen);

	switch (kind) {
	case KIND_FLAG:
		*(bool *)field(s, o->off) = true;
		return 0;
	case KIND_PATH:
		set_string(s, o, TAKE_PTR(path));
		return 0;
	case KIND_STRING:
		set_string(s, o, xstrdup(v));
		return 0;
	case KIND_UINT:
	case KIND_DURATION:
		return option_uint(o, v, field(s, o->off), errbuf, errlen);
	case KIND_SIZE:
		if (parse_size(v, field(s, o->off)) < 0)
			return invalid_value(o->name, v, errbuf, errlen);
		return 0;
	case KIND_RATE:
		return option_rate(o, v, field(s, o->off), errbuf, errlen);
	case KIND_LIST:
		list_append(s, o, v);
		return 0;
	}
	return -EINVAL;
}

/* ----------------------------------------------------- where they come */

/* The option named name that may be given in where (IN_MOUNT, IN_FILE). */
static const struct opt *option_named(const char *name, unsigned where)
{
	for (size_t i = 0; i < ARRAY_SIZE(options); i++)
		if ((options[i].where & where) == where && !strcmp(options[i].name, name))
			return &options[i];
	return NULL;
}

/* -o values: pullfs's own options may be given there too, spelled with
 * "_" or "-" ("cache=/var/lib/pullfs,insecure_registry=host:5000"), which
 * is how mount(8) and fstab entries of type fuse.pullfs pass them; the
 * rest are FUSE mount options.  A flag given as key=value takes a
 * boolean, so that "foreground=false" does not turn it on. */
static int set_mount_options(struct settings *s, const struct opt *unused, const char *v,
			     char *errbuf, size_t errlen)
{
	_cleanup_free_ char *copy = xstrdup(v);
	char *save = NULL;
	int r;

	for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char key[64];
		char *eq = strchr(item, '=');
		size_t klen = eq ? (size_t)(eq - item) : strlen(item);
		const struct opt *o = NULL;

		if (klen < sizeof(key)) {
			memcpy(key, item, klen);
			key[klen] = '\0';
			for (char *c = key; *c; c++)
				if (*c == '_')
					*c = '-';
			o = option_named(key, IN_MOUNT);
		}
		if (o) {
			bool on = true;

			if (o->kind == KIND_FLAG && eq) {
				r = parse_flag(o->name, eq + 1, &on, errbuf, errlen);
				if (r < 0)
					return r;
			}
			if (o->kind == KIND_FLAG && !on)
				continue;
			r = apply_option(s, o,
					 o->kind == KIND_FLAG ? NULL
					 : eq		      ? eq + 1
							      : "",
					 errbuf, errlen);
			if (r < 0)
				return r;
			continue;
		}
		if (!s->fuse_opts) {
			s->fuse_opts = xstrdup(item);
		} else {
			char *j;
			if (asprintf(&j, "%s,%s", s->fuse_opts, item) < 0)
				return -ENOMEM;
			free(s->fuse_opts);
			s->fuse_opts = j;
		}
	}
	return 0;
}

/* One line of the config file: registry sections go to the hosts table,
 * the rest are long options.  The file may be read from anywhere (fstab,
 * a unit file), so its paths must be absolute, as in the sections. */
static int config_line(void *userdata, const char *section, const char *key, const char *val,
		       char *errbuf, size_t errlen)
{
	struct settings *s = userdata;
	const struct opt *o;
	bool on;
	int r;

	if (section[0]) {
		if (!s->hosts && registry_hosts_new(&s->hosts) < 0)
			return -ENOMEM;
		return registry_hosts_set(s->hosts, section, key, val, errbuf, errlen);
	}
	o = option_named(key, IN_FILE);
	if (!o)
		return errbuf_fail(-EINVAL, errbuf, errlen, "unknown key \"%s\"", key);
	if (o->kind == KIND_FLAG) {
		r = parse_flag(o->name, val, &on, errbuf, errlen);
		return r < 0 || !on ? r : apply_option(s, o, NULL, errbuf, errlen);
	}
	if (o->kind == KIND_PATH && *val && *val != '/')
		return errbuf_fail(-EINVAL, errbuf, errlen, "%s needs an absolute path", key);
	return apply_option(s, o, val, errbuf, errlen);
}

/* The config file (conffile.h has the syntax): options as "key = value"
 * with the long option names as keys, [registry "HOST"] sections for
 * hosts.h.  The command line wins over the file.  Exits on an error, with
 * the file and line. */
static int set_config(struct settings *s, const struct opt *o, const char *path, char *errbuf,
		      size_t errlen)
{
	FILE *f = fopen(path, "re");
	char why[512] = "";
	unsigned line = 0;
	int r;

	if (!f)
		usage_error("cannot read config file \"%s\": %s", path, strerror(errno));
	r = config_parse(f, config_line, s, &line, why, sizeof(why));
	fclose(f);
	if (r < 0)
		usage_error("%s:%u: %s", path, line, why[0] ? why : strerror(-r));
	return 0;
}

/* ---------------------------------------------------------- the help */

static const char *option_arg(const struct opt *o)
{
	if (o->arg)
		return o->arg;
	switch (o->kind) {
	case KIND_DURATION:
		return "SECONDS";
	case KIND_SIZE:
		return "SIZE";
	case KIND_UINT:
	case KIND_RATE:
		return "N";
	default:
		return NULL;
	}
}

/* Column of the help texts, and the width they are wrapped to. */
#define HELP_COLUMN 31
#define HELP_WIDTH 80

/* Prints text from column HELP_COLUMN, wrapped at blanks; the cursor is
 * at column col of the first line. */
static void print_wrapped(FILE *f, const char *text, size_t col)
{
	while (*text) {
		size_t room = HELP_WIDTH - HELP_COLUMN, n = strlen(text), cut = n;

		if (n > room) {
			cut = room;
			while (cut > 0 && text[cut] != ' ')
				cut--;
			if (cut == 0)
				cut = strcspn(text, " ");
		}
		fprintf(f, "%*s%.*s\n", (int)(HELP_COLUMN - col), "", (int)cut, text);
		col = 0;
		text += cut;
		text += strspn(text, " ");
	}
}

static void usage(FILE *f)
{
	fputs("Usage: pullfs [OPTIONS] MOUNTPOINT\n"
	      "Mount a read-only filesystem where MOUNTPOINT/images/<reference>/ is the\n"
	      "root filesystem of any container image a registry serves, pulled on first\n"
	      "lookup into a local cache.\n"
	      "\n"
	      "Options:\n",
	      f);
	for (size_t i = 0; i < ARRAY_SIZE(options); i++) {
		const struct opt *o = &options[i];
		const char *arg = option_arg(o);
		_cleanup_free_ char *text = NULL;
		char head[96];
		int n;

		if (o->where & NO_LONG)
			n = snprintf(head, sizeof(head), "  -%c%s%s", o->letter, arg ? " " : "",
				     arg ? arg : "");
		else if (o->letter)
			n = snprintf(head, sizeof(head), "  -%c, --%s%s%s", o->letter, o->name,
				     arg ? " " : "", arg ? arg : "");
		else
			n = snprintf(head, sizeof(head), "      --%s%s%s", o->name, arg ? " " : "",
				     arg ? arg : "");
		if (asprintf(&text, "%s%s%s%s%s", o->help,
			     o->kind == KIND_LIST ? " (repeatable)" : "",
			     o->def ? " (default " : "", o->def ? o->def : "",
			     o->def ? ")" : "") < 0)
			out_of_memory();
		/* Two blanks at least between the option and its help. */
		fputs(head, f);
		if (n + 2 > HELP_COLUMN) {
			fputc('\n', f);
			n = 0;
		}
		print_wrapped(f, text, (size_t)n);
	}
}

/* ------------------------------------------------------ the command line */

static char *default_cache_dir(void)
{
	const char *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	char *p;

	if (geteuid() == 0)
		return xstrdup("/var/lib/pullfs");
	if (xdg && *xdg == '/') {
		if (asprintf(&p, "%s/pullfs", xdg) < 0)
			out_of_memory();
		return p;
	}
	if (!home || *home != '/')
		usage_error(
			"cannot find a cache directory: set --cache, or HOME to an absolute path");
	if (asprintf(&p, "%s/.cache/pullfs", home) < 0)
		out_of_memory();
	return p;
}

/* getopt_long's view of the table: an option with a letter returns the
 * letter, the others 0x100 plus their row. */
#define LONG_BASE 0x100

static int option_val(const struct opt *o)
{
	return o->letter ? o->letter : LONG_BASE + (int)(o - options);
}

static const struct opt *option_by_val(int val)
{
	for (size_t i = 0; i < ARRAY_SIZE(options); i++)
		if (option_val(&options[i]) == val)
			return &options[i];
	return NULL;
}

static void parse_command_line(struct settings *s, int argc, char **argv)
{
	struct option longopts[ARRAY_SIZE(options) + 1] = { { 0 } };
	char shortopts[2 * ARRAY_SIZE(options) + 2] = ":";
	const struct opt *config = option_named("config", IN_MOUNT);
	const char *config_file = NULL;
	size_t nl = 0, ns = 1;
	char why[512] = "";
	int c;

	for (size_t i = 0; i < ARRAY_SIZE(options); i++) {
		const struct opt *o = &options[i];
		int has_arg = o->kind == KIND_FLAG ? no_argument : required_argument;

		if (!(o->where & NO_LONG))
			longopts[nl++] = (struct option){ o->name, has_arg, NULL, option_val(o) };
		if (o->letter) {
			shortopts[ns++] = (char)o->letter;
			if (has_arg == required_argument)
				shortopts[ns++] = ':';
		}
	}

	/* First pass: only --config, so that the file is applied before the
	 * command line overrides it. */
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1)
		if (c == option_val(config))
			config_file = optarg;
	if (config_file && apply_option(s, config, config_file, why, sizeof(why)) < 0)
		usage_error("%s", why);

	/* 0, not 1: glibc's getopt only starts over completely from 0. */
	optind = 0;
	while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("pullfs %s\n", PULLFS_VERSION);
			exit(0);
		case '?':
			if (optopt > 0 && optopt < LONG_BASE && argv[optind - 1][1] != '-')
				usage_error("invalid option -- '%c'", optopt);
			usage_error("unrecognized option \"%s\"", argv[optind - 1]);
		case ':':
			usage_error("option \"%s\" needs a value", argv[optind - 1]);
		default:
			if (c == option_val(config))
				break;
			if (apply_option(s, option_by_val(c), optarg, why, sizeof(why)) < 0)
				usage_error("%s", why[0] ? why : "out of memory");
		}
	}
	/* "pullfs MOUNTPOINT", or "pullfs SOURCE MOUNTPOINT" as mount(8)
	 * helpers call it for fstab entries of type fuse.pullfs. */
	if (argc - optind == 0)
		usage_error("missing MOUNTPOINT");
	if (argc - optind > 2)
		usage_error("too many arguments");
	/* Made absolute, "" would be the working directory. */
	if (!argv[argc - 1][0])
		usage_error("empty MOUNTPOINT");
	if (absolute_path("mountpoint", argv[argc - 1], &s->mountpoint, why, sizeof(why)) < 0)
		usage_error("%s", why);
}

/* What no single option can check.  Exits on a problem. */
static void check_settings(struct settings *s)
{
	struct sockaddr_un sa;

	/* manager.h's defaults for what was not set. */
	if ((s->mo.gc_low_percent ?: 80) > (s->mo.gc_high_percent ?: 85))
		usage_error("gc-low-percent must not be above gc-high-percent");
	if ((s->mo.backoff_initial_s ?: 10) > (s->mo.backoff_max_s ?: 300))
		usage_error("backoff-initial must not be above backoff-max");
	if (!s->mo.cache_dir)
		s->mo.cache_dir = default_cache_dir();
	if (!s->control_socket &&
	    asprintf(&s->control_socket, "%s/control.sock", s->mo.cache_dir) < 0)
		out_of_memory();
	if (strlen(s->control_socket) >= sizeof(sa.sun_path))
		usage_error("control socket path \"%s\" is longer than %zu bytes: "
			    "choose a shorter one with control-socket",
			    s->control_socket, sizeof(sa.sun_path) - 1);
}

void settings_parse(struct settings *s, int argc, char **argv)
{
	/* Where 0 is a value of its own rather than "the default". */
	s->mo.registry_qps = 5.0;
	s->mo.registry_burst = 10;
	s->mo.events_max_bytes = EVENTS_DEFAULT_MAX_BYTES;
	s->mo.events_burst = EVENTS_DEFAULT_BURST;
	parse_command_line(s, argc, argv);
	check_settings(s);
	s->mo.registry_hosts = s->hosts;
}

void settings_done(struct settings *s)
{
	for (size_t i = 0; i < ARRAY_SIZE(options); i++) {
		const struct opt *o = &options[i];

		if (o->off == NO_FIELD)
			continue;
		if (o->kind == KIND_STRING || o->kind == KIND_PATH) {
			free(*(char **)field(s, o->off));
		} else if (o->kind == KIND_LIST) {
			char **v = *(char ***)field(s, o->off);
			size_t n = *(size_t *)field(s, o->off_n);

			for (size_t k = 0; k < n; k++)
				free(v[k]);
			free(v);
		}
	}
	free(s->fuse_opts);
	free(s->mountpoint);
	registry_hosts_free(s->hosts);
}
