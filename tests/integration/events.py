#!/usr/bin/env python3
"""Reads and checks the pullfs events log (JSON Lines) for the tests.

    events.py LOG count REASON IMAGE     number of such events
    events.py LOG field REASON IMAGE KEY  KEY of the first such event
    events.py LOG fields REASON IMAGE KEY KEY of each such event, one a line
    events.py LOG countmsg REASON IMAGE TEXT  such events whose message
                                         contains TEXT
    events.py LOG check                  every line well-formed (SPEC §4)
    events.py LOG order IMAGE R1 R2...   reasons for IMAGE, in that order
                                         ("already present" left out)
    events.py LOG show                   the log, one event per line

Exit status 1 with a message on a failed check.
"""

import datetime
import json
import os
import re
import sys

TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
ERRNO_RE = re.compile(r"^E[A-Z0-9]+$")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
# "in 1.2s", "in 350ms", "in 1m2.5s" ... any Go- or kubelet-style duration.
DURATION_RE = re.compile(r"\bin [0-9][0-9.]*(ns|us|µs|ms|s|m|h)([0-9.]+(ms|s|m))*\b")
SIZE_RE = re.compile(r"[Ss]ize:? [0-9]+ ?(bytes|B)?\b")

# BackOff is a Normal event, as the kubelet logs it.
NORMAL_REASONS = {"Pulling", "Pulled", "BackOff"}
WARNING_REASONS = {"Failed", "ErrImageNeverPull", "InspectFailed", "PullDenied",
                   "AccessDenied", "EventsSuppressed"}
# Events that only a lookup (or a pull asked for) writes: they always
# name the process that caused them.
CAUSED_REASONS = {"Pulling", "Failed", "BackOff", "ErrImageNeverPull",
                  "InspectFailed", "PullDenied", "AccessDenied"}
# Events of a failed lookup carry the errno the caller got (SPEC section 4:
# "errno on failures"); for these reasons it can only be this one.
FIXED_ERRNO = {"BackOff": "EAGAIN", "ErrImageNeverPull": "EPERM",
               "InspectFailed": "EINVAL", "PullDenied": "EACCES",
               "AccessDenied": "EACCES"}


def load(path):
    events = []
    if not os.path.exists(path):
        return events
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.endswith(b"\n"):
                raise SystemExit("%s:%d: line not terminated by a newline"
                                 % (path, n))
            try:
                ev = json.loads(raw)
            except ValueError as e:
                raise SystemExit("%s:%d: not JSON (%s): %r" % (path, n, e, raw))
            if not isinstance(ev, dict):
                raise SystemExit("%s:%d: not a JSON object: %r" % (path, n, raw))
            events.append((n, ev))
    return events


def already_present(ev):
    return (ev.get("reason") == "Pulled"
            and "already present" in str(ev.get("message", "")))


