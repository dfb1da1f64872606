/* docker config.json credentials and docker-credential-<name> helpers.
 * A helper is spawned directly (no shell), gets the server URL on stdin,
 * answers JSON on stdout, and is killed if it takes too long.  A cache in
 * front of the lookup keeps what it answered per host for a while, since a
 * registry with Basic authentication wants the credentials on every
 * request. */
#include "credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base64.h"
#include "clock.h"
#include "macro.h"
#include "strmap.h"

#define CONFIG_MAX_BYTES (4u << 20)
#define HELPER_OUTPUT_MAX (64u << 10)
#define HOST_MAX 256

extern char **environ;

struct auth_entry {
	char host[HOST_MAX];
	struct credential cred;
};

struct helper_entry {
	char host[HOST_MAX];
	char *helper;
};

struct credentials {
	struct auth_entry *auths;
	size_t n_auths;
	struct helper_entry *helpers;
	size_t n_helpers;
	char *store; /* credsStore */
};

static void secret_free(char *s)
{
	if (!s)
		return;
	explicit_bzero(s, strlen(s));
	free(s);
}

static void secret_freep(char **p)
{
	secret_free(*p);
}

void credential_clear(struct credential *c)
{
	if (!c)
		return;
	secret_free(c->username);
	secret_free(c->password);
	secret_free(c->identity_token);
	*c = (struct credential){ 0 };
}

void credentials_free(struct credentials *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n_auths; i++)
		credential_clear(&c->auths[i].cred);
	free(c->auths);
	for (size_t i = 0; i < c->n_helpers; i++)
		free(c->helpers[i].helper);
	free(c->helpers);
	free(c->store);
	free(c);
}

DEFINE_TRIVIAL_CLEANUP_FUNC(struct credentials *, credentials_free)

void credentials_normalize_host(const char *key, char *out, size_t outlen)
{
	const char *p = key, *e;
	size_t n;

	if (outlen == 0)
		return;
	if (strncasecmp(p, "https://", 8) == 0)
		p += 8;
	else if (strncasecmp(p, "http://", 7) == 0)
		p += 7;
	e = strchr(p, '/');
	n = e ? (size_t)(e - p) : strlen(p);
	if (n >= outlen)
		n = outlen - 1;
	memcpy(out, p, n);
	out[n] = '\0';
	for (char *q = out; *q; q++)
		if (*q >= 'A' && *q <= 'Z')
			*q = (char)(*q - 'A' + 'a');
	/* Docker Hub answers to several names; config.json usually has
	 * the oldest, "https://index.docker.io/v1/". */
	if (!strcmp(out, "index.docker.io") || !strcmp(out, "registry-1.docker.io") ||
	    !strcmp(out, "registry.hub.docker.com"))
		snprintf(out, outlen, "docker.io");
}

/* Standard base64, padding optional.  Returns a NUL-terminated buffer or
 * NULL (malformed, a NUL inside, or out of memory). */
static char *b64_decode(const char *in)
{
	size_t len = strlen(in);
	char *out = malloc(BASE64_DECODED_MAX(len) + 1);
	ssize_t n;

	if (!out)
		return NULL;
	n = base64_decode(in, len, false, (unsigned char *)out);
	if (n < 0 || memchr(out, '\0', (size_t)n)) {
		explicit_bzero(out, BASE64_DECODED_MAX(len));
		free(out);
		return NULL;
	}
	out[n] = '\0';
	return out;
}

static int parse_auth_entry(json_t *v, struct credential *ret)
{
	const char *auth = json_string_value(json_object_get(v, "auth"));
	const char *user = json_string_value(json_object_get(v, "username"));
	const char *pass = json_string_value(json_object_get(v, "password"));
	const char *idt = json_string_value(json_object_get(v, "identitytoken"));
	struct credential c = { 0 };

	if (!json_is_object(v))
		return -EINVAL;
	if (auth && *auth) {
		_cleanup_(secret_freep) char *dec = b64_decode(auth);
		char *colon;

		if (!dec)
			return -EINVAL;
		colon = strchr(dec, ':');
		if (!colon)
			return -EINVAL;
		*colon = '\0';
		c.username = strdup(dec);
		c.password = strdup(colon + 1);
		if (!c.username || !c.password)
			goto oom;
	} else if (user && *user) {
		c.username = strdup(user);
		c.password = strdup(pass ? pass : "");
		if (!c.username || !c.password)
			goto oom;
	}
	if (idt && *idt && !(c.identity_token = strdup(idt)))
		goto oom;
	*ret = c;
	return 0;
oom:
	credential_clear(&c);
	return -ENOMEM;
}

