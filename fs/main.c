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
#include <unistd.h>

#include "config.h"
#include "credentials.h"
#include "conffile.h"
#include "fs.h"
#include "hosts.h"
#include "macro.h"
#include "manager.h"

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
	unsigned max_parallel;
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
	OPT_MAX_PARALLEL,
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
	{ "max-parallel-pulls", required_argument, NULL, OPT_MAX_PARALLEL },
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
		"      --max-parallel-pulls N   images pulled at once (default 1: serialised)\n"
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

static char *xstrdup(const char *s)
{
	char *d = strdup(s);

	if (!d) {
		fputs("pullfs: out of memory\n", stderr);
		exit(1);
	}
	return d;
}

static unsigned parse_uint(const char *opt, const char *v, unsigned max)
{
	char *end;
	unsigned long n;

	errno = 0;
	n = strtoul(v, &end, 10);
	if (errno || end == v || *end || n > max || v[0] == '-')
		usage_error("invalid value \"%s\" for %s", v, opt);
	return (unsigned)n;
}

/* "1073741824", "512M", "20G", "1.5T" (binary multiples). */
static uint64_t parse_bytes(const char *opt, const char *v)
{
	char *end;
	double n;

	errno = 0;
	n = strtod(v, &end);
	if (errno || end == v || n < 0 || v[0] == '-')
		usage_error("invalid size \"%s\" for %s", v, opt);
	switch (*end) {
	case 'T': case 't': n *= 1024.0; /* fall through */
	case 'G': case 'g': n *= 1024.0; /* fall through */
	case 'M': case 'm': n *= 1024.0; /* fall through */
	case 'K': case 'k': n *= 1024.0; end++; break;
	case '\0': break;
	default: usage_error("invalid size \"%s\" for %s", v, opt);
	}
	if (*end == 'i' && end[-1] != '\0')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || n > 1.8e19)
		usage_error("invalid size \"%s\" for %s", v, opt);
	return (uint64_t)n;
}

static void apply_option(struct settings *s, int opt, const char *name,
			 const char *v);
static void load_config(struct settings *s, const char *path);

/* -o values: pullfs's own options may be given there too, spelled with
 * "_" or "-" ("cache=/var/lib/pullfs,insecure_registry=host:5000"), which
 * is how mount(8) and fstab entries of type fuse.pullfs pass them; the
 * rest are FUSE mount options. */
static void apply_mount_options(struct settings *s, const char *v)
{
	_cleanup_free_ char *copy = xstrdup(v);
	char *save = NULL;

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
			if (o->val == OPT_CONFIG)
				load_config(s, eq ? eq + 1 : "");
			else if (o->has_arg == no_argument)
				apply_option(s, o->val, o->name, NULL);
			else if (!eq)
				usage_error("option \"%s\" needs a value", key);
			else
				apply_option(s, o->val, o->name, eq + 1);
			continue;
		}
		if (!s->fuse_opts) {
			s->fuse_opts = xstrdup(item);
		} else {
			char *j;
			if (asprintf(&j, "%s,%s", s->fuse_opts, item) < 0)
				usage_error("out of memory");
			free(s->fuse_opts);
			s->fuse_opts = j;
		}
	}
}

static void set_string(char **field, const char *v)
{
	free(*field);
	*field = xstrdup(v);
}

