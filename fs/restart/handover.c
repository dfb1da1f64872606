/* The hand-over log (handover.h): its records, written and read. */
#include "handover.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fault.h"

#include "macro.h"
#include "strmap.h"

/* ---- records ---------------------------------------------------------- */

static bool needs_escape(unsigned char c)
{
	return c <= ' ' || c >= 0x7f || c == '%';
}

/* s escaped, in a new string. */
static char *escape(const char *s)
{
	size_t n = 0;
	char *out, *p;

	for (const char *q = s; *q; q++)
		n += needs_escape((unsigned char)*q) ? 3 : 1;
	out = p = malloc(n + 1);
	if (!out)
		return NULL;
	for (const char *q = s; *q; q++) {
		if (needs_escape((unsigned char)*q))
			p += sprintf(p, "%%%02X", (unsigned char)*q);
		else
			*p++ = *q;
	}
	*p = '\0';
	return out;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Unescapes s in place; -EBADMSG for a bad escape or an empty string. */
static int unescape(char *s)
{
	char *w = s;

	if (!*s)
		return -EBADMSG;
	for (const char *r = s; *r; r++) {
		if (*r != '%') {
			*w++ = *r;
			continue;
		}
		int hi = hexval(r[1]), lo = hi < 0 ? -1 : hexval(r[2]);
		if (lo < 0 || (hi == 0 && lo == 0))
			return -EBADMSG;
		*w++ = (char)(hi << 4 | lo);
		r += 2;
	}
	*w = '\0';
	return 0;
}

static char *format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *format(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&s, fmt, ap);
	va_end(ap);
	return r < 0 ? NULL : s;
}

char *handover_format_version(void)
{
	return format("v %d\n", HANDOVER_VERSION);
}

char *handover_format_init(const void *req, size_t len)
{
	const unsigned char *b = req;
	char *s = malloc(5 + 2 * len + 2), *p = s;

	if (!s)
		return NULL;
	p += sprintf(p, "init ");
	for (size_t i = 0; i < len; i++)
		p += sprintf(p, "%02x", b[i]);
	strcpy(p, "\n");
	return s;
}

char *handover_format_init_reply(uint64_t flags)
{
	return format("initr %" PRIx64 "\n", flags);
}

char *handover_format_ns(const char *key)
{
	_cleanup_free_ char *k = escape(key);

	/* images/ itself ("") is never recorded: every process has it */
	return k && *k ? format("ns %s\n", k) : NULL;
}

char *handover_format_ns_owned(const char *key, uint32_t uid)
{
	_cleanup_free_ char *k = escape(key);

	return k && *k && uid != HANDOVER_NO_OWNER
		       ? format("ns %s\nnsu %s %" PRIu32 "\n", k, k, uid)
		       : NULL;
}

char *handover_format_image(uint32_t key, const char *digest, const char *reference)
{
	_cleanup_free_ char *d = escape(digest), *r = escape(reference);

	return d && r && *d && *r ? format("img %" PRIu32 " %s %s\n", key, d, r) : NULL;
}

char *handover_format_image_gone(uint32_t key)
{
	return key ? format("imgx %" PRIu32 "\n", key) : NULL;
}

char *handover_format_ns_forgotten(const char *key)
{
	_cleanup_free_ char *k = escape(key);

	return k && *k ? format("nsx %s\n", k) : NULL;
}

char *handover_format_backing(int id, const char *object)
{
	_cleanup_free_ char *o = escape(object);

	return o && *o ? format("bk %d %s\n", id, o) : NULL;
}

char *handover_format_backing_closed(int id)
{
	return format("bkx %d\n", id);
}

char *handover_format_backoff(const struct handover_backoff *b)
{
	_cleanup_free_ char *r = escape(b->reference), *m = escape(b->message);

	return r && m && *r ? format("bo %s %u %" PRId64 " %" PRId64 " %d =%s\n", r, b->failures,
				     b->delay_ns, b->last_ns, -b->err, m)
			    : NULL;
}

