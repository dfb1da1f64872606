/* Views of single layers, for MOUNT/layers/ (containers/storage's
 * Additional Layer Store, docs/layer-store.md): one layer of an ensured
 * image, its own tree in the format overlayfs stacks (whiteouts as 0/0
 * character devices, opaque directories marked by the overlay opaque
 * xattrs), served from the same cache as the image.  A view is a struct
 * image like any other (node ids, files, lazy reads work unchanged); it
 * holds its image, counted as open for GC, as long as it lives. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "events.h"

struct image;
struct layer_index;
struct tree;

/* The tree of layer li alone in overlayfs's format: each whiteout a
 * character device 0/0 (mode 0, owner root) under the removed name, each
 * opaque marker LAYER_VIEW_OPAQUE_XATTR = "y" on its directory (the
 * layer's own entry, else a 0755 directory made for it), the rest as in
 * the layer.  Returns 0 with a tree owned by the caller, or what
 * tree_build() returns. */
int layer_overlay_tree(const struct layer_index *li, struct tree **ret, char *errbuf,
		       size_t errlen);

/* The view of layer `digest` of img, which reference named when ensured.
 * Blocks (reads the cache, builds the layer's tree).  Returns 0 with a
 * new view (one reference for the caller), -ENOENT when the image has no
 * such layer (an event says so, with who), -EBADMSG, -ENOMEM. */
int manager_layer_view(struct image *img, const char *reference, const char *digest,
		       const struct caller *who, struct image **ret_view);

/* The xattr that marks an opaque directory in a view's tree. */
#define LAYER_VIEW_OPAQUE_XATTR "trusted.overlay.opaque"

bool image_is_layer_view(const struct image *img);
/* The kernel holds nothing of view any more, though its references stay
 * (a view made again after a takeover, whose count of lookups is not
 * known): its image is no longer counted as open for it, so that GC and
 * rm may take that image.  Once; a no-op for an image that is no view. */
void layer_view_release(struct image *view);

/* The image a view is a layer of (borrowed from the view): who may see
 * the view is who may see that image. */
struct image *layer_view_image(const struct image *view);
/* The reference that named that image when the view was made. */
const char *layer_view_reference(const struct image *view);

/* The layer's "info" document (containers/storage's Layer JSON), borrowed
 * from the view. */
const char *layer_view_info(const struct image *view, size_t *ret_len);

/* The compressed blob as the registry has it: its size, and a read of
 * part of it (fetched from the registry with a Range request; the cache
 * keeps layers unpacked).  Returns the bytes read or -errno; blocks. */
uint64_t layer_view_blob_size(const struct image *view);
ssize_t layer_view_blob_read(struct image *view, uint64_t off, size_t size, void *buf);

/* The engine said it uses the layer (its "use" marker): counted, and a
 * LayerUsed event names who. */
void layer_view_used(struct image *view, const struct caller *who);
