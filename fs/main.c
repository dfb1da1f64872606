/* pullfs: the daemon.  Parses the command line (and the optional config
 * file, whose keys are the long options), then hands over to the manager
 * and the filesystem. */
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)

#include <errno.h>
#include <fuse_lowlevel.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/vfs.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "credentials.h"
#include "conffile.h"
#include "control.h"
#include "errname.h"
#include "fs.h"
#include "hosts.h"
#include "macro.h"
#include "manager.h"
#include "units.h"

#define EXIT_USAGE 2

struct settings {
	bool foreground;
	bool debug;
	char *cache_dir;
	char *events_log;
	enum pull_policy pull_policy;
	char **insecure;
	size_t n_insecure;
	char *platform;
	unsigned max_downloads;
	unsigned revalidate_s;
	char **rules;
	size_t n_rules;
	unsigned backoff_initial_s;
	unsigned backoff_max_s;
	double registry_qps;
	unsigned registry_burst;
	bool qps_fail_fast;
	bool no_passthrough;
	unsigned max_parallel;
	unsigned max_names_per_user;
	unsigned max_pulls_per_user;
	char *auth_file;
	long connect_timeout_ms;
	long low_speed_time_s;
	struct registry_hosts *hosts; /* [registry "..."] sections of the config */
	char *fuse_opts; /* comma-joined -o values */
	char *mountpoint;
	uint64_t cache_max_bytes;
	unsigned gc_high, gc_low, gc_min_age_s;
	char **pins;
	size_t n_pins;
	char *control_socket;
};

enum {
	OPT_CACHE = 0x100,
	OPT_EVENTS_LOG,
	OPT_PULL_POLICY,
	OPT_INSECURE,
	OPT_CONFIG,
	OPT_PLATFORM,
	OPT_MAX_DOWNLOADS,
	OPT_REVALIDATE,
	OPT_POLICY_RULE,
	OPT_BACKOFF_INITIAL,
	OPT_BACKOFF_MAX,
	OPT_REGISTRY_QPS,
	OPT_REGISTRY_BURST,
	OPT_QPS_FAIL_FAST,
	OPT_NO_PASSTHROUGH,
	OPT_MAX_PARALLEL,
	OPT_MAX_NAMES_PER_USER,
	OPT_MAX_PULLS_PER_USER,
	OPT_AUTH_FILE,
	OPT_CONNECT_TIMEOUT,
	OPT_LOW_SPEED_TIMEOUT,
	OPT_CACHE_MAX_BYTES,
	OPT_GC_HIGH,
	OPT_GC_LOW,
	OPT_GC_MIN_AGE,
	OPT_PIN,
	OPT_CONTROL_SOCKET,
};

