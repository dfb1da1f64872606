/* The snapshots service (snapshotter.h): each method unpacks its request
 * with protobuf-c, checks what it names, asks the store and packs the
 * answer.  The store's -errno becomes the gRPC code containerd maps back
 * to its own errors (errdefs): ENOENT NotFound, EEXIST AlreadyExists,
 * EINVAL InvalidArgument, EBUSY FailedPrecondition. */
#include "snapshotter.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "digest.h"
#include "errname.h"
#include "grpcserver.h"
#include "layerview.h"
#include "macro.h"
#include "manager.h"
#include "snapfilter.h"
#include "snapshots.pb-c.h"
#include "snapstore.h"
#include "strmap.h"

/* Snapshots per message of List's stream. */
#define LIST_BATCH 100

struct snapshotter {
	char *layers_dir;	 /* MOUNT/layers; NULL: no remote snapshots */
	struct manager *manager; /* borrowed; NULL: no remote snapshots */
	struct snapstore *store;
	struct grpcserver *server;
	/* the images remote snapshots stand on, canonical references as
	 * keys (snapshotter_in_use); refs_lock, which nothing holds while
	 * it takes another */
	pthread_mutex_t refs_lock;
	struct strmap *refs;
};

/* A remote snapshot's directory, layers_dir/<base64 of the reference>/
 * <digest>/diff: the image's canonical reference goes into the map. */
static int note_ref(void *userdata, const char *path)
{
	void **ctx = userdata;
	const struct snapshotter *s = ctx[0];
	struct strmap *m = ctx[1];
	size_t n = strlen(s->layers_dir), len;
	const char *b64 = path + n + 1, *end;
	_cleanup_free_ unsigned char *text = NULL;
	_cleanup_free_ char *canon = NULL;
	ssize_t got;
	int r;

	if (strncmp(path, s->layers_dir, n) != 0 || path[n] != '/' || !(end = strchr(b64, '/')))
		return 0;
	len = (size_t)(end - b64);
	text = malloc(BASE64_DECODED_MAX(len) + 1);
	if (!text)
		return -ENOMEM;
	got = base64_decode(b64, len, true, text);
	if (got <= 0)
		return 0;
	text[got] = '\0';
	r = manager_canonical((const char *)text, &canon);
	if (r < 0)
		return r == -ENOMEM ? r : 0;
	return strmap_put(m, canon, (void *)1);
}

/* The map of the images remote snapshots stand on, made again from the
 * store (a failure keeps the one there: GC then keeps as before). */
static void refs_refresh(struct snapshotter *s)
{
	struct strmap *m = s->layers_dir ? strmap_new() : NULL;
	void *ctx[2] = { s, m };

	if (!m || snapstore_walk_remote(s->store, note_ref, ctx) < 0) {
		strmap_free(m);
		return;
	}
	struct strmap *old;

	pthread_mutex_lock(&s->refs_lock);
	old = s->refs;
	s->refs = m;
	pthread_mutex_unlock(&s->refs_lock);
	strmap_free(old);
}

uint64_t snapshotter_local_bytes(void *userdata)
{
	struct snapshotter *s = userdata;

	return snapstore_local_bytes(s->store);
}

bool snapshotter_in_use(void *userdata, const char *reference)
{
	struct snapshotter *s = userdata;
	bool used;

	pthread_mutex_lock(&s->refs_lock);
	used = s->refs && strmap_get(s->refs, reference);
	pthread_mutex_unlock(&s->refs_lock);
	return used;
}

static int code_of(int r)
{
	switch (r) {
	case -ENOENT:
		return GRPC_NOT_FOUND;
	case -EEXIST:
		return GRPC_ALREADY_EXISTS;
	case -EINVAL:
		return GRPC_INVALID_ARGUMENT;
	case -EBUSY:
		return GRPC_FAILED_PRECONDITION;
	case -ENOMEM:
		return GRPC_RESOURCE_EXHAUSTED;
	default:
		return GRPC_UNKNOWN;
	}
}

static void pack_message(const void *msg, uint8_t *out)
{
	protobuf_c_message_pack(msg, out);
}