char *handover_format_backoff_cleared(const char *reference)
{
	_cleanup_free_ char *r = escape(reference);

	return r && *r ? format("bok %s\n", r) : NULL;
}

/* ---- parsing ---------------------------------------------------------- */

static int parse_uint(const char *s, uint64_t max, uint64_t *ret)
{
	char *end;
	unsigned long long v;

	if (!*s || *s == '-' || *s == '+')
		return -EBADMSG;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		return -EBADMSG;
	*ret = v;
	return 0;
}

/* Splits line into at most max fields at single spaces; the count. */
static int parse_i64(const char *s, int64_t *ret)
{
	uint64_t v;
	int r = parse_uint(s, INT64_MAX, &v);

	if (r == 0)
		*ret = (int64_t)v;
	return r;
}

static size_t split(char *line, char **f, size_t max)
{
	size_t n = 0;

	while (n < max) {
		f[n++] = line;
		line = strchr(line, ' ');
		if (!line)
			break;
		*line++ = '\0';
	}
	return line ? max + 1 : n;
}

struct parse {
	struct handover_state *s;
	struct strmap *ns;     /* key -> its index in s->ns_keys + 1 (size_t *) */
	struct strmap *images; /* key in decimal -> struct handover_image * */
	struct strmap *bk;     /* id in decimal -> object (owned) */
	struct strmap *bo;     /* reference -> struct handover_backoff * */
};

static void backoff_free(struct handover_backoff *b)
{
	if (b) {
		free(b->reference);
		free(b->message);
		free(b);
	}
}

static int add_backoff(struct parse *p, char **f, size_t n)
{
	struct handover_backoff *b;
	uint64_t failures, err;

	if (unescape(f[1]) < 0)
		return -EBADMSG;
	backoff_free(strmap_remove(p->bo, f[1]));
	if (n == 2)
		return 0;
	if (parse_uint(f[2], UINT32_MAX, &failures) < 0 || failures == 0 || f[6][0] != '=' ||
	    parse_uint(f[5], 4095, &err) < 0 || (f[6][1] && unescape(f[6] + 1) < 0))
		return -EBADMSG;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->failures = (unsigned)failures;
	b->err = -(int)err;
	if (parse_i64(f[3], &b->delay_ns) < 0 || parse_i64(f[4], &b->last_ns) < 0) {
		backoff_free(b);
		return -EBADMSG;
	}
	b->reference = strdup(f[1]);
	b->message = strdup(f[6] + 1);
	if (!b->reference || !b->message || strmap_put(p->bo, b->reference, b) < 0) {
		backoff_free(b);
		return -ENOMEM;
	}
	return 0;
}

/* A namespace node the kernel forgot: its key, if live, goes. */
static int drop_ns(struct parse *p, const char *key)
{
	size_t *slot = strmap_remove(p->ns, key);

	if (slot) {
		free(p->s->ns_keys[*slot - 1]);
		p->s->ns_keys[*slot - 1] = NULL;
		free(slot);
	}
	return 0;
}