static const struct option long_options[] = {
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ "foreground", no_argument, NULL, 'f' },
	{ "debug", no_argument, NULL, 'd' },
	{ "cache", required_argument, NULL, OPT_CACHE },
	{ "events-log", required_argument, NULL, OPT_EVENTS_LOG },
	{ "pull-policy", required_argument, NULL, OPT_PULL_POLICY },
	{ "insecure-registry", required_argument, NULL, OPT_INSECURE },
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "platform", required_argument, NULL, OPT_PLATFORM },
	{ "max-concurrent-downloads", required_argument, NULL, OPT_MAX_DOWNLOADS },
	{ "revalidate-interval", required_argument, NULL, OPT_REVALIDATE },
	{ "pull-policy-rule", required_argument, NULL, OPT_POLICY_RULE },
	{ "backoff-initial", required_argument, NULL, OPT_BACKOFF_INITIAL },
	{ "backoff-max", required_argument, NULL, OPT_BACKOFF_MAX },
	{ "registry-qps", required_argument, NULL, OPT_REGISTRY_QPS },
	{ "registry-burst", required_argument, NULL, OPT_REGISTRY_BURST },
	{ "pull-qps-fail-fast", no_argument, NULL, OPT_QPS_FAIL_FAST },
	{ "no-passthrough", no_argument, NULL, OPT_NO_PASSTHROUGH },
	{ "max-parallel-pulls", required_argument, NULL, OPT_MAX_PARALLEL },
	{ "max-names-per-user", required_argument, NULL, OPT_MAX_NAMES_PER_USER },
	{ "max-pulls-per-user", required_argument, NULL, OPT_MAX_PULLS_PER_USER },
	{ "auth-file", required_argument, NULL, OPT_AUTH_FILE },
	{ "connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT },
	{ "low-speed-timeout", required_argument, NULL, OPT_LOW_SPEED_TIMEOUT },
	{ "cache-max-bytes", required_argument, NULL, OPT_CACHE_MAX_BYTES },
	{ "gc-high-percent", required_argument, NULL, OPT_GC_HIGH },
	{ "gc-low-percent", required_argument, NULL, OPT_GC_LOW },
	{ "gc-min-age", required_argument, NULL, OPT_GC_MIN_AGE },
	{ "pin-image", required_argument, NULL, OPT_PIN },
	{ "control-socket", required_argument, NULL, OPT_CONTROL_SOCKET },
	{ NULL, 0, NULL, 0 },
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: pullfs [OPTIONS] MOUNTPOINT\n"
		"Mount a read-only filesystem where MOUNTPOINT/images/<reference>/ is the\n"
		"root filesystem of any container image a registry serves, pulled on first\n"
		"lookup into a local cache.\n"
		"\n"
		"Options:\n"
		"  -f, --foreground             stay in the foreground\n"
		"  -d, --debug                  print every FUSE request (implies -f)\n"
		"      --cache DIR              cache directory (default /var/lib/pullfs for\n"
		"                               root, else $XDG_CACHE_HOME/pullfs)\n"
		"      --events-log FILE        events log, JSON Lines (default CACHE/events.log)\n"
		"      --pull-policy POLICY     always, if-not-present or never for every image\n"
		"                               (default: the kubelet rule, see README)\n"
		"      --insecure-registry HOST[:PORT]\n"
		"                               speak plain HTTP to this registry (repeatable)\n"
		"      --config FILE            read options from FILE (\"key = value\" lines,\n"
		"                               keys are the long options)\n"
		"      --platform OS/ARCH[/VARIANT]\n"
		"                               platform picked from multi-platform images\n"
		"                               (default: this machine)\n"
		"      --max-concurrent-downloads N\n"
		"                               layers downloaded at once per pull (default 3)\n"
		"      --revalidate-interval SECONDS\n"
		"                               with pull policy Always, re-resolve a tag at\n"
		"                               most this often (default %d)\n"
		"      --pull-policy-rule PATTERN=POLICY\n"
		"                               policy for references matching the glob\n"
		"                               PATTERN (repeatable; first match wins)\n"
		"      --backoff-initial SECONDS  refuse a failed image for this long (default 10)\n"
		"      --backoff-max SECONDS    cap of the doubling back-off (default 300)\n"
		"      --registry-qps N         pull starts per second, 0 = no limit (default 5)\n"
		"      --registry-burst N       pull starts allowed at once (default 10)\n"
		"      --pull-qps-fail-fast     fail pulls over the rate with EAGAIN instead\n"
		"                               of queueing them (the kubelet's behaviour)\n"
		"      --no-passthrough         read large files through the daemon, not by\n"
		"                               FUSE passthrough (default: passthrough\n"
		"                               where the kernel and privileges allow)\n"
		"      --max-parallel-pulls N   images pulled at once (default 1: serialised)\n"
		"      --max-names-per-user N   image names a user other than root may hold (256)\n"
		"      --max-pulls-per-user N   pulls a user other than root may start at once (8)\n"
		"      --auth-file FILE         registry credentials, docker config.json format\n"
		"                               (default $DOCKER_CONFIG/config.json, else\n"
		"                               ~/.docker/config.json)\n"
		"      --connect-timeout SECONDS  give up connecting to a registry (default 10)\n"
		"      --low-speed-timeout SECONDS\n"
		"                               abort a transfer under 1 KiB/s for this long\n"
		"                               (default 30)\n"
		"      --cache-max-bytes SIZE   disk budget of the cache (e.g. 20G); default:\n"
		"                               the size of the cache's filesystem\n"
		"      --gc-high-percent N      collect garbage above N %% of the budget (85)\n"
		"      --gc-low-percent N       ... down to N %% (80)\n"
		"      --gc-min-age SECONDS     never collect an image pulled less ago (120)\n"
		"      --pin-image PATTERN      never collect references matching the glob\n"
		"                               (repeatable)\n"
		"      --control-socket PATH    control socket (default CACHE/control.sock)\n"
		"  -o OPTIONS                   FUSE mount options (e.g. allow_other); pullfs's\n"
		"                               own options too, as key=value (cache=DIR, ...)\n"
		"  -h, --help                   show this help\n"
		"  -V, --version                show the version\n",
		MANAGER_DEFAULT_REVALIDATE_S);
}

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

