#!/usr/bin/python3
"""A client of pullfs's snapshots socket that speaks the snapshots API
directly (python3-grpcio, the messages compiled at run time by protoc
from containerd's .proto files, staged by fs/snapshotter/protogen.py), for
what containerd itself never sends: malformed and hostile requests, and
the labels of remote snapshots.

    snapclient.py SOCKET hostile     every refusal has its gRPC code and
                                     the server still answers after them
    snapclient.py SOCKET cri REF DIGEST  a Prepare with the CRI plugin's
                                     labels naming layer DIGEST of image REF
                                     is answered AlreadyExists and leaves a
                                     committed snapshot; labels naming no
                                     layer pullfs can give are an ordinary
                                     Prepare
    snapclient.py SOCKET denied REF DIGEST  run by a user the access
                                     rules refuse for image REF: a Prepare
                                     with the CRI plugin's labels naming
                                     its layer DIGEST is an ordinary
                                     Prepare, with no target
    snapclient.py SOCKET slow        a Prepare that waits on a registry
                                     that never answers holds up no other
                                     call of the connection
    snapclient.py SOCKET list FILTER...   prints the names List gives
Exits 1 with a message on the first check that fails."""
import importlib.util
import os
import subprocess
import sys
import tempfile

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
API = os.environ.get("CONTAINERD_API",
                     "/usr/share/gocode/src/github.com/containerd/containerd/api")
SERVICE = "/containerd.services.snapshots.v1.Snapshots/"


def compile_protos(out):
    spec = importlib.util.spec_from_file_location(
        "protogen", os.path.join(SRC, "fs/snapshotter/protogen.py"))
    protogen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(protogen)
    files = {"snapshots.proto": "services/snapshots/v1/snapshots.proto",
             "mount.proto": "types/mount.proto"}
    for name, rel in files.items():
        with open(os.path.join(API, rel), encoding="utf-8") as f:
            text = protogen.strip(f.read())
        # the well-known types stay where protoc finds them
        text = text.replace('import "empty.proto"', 'import "google/protobuf/empty.proto"')
        text = text.replace('import "field_mask.proto"', 'import "google/protobuf/field_mask.proto"')
        text = text.replace('import "timestamp.proto"', 'import "google/protobuf/timestamp.proto"')
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.write(text)
    subprocess.run(["protoc", "--proto_path=" + out, "--proto_path=/usr/include",
                    "--python_out=" + out] + sorted(files), check=True)
    sys.path.insert(0, out)
    import snapshots_pb2  # noqa: E402 (generated just above)
    return snapshots_pb2


