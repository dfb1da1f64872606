/* The manager's events: every part of the manager writes the events log
 * through this one helper, which calls nothing of the manager's. */
#include <stdarg.h>
#include <stdio.h>

#include "manager-private.h"

void manager_emit(struct manager *m, enum event_type type, const char *reason, const char *image,
		  const char *digest, int err, const struct caller *who, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	events_emit(m->events, &(struct event){
				       .type = type,
				       .reason = reason,
				       .image = image,
				       .digest = digest,
				       .message = msg,
				       .err = err,
				       .caller = who,
			       });
}
