// Package inprocess holds the wiring that runs kplane's roles in the same process as the API
// server they talk to: the settings `kplane up` and testenv share, so that the two start the
// controller manager, scheduler and node agent the same way.
package inprocess

import (
	"context"
	"fmt"
	"time"

	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/manager"
	"github.com/kplane/kplane/controller/serviceaccounttoken"
	"github.com/kplane/kplane/node"
	"github.com/kplane/kplane/scheduler"
)

// Client QPS and burst of the roles: their usual limits (20 QPS for kube-controller-manager,
// 50 for the kubelet and kube-scheduler) would make a Job of 1000 pods or a burst of 100 pod
// starts wait seconds for an apiserver that is in this very process and idle.
const (
	LocalQPS   = 1000
	LocalBurst = 2000
)

// WaitReady waits until api has filled its watch caches and bootstrapped (its /readyz), at
// most timeout; it fails early if the server stops.
func WaitReady(ctx context.Context, api *apiserver.Instance, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	// A short poll: a fresh server is ready in tens of milliseconds, and testenv's start time
	// is what its users wait for in every test.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !api.Server.Ready() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("the apiserver did not become ready within %v", timeout)
		case <-tick.C:
		}
	}
	return nil
}

// Client is a client of the local apiserver through kubeconfig, at the roles' QPS.
func Client(kubeconfig string) (*client.Client, error) {
	return client.FromKubeconfig(kubeconfig, LocalQPS, LocalBurst)
}

// ControllerManager returns controller-manager settings for a manager beside api, reached
// through kubeconfig: no leader election and no health server (the process has one
// manager), the roles' QPS, and the apiserver's CA and service-account key, as
// kube-controller-manager is set up beside kube-apiserver.
func ControllerManager(api *apiserver.Instance, kubeconfig string) manager.Options {
	cm := manager.DefaultOptions()
	cm.Kubeconfig, cm.LeaderElect, cm.SecurePort = kubeconfig, false, 0
	cm.KubeAPIQPS, cm.KubeAPIBurst = LocalQPS, LocalBurst
	// kube-root-ca.crt publishes the certificate the apiserver answers TLS with (to in-cluster
	// clients, through the kubernetes service); the token controller signs with its key.
	cm.RootCAFile = api.CAFile
	if tokens, ok := manager.OptionsOf[*serviceaccounttoken.Options](cm, serviceaccounttoken.Name); ok {
		tokens.ServiceAccountKeyFile = api.ServiceAccountKeyFile
	}
	return cm
}

// Scheduler returns scheduler settings for a scheduler beside the apiserver (no leader
// election: the process has one).
func Scheduler(kubeconfig string) scheduler.Options {
	s := scheduler.DefaultOptions()
	s.Kubeconfig, s.LeaderElect = kubeconfig, false
	return s
}

// Node returns node-agent settings for an agent beside the apiserver, its pods' files under
// dataDir and their addresses from podCIDR ("" keeps the default). It listens on a free port
// rather than the kubelet's 10250, which a real kubelet or another kplane may hold; the
// apiserver finds the port in the Node's status.
func Node(kubeconfig, dataDir, podCIDR string) node.Options {
	n := node.DefaultOptions()
	n.Kubeconfig, n.DataDir, n.Port = kubeconfig, dataDir, 0
	if podCIDR != "" {
		n.PodCIDR = podCIDR
	}
	return n
}
