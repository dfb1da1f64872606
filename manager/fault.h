/* Failure injection for the crash tests: PULLFS_FAULT=<point> in the
 * daemon's environment makes it SIGKILL itself the first time a pull
 * reaches that point, exactly as an operator's `kill -9` would at a moment
 * chosen by luck.  Points:
 *
 *   manifest      after the manifest was fetched, before any blob
 *   config        after the config blob was stored
 *   mid-blob      in the middle of a layer download (after 64 KiB)
 *   mid-unpack    after the first layer was unpacked, before its publish
 *   layer         right after the first layer was published
 *   publish       after every layer is in place, before the reference file
 *
 * Unset, every check is one load and a compare. */
#pragma once

#include <stdbool.h>

/* Kills the process with SIGKILL when `point` is the armed one. */
void fault_point(const char *point);

/* True when `point` is armed; for points that need their own trigger
 * condition (mid-blob). */
bool fault_armed(const char *point);