static void answer(struct grpc_reply *reply, const void *msg)
{
	if (grpc_reply_add(reply, protobuf_c_message_get_packed_size(msg), pack_message, msg) < 0)
		grpc_reply_fail(reply, GRPC_RESOURCE_EXHAUSTED, "out of memory");
}

static void answer_empty(struct grpc_reply *reply)
{
	Google__Protobuf__Empty e = GOOGLE__PROTOBUF__EMPTY__INIT;

	answer(reply, &e);
}

/* The labels of a request as a JSON object (a key given twice: the last
 * value), checked.  Entries are the generated LabelsEntry of any of the
 * requests: all have the layout of the Prepare one. */
typedef Containerd__Services__Snapshots__V1__PrepareSnapshotRequest__LabelsEntry LabelsEntry;

static int labels_of(LabelsEntry *const *v, size_t n, json_t **ret, char *errbuf, size_t errlen)
{
	json_t *o = json_object();
	int r;

	if (!o)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		json_t *s = json_string(v[i]->value);

		if (!s) {
			json_decref(o);
			return errbuf_fail(-EINVAL, errbuf, errlen,
					   "label \"%.64s\" is not valid UTF-8", v[i]->key);
		}
		if (json_object_set_new(o, v[i]->key, s) < 0) {
			json_decref(o);
			return errbuf_fail(-EINVAL, errbuf, errlen,
					   "a label key is not valid UTF-8");
		}
	}
	r = snapstore_check_labels(o, errbuf, errlen);
	if (r < 0) {
		json_decref(o);
		return r;
	}
	*ret = o;
	return 0;
}

/* A mount as a message, pointing into m (which outlives it). */
static void mount_message(const struct snap_mount *m, Containerd__Types__Mount *pm)
{
	*pm = (Containerd__Types__Mount)CONTAINERD__TYPES__MOUNT__INIT;
	pm->type = m->type;
	pm->source = m->source;
	pm->n_options = m->n_options;
	pm->options = (char **)m->options;
}

/* Prepare, View and Mounts answer with one mount; their responses share
 * the layout of Prepare's. */
static void answer_mount(struct grpc_reply *reply, const ProtobufCMessageDescriptor *d,
			 const struct snap_mount *m)
{
	Containerd__Services__Snapshots__V1__PrepareSnapshotResponse resp =
		CONTAINERD__SERVICES__SNAPSHOTS__V1__PREPARE_SNAPSHOT_RESPONSE__INIT;
	Containerd__Types__Mount pm, *pms[1] = { &pm };

	resp.base.descriptor = d;
	mount_message(m, &pm);
	resp.n_mounts = 1;
	resp.mounts = pms;
	answer(reply, &resp);
}

/* What every method does with its request, once unpacked: 0 with its
 * answer added to reply (none for the methods that answer Empty), or
 * -errno with the reason in errbuf. */
struct errbuf {
	char text[512];
};

/* The label containerd's unpacking puts on a layer's Prepare: the name of
 * the committed snapshot it wants. */
#define TARGET_LABEL "containerd.io/snapshot.ref"
/* A longer reference is not one: references are short. */
#define REMOTE_REF_MAX 1024

/* The labels that name the layer: the CRI plugin's, and stargz's family
 * (ctr-remote rpull). */
static const struct {
	const char *ref, *digest;
} remote_labels[] = {
	{ "containerd.io/snapshot/cri.image-ref", "containerd.io/snapshot/cri.layer-digest" },
	{ "containerd.io/snapshot/remote/stargz.reference",
	  "containerd.io/snapshot/remote/stargz.digest" },
};

/* A Prepare waiting for ensure's answer. */
struct ensure_wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int r;
	struct image *img;
};

