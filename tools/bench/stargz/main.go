// stargz-grpc: stargz-snapshotter's snapshotter as a containerd proxy
// snapshotter, for the lazy benchmark.  Debian packages the snapshotter's
// library (golang-github-containerd-stargz-snapshotter-dev) but not its
// daemon; this is the daemon's wiring: the service package behind a gRPC
// snapshots server on a unix socket, with the configuration file upstream's
// daemon reads (fs options plus [resolver]) and the docker config keychain.
//
//	stargz-grpc -address SOCK -root DIR [-config FILE] [-log-level debug]
//
// It stops on SIGINT/SIGTERM, unmounting the layers it mounted.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/contrib/snapshotservice"
	"github.com/containerd/containerd/log"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/stargz-snapshotter/service"
	"github.com/containerd/stargz-snapshotter/service/keychain/dockerconfig"
	"github.com/pelletier/go-toml"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
)

func main() {
	address := flag.String("address", "/run/containerd-stargz-grpc/containerd-stargz-grpc.sock", "the socket to serve on")
	root := flag.String("root", "/var/lib/containerd-stargz-grpc", "the snapshotter's state")
	configPath := flag.String("config", "", "a TOML file of stargz-snapshotter's options")
	level := flag.String("log-level", "info", "logrus level")
	flag.Parse()
	if err := run(*address, *root, *configPath, *level); err != nil {
		fmt.Fprintf(os.Stderr, "stargz-grpc: %v\n", err)
		os.Exit(1)
	}
}

func run(address, root, configPath, level string) error {
	lvl, err := logrus.ParseLevel(level)
	if err != nil {
		return err
	}
	logrus.SetLevel(lvl)
	ctx, cancel := context.WithCancel(log.WithLogger(context.Background(), log.L))
	defer cancel()

	var config service.Config
	if configPath != "" {
		tree, err := toml.LoadFile(configPath)
		if err != nil {
			return err
		}
		if err := tree.Unmarshal(&config); err != nil {
			return err
		}
	}
	sn, err := service.NewStargzSnapshotterService(ctx, root, &config,
		service.WithCredsFuncs(dockerconfig.NewDockerconfigKeychain(ctx)))
	if err != nil {
		return err
	}

	srv := grpc.NewServer()
	snapshotsapi.RegisterSnapshotsServer(srv, snapshotservice.FromSnapshotter(sn))
	if err := os.MkdirAll(filepath.Dir(address), 0o700); err != nil {
		return err
	}
	if err := os.RemoveAll(address); err != nil {
		return err
	}
	l, err := net.Listen("unix", address)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err = <-errc:
	case <-sig:
	}
	srv.Stop()
	// the snapshotter's Close unmounts the layers' FUSE filesystems
	if cerr := sn.Close(); cerr != nil && err == nil {
		err = cerr
	}
	mount.UnmountAll(filepath.Join(root, "stargz"), 0)
	return err
}