static int add_ns(struct parse *p, const char *key)
{
	size_t *slot;
	char **v;

	uint32_t *o;

	if (strmap_get(p->ns, key))
		return 0;
	o = realloc(p->s->ns_owners, (p->s->n_ns_keys + 1) * sizeof(*o));
	if (!o)
		return -ENOMEM;
	p->s->ns_owners = o;
	o[p->s->n_ns_keys] = HANDOVER_NO_OWNER;
	v = realloc(p->s->ns_keys, (p->s->n_ns_keys + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	p->s->ns_keys = v;
	if (!(v[p->s->n_ns_keys] = strdup(key)))
		return -ENOMEM;
	p->s->n_ns_keys++;
	/* where it is, counted from 1, for a later "nsx" */
	slot = malloc(sizeof(*slot));
	if (!slot)
		return -ENOMEM;
	*slot = p->s->n_ns_keys;
	if (strmap_put(p->ns, key, slot) < 0) {
		free(slot);
		return -ENOMEM;
	}
	return 0;
}

/* The user a live node is charged to (a later "ns" of it keeps it). */
static int own_ns(struct parse *p, const char *key, const char *uid)
{
	size_t *slot = strmap_get(p->ns, key);
	uint64_t v;

	if (parse_uint(uid, HANDOVER_NO_OWNER, &v) < 0)
		return -EBADMSG;
	if (slot)
		p->s->ns_owners[*slot - 1] = (uint32_t)v;
	return 0;
}

/* The keys "nsx" dropped leave holes: closed up, in order. */
static void pack_ns(struct handover_state *s)
{
	size_t w = 0;

	for (size_t i = 0; i < s->n_ns_keys; i++)
		if (s->ns_keys[i]) {
			s->ns_owners[w] = s->ns_owners[i];
			s->ns_keys[w++] = s->ns_keys[i];
		}
	s->n_ns_keys = w;
}

static int add_image(struct parse *p, char **f)
{
	struct handover_image *img;
	uint64_t key;
	char name[24];

	if (parse_uint(f[1], UINT32_MAX, &key) < 0 || key == 0 || unescape(f[2]) < 0 ||
	    unescape(f[3]) < 0)
		return -EBADMSG;
	snprintf(name, sizeof(name), "%" PRIu64, key);
	img = strmap_get(p->images, name);
	if (!img) {
		img = calloc(1, sizeof(*img));
		if (!img || strmap_put(p->images, name, img) < 0) {
			free(img);
			return -ENOMEM;
		}
	}
	free(img->digest);
	free(img->reference);
	img->key = (uint32_t)key;
	img->digest = strdup(f[2]);
	img->reference = strdup(f[3]);
	return img->digest && img->reference ? 0 : -ENOMEM;
}

static int drop_image(struct parse *p, const char *field)
{
	struct handover_image *img;
	uint64_t key;
	char name[24];

	if (parse_uint(field, UINT32_MAX, &key) < 0 || key == 0)
		return -EBADMSG;
	snprintf(name, sizeof(name), "%" PRIu64, key);
	img = strmap_remove(p->images, name);
	if (img) {
		free(img->digest);
		free(img->reference);
		free(img);
	}
	return 0;
}

static int add_backing(struct parse *p, char **f, size_t n)
{
	uint64_t id;
	char *old, *obj = NULL;

	if (parse_uint(f[1], INT32_MAX, &id) < 0 || id == 0)
		return -EBADMSG;
	if (n == 3) {
		if (unescape(f[2]) < 0)
			return -EBADMSG;
		if (!(obj = strdup(f[2])))
			return -ENOMEM;
	}
	old = strmap_remove(p->bk, f[1]);
	free(old);
	if (obj && strmap_put(p->bk, f[1], obj) < 0) {
		free(obj);
		return -ENOMEM;
	}
	return 0;
}

static int parse_init(struct handover_state *s, const char *hex)
{
	size_t n = strlen(hex);
	unsigned char *b;

	if (n == 0 || n % 2)
		return -EBADMSG;
	b = malloc(n / 2);
	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0) {
			free(b);
			return -EBADMSG;
		}
		b[i] = (unsigned char)(hi << 4 | lo);
	}
	free(s->init);
	s->init = b;
	s->init_len = n / 2;
	return 0;
}

static int parse_init_reply(struct handover_state *s, const char *hex)
{
	uint64_t v = 0;

	if (!*hex || strlen(hex) > 16)
		return -EBADMSG;
	for (const char *c = hex; *c; c++) {
		int d = hexval(*c);

		if (d < 0)
			return -EBADMSG;
		v = v << 4 | (uint64_t)d;
	}
	s->init_reply_known = true;
	s->init_reply = v;
	return 0;
}

