/* The manager's events: every part of the manager writes the events log
 * through the manager's event sink (events.h), which calls nothing of the
 * manager's; the floors below the top are given the sink itself. */
#include <stdarg.h>
#include <stdio.h>

#include "manager-private.h"

static void emit_to_log(void *userdata, const struct event *e)
{
	struct manager *m = userdata;

	events_emit(m->events, e);
}

struct event_sink manager_event_sink(struct manager *m)
{
	return (struct event_sink){ .emit = emit_to_log, .userdata = m };
}

void manager_emit(struct manager *m, enum event_type type, const char *reason, const char *image,
		  const char *digest, int err, const struct caller *who, const char *fmt, ...)
{
	struct event_sink sink = manager_event_sink(m);
	va_list ap;

	va_start(ap, fmt);
	event_vsendf(&sink, type, reason, image, digest, err, who, fmt, ap);
	va_end(ap);
}
