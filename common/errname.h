/* Symbolic names for errno values ("ENOENT"), as the events log prints them. */
#pragma once

/* Returns a static string such as "EBADMSG" for err, positive or negative;
 * "EUNKNOWN" for values outside the set pullfs produces.  Never NULL. */
const char *errno_name(int err);