static void apply_option(struct settings *s, int opt, const char *name,
			 const char *v)
{
	switch (opt) {
	case 'f':
		s->foreground = true;
		break;
	case 'd':
		s->debug = s->foreground = true;
		break;
	case OPT_CACHE:
		set_string(&s->cache_dir, v);
		break;
	case OPT_EVENTS_LOG:
		set_string(&s->events_log, v);
		break;
	case OPT_PULL_POLICY:
		if (pull_policy_parse(v, &s->pull_policy) < 0)
			usage_error("invalid pull policy \"%s\" (always, if-not-present, never)", v);
		break;
	case OPT_INSECURE: {
		char **n = realloc(s->insecure, (s->n_insecure + 1) * sizeof(*n));
		if (!n)
			usage_error("out of memory");
		s->insecure = n;
		s->insecure[s->n_insecure++] = xstrdup(v);
		break;
	}
	case OPT_PLATFORM:
		set_string(&s->platform, v);
		break;
	case OPT_MAX_DOWNLOADS:
		s->max_downloads = parse_uint(name, v, 16);
		if (s->max_downloads == 0)
			usage_error("%s must be at least 1", name);
		break;
	case OPT_REVALIDATE:
		s->revalidate_s = parse_uint(name, v, 86400 * 365);
		if (!s->revalidate_s)
			usage_error("%s must be at least 1", name);
		break;
	case OPT_POLICY_RULE: {
		char **n = realloc(s->rules, (s->n_rules + 1) * sizeof(*n));
		if (!n)
			usage_error("out of memory");
		s->rules = n;
		s->rules[s->n_rules++] = xstrdup(v);
		break;
	}
	case OPT_BACKOFF_INITIAL:
		s->backoff_initial_s = parse_uint(name, v, 86400);
		if (!s->backoff_initial_s)
			usage_error("%s must be at least 1", name);
		break;
	case OPT_BACKOFF_MAX:
		s->backoff_max_s = parse_uint(name, v, 86400);
		if (!s->backoff_max_s)
			usage_error("%s must be at least 1", name);
		break;
	case OPT_REGISTRY_QPS: {
		char *end;
		errno = 0;
		s->registry_qps = strtod(v, &end);
		if (errno || end == v || *end || s->registry_qps < 0 || s->registry_qps > 1e6)
			usage_error("invalid value \"%s\" for %s", v, name);
		break;
	}
	case OPT_REGISTRY_BURST:
		s->registry_burst = parse_uint(name, v, 100000);
		if (!s->registry_burst)
			usage_error("%s must be at least 1", name);
		break;
	case OPT_QPS_FAIL_FAST:
		s->qps_fail_fast = true;
		break;
	case OPT_AUTH_FILE:
		set_string(&s->auth_file, v);
		break;
	case OPT_CONNECT_TIMEOUT:
		s->connect_timeout_ms = (long)parse_uint(name, v, 3600) * 1000;
		if (!s->connect_timeout_ms)
			usage_error("%s must be at least 1", name);
		break;
	case OPT_LOW_SPEED_TIMEOUT:
		s->low_speed_time_s = parse_uint(name, v, 3600);
		if (!s->low_speed_time_s)
			usage_error("%s must be at least 1", name);
		break;
	case OPT_MAX_PARALLEL:
		s->max_parallel = parse_uint(name, v, 64);
		if (!s->max_parallel)
			usage_error("%s must be at least 1", name);
		break;
	case OPT_CACHE_MAX_BYTES:
		s->cache_max_bytes = parse_bytes(name, v);
		break;
	case OPT_GC_HIGH:
		s->gc_high = parse_uint(name, v, 100);
		if (!s->gc_high)
			usage_error("%s must be between 1 and 100", name);
		break;
	case OPT_GC_LOW:
		s->gc_low = parse_uint(name, v, 100);
		if (!s->gc_low)
			usage_error("%s must be between 1 and 100", name);
		break;
	case OPT_GC_MIN_AGE:
		/* 0 is allowed here: "no minimum" (tests, tiny nodes). */
		s->gc_min_age_s = parse_uint(name, v, 86400 * 365);
		if (!s->gc_min_age_s)
			s->gc_min_age_s = UINT32_MAX; /* marker, mapped below */
		break;
	case OPT_PIN: {
		char **n = realloc(s->pins, (s->n_pins + 1) * sizeof(*n));
		if (!n)
			usage_error("out of memory");
		s->pins = n;
		s->pins[s->n_pins++] = xstrdup(v);
		break;
	}
	case OPT_CONTROL_SOCKET:
		set_string(&s->control_socket, v);
		break;
	case 'o':
		apply_mount_options(s, v);
		break;
	default:
		usage_error("unknown option \"%s\"", name);
	}
}

