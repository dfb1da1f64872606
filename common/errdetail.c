/* The error-detail structure; see errdetail.h. */
#include "errdetail.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* One line, whatever the message was made of. */
static void message_sanitize(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
			*s = ' ';
}

int error_detail_vset(struct error_detail *d, long http_status, int err, const char *fmt,
		      va_list ap)
{
	if (!d)
		return err;
	d->err = err;
	d->http_status = (int)http_status;
	vsnprintf(d->message, sizeof(d->message), fmt, ap);
	message_sanitize(d->message);
	return err;
}

int error_detail_set(struct error_detail *d, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err = error_detail_vset(d, 0, err, fmt, ap);
	va_end(ap);
	return err;
}

int error_detail_set_http(struct error_detail *d, long http_status, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err = error_detail_vset(d, http_status, err, fmt, ap);
	va_end(ap);
	return err;
}

void error_detail_clear(struct error_detail *d)
{
	if (!d)
		return;
	d->err = 0;
	d->http_status = 0;
	d->message[0] = '\0';
}

const char *error_detail_message(const struct error_detail *d)
{
	if (!d)
		return "";
	if (d->message[0])
		return d->message;
	return d->err ? strerror(-d->err) : "";
}
