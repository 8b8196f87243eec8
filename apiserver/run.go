package apiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kplane/kplane/apiserver/authentication"
	"github.com/kplane/kplane/apiserver/registry"
	"github.com/kplane/kplane/storage"
)

// Options are the apiserver's settings; the flags of `kplane apiserver` fill them.
type Options struct {
	BindAddress           string
	SecurePort            int // 0 picks a free port
	DataDir               string
	EtcdServers           []string // empty: embedded etcd under DataDir
	ServiceClusterIPRange string
	ServiceNodePortRange  string
	TokenAuthFile         string
	// ServiceAccountIssuers are the "iss" of service-account tokens: the first signs, all are
	// accepted (kube-apiserver's --service-account-issuer).
	ServiceAccountIssuers []string
	// ServiceAccountKeyFiles verify service-account tokens besides the signing key.
	ServiceAccountKeyFiles []string
	// ServiceAccountSigningKeyFile signs them; empty: <data-dir>/sa.key, made on first start.
	ServiceAccountSigningKeyFile string
	// APIAudiences are the audiences tokens must have one of; empty: the issuers.
	APIAudiences       []string
	TLSCertFile        string
	TLSPrivateKeyFile  string
	WriteKubeconfig    string
	CompactionInterval time.Duration
	Cache              storage.CacheOptions
	// EtcdNoFsync skips fsync in the embedded etcd (tests and benchmarks only).
	EtcdNoFsync bool
	// EtcdTick is the embedded etcd's raft tick (0: its default; see storage.EmbeddedOptions).
	EtcdTick time.Duration
	// Profiling serves /debug/pprof (kube-apiserver's --profiling, on by default).
	Profiling bool
}

// DefaultServiceAccountIssuer is the issuer of service-account tokens unless
// --service-account-issuer says otherwise: the in-cluster name of the API server, as kubeadm sets.
const DefaultServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// DefaultOptions are kube-apiserver's defaults where they apply.
func DefaultOptions() Options {
	return Options{
		BindAddress:           "127.0.0.1",
		SecurePort:            6443,
		DataDir:               defaultDataDir(),
		ServiceClusterIPRange: "10.96.0.0/12",
		ServiceNodePortRange:  "30000-32767",
		ServiceAccountIssuers: []string{DefaultServiceAccountIssuer},
		CompactionInterval:    5 * time.Minute,
		Profiling:             true,
	}
}

func defaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/kplane"
	}
	if dir, err := os.UserHomeDir(); err == nil {
		return filepath.Join(dir, ".kplane")
	}
	return ".kplane"
}

// Instance is a running API server.
type Instance struct {
	// URL is the address clients use, with the port actually bound.
	URL string
	// Kubeconfig is a kubeconfig for this server (also written to WriteKubeconfig if set).
	Kubeconfig []byte
	// ServiceAccountKeyFile is the key service-account tokens are signed with (the controller
	// manager's --service-account-private-key-file under kplane up).
	ServiceAccountKeyFile string
	// CAFile is the certificate clients verify the server with, also on a plain-HTTP loopback
	// server, which answers TLS too (the controller manager's --root-ca-file under kplane up).
	CAFile string
	Server *Server
	done   chan error
	cancel context.CancelFunc
}

// Wait blocks until the server stops and returns why.
func (i *Instance) Wait() error { return <-i.done }

// Stop shuts the server down and waits for it.
func (i *Instance) Stop() error {
	i.cancel()
	return i.Wait()
}

