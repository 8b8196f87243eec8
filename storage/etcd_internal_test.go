package storage

import (
	"errors"
	"net"
	"net/url"
	"syscall"
	"testing"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// StartEmbedded retries when a port it found free was taken before etcd bound it: that rests
// on etcd reporting the bind failure as EADDRINUSE.
func TestEtcdReportsPortTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	peer, err := freeLoopbackURL()
	if err != nil {
		t.Fatal(err)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "kplane", t.TempDir()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	u := url.URL{Scheme: "http", Host: taken.Addr().String()}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{u}, []url.URL{u}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err == nil {
		e.Close()
		t.Fatal("etcd started on a port in use")
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("error %v (%T), want one that is EADDRINUSE", err, err)
	}
}
