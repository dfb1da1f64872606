#include "errtable.h"

#include <errno.h>
#include <stdlib.h>

const struct errtable_row errtable[] = {
	{ EINVAL, "invalid reference", "InspectFailed" },
	{ ENOENT, "repository or tag unknown to the registry", "Failed" },
	{ EPERM, "not cached and pull policy Never", "ErrImageNeverPull" },
	{ EACCES, "registry says unauthorised or denied", "Failed" },
	{ EAGAIN, "in back-off after earlier failures", "BackOff" },
	{ EHOSTUNREACH, "registry unreachable (connect, DNS, 502/503/504)", "Failed" },
	{ ETIMEDOUT, "timed out", "Failed" },
	{ ENOEXEC, "no manifest for this platform", "Failed" },
	{ EBADMSG, "digest or size mismatch, malformed manifest, corrupt layer", "Failed" },
	{ ENOSPC, "cache disk full", "Failed" },
	{ EDQUOT, "the user's share of the cache is full of images in use", "Failed" },
	{ EFBIG, "image over --max-image-entries entries", "Failed" },
	{ EROFS, "any write to the filesystem", "Failed" },
	{ EIO, "anything else", "Failed" },
};

const unsigned errtable_len = sizeof(errtable) / sizeof(errtable[0]);

const char *errtable_reason(int err)
{
	for (unsigned i = 0; i < errtable_len; i++)
		if (-errtable[i].err == err)
			return errtable[i].reason;
	return "Failed";
}

int errtable_normalize(int err)
{
	for (unsigned i = 0; i < errtable_len; i++)
		if (-errtable[i].err == err)
			return err;
	return -EIO;
}