static bool helper_name_is_sane(const char *s)
{
	if (!*s || strlen(s) > 64)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || strchr("._-", *s)))
			return false;
	return true;
}

int credentials_parse(const char *json, size_t len, struct credentials **ret, char *errbuf,
		      size_t errlen)
{
	_cleanup_(credentials_freep) struct credentials *c = NULL;
	json_auto_t *root = NULL;
	json_error_t jerr;
	json_t *auths, *helpers, *v;
	const char *key, *store;

	root = json_loadb(json, len, 0, &jerr);
	if (!json_is_object(root)) {
		/* jansson's text may quote the input: give the position only */
		snprintf(errbuf, errlen, "not a JSON object (line %d)", root ? 1 : jerr.line);
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;

	auths = json_object_get(root, "auths");
	if (auths && !json_is_object(auths)) {
		snprintf(errbuf, errlen, "\"auths\" is not an object");
		return -EINVAL;
	}
	if (auths && json_object_size(auths) > 0) {
		c->auths = calloc(json_object_size(auths), sizeof(*c->auths));
		if (!c->auths)
			return -ENOMEM;
		json_object_foreach(auths, key, v)
		{
			struct auth_entry *e = &c->auths[c->n_auths];
			int r = parse_auth_entry(v, &e->cred);

			if (r == -ENOMEM)
				return r;
			if (r < 0) {
				char host[HOST_MAX];

				credentials_normalize_host(key, host, sizeof(host));
				snprintf(errbuf, errlen, "malformed entry for \"%s\" in \"auths\"",
					 host);
				return r;
			}
			credentials_normalize_host(key, e->host, sizeof(e->host));
			c->n_auths++;
		}
	}

	helpers = json_object_get(root, "credHelpers");
	if (helpers && !json_is_object(helpers)) {
		snprintf(errbuf, errlen, "\"credHelpers\" is not an object");
		return -EINVAL;
	}
	if (helpers && json_object_size(helpers) > 0) {
		c->helpers = calloc(json_object_size(helpers), sizeof(*c->helpers));
		if (!c->helpers)
			return -ENOMEM;
		json_object_foreach(helpers, key, v)
		{
			struct helper_entry *e = &c->helpers[c->n_helpers];
			const char *name = json_string_value(v);

			if (!name || !helper_name_is_sane(name)) {
				snprintf(errbuf, errlen,
					 "invalid credential helper name in \"credHelpers\"");
				return -EINVAL;
			}
			credentials_normalize_host(key, e->host, sizeof(e->host));
			if (!(e->helper = strdup(name)))
				return -ENOMEM;
			c->n_helpers++;
		}
	}

	store = json_string_value(json_object_get(root, "credsStore"));
	if (store && *store) {
		if (!helper_name_is_sane(store)) {
			snprintf(errbuf, errlen,
				 "invalid credential helper name in \"credsStore\"");
			return -EINVAL;
		}
		if (!(c->store = strdup(store)))
			return -ENOMEM;
	}
	*ret = TAKE_PTR(c);
	return 0;
}

int credentials_default_path(char **ret)
{
	const char *dc = getenv("DOCKER_CONFIG");
	const char *home = getenv("HOME");
	char *p;

	if (dc && *dc) {
		if (asprintf(&p, "%s/config.json", dc) < 0)
			return -ENOMEM;
	} else if (home && *home) {
		if (asprintf(&p, "%s/.docker/config.json", home) < 0)
			return -ENOMEM;
	} else {
		return -ENOENT;
	}
	*ret = p;
	return 0;
}

int credentials_load(const char *path, bool must_exist, struct credentials **ret, char *errbuf,
		     size_t errlen)
{
	_cleanup_close_ int fd = -1;
	_cleanup_(secret_freep) char *buf = NULL;
	char why[200];
	struct stat st;
	size_t len = 0;
	int r;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		r = negative_errno();
		if (r == -ENOENT && !must_exist) {
			*ret = calloc(1, sizeof(**ret));
			return *ret ? 0 : -ENOMEM;
		}
		snprintf(errbuf, errlen, "cannot read auth file \"%s\": %s", path, strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > CONFIG_MAX_BYTES) {
		snprintf(errbuf, errlen, "auth file \"%s\" is not a regular file under %u bytes",
			 path, CONFIG_MAX_BYTES);
		return -EFBIG;
	}
	buf = calloc(1, (size_t)st.st_size + 1);
	if (!buf)
		return -ENOMEM;
	while (len < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = negative_errno();
			snprintf(errbuf, errlen, "cannot read auth file \"%s\": %s", path,
				 strerror(-r));
			return r;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	why[0] = '\0';
	r = credentials_parse(buf, len, ret, why, sizeof(why));
	if (r < 0)
		snprintf(errbuf, errlen, "auth file \"%s\": %s", path, why[0] ? why : strerror(-r));
	return r;
}

/* Runs docker-credential-<name> get; its stdout into out (capped). */
static int helper_run(const char *name, const char *server_url, int timeout_ms, char *out,
		      size_t outcap, size_t *ret_len)
{
	_cleanup_free_ char *prog = NULL;
	int in_pipe[2] = { -1, -1 }, out_pipe[2] = { -1, -1 };
	posix_spawn_file_actions_t fa;
	int64_t deadline = clock_mono_ms() + timeout_ms;
	size_t len = 0;
	bool timed_out = false;
	pid_t pid;
	int r, status;
	char *argv[3];

	if (asprintf(&prog, "docker-credential-%s", name) < 0)
		return -ENOMEM;
	if (pipe2(in_pipe, O_CLOEXEC) < 0)
		return negative_errno();
	if (pipe2(out_pipe, O_CLOEXEC) < 0) {
		r = negative_errno();
		close(in_pipe[0]);
		close(in_pipe[1]);
		return r;
	}
	argv[0] = prog;
	argv[1] = (char *)"get";
	argv[2] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in_pipe[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
	/* The helper's complaints may echo what it was given. */
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	r = -posix_spawnp(&pid, prog, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(in_pipe[0]);
	close(out_pipe[1]);
	if (r < 0) {
		close(in_pipe[1]);
		close(out_pipe[0]);
		return r == -ENOENT ? -EIO : r;
	}

	/* The URL is short: the pipe takes it without blocking. */
	if (write(in_pipe[1], server_url, strlen(server_url)) < 0)
		(void)0; /* a helper that does not read is judged by its output */
	close(in_pipe[1]);

	for (;;) {
		struct pollfd pfd = { .fd = out_pipe[0], .events = POLLIN };
		int64_t left = deadline - clock_mono_ms();
		ssize_t n;

		if (left <= 0) {
			timed_out = true;
			break;
		}
		r = poll(&pfd, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0) {
			timed_out = true;
			break;
		}
		if (len >= outcap) {
			len = outcap + 1;
			break;
		}
		n = read(out_pipe[0], out + len, outcap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(out_pipe[0]);
	if (timed_out || len > outcap)
		kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (timed_out)
		return -ETIMEDOUT;
	if (len > outcap)
		return -EIO;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -ENOENT; /* "credentials not found" is a non-zero exit */
	*ret_len = len;
	return 0;
}

static int helper_get(const char *name, const char *host, int timeout_ms, struct credential *ret)
{
	_cleanup_(secret_freep) char *out = NULL;
	json_auto_t *root = NULL;
	const char *user, *secret;
	const char *url = strcmp(host, "docker.io") == 0 ? "https://index.docker.io/v1/" : host;
	struct credential c = { 0 };
	size_t len = 0;
	int r;

	out = calloc(1, HELPER_OUTPUT_MAX + 1);
	if (!out)
		return -ENOMEM;
	r = helper_run(name, url, timeout_ms > 0 ? timeout_ms : 10000, out, HELPER_OUTPUT_MAX,
		       &len);
	if (r < 0)
		return r;
	root = json_loadb(out, len, 0, NULL);
	user = json_string_value(json_object_get(root, "Username"));
	secret = json_string_value(json_object_get(root, "Secret"));
	if (!secret || !*secret)
		return -EIO;
	if (user && strcmp(user, "<token>") == 0) {
		c.identity_token = strdup(secret);
		if (!c.identity_token)
			return -ENOMEM;
	} else {
		c.username = strdup(user ? user : "");
		c.password = strdup(secret);
		if (!c.username || !c.password) {
			credential_clear(&c);
			return -ENOMEM;
		}
	}
	*ret = c;
	return 0;
}

static int cred_copy(const struct credential *src, struct credential *ret)
{
	struct credential c = { 0 };

	if ((src->username && !(c.username = strdup(src->username))) ||
	    (src->password && !(c.password = strdup(src->password))) ||
	    (src->identity_token && !(c.identity_token = strdup(src->identity_token)))) {
		credential_clear(&c);
		return -ENOMEM;
	}
	*ret = c;
	return 0;
}

int credentials_lookup(const struct credentials *c, const char *host, int helper_timeout_ms,
		       struct credential *ret)
{
	char want[HOST_MAX];

	if (!c || !host)
		return -ENOENT;
	credentials_normalize_host(host, want, sizeof(want));
	for (size_t i = 0; i < c->n_helpers; i++)
		if (strcmp(c->helpers[i].host, want) == 0)
			return helper_get(c->helpers[i].helper, want, helper_timeout_ms, ret);
	for (size_t i = 0; i < c->n_auths; i++) {
		const struct credential *e = &c->auths[i].cred;

		if (strcmp(c->auths[i].host, want) != 0)
			continue;
		if (e->username || e->identity_token)
			return cred_copy(e, ret);
	}
	if (c->store)
		return helper_get(c->store, want, helper_timeout_ms, ret);
	return -ENOENT;
}

bool credentials_configured(const struct credentials *c, const char *host)
{
	char want[HOST_MAX];

	if (!c || !host)
		return false;
	if (c->store)
		return true;
	credentials_normalize_host(host, want, sizeof(want));
	for (size_t i = 0; i < c->n_helpers; i++)
		if (strcmp(c->helpers[i].host, want) == 0)
			return true;
	for (size_t i = 0; i < c->n_auths; i++)
		if (strcmp(c->auths[i].host, want) == 0 &&
		    (c->auths[i].cred.username || c->auths[i].cred.identity_token))
			return true;
	return false;
}

struct cache_entry {
	int found; /* 0, or -ENOENT for "none" */
	struct credential cred;
	int64_t at_ms;
};

struct credentials_cache {
	const struct credentials *creds; /* borrowed, read-only */
	int64_t ttl_ms;
	pthread_mutex_t lock;
	struct strmap *entries; /* protected by lock; host -> struct cache_entry */
};

static int cache_entry_free(void *userdata, const char *key, void *value)
{
	struct cache_entry *e = value;

	credential_clear(&e->cred);
	free(e);
	return 0;
}

int credentials_cache_new(const struct credentials *c, int64_t ttl_ms,
			  struct credentials_cache **ret)
{
	struct credentials_cache *cc = calloc(1, sizeof(*cc));

	if (!cc)
		return -ENOMEM;
	cc->entries = strmap_new();
	if (!cc->entries || pthread_mutex_init(&cc->lock, NULL) != 0) {
		strmap_free(cc->entries);
		free(cc);
		return -ENOMEM;
	}
	cc->creds = c;
	cc->ttl_ms = ttl_ms;
	*ret = cc;
	return 0;
}

void credentials_cache_free(struct credentials_cache *cc)
{
	if (!cc)
		return;
	strmap_foreach(cc->entries, cache_entry_free, NULL);
	strmap_free(cc->entries);
	pthread_mutex_destroy(&cc->lock);
	free(cc);
}

int credentials_cache_lookup(struct credentials_cache *cc, const char *host, int helper_timeout_ms,
			     struct credential *ret)
{
	struct cache_entry *e, *fresh;
	int64_t now = clock_mono_ms();
	int k;

	if (!cc->creds)
		return -ENOENT;
	pthread_mutex_lock(&cc->lock);
	e = strmap_get(cc->entries, host);
	if (e && now - e->at_ms < cc->ttl_ms) {
		k = e->found == 0 ? cred_copy(&e->cred, ret) : e->found;
		pthread_mutex_unlock(&cc->lock);
		return k;
	}
	pthread_mutex_unlock(&cc->lock);

	/* A helper may take seconds: run it without the lock. */
	k = credentials_lookup(cc->creds, host, helper_timeout_ms, ret);
	if (k < 0 && k != -ENOENT)
		return k;
	fresh = calloc(1, sizeof(*fresh));
	if (!fresh)
		return k;
	fresh->found = k;
	fresh->at_ms = now;
	if (k == 0 && cred_copy(ret, &fresh->cred) < 0) {
		free(fresh);
		return k;
	}
	pthread_mutex_lock(&cc->lock);
	e = strmap_get(cc->entries, host);
	if (strmap_put(cc->entries, host, fresh) < 0)
		cache_entry_free(NULL, NULL, fresh);
	else if (e)
		cache_entry_free(NULL, NULL, e);
	pthread_mutex_unlock(&cc->lock);
	return k;
}