static int parse_line(struct parse *p, char *line, bool first)
{
	char *f[8];
	size_t n = split(line, f, 7);
	uint64_t v;

	if (first) {
		if (n != 2 || strcmp(f[0], "v") != 0 || parse_uint(f[1], UINT32_MAX, &v) < 0)
			return -EBADMSG;
		if (v != HANDOVER_VERSION)
			return -EPROTO;
		p->s->version = (unsigned)v;
		return 0;
	}
	if (!strcmp(f[0], "init"))
		return n == 2 ? parse_init(p->s, f[1]) : -EBADMSG;
	if (!strcmp(f[0], "initr"))
		return n == 2 ? parse_init_reply(p->s, f[1]) : -EBADMSG;
	if (!strcmp(f[0], "ns"))
		return n == 2 && unescape(f[1]) == 0 ? add_ns(p, f[1]) : -EBADMSG;
	if (!strcmp(f[0], "nsu"))
		return n == 3 && unescape(f[1]) == 0 ? own_ns(p, f[1], f[2]) : -EBADMSG;
	if (!strcmp(f[0], "nsx"))
		return n == 2 && unescape(f[1]) == 0 ? drop_ns(p, f[1]) : -EBADMSG;
	if (!strcmp(f[0], "img"))
		return n == 4 ? add_image(p, f) : -EBADMSG;
	if (!strcmp(f[0], "imgx"))
		return n == 2 ? drop_image(p, f[1]) : -EBADMSG;
	if (!strcmp(f[0], "bk"))
		return n == 3 ? add_backing(p, f, n) : -EBADMSG;
	if (!strcmp(f[0], "bkx"))
		return n == 2 ? add_backing(p, f, n) : -EBADMSG;
	if (!strcmp(f[0], "bo"))
		return n == 7 ? add_backoff(p, f, n) : -EBADMSG;
	if (!strcmp(f[0], "bok"))
		return n == 2 ? add_backoff(p, f, n) : -EBADMSG;
	return 0;
}

static int collect_image(void *userdata, const char *key, void *value)
{
	struct handover_state *s = userdata;
	struct handover_image *img = value;

	s->images[s->n_images++] = *img;
	free(img);
	return 0;
}

static int collect_backing(void *userdata, const char *key, void *value)
{
	struct handover_state *s = userdata;

	s->backings[s->n_backings++] =
		(struct handover_backing){ .id = atoi(key), .object = value };
	return 0;
}

static int collect_backoff(void *userdata, const char *key, void *value)
{
	struct handover_state *s = userdata;

	s->backoffs[s->n_backoffs] = *(struct handover_backoff *)value;
	free(value);
	s->n_backoffs++;
	return 0;
}

static int free_backoff_entry(void *userdata, const char *key, void *value)
{
	backoff_free(value);
	return 0;
}

static int free_image_entry(void *userdata, const char *key, void *value)
{
	struct handover_image *img = value;

	free(img->digest);
	free(img->reference);
	free(img);
	return 0;
}

static int free_entry(void *userdata, const char *key, void *value)
{
	free(value);
	return 0;
}

