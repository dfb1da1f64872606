/* Failure injection for the crash tests: PULLFS_FAULT=<point> in the
 * daemon's environment makes it SIGKILL itself the first time a pull
 * (or a collection) reaches that point, exactly as an operator's
 * `kill -9` would at a moment chosen by luck.  Points:
 *
 *   manifest      after the manifest was fetched, before any blob
 *   config        after the config was fetched (it is stored while the
 *                 layers download)
 *   mid-blob      in the middle of a layer download (after 64 KiB)
 *   mid-unpack    after the first layer was unpacked, before its commit
 *   layer         right after the first layer was committed (served from
 *                 its stage, published in the background)
 *   publish       after every layer is committed, before the reference file
 *   gc-layer      GC (or rm) moved the first unneeded layer away
 *   gc-blob       GC (or rm) deleted the first unneeded blob
 *   snap-dirs     the snapshotter made a new snapshot's directories, before
 *                 the metadata naming them
 *   snap-metadata the snapshotter's new metadata is written and flushed
 *                 under its temporary name, before the rename
 *   snap-removed  the snapshotter's metadata no longer names a removed
 *                 snapshot, whose directories are still there
 *
 * Not a kill: "staged" holds the background publishing of layers (and the
 * reference files waiting for it) until the process stops, so that a test
 * can kill the process in that window (publish.c).  "no-resend" has the
 * serving process take the kernel for one that cannot resend requests
 * (fs/fuseio.c), so that an upgrade's drain answers every request itself.
 * "drain-gc" has a serving process run a collection (to 1 byte) as it
 * starts to drain for an upgrade (fs/serve.c).  "notify-late" has the
 * notifier send one more notification (a dentry of images/) 300 ms after
 * the stop came (fs/nsnotify.c), as one under way at that moment would.
 *
 * Unset, every check is one load and a compare. */
#pragma once

#include <stdbool.h>

/* Kills the process with SIGKILL when `point` is the armed one. */
void fault_point(const char *point);

/* True when `point` is armed; for points that need their own trigger
 * condition (mid-blob). */
bool fault_armed(const char *point);