/* One line of the config file: registry sections go to the hosts table,
 * the rest are long options. */
static int config_line(void *userdata, const char *section, const char *key,
		       const char *val, char *errbuf, size_t errlen)
{
	struct settings *s = userdata;
	const struct option *o;

	if (section[0]) {
		if (!s->hosts && registry_hosts_new(&s->hosts) < 0)
			return -ENOMEM;
		return registry_hosts_set(s->hosts, section, key, val, errbuf, errlen);
	}
	for (o = long_options; o->name; o++)
		if (!strcmp(o->name, key))
			break;
	if (!o->name || o->val == 'h' || o->val == 'V' || o->val == OPT_CONFIG) {
		snprintf(errbuf, errlen, "unknown key \"%s\"", key);
		return -EINVAL;
	}
	if (o->has_arg == no_argument) {
		if (!strcmp(val, "true") || !strcmp(val, "yes") || !strcmp(val, "1"))
			apply_option(s, o->val, o->name, NULL);
		return 0;
	}
	apply_option(s, o->val, o->name, val);
	return 0;
}

/* The config file (fs/config.h has the syntax): options as "key = value"
 * with the long option names as keys, [registry "HOST"] sections for
 * hosts.h.  The command line wins over the file. */
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
			return NULL;
		return p;
	}
	if (!home || !*home)
		usage_error("cannot find a cache directory: set --cache or HOME");
	if (asprintf(&p, "%s/.cache/pullfs", home) < 0)
		return NULL;
	return p;
}

static void parse_command_line(struct settings *s, int argc, char **argv)
{
	const char *config = NULL;
	int c;

	/* First pass: only --config, so that the file is applied before the
	 * command line overrides it. */
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, ":hVfdo:", long_options, NULL)) != -1)
		if (c == OPT_CONFIG)
			config = optarg;
	if (config)
		load_config(s, config);

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
		default: {
			const char *name = "?";
			for (const struct option *o = long_options; o->name; o++)
				if (o->val == c)
					name = o->name;
			apply_option(s, c, name, optarg);
		}
		}
	}
	/* "pullfs MOUNTPOINT", or "pullfs SOURCE MOUNTPOINT" as mount(8)
	 * helpers call it for fstab entries of type fuse.pullfs. */
	if (argc - optind == 1)
		s->mountpoint = xstrdup(argv[optind]);
	else if (argc - optind == 2)
		s->mountpoint = xstrdup(argv[optind + 1]);
	else if (argc - optind == 0)
		usage_error("missing MOUNTPOINT");
	else
		usage_error("too many arguments");
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
	struct credentials *creds = NULL;
	_cleanup_free_ char *opts = NULL;
	char errbuf[512] = "";
	int status = 1;
	int r;

	parse_command_line(&s, argc, argv);
	raise_fd_limit();
	if (!s.cache_dir)
		s.cache_dir = default_cache_dir();
	if (!s.cache_dir) {
		fputs("pullfs: out of memory\n", stderr);
		goto done;
	}
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
	mo.cache_max_bytes = s.cache_max_bytes;
	mo.gc_high_percent = s.gc_high;
	mo.gc_low_percent = s.gc_low;
	/* "--gc-min-age 0" means none; the manager reads 0 as its default. */
	mo.gc_min_age_s = s.gc_min_age_s == UINT32_MAX ? 0 : s.gc_min_age_s;
	mo.gc_no_min_age = s.gc_min_age_s == UINT32_MAX;
	mo.pins = (const char *const *)s.pins;
	mo.n_pins = s.n_pins;
	if (s.gc_high && s.gc_low && s.gc_low > s.gc_high) {
		fprintf(stderr, "pullfs: --gc-low-percent must not be above --gc-high-percent (see pullfs --help)\n");
		status = EXIT_USAGE;
		goto done;
	}
	fo.control_socket = s.control_socket;
	fo.debug = s.debug;
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
	fs_free(fs);
	manager_free(m);
	credentials_free(creds);
	registry_hosts_free(s.hosts);
	settings_done(&s);
	return status;
}