class Client:
    def __init__(self, sock, pb):
        self.pb = pb
        self.ch = grpc.insecure_channel("unix://" + sock)

    def raw(self, method, payload):
        """Sends bytes as the request; returns (code, details)."""
        f = self.ch.unary_unary(SERVICE + method, request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
        try:
            f(payload, timeout=20)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            return e.code(), e.details()

    def call(self, method, req):
        return self.raw(method, req.SerializeToString())

    def list(self, filters):
        f = self.ch.unary_stream(SERVICE + "List",
                                 request_serializer=lambda m: m.SerializeToString(),
                                 response_deserializer=self.pb.ListSnapshotsResponse.FromString)
        names = []
        for resp in f(self.pb.ListSnapshotsRequest(filters=filters), timeout=20):
            names += [i.name for i in resp.info]
        return names


def expect(what, got, code, words=""):
    c, details = got
    if c != code or words not in details:
        sys.exit(f"snapclient: {what}: got {c} {details!r}, expected {code} with {words!r}")


def hostile(cl, pb):
    S = grpc.StatusCode
    before = cl.list([])
    expect("garbage as a request", cl.raw("Prepare", b"\xff\xff\xff\xff\x0f"),
           S.INVALID_ARGUMENT, "malformed")
    expect("unknown method", cl.raw("Explode", b""), S.UNIMPLEMENTED, "unknown method")
    expect("empty key", cl.call("Prepare", pb.PrepareSnapshotRequest(key="")),
           S.INVALID_ARGUMENT, "empty")
    # field 2 (key), 2 bytes that are not UTF-8
    expect("a key not UTF-8", cl.raw("Prepare", b"\x12\x02\xff\xfe"), S.INVALID_ARGUMENT)
    expect("a key over 4096 bytes", cl.call("Prepare", pb.PrepareSnapshotRequest(key="k" * 5000)),
           S.INVALID_ARGUMENT, "longer than")
    expect("a label over 4096 bytes",
           cl.call("Prepare", pb.PrepareSnapshotRequest(key="big", labels={"k": "v" * 5000})),
           S.INVALID_ARGUMENT, "greater than maximum size")
    expect("a request over 4 MiB",
           cl.call("Prepare", pb.PrepareSnapshotRequest(key="huge", labels={
               f"k{i}": "v" * 4000 for i in range(1200)})),
           S.RESOURCE_EXHAUSTED)
    for m, req in [("Stat", pb.StatSnapshotRequest(key="nope")),
                   ("Mounts", pb.MountsRequest(key="nope")),
                   ("Remove", pb.RemoveSnapshotRequest(key="nope")),
                   ("Usage", pb.UsageRequest(key="nope")),
                   ("Commit", pb.CommitSnapshotRequest(name="n", key="nope"))]:
        expect(f"{m} of an unknown key", cl.call(m, req), S.NOT_FOUND, "does not exist")
    expect("an unknown parent", cl.call("Prepare", pb.PrepareSnapshotRequest(key="x", parent="nope")),
           S.NOT_FOUND)
    # names are data, never paths
    for key in ["../../../../escape", "/etc/shadow", "a/../../b", ".."]:
        expect(f"prepare {key!r}", cl.call("Prepare", pb.PrepareSnapshotRequest(key=key)), S.OK)
        expect(f"prepare {key!r} again", cl.call("Prepare", pb.PrepareSnapshotRequest(key=key)),
               S.ALREADY_EXISTS, "already exists")
    expect("commit of a view", cl.call("View", pb.ViewSnapshotRequest(key="view-of-nothing")), S.OK)
    expect("commit of a view",
           cl.call("Commit", pb.CommitSnapshotRequest(name="cv", key="view-of-nothing")),
           S.FAILED_PRECONDITION, "not active")
    expect("commit", cl.call("Commit", pb.CommitSnapshotRequest(
        name="base", key="..", labels={"containerd.io/snapshot.ref": "base"})), S.OK)
    expect("prepare over a committed parent",
           cl.call("Prepare", pb.PrepareSnapshotRequest(key="child", parent="base")), S.OK)
    expect("prepare over an active parent",
           cl.call("Prepare", pb.PrepareSnapshotRequest(key="child2", parent="child")),
           S.INVALID_ARGUMENT, "not a committed")
    expect("remove of a parent", cl.call("Remove", pb.RemoveSnapshotRequest(key="base")),
           S.FAILED_PRECONDITION, "has it as parent")
    expect("update of an immutable field", cl.call("Update", pb.UpdateSnapshotRequest(
        info=pb.Info(name="base"), update_mask={"paths": ["parent"]})), S.INVALID_ARGUMENT)
    expect("update of a label", cl.call("Update", pb.UpdateSnapshotRequest(
        info=pb.Info(name="base", labels={"x": "1"}), update_mask={"paths": ["labels.x"]})), S.OK)
    expect("a bad filter", cl.raw("List", pb.ListSnapshotsRequest(filters=["name~=("]).SerializeToString()),
           S.INVALID_ARGUMENT, "filter")
    got = cl.list(['labels."containerd.io/snapshot.ref"==base,labels.x==1'])
    if got != ["base"]:
        sys.exit(f"snapclient: List with a label filter gave {got}")
    for key in ["child", "base", "../../../../escape", "/etc/shadow", "a/../../b",
                "view-of-nothing"]:
        expect(f"remove {key!r}", cl.call("Remove", pb.RemoveSnapshotRequest(key=key)), S.OK)
    expect("cleanup", cl.call("Cleanup", pb.CleanupRequest()), S.OK)
    left(before, cl.list([]))


def left(before, after):
    """Nothing made here is left.  containerd may remove snapshots of its
    own meanwhile (its collection runs when it likes): after is a part of
    before."""
    if not set(after) <= set(before):
        sys.exit(f"snapclient: snapshots left: {sorted(set(after) - set(before))}")


REF_LABEL = "containerd.io/snapshot.ref"
CRI_REF = "containerd.io/snapshot/cri.image-ref"
CRI_DIGEST = "containerd.io/snapshot/cri.layer-digest"
SGZ_REF = "containerd.io/snapshot/remote/stargz.reference"
SGZ_DIGEST = "containerd.io/snapshot/remote/stargz.digest"


def cri(cl, pb, ref, digest):
    S = grpc.StatusCode
    before = cl.list([])
    labels = {REF_LABEL: "cri-target", CRI_REF: ref, CRI_DIGEST: digest,
              "containerd.io/snapshot/cri.manifest-digest": "sha256:" + "1" * 64}
    expect("a Prepare naming a layer pullfs has",
           cl.call("Prepare", pb.PrepareSnapshotRequest(key="cri-extract", labels=labels)),
           S.ALREADY_EXISTS, "cri-target")
    f = cl.ch.unary_unary(SERVICE + "Stat", request_serializer=lambda m: m.SerializeToString(),
                          response_deserializer=pb.StatSnapshotResponse.FromString)
    info = f(pb.StatSnapshotRequest(key="cri-target"), timeout=20).info
    if info.kind != pb.COMMITTED or info.labels.get(CRI_REF) != ref:
        sys.exit(f"snapclient: the remote snapshot is {info}")
    expect("the extraction key is not kept",
           cl.call("Stat", pb.StatSnapshotRequest(key="cri-extract")), S.NOT_FOUND)
    # what containerd asks next: the target by its label and parent
    got = cl.list([f'labels."{REF_LABEL}"==cri-target,parent==""'])
    if got != ["cri-target"]:
        sys.exit(f"snapclient: containerd's filter for the target gave {got}")
    # labels that name no layer pullfs can give: an ordinary Prepare each
    zero = "sha256:" + "0" * 64
    for i, (r, d) in enumerate([("127.0.0.1:1/none:1", zero),   # nothing listens there
                                ("../../../etc", zero),
                                (ref, "sha256:../../../../etc/passwd"),
                                (ref, zero),                     # not a layer of ref
                                ("", zero)]):
        key, target = f"fallback-{i}", f"fallback-target-{i}"
        lab = {REF_LABEL: target, SGZ_REF: r, SGZ_DIGEST: d}
        expect(f"fallback for {r!r} {d!r}",
               cl.call("Prepare", pb.PrepareSnapshotRequest(key=key, labels=lab)), S.OK)
        expect(f"no target for {r!r} {d!r}",
               cl.call("Stat", pb.StatSnapshotRequest(key=target)), S.NOT_FOUND)
        expect("remove", cl.call("Remove", pb.RemoveSnapshotRequest(key=key)), S.OK)
    expect("remove", cl.call("Remove", pb.RemoveSnapshotRequest(key="cri-target")), S.OK)
    left(before, cl.list([]))


def denied(cl, pb, ref, digest):
    S = grpc.StatusCode
    labels = {REF_LABEL: "denied-target", CRI_REF: ref, CRI_DIGEST: digest}
    expect("a Prepare by a user who may not pull",
           cl.call("Prepare", pb.PrepareSnapshotRequest(key="denied-extract", labels=labels)),
           S.OK)
    expect("no target for a user who may not pull",
           cl.call("Stat", pb.StatSnapshotRequest(key="denied-target")), S.NOT_FOUND)
    expect("remove", cl.call("Remove", pb.RemoveSnapshotRequest(key="denied-extract")), S.OK)


def slow(cl, pb):
    import socket
    import threading
    import time
    S = grpc.StatusCode
    before = cl.list([])
    # a registry that takes connections and never answers
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(8)
    ref = f"127.0.0.1:{hole.getsockname()[1]}/slow/image:1"
    labels = {REF_LABEL: "slow-target", SGZ_REF: ref, SGZ_DIGEST: "sha256:" + "2" * 64}
    result = []
    t = threading.Thread(target=lambda: result.append(cl.call(
        "Prepare", pb.PrepareSnapshotRequest(key="slow", labels=labels))))
    t.start()
    # the Prepare is waiting on the registry: give pullfs a moment to get
    # there, then other calls on the same connection must not wait for it
    deadline = time.monotonic() + 10
    while not hole_has_client(hole) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not hole_has_client(hole):
        sys.exit("snapclient: pullfs never connected to the silent registry")
    t0 = time.monotonic()
    got = cl.list([])
    took = time.monotonic() - t0
    if not t.is_alive():
        sys.exit(f"snapclient: the Prepare ended before the check: {result}")
    if took > 2:
        sys.exit(f"snapclient: List took {took:.1f} s behind a slow Prepare")
    if set(got) != set(before):
        sys.exit(f"snapclient: List gave {got}")
    print(f"List answered in {took * 1000:.0f} ms while a Prepare waited", file=sys.stderr)
    hole.close()  # its waiting connection is reset: the lookup fails
    t.join(60)
    if t.is_alive():
        sys.exit("snapclient: the Prepare did not end once the registry went")
    expect("the Prepare once its registry failed", result[0], S.OK)
    expect("remove", cl.call("Remove", pb.RemoveSnapshotRequest(key="slow")), S.OK)
    left(before, cl.list([]))


def hole_has_client(hole):
    """Whether a connection waits in the listening socket's backlog."""
    import select
    return bool(select.select([hole], [], [], 0)[0])


def main():
    sock, cmd = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        pb = compile_protos(tmp)
        cl = Client(sock, pb)
        if cmd == "hostile":
            hostile(cl, pb)
        elif cmd == "slow":
            slow(cl, pb)
        elif cmd == "cri":
            cri(cl, pb, sys.argv[3], sys.argv[4])
        elif cmd == "denied":
            denied(cl, pb, sys.argv[3], sys.argv[4])
        elif cmd == "list":
            for n in cl.list(sys.argv[3:]):
                print(n)
        else:
            sys.exit(f"snapclient: unknown command {cmd}")


if __name__ == "__main__":
    main()
