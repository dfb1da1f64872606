/* The serving process's end of the supervisor's socket (supervisor.c
 * holds the other end and lists the messages): a SOCK_SEQPACKET socket,
 * one message per datagram, one exchange at a time.  The serving process
 * says "ready" once it serves, asks "upgrade" for a check run of the
 * binary installed, says "go" once the upgrade was answered and
 * "drained N" as it ends, and gives the supervisor a compacted hand-over
 * log to hold (suplink_swap_log()). */
#pragma once

#include <pthread.h>
#include <stddef.h>

struct suplink {
	int fd; /* -1: not under a supervisor */
	pthread_mutex_t lock;
};

/* fd: the socket the supervisor passed (struct handoff), or -1. */
void suplink_init(struct suplink *l, int fd);
void suplink_done(struct suplink *l);

/* One message that takes no answer.  0, -ENOTCONN without a supervisor,
 * -errno. */
int suplink_tell(struct suplink *l, const char *msg);

/* Asks the supervisor to check the binary at its path for an upgrade;
 * blocks for the check run.  0 with the binary's path in answer, -ENOEXEC
 * with the supervisor's reason in answer, -ENOTCONN without a supervisor,
 * or another -errno (the supervisor unreachable). */
int suplink_upgrade(struct suplink *l, char *answer, size_t len);

/* handover.h's swap (userdata the suplink): the compacted log fd goes to
 * the supervisor, which holds it from its answer on.  0 once it does,
 * -errno when it keeps the old one. */
int suplink_swap_log(int fd, void *userdata);