static void ensured(void *userdata, int r, struct image *img)
{
	struct ensure_wait *w = userdata;

	pthread_mutex_lock(&w->lock);
	w->r = r;
	w->img = img;
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* Ensure for the image ref on behalf of who, as a lookup of its layer
 * directory in layers/ would for a process (policy, back-off, single
 * flight, the access rules for who, events naming who), blocking until it
 * answers; then whether who may see it (-EACCES and AccessDenied
 * otherwise) and whether digest is a layer of it (LayerNotInImage
 * otherwise).  0 or the -errno of ensure, the access or the layer. */
static int ensure_layer(struct snapshotter *s, const char *ref, const char *digest,
			const struct caller *who)
{
	struct ensure_wait w = { .lock = PTHREAD_MUTEX_INITIALIZER,
				 .cond = PTHREAD_COND_INITIALIZER };
	struct ensure_call *call = NULL;
	struct image *img = NULL, *view = NULL;
	_cleanup_free_ char *canonical = NULL;
	int r = manager_ensure_start(s->manager, ref, who, ensured, &w, &call, &img);

	if (r == 0) {
		pthread_mutex_lock(&w.lock);
		while (!w.done)
			pthread_cond_wait(&w.cond, &w.lock);
		pthread_mutex_unlock(&w.lock);
		r = w.r;
		img = w.img;
	}
	pthread_cond_destroy(&w.cond);
	pthread_mutex_destroy(&w.lock);
	if (r < 0)
		return r;
	/* For a process reading the mount, ensure leaves a private image's
	 * refusal to the kernel, which checks the ACL of its root on every
	 * walk; a snapshot is handed to containerd without one. */
	r = manager_canonical(ref, &canonical);
	if (r == 0)
		r = manager_admit_image(s->manager, img, canonical, who);
	if (r == 0)
		r = manager_layer_view(img, ref, digest, who, &view);
	image_unref(img, 1);
	if (r < 0)
		return r;
	image_unref(view, 1);
	return 0;
}

/* A Prepare that names a layer pullfs can give: ensure runs for its
 * image on behalf of the process that called (the peer of the socket,
 * with the snapshot's key and the layer in its events) and blocks until
 * it answers, and the snapshot containerd wants is recorded as a
 * committed one over the layer's directory in layers/.  Returns -EEXIST
 * (the answer that tells containerd the layer is there) with the reason
 * in e, or 0 when pullfs does not give the layer -- no labels naming
 * one, labels that are not a reference and a digest, a caller the access
 * rules refuse, an image that cannot be had -- and containerd is to
 * fetch and unpack it into an ordinary snapshot. */
static int try_remote(struct snapshotter *s, const char *key, const char *parent,
		      const json_t *labels, const struct grpc_peer *peer, struct errbuf *e)
{
	const char *target = json_string_value(json_object_get(labels, TARGET_LABEL));
	const char *ref = NULL, *digest = NULL;
	_cleanup_free_ char *enc = NULL, *path = NULL;
	struct snap_info known = { 0 };
	struct caller who = { 0 };
	size_t len;
	int r, exists;

	if (!s->layers_dir || !s->manager || !target || peer->pid <= 0)
		return 0;
	for (size_t i = 0; i < ARRAY_SIZE(remote_labels) && !ref; i++) {
		ref = json_string_value(json_object_get(labels, remote_labels[i].ref));
		digest = json_string_value(json_object_get(labels, remote_labels[i].digest));
		if (!ref || !digest)
			ref = NULL;
	}
	if (!ref || !ref[0] || (len = strlen(ref)) > REMOTE_REF_MAX || !digest_is_valid(digest) ||
	    snapstore_check_name("target", target, NULL, 0) < 0)
		return 0;
	who = (struct caller){
		.pid = peer->pid,
		.uid = peer->uid,
		.gid = peer->gid,
		.snapshot = key,
		.layer = digest,
	};
	caller_name(&who);
	r = ensure_layer(s, ref, digest, &who);
	/* already given (to another namespace, to an unpack tried again):
	 * there whatever the registry says now, but not to a caller the
	 * access rules refuse */
	exists = snapstore_stat(s->store, target, &known, NULL, 0);
	snap_info_done(&known);
	if (exists == 0 && r != -EACCES)
		return errbuf_fail(-EEXIST, e->text, sizeof(e->text),
				   "target snapshot \"%s\" exists", target);
	if (r < 0)
		return 0;
	enc = malloc(BASE64_ENCODED_LEN(len) + 1);
	if (!enc)
		return 0;
	base64_encode((const unsigned char *)ref, len, enc);
	if (asprintf(&path, "%s/%s/%s/diff", s->layers_dir, enc, digest) < 0) {
		path = NULL;
		return 0;
	}
	r = snapstore_add_remote(s->store, target, parent, labels, path, NULL, 0);
	if (r < 0 && r != -EEXIST)
		return 0;
	refs_refresh(s);
	return errbuf_fail(-EEXIST, e->text, sizeof(e->text),
			   "target snapshot \"%s\": layer %s of %s is pullfs's", target, digest,
			   ref);
}

static int create(struct snapshotter *s, enum snap_kind kind,
		  const Containerd__Services__Snapshots__V1__PrepareSnapshotRequest *req,
		  const ProtobufCMessageDescriptor *resp_d, struct grpc_reply *reply,
		  struct errbuf *e)
{
	struct snap_mount m = { 0 };
	json_t *labels = NULL;
	int r;

	r = snapstore_check_name("key", req->key, e->text, sizeof(e->text));
	if (r == 0 && req->parent[0])
		r = snapstore_check_name("parent", req->parent, e->text, sizeof(e->text));
	if (r == 0)
		r = labels_of(req->labels, req->n_labels, &labels, e->text, sizeof(e->text));
	if (r == 0 && kind == SNAP_ACTIVE)
		r = try_remote(s, req->key, req->parent, labels, &reply->peer, e);
	if (r == 0)
		r = snapstore_prepare(s->store, kind, req->key, req->parent, labels, &m, e->text,
				      sizeof(e->text));
	if (r == 0)
		answer_mount(reply, resp_d, &m);
	snap_mount_done(&m);
	json_decref(labels);
	return r;
}

static int do_prepare(struct snapshotter *s, const void *msg, struct grpc_reply *reply,
		      struct errbuf *e)
{
	return create(s, SNAP_ACTIVE, msg,
		      &containerd__services__snapshots__v1__prepare_snapshot_response__descriptor,
		      reply, e);
}

/* View's request has the layout of Prepare's. */
static int do_view(struct snapshotter *s, const void *msg, struct grpc_reply *reply,
		   struct errbuf *e)
{
	return create(s, SNAP_VIEW, msg,
		      &containerd__services__snapshots__v1__view_snapshot_response__descriptor,
		      reply, e);
}

static int do_mounts(struct snapshotter *s, const void *msg, struct grpc_reply *reply,
		     struct errbuf *e)
{
	const Containerd__Services__Snapshots__V1__MountsRequest *req = msg;
	struct snap_mount m = { 0 };
	int r;

	r = snapstore_check_name("key", req->key, e->text, sizeof(e->text));
	if (r == 0)
		r = snapstore_mounts(s->store, req->key, &m, e->text, sizeof(e->text));
	if (r == 0)
		answer_mount(reply,
			     &containerd__services__snapshots__v1__mounts_response__descriptor, &m);
	snap_mount_done(&m);
	return r;
}

static int do_commit(struct snapshotter *s, const void *msg, struct grpc_reply *reply,
		     struct errbuf *e)
{
	const Containerd__Services__Snapshots__V1__CommitSnapshotRequest *req = msg;
	json_t *labels = NULL;
	int r;

	r = snapstore_check_name("key", req->key, e->text, sizeof(e->text));
	if (r == 0)
		r = snapstore_check_name("name", req->name, e->text, sizeof(e->text));
	if (r == 0)
		r = labels_of((LabelsEntry *const *)req->labels, req->n_labels, &labels, e->text,
			      sizeof(e->text));
	if (r == 0)
		r = snapstore_commit(s->store, req->name, req->key, labels, e->text,
				     sizeof(e->text));
	/* containerd's own layers and containers' upper directories count
	 * in the cache's budget */
	if (r == 0 && s->manager)
		manager_snapshot_bytes_grew(s->manager);
	json_decref(labels);
	return r;
}

static int do_remove(struct snapshotter *s, const void *msg, struct grpc_reply *reply,
		     struct errbuf *e)
{
	const Containerd__Services__Snapshots__V1__RemoveSnapshotRequest *req = msg;
	int r = snapstore_check_name("key", req->key, e->text, sizeof(e->text));

	if (r == 0)
		r = snapstore_remove(s->store, req->key, e->text, sizeof(e->text));
	if (r == 0)
		refs_refresh(s);
	return r;
}

/* An Info message of info; strings and labels point into info, the
 * entries into the arrays it allocates. */
struct info_msg {
	Containerd__Services__Snapshots__V1__Info info;
	Google__Protobuf__Timestamp created, updated;
	Containerd__Services__Snapshots__V1__Info__LabelsEntry *ents;
	Containerd__Services__Snapshots__V1__Info__LabelsEntry **ptrs;
};

static void timestamp_of(int64_t ns, Google__Protobuf__Timestamp *t)
{
	*t = (Google__Protobuf__Timestamp)GOOGLE__PROTOBUF__TIMESTAMP__INIT;
	t->seconds = ns / 1000000000;
	t->nanos = (int32_t)(ns % 1000000000);
}

static int info_message(const struct snap_info *si, struct info_msg *m)
{
	size_t n = json_object_size(si->labels), i = 0;
	const char *k;
	json_t *v;

	*m = (struct info_msg){ .info = CONTAINERD__SERVICES__SNAPSHOTS__V1__INFO__INIT };
	m->ents = calloc(n ? n : 1, sizeof(*m->ents));
	m->ptrs = calloc(n ? n : 1, sizeof(*m->ptrs));
	if (!m->ents || !m->ptrs)
		return -ENOMEM;
	json_object_foreach((json_t *)si->labels, k, v)
	{
		m->ents[i] = (Containerd__Services__Snapshots__V1__Info__LabelsEntry)
			CONTAINERD__SERVICES__SNAPSHOTS__V1__INFO__LABELS_ENTRY__INIT;
		m->ents[i].key = (char *)k;
		m->ents[i].value = (char *)json_string_value(v);
		m->ptrs[i] = &m->ents[i];
		i++;
	}
	timestamp_of(si->created_ns, &m->created);
	timestamp_of(si->updated_ns, &m->updated);
	m->info.name = si->name;
	m->info.parent = si->parent;
	m->info.kind = (Containerd__Services__Snapshots__V1__Kind)si->kind;
	m->info.created_at = &m->created;
	m->info.updated_at = &m->updated;
	m->info.n_labels = i;
	m->info.labels = m->ptrs;
	return 0;
}

static void info_message_done(struct info_msg *m)
{
	free(m->ents);
	free(m->ptrs);
}

/* Stat and Update answer with one Info; their responses share the layout
 * of Stat's. */
static int answer_info(struct grpc_reply *reply, const ProtobufCMessageDescriptor *d,
		       const struct snap_info *si)
{
	Containerd__Services__Snapshots__V1__StatSnapshotResponse resp =
		CONTAINERD__SERVICES__SNAPSHOTS__V1__STAT_SNAPSHOT_RESPONSE__INIT;
	struct info_msg im;
	int r = info_message(si, &im);

	if (r == 0) {
		resp.base.descriptor = d;
		resp.info = &im.info;
		answer(reply, &resp);
	}
	info_message_done(&im);
	return r;
}

static int do_stat(struct snapshotter *s, const void *msg, struct grpc_reply *reply,
		   struct errbuf *e)
{
	const Containerd__Services__Snapshots__V1__StatSnapshotRequest *req = msg;
	struct snap_info si = { 0 };
	int r;

	r = snapstore_check_name("key", req->key, e->text, sizeof(e->text));
	if (r == 0)
		r = snapstore_stat(s->store, req->key, &si, e->text, sizeof(e->text));
	if (r == 0)
		r = answer_info(
			reply,
			&containerd__services__snapshots__v1__stat_snapshot_response__descriptor,
			&si);
	snap_info_done(&si);
	return r;
}

static int do_update(struct snapshotter *s, const void *msg, struct grpc_reply *reply,
		     struct errbuf *e)
{
	const Containerd__Services__Snapshots__V1__UpdateSnapshotRequest *req = msg;
	const Google__Protobuf__FieldMask *mask = req->update_mask;
	struct snap_info given = { 0 }, si = { 0 };
	int r;

	if (!req->info)
		return errbuf_fail(-EINVAL, e->text, sizeof(e->text), "no snapshot info");
	given.name = req->info->name;
	r = snapstore_check_name("name", given.name, e->text, sizeof(e->text));
	if (r == 0)
		r = labels_of((LabelsEntry *const *)req->info->labels, req->info->n_labels,
			      &given.labels, e->text, sizeof(e->text));
	if (r == 0)
		r = snapstore_update(s->store, &given, mask ? mask->paths : NULL,
				     mask ? mask->n_paths : 0, &si, e->text, sizeof(e->text));
	if (r == 0)
		r = answer_info(
			reply,
			&containerd__services__snapshots__v1__update_snapshot_response__descriptor,
			&si);
	snap_info_done(&si);
	json_decref(given.labels);
	return r;
}

/* List: the matching snapshots in messages of LIST_BATCH. */
struct list_state {
	const struct snapfilter *filter;
	struct grpc_reply *reply;
	struct info_msg batch[LIST_BATCH];
	Containerd__Services__Snapshots__V1__Info *infos[LIST_BATCH];
	size_t n;
};

static int list_flush(struct list_state *ls)
{
	Containerd__Services__Snapshots__V1__ListSnapshotsResponse resp =
		CONTAINERD__SERVICES__SNAPSHOTS__V1__LIST_SNAPSHOTS_RESPONSE__INIT;
	int r = 0;

	if (ls->n == 0)
		return 0;
	resp.n_info = ls->n;
	resp.info = ls->infos;
	if (grpc_reply_add(ls->reply, protobuf_c_message_get_packed_size(&resp.base), pack_message,
			   &resp) < 0)
		r = -ENOMEM;
	for (size_t i = 0; i < ls->n; i++)
		info_message_done(&ls->batch[i]);
	ls->n = 0;
	return r;
}

static int list_one(void *userdata, const struct snap_info *si)
{
	struct list_state *ls = userdata;
	int r;

	if (!snapfilter_match(ls->filter, si))
		return 0;
	r = info_message(si, &ls->batch[ls->n]);
	if (r < 0) {
		info_message_done(&ls->batch[ls->n]);
		return r;
	}
	ls->infos[ls->n] = &ls->batch[ls->n].info;
	ls->n++;
	/* the batch points into the store: packed before the lock goes */
	return ls->n == LIST_BATCH ? list_flush(ls) : 0;
}

static int do_list(struct snapshotter *s, const void *msg, struct grpc_reply *reply,
		   struct errbuf *e)
{
	const Containerd__Services__Snapshots__V1__ListSnapshotsRequest *req = msg;
	struct snapfilter *f = NULL;
	_cleanup_free_ struct list_state *ls = NULL;
	int r;

	r = snapfilter_parse((const char *const *)req->filters, req->n_filters, &f, e->text,
			     sizeof(e->text));
	if (r < 0)
		return r;
	ls = calloc(1, sizeof(*ls));
	if (!ls) {
		snapfilter_free(f);
		return -ENOMEM;
	}
	ls->filter = f;
	ls->reply = reply;
	r = snapstore_walk(s->store, list_one, ls);
	if (r == 0)
		r = list_flush(ls);
	for (size_t i = 0; i < ls->n; i++)
		info_message_done(&ls->batch[i]);
	snapfilter_free(f);
	return r;
}

static int do_usage(struct snapshotter *s, const void *msg, struct grpc_reply *reply,
		    struct errbuf *e)
{
	const Containerd__Services__Snapshots__V1__UsageRequest *req = msg;
	Containerd__Services__Snapshots__V1__UsageResponse resp =
		CONTAINERD__SERVICES__SNAPSHOTS__V1__USAGE_RESPONSE__INIT;
	int r;

	r = snapstore_check_name("key", req->key, e->text, sizeof(e->text));
	if (r == 0)
		r = snapstore_usage(s->store, req->key, &resp.size, &resp.inodes, e->text,
				    sizeof(e->text));
	if (r == 0)
		answer(reply, &resp);
	return r;
}

static int do_cleanup(struct snapshotter *s, const void *msg, struct grpc_reply *reply,
		      struct errbuf *e)
{
	int r = snapstore_cleanup(s->store);

	return r < 0 ? r : 0;
}

struct method {
	const ProtobufCMessageDescriptor *request;
	int (*run)(struct snapshotter *s, const void *req, struct grpc_reply *reply,
		   struct errbuf *e);
	bool empty; /* answers google.protobuf.Empty */
};

/* Every method: its request unpacked (a message that does not parse is
 * InvalidArgument), run, its -errno turned into a gRPC status. */
static void serve_method(void *userdata, const void *data, const uint8_t *msg, size_t len,
			 struct grpc_reply *reply)
{
	const struct method *m = data;
	struct errbuf e = { "" };
	ProtobufCMessage *req = protobuf_c_message_unpack(m->request, NULL, len, msg);
	int r;

	if (!req) {
		grpc_reply_fail(reply, GRPC_INVALID_ARGUMENT, "malformed %s", m->request->name);
		return;
	}
	r = m->run(userdata, req, reply, &e);
	if (r < 0)
		grpc_reply_fail(reply, code_of(r), "%s", e.text[0] ? e.text : strerror(-r));
	else if (m->empty)
		answer_empty(reply);
	protobuf_c_message_free_unpacked(req, NULL);
}

#define REQ(name) &containerd__services__snapshots__v1__##name##__descriptor
#define METHOD(name, request, fn, empty)                                           \
	{                                                                          \
		"/containerd.services.snapshots.v1.Snapshots/" name, serve_method, \
			&(const struct method)                                     \
		{                                                                  \
			REQ(request), fn, empty                                    \
		}                                                                  \
	}

static const struct grpc_method methods[] = {
	METHOD("Prepare", prepare_snapshot_request, do_prepare, false),
	METHOD("View", view_snapshot_request, do_view, false),
	METHOD("Mounts", mounts_request, do_mounts, false),
	METHOD("Commit", commit_snapshot_request, do_commit, true),
	METHOD("Remove", remove_snapshot_request, do_remove, true),
	METHOD("Stat", stat_snapshot_request, do_stat, false),
	METHOD("Update", update_snapshot_request, do_update, false),
	METHOD("List", list_snapshots_request, do_list, false),
	METHOD("Usage", usage_request, do_usage, false),
	METHOD("Cleanup", cleanup_request, do_cleanup, true),
};

int snapshotter_new(const char *socket_path, int listen_fd, bool predecessors, const char *dir,
		    const char *mountpoint, struct manager *m, struct snapshotter **ret,
		    char *errbuf, size_t errlen)
{
	struct snapshotter *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return -ENOMEM;
	s->manager = m;
	pthread_mutex_init(&s->refs_lock, NULL);
	if (mountpoint && asprintf(&s->layers_dir, "%s/layers", mountpoint) < 0) {
		pthread_mutex_destroy(&s->refs_lock);
		free(s);
		return -ENOMEM;
	}
	r = snapstore_open(dir, &s->store, errbuf, errlen);
	if (r == 0)
		refs_refresh(s);
	if (r == 0)
		r = grpcserver_new(socket_path, listen_fd, predecessors, methods,
				   ARRAY_SIZE(methods), s, &s->server, errbuf, errlen);
	if (r < 0) {
		snapshotter_free(s);
		return r;
	}
	*ret = s;
	return 0;
}

int snapshotter_start(struct snapshotter *s)
{
	return grpcserver_start(s->server);
}

void snapshotter_stop(struct snapshotter *s)
{
	if (s)
		grpcserver_stop(s->server);
}

void snapshotter_free(struct snapshotter *s)
{
	if (!s)
		return;
	grpcserver_free(s->server);
	snapstore_free(s->store);
	strmap_free(s->refs);
	pthread_mutex_destroy(&s->refs_lock);
	free(s->layers_dir);
	free(s);
}