func parseNodePortRange(s string) (base, size int, err error) {
	lo, hi, ok := strings.Cut(s, "-")
	a, err1 := strconv.Atoi(strings.TrimSpace(lo))
	b, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if !ok || err1 != nil || err2 != nil || a < 1 || b > 65535 || b < a {
		return 0, 0, fmt.Errorf("invalid --service-node-port-range %q: want FIRST-LAST, e.g. 30000-32767", s)
	}
	return a, b - a + 1, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Start starts etcd (or connects to it), the API server and its listener. It returns once the
// listener is bound; /readyz turns 200 when the watch caches are filled.
func Start(ctx context.Context, o Options) (*Instance, error) {
	_, cidr, err := net.ParseCIDR(o.ServiceClusterIPRange)
	if err != nil {
		return nil, fmt.Errorf("invalid --service-cluster-ip-range %q: %w", o.ServiceClusterIPRange, err)
	}
	if ones, bits := cidr.Mask.Size(); bits-ones < 2 || bits-ones > 24 {
		return nil, fmt.Errorf("invalid --service-cluster-ip-range %q: want a prefix with between 4 and 2^24 addresses", o.ServiceClusterIPRange)
	}
	npBase, npSize, err := parseNodePortRange(o.ServiceNodePortRange)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	secure := o.TLSCertFile != "" || !isLoopback(o.BindAddress)
	var tokens *authentication.StaticTokens
	switch {
	case o.TokenAuthFile != "":
		if tokens, err = authentication.LoadTokenFile(o.TokenAuthFile); err != nil {
			return nil, err
		}
	case secure:
		// Off loopback every request must authenticate: make an admin token if none was given.
		if tokens, err = ensureTokenFile(filepath.Join(o.DataDir, "tokens.csv")); err != nil {
			return nil, err
		}
	}
	adminToken := tokens.First()
	serviceAccounts, saKeyFile, err := serviceAccounts(o)
	if err != nil {
		return nil, err
	}
	allocation := &registry.ServiceAllocation{ClusterIPRange: cidr, NodePortBase: npBase, NodePortSize: npSize}
	serviceIP, _ := allocation.APIServerServiceIP()
	// TLS is served even on plain loopback, for in-cluster clients (see dualListener).
	tlsConfig, caPEM, caFile, err := serverTLS(o, serviceIP.AsSlice())
	if err != nil {
		return nil, err
	}

	var etcd *storage.Etcd
	if len(o.EtcdServers) > 0 {
		etcd, err = storage.Connect(ctx, o.EtcdServers)
	} else {
		etcd, err = storage.StartEmbedded(storage.EmbeddedOptions{Dir: o.DataDir, NoFsync: o.EtcdNoFsync, Tick: o.EtcdTick})
	}
	if err != nil {
		return nil, err
	}
	listener, err := net.Listen("tcp", net.JoinHostPort(o.BindAddress, strconv.Itoa(o.SecurePort)))
	if err != nil {
		etcd.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	port := listener.Addr().(*net.TCPAddr).Port
	host := o.BindAddress
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	scheme := "http"
	if secure {
		scheme = "https"
	}
	url := scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))

	srv := New(Config{
		Etcd:              etcd,
		ServiceAllocation: allocation,
		Cache:             o.Cache,
		StaticTokens:      tokens,
		ServiceAccounts:   serviceAccounts,
		ExternalAddress:   net.JoinHostPort(host, strconv.Itoa(port)),
		Profiling:         o.Profiling,
	})
	if !secure {
		caPEM = nil // the kubeconfig's server is http://
	}
	kubeconfig, err := kubeconfigFor(url, caPEM, adminToken)
	if err != nil {
		listener.Close()
		etcd.Close()
		return nil, err
	}
	if o.WriteKubeconfig != "" {
		if err := writeFileAtomic(o.WriteKubeconfig, kubeconfig, 0o600); err != nil {
			listener.Close()
			etcd.Close()
			return nil, fmt.Errorf("write kubeconfig: %w", err)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	inst := &Instance{URL: url, Kubeconfig: kubeconfig, ServiceAccountKeyFile: saKeyFile, CAFile: caFile, Server: srv, done: make(chan error, 1), cancel: cancel}
	httpServer := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	if secure {
		httpServer.TLSConfig = tlsConfig
	}
	runErr := make(chan error, 1)
	go func() { runErr <- srv.Run(ctx) }()
	go etcd.RunCompactor(ctx, o.CompactionInterval)
	serveErr := make(chan error, 1)
	go func() {
		if secure {
			serveErr <- httpServer.ServeTLS(listener, "", "")
		} else {
			serveErr <- httpServer.Serve(newDualListener(listener, tlsConfig))
		}
	}()
	go func() {
		var err error
		runDone := false
		select {
		case <-ctx.Done():
		case err = <-runErr:
			runDone = true
		case err = <-serveErr:
		}
		cancel()
		shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
		_ = httpServer.Shutdown(shutdownCtx)
		done()
		_ = httpServer.Close()
		if !runDone {
			if e := <-runErr; err == nil {
				err = e
			}
		}
		etcd.Close()
		if errors.Is(err, http.ErrServerClosed) || errors.Is(err, context.Canceled) {
			err = nil
		}
		inst.done <- err
	}()
	slog.Info("kplane apiserver listening", "url", url, "dataDir", o.DataDir, "externalEtcd", len(o.EtcdServers) > 0)
	return inst, nil
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