/* Option values are checked by hand rather than by strtoul(3) and
 * strtod(3) alone, which also take blanks, signs, hex, exponents, "nan"
 * and "inf".  Each parser returns 0, or -EINVAL with the reason in
 * errbuf: the caller says where the value came from. */

static int invalid_value(const char *name, const char *v, char *errbuf, size_t errlen)
{
	return errbuf_fail(-EINVAL, errbuf, errlen, "invalid value \"%s\" for %s", v, name);
}

/* Digits only, min to max. */
static int parse_uint(const char *name, const char *v, unsigned min, unsigned max,
		      unsigned *ret, char *errbuf, size_t errlen)
{
	uint64_t n;
	int r = parse_uint64(v, &n);

	if (r == -EINVAL)
		return invalid_value(name, v, errbuf, errlen);
	if (r < 0 || n < min || n > max)
		return errbuf_fail(-EINVAL, errbuf, errlen,
				   "%s must be between %u and %u, not \"%s\"", name, min, max, v);
	*ret = (unsigned)n;
	return 0;
}

/* Pull starts per second: 0 (no limit), or 0.001 to 1e6 -- below that,
 * the token bucket's interval does not fit its clock. */
static int parse_qps(const char *name, const char *v, double *ret, char *errbuf,
		     size_t errlen)
{
	size_t n = decimal_len(v);
	double q;

	if (n == 0 || v[n])
		return invalid_value(name, v, errbuf, errlen);
	q = strtod(v, NULL);
	if (q != 0 && (q < 0.001 || q > 1e6))
		return errbuf_fail(-EINVAL, errbuf, errlen,
				   "%s must be 0, or between 0.001 and 1000000, not \"%s\"", name, v);
	*ret = q;
	return 0;
}

/* units.h has the grammar: "20G", "1.5TiB". */
static int parse_bytes(const char *name, const char *v, uint64_t *ret, char *errbuf,
		       size_t errlen)
{
	if (parse_size(v, ret) < 0)
		return invalid_value(name, v, errbuf, errlen);
	return 0;
}

static int parse_flag(const char *name, const char *v, bool *ret, char *errbuf,
		      size_t errlen)
{
	if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1"))
		*ret = true;
	else if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "0"))
		*ret = false;
	else
		return errbuf_fail(-EINVAL, errbuf, errlen, "%s must be true or false", name);
	return 0;
}

static bool option_is_path(int opt)
{
	return opt == OPT_CACHE || opt == OPT_EVENTS_LOG || opt == OPT_AUTH_FILE ||
	       opt == OPT_CONTROL_SOCKET || opt == OPT_CONFIG;
}