def problems_of(ev):
    p = []

    def need(key, types):
        if key not in ev:
            p.append("no field %r" % key)
            return False
        if not isinstance(ev[key], types) or isinstance(ev[key], bool):
            p.append("field %r has type %s" % (key, type(ev[key]).__name__))
            return False
        return True

    if need("time", str):
        if not TIME_RE.match(ev["time"]):
            p.append("time %r is not RFC 3339 UTC with milliseconds" % ev["time"])
        else:
            t = datetime.datetime.strptime(ev["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
            now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
            if abs((now - t).total_seconds()) > 3600:
                p.append("time %r is far from now (%s)" % (ev["time"], now))
    need("reason", str)
    reason = ev.get("reason")
    # An image's events name it; those a lookup caused name its process
    # too.  What nothing asked for (a layer's background completion, GC,
    # a restart) has no process, and no image when it is about a layer or
    # the cache; a process, when there is one, comes with all three.
    if reason in CAUSED_REASONS or reason == "Pulled" or "image" in ev:
        need("image", str)
    need("message", str)
    if reason in CAUSED_REASONS or any(k in ev for k in ("pid", "uid", "comm")):
        if need("pid", int) and ev["pid"] <= 0:
            p.append("pid %r is not positive" % ev["pid"])
        if need("uid", int) and ev["uid"] < 0:
            p.append("uid %r is negative" % ev["uid"])
        need("comm", str)
    # a request of the snapshots socket: its snapshot and layer come
    # together, with the process that made it
    if "snapshot" in ev or "layer" in ev:
        if "pid" not in ev:
            p.append("a snapshot and layer without a process")
        if need("snapshot", str) and not ev["snapshot"]:
            p.append("an empty snapshot key")
        if need("layer", str) and not DIGEST_RE.match(ev["layer"]):
            p.append("layer %r is not a sha256 digest" % ev["layer"])
    if need("type", str):
        if reason in NORMAL_REASONS and ev["type"] != "Normal":
            p.append("type %r for %s (expected Normal)" % (ev["type"], reason))
        elif reason in WARNING_REASONS and ev["type"] != "Warning":
            p.append("type %r for %s (expected Warning)" % (ev["type"], reason))
        elif ev["type"] not in ("Normal", "Warning"):
            p.append("type %r" % ev["type"])
    if "digest" in ev and ev["digest"] not in (None, ""):
        if not isinstance(ev["digest"], str) or not DIGEST_RE.match(ev["digest"]):
            p.append("digest %r is not a sha256 digest" % ev["digest"])
    msg = ev.get("message") if isinstance(ev.get("message"), str) else ""
    img = ev.get("image") if isinstance(ev.get("image"), str) else None
    if img and img not in msg:
        p.append("message %r does not name the image %r" % (msg, img))
    if reason == "Pulled" and not already_present(ev):
        if not isinstance(ev.get("digest"), str) or not DIGEST_RE.match(ev["digest"]):
            p.append("Pulled without a digest")
        if not DURATION_RE.search(msg):
            p.append("Pulled message %r has no duration" % msg)
        if not SIZE_RE.search(msg):
            p.append("Pulled message %r has no image size" % msg)
    if reason == "Failed":
        if not isinstance(ev.get("errno"), str) or not ERRNO_RE.match(ev["errno"]):
            p.append("Failed without an errno name (%r)" % ev.get("errno"))
    elif reason in FIXED_ERRNO:
        if ev.get("errno") != FIXED_ERRNO[reason]:
            p.append("%s with errno %r (expected %s)"
                     % (reason, ev.get("errno"), FIXED_ERRNO[reason]))
    elif "errno" in ev and ev["errno"] not in (None, ""):
        # any other failure (a lazy read, a layer's completion) says its
        # errno too; a Normal event has none
        if ev.get("type") != "Warning":
            p.append("errno %r on a %s event" % (ev["errno"], reason))
        elif not isinstance(ev["errno"], str) or not ERRNO_RE.match(ev["errno"]):
            p.append("errno %r is not an errno name" % ev["errno"])
    return p


def main(argv):
    if len(argv) < 3:
        raise SystemExit(__doc__)
    path, cmd, args = argv[1], argv[2], argv[3:]
    events = load(path)

    def matching(reason, image):
        return [ev for _, ev in events
                if ev.get("reason") == reason and ev.get("image") == image]

    if cmd == "count":
        print(len(matching(args[0], args[1])))
    elif cmd == "field":
        found = matching(args[0], args[1])
        if not found:
            raise SystemExit("no %s event for %s" % (args[0], args[1]))
        v = found[0].get(args[2])
        print(v if isinstance(v, str) else json.dumps(v))
    elif cmd == "fields":
        for ev in matching(args[0], args[1]):
            v = ev.get(args[2])
            print(v if isinstance(v, str) else json.dumps(v))
    elif cmd == "countmsg":
        print(len([ev for ev in matching(args[0], args[1])
                   if args[2] in str(ev.get("message", ""))]))
    elif cmd == "check":
        if not os.path.exists(path):
            print("%s: no events log" % path)
            return 1
        bad = 0
        for n, ev in events:
            for prob in problems_of(ev):
                print("%s:%d: %s: %s" % (path, n, prob, json.dumps(ev)))
                bad += 1
        if bad:
            return 1
        print("events: %d well-formed events in %s" % (len(events), path))
    elif cmd == "order":
        # "already present" events come and go with lookups and their rate
        # limit; the order is about what pulls did.
        got = [ev.get("reason") for _, ev in events
               if ev.get("image") == args[0] and not already_present(ev)]
        if got != args[1:]:
            print("events for %s: expected %s, got %s" % (args[0], args[1:], got))
            return 1
    elif cmd == "show":
        for _, ev in events:
            print(json.dumps(ev, sort_keys=True))
    else:
        raise SystemExit("unknown command %r" % cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
