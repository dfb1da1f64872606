#include "errname.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int errbuf_fail(int err, char *errbuf, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (errbuf && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(errbuf, errlen, fmt, ap);
		va_end(ap);
	}
	return err;
}

const char *errno_name(int err)
{
	switch (-err) {
#define X(e)    \
	case e: \
		return #e;
		X(EPERM)
		X(ENOENT)
		X(EIO)
		X(ENOEXEC)
		X(EAGAIN)
		X(ENOMEM)
		X(EACCES)
		X(EEXIST)
		X(ENOTDIR)
		X(EISDIR)
		X(EINVAL)
		X(ENOSPC)
		X(EDQUOT)
		X(EROFS)
		X(ENAMETOOLONG)
		X(ENOSYS)
		X(ENOTEMPTY)
		X(ELOOP)
		X(ENODATA)
		X(ETIMEDOUT)
		X(EBADMSG)
		X(EOVERFLOW)
		X(EPROTO)
		X(ENOTSUP)
		X(ECONNREFUSED)
		X(EHOSTUNREACH)
		X(ECANCELED)
		X(EINTR)
		X(EBUSY)
		X(EFBIG)
		X(ERANGE)
		X(E2BIG)
#undef X
	case 0:
		return "OK";
	default:
		return "EUNKNOWN";
	}
}