/* Paths are kept absolute, resolved against the working directory at
 * start: the daemon moves to / once it serves, and opens some of them
 * only then (the events log on SIGHUP, the control socket's default). */
static int absolute_path(const char *name, const char *v, char **ret, char *errbuf,
			 size_t errlen)
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

static void set_string(char **field, char *v)
{
	free(*field);
	*field = v;
}

static int append_string(char ***v, size_t *n, const char *s)
{
	char **nv = realloc(*v, (*n + 1) * sizeof(**v));

	if (!nv)
		return -ENOMEM;
	*v = nv;
	(*v)[(*n)++] = xstrdup(s);
	return 0;
}

static int apply_option(struct settings *s, const struct option *o, const char *v,
			char *errbuf, size_t errlen);
static void load_config(struct settings *s, const char *path);

/* -o values: pullfs's own options may be given there too, spelled with
 * "_" or "-" ("cache=/var/lib/pullfs,insecure_registry=host:5000"), which
 * is how mount(8) and fstab entries of type fuse.pullfs pass them; the
 * rest are FUSE mount options.  A flag given as key=value takes a
 * boolean, so that "foreground=false" does not turn it on. */
static int apply_mount_options(struct settings *s, const char *v, char *errbuf,
			       size_t errlen)
{
	_cleanup_free_ char *copy = xstrdup(v);
	char *save = NULL;
	int r;

	for (char *item = strtok_r(copy, ",", &save); item;
	     item = strtok_r(NULL, ",", &save)) {
		char key[64];
		char *eq = strchr(item, '=');
		size_t klen = eq ? (size_t)(eq - item) : strlen(item);
		const struct option *o = NULL;

		if (klen < sizeof(key)) {
			memcpy(key, item, klen);
			key[klen] = '\0';
			for (char *c = key; *c; c++)
				if (*c == '_')
					*c = '-';
			for (o = long_options; o->name; o++)
				if (!strcmp(o->name, key))
					break;
		}
		if (o && o->name && o->val != 'h' && o->val != 'V') {
			bool on = true;

			if (o->has_arg == no_argument && eq) {
				r = parse_flag(o->name, eq + 1, &on, errbuf, errlen);
				if (r < 0)
					return r;
			}
			if (o->has_arg == no_argument && !on)
				continue;
			r = apply_option(s, o, o->has_arg == no_argument ? NULL : eq ? eq + 1 : "",
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

static const struct option mount_options_option = { "o", required_argument, NULL, 'o' };

/* One option from the command line, -o or the config file.  Returns 0,
 * or -errno with a one-line reason in errbuf. */
static int apply_option(struct settings *s, const struct option *o, const char *v,
			char *errbuf, size_t errlen)
{
	const char *name = o->name;
	char *path = NULL;
	unsigned n;
	int r;

	if (o->has_arg == required_argument && (!v || !*v))
		return errbuf_fail(-EINVAL, errbuf, errlen, "%s needs a value", name);
	if (option_is_path(o->val)) {
		r = absolute_path(name, v, &path, errbuf, errlen);
		if (r < 0)
			return r;
	}

	switch (o->val) {
	case 'f':
		s->foreground = true;
		return 0;
	case 'd':
		s->debug = s->foreground = true;
		return 0;
	case OPT_CACHE:
		set_string(&s->cache_dir, path);
		return 0;
	case OPT_EVENTS_LOG:
		set_string(&s->events_log, path);
		return 0;
	case OPT_AUTH_FILE:
		set_string(&s->auth_file, path);
		return 0;
	case OPT_CONTROL_SOCKET:
		set_string(&s->control_socket, path);
		return 0;
	case OPT_CONFIG:
		load_config(s, path);
		free(path);
		return 0;
	case OPT_PULL_POLICY:
		if (pull_policy_parse(v, &s->pull_policy) < 0)
			return errbuf_fail(-EINVAL, errbuf, errlen,
					   "invalid pull policy \"%s\" (always, if-not-present, never)", v);
		return 0;
	case OPT_INSECURE:
		if (!hosts_name_is_sane(v))
			return errbuf_fail(-EINVAL, errbuf, errlen,
					   "invalid registry host \"%s\" for %s", v, name);
		return append_string(&s->insecure, &s->n_insecure, v);
	case OPT_PLATFORM:
		set_string(&s->platform, xstrdup(v));
		return 0;
	case OPT_POLICY_RULE:
		return append_string(&s->rules, &s->n_rules, v);
	case OPT_PIN:
		return append_string(&s->pins, &s->n_pins, v);
	case OPT_MAX_DOWNLOADS:
		return parse_uint(name, v, 1, 16, &s->max_downloads, errbuf, errlen);
	case OPT_REVALIDATE:
		return parse_uint(name, v, 1, 86400 * 365, &s->revalidate_s, errbuf, errlen);
	case OPT_BACKOFF_INITIAL:
		return parse_uint(name, v, 1, 86400, &s->backoff_initial_s, errbuf, errlen);
	case OPT_BACKOFF_MAX:
		return parse_uint(name, v, 1, 86400, &s->backoff_max_s, errbuf, errlen);
	case OPT_REGISTRY_QPS:
		return parse_qps(name, v, &s->registry_qps, errbuf, errlen);
	case OPT_REGISTRY_BURST:
		return parse_uint(name, v, 1, 100000, &s->registry_burst, errbuf, errlen);
	case OPT_QPS_FAIL_FAST:
		s->qps_fail_fast = true;
		return 0;
	case OPT_NO_PASSTHROUGH:
		s->no_passthrough = true;
		return 0;
	case OPT_CONNECT_TIMEOUT:
		r = parse_uint(name, v, 1, 3600, &n, errbuf, errlen);
		if (r == 0)
			s->connect_timeout_ms = (long)n * 1000;
		return r;
	case OPT_LOW_SPEED_TIMEOUT:
		r = parse_uint(name, v, 1, 3600, &n, errbuf, errlen);
		if (r == 0)
			s->low_speed_time_s = n;
		return r;
	case OPT_MAX_PARALLEL:
		return parse_uint(name, v, 1, 64, &s->max_parallel, errbuf, errlen);
	case OPT_MAX_NAMES_PER_USER:
		return parse_uint(name, v, 1, 1u << 20, &s->max_names_per_user, errbuf, errlen);
	case OPT_MAX_PULLS_PER_USER:
		return parse_uint(name, v, 1, 1024, &s->max_pulls_per_user, errbuf, errlen);
	case OPT_CACHE_MAX_BYTES:
		return parse_bytes(name, v, &s->cache_max_bytes, errbuf, errlen);
	case OPT_GC_HIGH:
		return parse_uint(name, v, 1, 100, &s->gc_high, errbuf, errlen);
	case OPT_GC_LOW:
		return parse_uint(name, v, 1, 100, &s->gc_low, errbuf, errlen);
	case OPT_GC_MIN_AGE:
		/* 0 is allowed here: "no minimum" (tests, tiny nodes). */
		r = parse_uint(name, v, 0, 86400 * 365, &s->gc_min_age_s, errbuf, errlen);
		if (r == 0 && !s->gc_min_age_s)
			s->gc_min_age_s = UINT32_MAX; /* marker, mapped below */
		return r;
	case 'o':
		return apply_mount_options(s, v, errbuf, errlen);
	default:
		return errbuf_fail(-EINVAL, errbuf, errlen, "unknown option \"%s\"", name);
	}
}

/* One line of the config file: registry sections go to the hosts table,
 * the rest are long options.  The file may be read from anywhere (fstab,
 * a unit file), so its paths must be absolute, as in the sections. */
static int config_line(void *userdata, const char *section, const char *key,
		       const char *val, char *errbuf, size_t errlen)
{
	struct settings *s = userdata;
	const struct option *o;
	bool on;
	int r;

	if (section[0]) {
		if (!s->hosts && registry_hosts_new(&s->hosts) < 0)
			return -ENOMEM;
		return registry_hosts_set(s->hosts, section, key, val, errbuf, errlen);
	}
	for (o = long_options; o->name; o++)
		if (!strcmp(o->name, key))
			break;
	if (!o->name || o->val == 'h' || o->val == 'V' || o->val == OPT_CONFIG)
		return errbuf_fail(-EINVAL, errbuf, errlen, "unknown key \"%s\"", key);
	if (o->has_arg == no_argument) {
		r = parse_flag(o->name, val, &on, errbuf, errlen);
		return r < 0 || !on ? r : apply_option(s, o, NULL, errbuf, errlen);
	}
	if (option_is_path(o->val) && *val && *val != '/')
		return errbuf_fail(-EINVAL, errbuf, errlen, "%s needs an absolute path", key);
	return apply_option(s, o, val, errbuf, errlen);
}

/* The config file (fs/conffile.h has the syntax): options as "key = value"
 * with the long option names as keys, [registry "HOST"] sections for
 * hosts.h.  The command line wins over the file.  Exits on an error, with
 * the file and line. */
static void load_config(struct settings *s, const char *path)
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
}

/* --auth-file, or docker's default place where a missing file is no
 * error.  Exits on a file that cannot be used. */
static struct credentials *load_credentials(const struct settings *s)
{
	_cleanup_free_ char *def = NULL;
	struct credentials *c = NULL;
	char errbuf[512] = "";
	int r;

	if (s->auth_file) {
		r = credentials_load(s->auth_file, true, &c, errbuf, sizeof(errbuf));
	} else {
		r = credentials_default_path(&def);
		if (r == -ENOENT)
			return NULL;
		if (r == 0)
			r = credentials_load(def, false, &c, errbuf, sizeof(errbuf));
	}
	if (r < 0) {
		fprintf(stderr, "pullfs: %s\n", errbuf[0] ? errbuf : strerror(-r));
		exit(1);
	}
	return c;
}

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
		usage_error("cannot find a cache directory: set --cache, or HOME to an absolute path");
	if (asprintf(&p, "%s/.cache/pullfs", home) < 0)
		out_of_memory();
	return p;
}

static const struct option *option_by_val(int val)
{
	if (val == 'o')
		return &mount_options_option;
	for (const struct option *o = long_options; o->name; o++)
		if (o->val == val)
			return o;
	return NULL;
}

static void parse_command_line(struct settings *s, int argc, char **argv)
{
	const char *config = NULL;
	char why[512] = "";
	int c;

	/* First pass: only --config, so that the file is applied before the
	 * command line overrides it. */
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, ":hVfdo:", long_options, NULL)) != -1)
		if (c == OPT_CONFIG)
			config = optarg;
	if (config && apply_option(s, option_by_val(OPT_CONFIG), config, why, sizeof(why)) < 0)
		usage_error("%s", why);

	/* 0, not 1: glibc's getopt only starts over completely from 0. */
	optind = 0;
	while ((c = getopt_long(argc, argv, ":hVfdo:", long_options, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("pullfs %s\n", PULLFS_VERSION);
			exit(0);
		case OPT_CONFIG:
			break;
		case '?':
			if (optopt > 0 && optopt < 0x100 && argv[optind - 1][1] != '-')
				usage_error("invalid option -- '%c'", optopt);
			usage_error("unrecognized option \"%s\"", argv[optind - 1]);
		case ':':
			usage_error("option \"%s\" needs a value", argv[optind - 1]);
		default:
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
	if ((s->gc_low ?: 80) > (s->gc_high ?: 85))
		usage_error("gc-low-percent must not be above gc-high-percent");
	if ((s->backoff_initial_s ?: 10) > (s->backoff_max_s ?: 300))
		usage_error("backoff-initial must not be above backoff-max");
	if (!s->cache_dir)
		s->cache_dir = default_cache_dir();
	if (!s->control_socket && asprintf(&s->control_socket, "%s/control.sock", s->cache_dir) < 0)
		out_of_memory();
	if (strlen(s->control_socket) >= sizeof(sa.sun_path))
		usage_error("control socket path \"%s\" is longer than %zu bytes: "
			    "choose a shorter one with control-socket",
			    s->control_socket, sizeof(sa.sun_path) - 1);
}

/* A daemon killed with -9 leaves its mount behind, answering ENOTCONN;
 * clear it rather than fail on it. */
static void strv_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void settings_done(struct settings *s)
{
	free(s->cache_dir);
	free(s->events_log);
	strv_free(s->insecure, s->n_insecure);
	free(s->platform);
	strv_free(s->rules, s->n_rules);
	free(s->auth_file);
	free(s->fuse_opts);
	free(s->mountpoint);
	strv_free(s->pins, s->n_pins);
	free(s->control_socket);
}

static int check_mountpoint(const char *mp)
{
	struct statfs sf;
	struct stat st;

	/* statfs, not stat: the kernel may answer stat from its attribute
	 * cache for a second after the daemon died, statfs always asks. */
	if (statfs(mp, &sf) == 0 && stat(mp, &st) == 0) {
		if (!S_ISDIR(st.st_mode)) {
			fprintf(stderr, "pullfs: mountpoint \"%s\" is not a directory\n", mp);
			return -ENOTDIR;
		}
		return 0;
	}
	if (errno == ENOTCONN) {
		if (umount2(mp, MNT_DETACH) == 0) {
			fprintf(stderr,
				"pullfs: \"%s\" was a stale mount of a pullfs that is gone; unmounted it\n",
				mp);
			return 0;
		}
		fprintf(stderr,
			"pullfs: \"%s\" is a stale mount of a pullfs that is gone; run: fusermount3 -u %s\n",
			mp, mp);
		return -ENOTCONN;
	}
	fprintf(stderr, "pullfs: mountpoint \"%s\": %s\n", mp, strerror(errno));
	return -errno;
}

/* Every image in memory holds the pack of each of its layers open, one
 * image per reference, and a download holds a socket and a file: a soft
 * limit of 1024 is a few dozen images.  The hard limit is what the
 * administrator (or the unit's LimitNOFILE=) grants.  The soft limit is
 * low only for programs that use select(2), which pullfs does not.  Before
 * any thread: the limit is the process's. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		if (rl.rlim_cur >= rl.rlim_max)
			return;
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
			return;
	}
	fprintf(stderr, "pullfs: cannot raise the limit of open files to the hard limit: %s\n",
		strerror(errno));
}

int main(int argc, char **argv)
{
	struct settings s = { .registry_qps = 5.0, .registry_burst = 10 };
	struct manager_options mo = { 0 };
	struct fs_options fo = { 0 };
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct manager *m = NULL;
	struct fs *fs = NULL;
	struct control *ctl = NULL;
	struct credentials *creds = NULL;
	_cleanup_free_ char *opts = NULL;
	char errbuf[512] = "";
	int status = 1;
	int r;

	parse_command_line(&s, argc, argv);
	check_settings(&s);
	raise_fd_limit();
	/* A reader that goes away mid-transfer must not kill the daemon. */
	signal(SIGPIPE, SIG_IGN);

	if (check_mountpoint(s.mountpoint) < 0)
		goto done;
	creds = load_credentials(&s);

	mo.cache_dir = s.cache_dir;
	mo.events_log = s.events_log;
	mo.pull_policy = s.pull_policy;
	mo.insecure_hosts = (const char *const *)s.insecure;
	mo.n_insecure_hosts = s.n_insecure;
	mo.platform = s.platform;
	mo.max_concurrent_downloads = s.max_downloads;
	mo.revalidate_interval_s = s.revalidate_s;
	mo.policy_rules = (const char *const *)s.rules;
	mo.n_policy_rules = s.n_rules;
	mo.backoff_initial_s = s.backoff_initial_s;
	mo.backoff_max_s = s.backoff_max_s;
	mo.registry_qps = s.registry_qps;
	mo.registry_burst = s.registry_burst;
	mo.pull_qps_fail_fast = s.qps_fail_fast;
	mo.max_parallel_pulls = s.max_parallel;
	mo.max_names_per_user = s.max_names_per_user;
	mo.max_pulls_per_user = s.max_pulls_per_user;
	mo.cache_max_bytes = s.cache_max_bytes;
	mo.gc_high_percent = s.gc_high;
	mo.gc_low_percent = s.gc_low;
	/* "--gc-min-age 0" means none; the manager reads 0 as its default. */
	mo.gc_min_age_s = s.gc_min_age_s == UINT32_MAX ? 0 : s.gc_min_age_s;
	mo.gc_no_min_age = s.gc_min_age_s == UINT32_MAX;
	mo.pins = (const char *const *)s.pins;
	mo.n_pins = s.n_pins;
	fo.debug = s.debug;
	fo.no_passthrough = s.no_passthrough;
	mo.registry_hosts = s.hosts;
	mo.credentials = creds;
	mo.connect_timeout_ms = s.connect_timeout_ms;
	mo.low_speed_time_s = s.low_speed_time_s;
	/* The kernel keeps images/<ref> for as long as a revalidation would
	 * not look anyway, so the next lookup after that runs ensure. */
	fo.image_timeout = s.revalidate_s ? s.revalidate_s : MANAGER_DEFAULT_REVALIDATE_S;
	r = manager_new(&mo, &m, errbuf, sizeof(errbuf));
	if (r < 0) {
		fprintf(stderr, "pullfs: %s\n", errbuf[0] ? errbuf : strerror(-r));
		goto done;
	}
	/* Bound before the mount, so that a socket that cannot be served
	 * stops the start with a message, not the daemon's service. */
	errbuf[0] = '\0';
	r = control_new(s.control_socket, m, &ctl, errbuf, sizeof(errbuf));
	if (r < 0) {
		if (errbuf[0])
			fprintf(stderr, "pullfs: %s\n", errbuf);
		else
			fprintf(stderr, "pullfs: cannot serve the control socket \"%s\": %s\n",
				s.control_socket, strerror(-r));
		goto done;
	}
	fo.control = ctl;
	r = fs_new(m, &fo, &fs);
	if (r < 0) {
		fprintf(stderr, "pullfs: %s\n", strerror(-r));
		goto done;
	}

	/* "ro" comes last so that no -o can make the mount writable. */
	if (asprintf(&opts, "fsname=pullfs,subtype=pullfs,default_permissions%s%s,ro",
		     s.fuse_opts ? "," : "", s.fuse_opts ? s.fuse_opts : "") < 0) {
		opts = NULL;
		r = -ENOMEM;
		goto out;
	}
	if (fuse_opt_add_arg(&args, argv[0]) != 0 ||
	    fuse_opt_add_arg(&args, "-o") != 0 ||
	    fuse_opt_add_arg(&args, opts) != 0 ||
	    (s.debug && fuse_opt_add_arg(&args, "-d") != 0)) {
		r = -ENOMEM;
		goto out;
	}
	r = fs_serve(fs, &args, s.mountpoint, s.foreground);
out:
	if (r < 0)
		fprintf(stderr, "pullfs: cannot serve \"%s\": %s\n", s.mountpoint,
			strerror(-r));
	else
		status = 0;
done:
	fuse_opt_free_args(&args);
	control_free(ctl);
	fs_free(fs);
	manager_free(m);
	credentials_free(creds);
	registry_hosts_free(s.hosts);
	settings_done(&s);
	return status;
}