static int cmp_backing(const void *a, const void *b)
{
	const struct handover_backing *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

static int cmp_image(const void *a, const void *b)
{
	const struct handover_image *x = a, *y = b;

	return (x->key > y->key) - (x->key < y->key);
}

int handover_parse(const char *text, size_t len, struct handover_state *ret)
{
	struct handover_state s = { 0 };
	struct parse p = { .s = &s };
	_cleanup_free_ char *buf = malloc(len + 1);
	char *line, *nl;
	bool first = true;
	int r = 0;

	p.ns = strmap_new();
	p.images = strmap_new();
	p.bk = strmap_new();
	p.bo = strmap_new();
	if (!buf || !p.ns || !p.images || !p.bk || !p.bo) {
		r = -ENOMEM;
		goto out;
	}
	memcpy(buf, text, len);
	buf[len] = '\0';
	if (memchr(buf, '\0', len)) {
		r = -EBADMSG;
		goto out;
	}
	/* a last line without its newline was cut by a kill: not a record */
	for (line = buf; (nl = strchr(line, '\n')); line = nl + 1) {
		*nl = '\0';
		r = parse_line(&p, line, first);
		if (r < 0)
			goto out;
		first = false;
	}
	if (first) {
		r = -EBADMSG;
		goto out;
	}
	s.images = calloc(strmap_size(p.images) + 1, sizeof(*s.images));
	s.backings = calloc(strmap_size(p.bk) + 1, sizeof(*s.backings));
	s.backoffs = calloc(strmap_size(p.bo) + 1, sizeof(*s.backoffs));
	if (!s.images || !s.backings || !s.backoffs) {
		r = -ENOMEM;
		goto out;
	}
	pack_ns(&s);
	strmap_foreach(p.images, collect_image, &s);
	strmap_foreach(p.bk, collect_backing, &s);
	strmap_foreach(p.bo, collect_backoff, &s);
	strmap_free(p.images);
	strmap_free(p.bk);
	strmap_free(p.bo);
	p.images = p.bk = p.bo = NULL;
	if (s.n_images > 1)
		qsort(s.images, s.n_images, sizeof(*s.images), cmp_image);
	if (s.n_backings > 1)
		qsort(s.backings, s.n_backings, sizeof(*s.backings), cmp_backing);
out:
	if (p.images)
		strmap_foreach(p.images, free_image_entry, NULL);
	if (p.bk)
		strmap_foreach(p.bk, free_entry, NULL);
	if (p.bo)
		strmap_foreach(p.bo, free_backoff_entry, NULL);
	strmap_free(p.images);
	strmap_free(p.bk);
	strmap_free(p.bo);
	if (p.ns)
		strmap_foreach(p.ns, free_entry, NULL);
	strmap_free(p.ns);
	if (r < 0) {
		pack_ns(&s);
		handover_state_done(&s);
		return r;
	}
	*ret = s;
	return 0;
}

void handover_state_done(struct handover_state *s)
{
	for (size_t i = 0; i < s->n_ns_keys; i++)
		free(s->ns_keys[i]);
	for (size_t i = 0; i < s->n_images; i++) {
		free(s->images[i].digest);
		free(s->images[i].reference);
	}
	for (size_t i = 0; i < s->n_backings; i++)
		free(s->backings[i].object);
	for (size_t i = 0; i < s->n_backoffs; i++) {
		free(s->backoffs[i].reference);
		free(s->backoffs[i].message);
	}
	free(s->backoffs);
	free(s->ns_keys);
	free(s->ns_owners);
	free(s->images);
	free(s->backings);
	free(s->init);
	*s = (struct handover_state){ 0 };
}

/* Appends record (taken) to *buf; false when out of memory. */
static bool append(char **buf, size_t *len, char *record)
{
	size_t n;
	char *b;

	if (!record)
		return false;
	n = strlen(record);
	b = realloc(*buf, *len + n + 1);
	if (!b) {
		free(record);
		return false;
	}
	memcpy(b + *len, record, n + 1);
	*buf = b;
	*len += n;
	free(record);
	return true;
}

char *handover_format_state(const struct handover_state *s)
{
	char *buf = NULL;
	size_t len = 0;
	bool ok = append(&buf, &len, handover_format_version());

	if (ok && s->init)
		ok = append(&buf, &len, handover_format_init(s->init, s->init_len));
	if (ok && s->init_reply_known)
		ok = append(&buf, &len, handover_format_init_reply(s->init_reply));
	for (size_t i = 0; ok && i < s->n_ns_keys; i++)
		ok = append(&buf, &len,
			    s->ns_owners && s->ns_owners[i] != HANDOVER_NO_OWNER
				    ? handover_format_ns_owned(s->ns_keys[i], s->ns_owners[i])
				    : handover_format_ns(s->ns_keys[i]));
	for (size_t i = 0; ok && i < s->n_images; i++)
		ok = append(&buf, &len,
			    handover_format_image(s->images[i].key, s->images[i].digest,
						  s->images[i].reference));
	for (size_t i = 0; ok && i < s->n_backings; i++)
		ok = append(&buf, &len,
			    handover_format_backing(s->backings[i].id, s->backings[i].object));
	for (size_t i = 0; ok && i < s->n_backoffs; i++)
		ok = append(&buf, &len, handover_format_backoff(&s->backoffs[i]));
	if (!ok) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* ---- this process's log ------------------------------------------------ */

/* lock orders every write to the log with a compaction: a note goes to
 * the log and, while a compaction is under way, to the new log too
 * (next_fd), so that whichever of the two the supervisor holds when this
 * process dies has every record. */
struct handover_log {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* the compactor waits for a compaction due */
	int fd;
	int next_fd;		   /* the compacted log while it is swapped in; lock */
	size_t bytes;		   /* the size of the log; lock */
	size_t live_bytes;	   /* its size when last compacted (0: never); lock */
	unsigned long compactions; /* lock */
	atomic_ulong lost;
	handover_swap_fn swap_fn;
	void *swap_data;
	bool compactor_on, compactor_stop; /* lock */
	pthread_t compactor;
};

int handover_log_new(int fd, struct handover_log **ret)
{
	struct handover_log *log = calloc(1, sizeof(*log));
	struct stat st;

	if (!log)
		return -ENOMEM;
	pthread_mutex_init(&log->lock, NULL);
	pthread_cond_init(&log->cond, NULL);
	log->fd = fd;
	log->next_fd = -1;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_APPEND);
	if (fstat(fd, &st) == 0)
		log->bytes = (size_t)st.st_size;
	*ret = log;
	return 0;
}

void handover_log_free(struct handover_log *log)
{
	if (!log)
		return;
	handover_compactor_stop(log);
	if (log->fd >= 0)
		close(log->fd);
	pthread_mutex_destroy(&log->lock);
	pthread_cond_destroy(&log->cond);
	free(log);
}

int handover_log_fd(struct handover_log *log)
{
	int fd;

	pthread_mutex_lock(&log->lock);
	fd = log->fd;
	pthread_mutex_unlock(&log->lock);
	return fd;
}

static bool compaction_due(const struct handover_log *log)
{
	return log->next_fd < 0 && log->bytes >= HANDOVER_COMPACT_MIN &&
	       log->bytes > 2 * log->live_bytes;
}

void handover_note(struct handover_log *log, char *record)
{
	size_t n;

	if (!log) {
		free(record);
		return;
	}
	if (!record) {
		atomic_fetch_add(&log->lost, 1);
		return;
	}
	n = strlen(record);
	pthread_mutex_lock(&log->lock);
	/* O_APPEND: one write(2) is one record */
	if (write(log->fd, record, n) != (ssize_t)n)
		atomic_fetch_add(&log->lost, 1);
	else
		log->bytes += n;
	if (log->next_fd >= 0 && write(log->next_fd, record, n) != (ssize_t)n)
		atomic_fetch_add(&log->lost, 1);
	if (log->compactor_on && compaction_due(log))
		pthread_cond_signal(&log->cond);
	pthread_mutex_unlock(&log->lock);
	free(record);
}

unsigned long handover_lost(struct handover_log *log)
{
	return atomic_load(&log->lost);
}

void handover_set_swap(struct handover_log *log, handover_swap_fn fn, void *userdata)
{
	pthread_mutex_lock(&log->lock);
	log->swap_fn = fn;
	log->swap_data = userdata;
	pthread_mutex_unlock(&log->lock);
}

size_t handover_log_bytes(struct handover_log *log)
{
	size_t n;

	pthread_mutex_lock(&log->lock);
	n = log->bytes;
	pthread_mutex_unlock(&log->lock);
	return n;
}

unsigned long handover_compactions(struct handover_log *log)
{
	unsigned long n;

	pthread_mutex_lock(&log->lock);
	n = log->compactions;
	pthread_mutex_unlock(&log->lock);
	return n;
}

char *handover_read(int fd, size_t *ret_len)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;
	ssize_t n;

	for (;;) {
		if (len == cap) {
			char *b = realloc(buf, cap = cap ? cap * 2 : 65536);
			if (!b) {
				free(buf);
				return NULL;
			}
			buf = b;
		}
		n = pread(fd, buf + len, cap - len, (off_t)len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			free(buf);
			return NULL;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	*ret_len = len;
	return buf;
}

/* A new log holding what the log in fd says, compacted: its descriptor,
 * or -errno.  Under the log's lock. */
static int write_compacted(int log_fd, size_t *ret_len)
{
	_cleanup_free_ char *text = NULL, *compact = NULL;
	struct handover_state st;
	size_t len = 0, n;
	int fd, r;

	text = handover_read(log_fd, &len);
	if (!text)
		return -errno ?: -ENOMEM;
	r = handover_parse(text, len, &st);
	if (r < 0)
		return r;
	compact = handover_format_state(&st);
	handover_state_done(&st);
	if (!compact)
		return -ENOMEM;
	fd = memfd_create("pullfs-handover", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = strlen(compact);
	if (write(fd, compact, n) != (ssize_t)n) {
		r = errno ? -errno : -ENOSPC;
		close(fd);
		return r;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_APPEND);
	*ret_len = n;
	return fd;
}

int handover_compact(struct handover_log *log)
{
	handover_swap_fn swap_fn;
	void *swap_data;
	size_t len = 0, before = 0;
	int fd, r;

	pthread_mutex_lock(&log->lock);
	swap_fn = log->swap_fn;
	swap_data = log->swap_data;
	if (!swap_fn || log->next_fd >= 0) {
		pthread_mutex_unlock(&log->lock);
		return swap_fn ? -EBUSY : -EOPNOTSUPP;
	}
	fd = write_compacted(log->fd, &len);
	if (fd >= 0)
		log->next_fd = fd; /* notes from now on go to both */
	before = log->bytes;
	pthread_mutex_unlock(&log->lock);
	if (fd < 0)
		return fd;
	/* A kill from here on leaves the supervisor either log, whole. */
	fault_point("handover-compacted");
	r = swap_fn(fd, swap_data);
	if (r == 0)
		fault_point("handover-swapped");
	pthread_mutex_lock(&log->lock);
	log->next_fd = -1;
	if (r == 0) {
		/* what was noted meanwhile is in both */
		log->bytes = len + (log->bytes - before);
		log->live_bytes = len;
		close(log->fd);
		log->fd = fd;
		log->compactions++;
	} else {
		close(fd);
	}
	pthread_mutex_unlock(&log->lock);
	return r;
}

static void *compactor_main(void *arg)
{
	struct handover_log *log = arg;

	pthread_mutex_lock(&log->lock);
	while (!log->compactor_stop) {
		if (!compaction_due(log)) {
			pthread_cond_wait(&log->cond, &log->lock);
			continue;
		}
		pthread_mutex_unlock(&log->lock);
		int r = handover_compact(log);
		pthread_mutex_lock(&log->lock);
		if (r < 0 && r != -EBUSY) {
			/* not again before the log doubles once more */
			log->live_bytes = log->bytes;
			fprintf(stderr, "pullfs: cannot compact the hand-over log: %s\n",
				strerror(-r));
		}
	}
	pthread_mutex_unlock(&log->lock);
	return NULL;
}

int handover_compactor_start(struct handover_log *log)
{
	int r;

	pthread_mutex_lock(&log->lock);
	log->compactor_stop = false;
	r = -pthread_create(&log->compactor, NULL, compactor_main, log);
	log->compactor_on = r == 0;
	if (log->compactor_on)
		pthread_cond_signal(&log->cond);
	pthread_mutex_unlock(&log->lock);
	return r;
}

void handover_compactor_stop(struct handover_log *log)
{
	bool on;

	if (!log)
		return;
	pthread_mutex_lock(&log->lock);
	on = log->compactor_on;
	log->compactor_stop = true;
	log->compactor_on = false;
	pthread_cond_broadcast(&log->cond);
	pthread_mutex_unlock(&log->lock);
	if (on)
		pthread_join(log->compactor, NULL);
}
