package app

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestOptionsFlags(t *testing.T) {
	o := DefaultOptions()
	fs := pflag.NewFlagSet("proxy", pflag.ContinueOnError)
	o.AddFlags(fs)
	err := fs.Parse([]string{"--kubeconfig=/k", "--hostname-override=Node-A", "--healthz-bind-address=127.0.0.1:0",
		"--metrics-bind-address=", "--iptables-min-sync-period=0", "--iptables-sync-period=10s", "--config-sync-period=0", "--kube-api-qps=50"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Kubeconfig != "/k" || o.HealthzBindAddress != "127.0.0.1:0" || o.MetricsBindAddress != "" ||
		o.MinSyncPeriod != 0 || o.SyncPeriod != 10*time.Second || o.ConfigSyncPeriod != 0 || o.KubeAPIQPS != 50 {
		t.Errorf("options %+v", o)
	}
	if name, _ := o.NodeName(); name != "node-a" {
		t.Errorf("node name %q", name)
	}
	if err := o.Validate(); err != nil {
		t.Error(err)
	}
	if fs.Lookup("proxy-mode") != nil {
		t.Error("--proxy-mode is the caller's")
	}
	d := DefaultOptions()
	if d.HealthzBindAddress != "0.0.0.0:10256" || d.MetricsBindAddress != "127.0.0.1:10249" || d.MinSyncPeriod != time.Second ||
		d.SyncPeriod != 30*time.Second || d.ConfigSyncPeriod != 15*time.Minute || d.ProxyMode != ProxyModeAuto {
		t.Errorf("defaults %+v", d)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Options)
		want   string // a part of the error; "" for none
	}{
		{name: "defaults", mutate: func(*Options) {}},
		{name: "userspace", mutate: func(o *Options) { o.ProxyMode = ProxyModeUserspace }},
		{name: "nftables", mutate: func(o *Options) { o.ProxyMode = ProxyModeNFTables }},
		{name: "servers off", mutate: func(o *Options) { o.HealthzBindAddress, o.MetricsBindAddress = "", "" }},
		{name: "any host", mutate: func(o *Options) { o.HealthzBindAddress = ":10256" }},
		{name: "IPv6 host", mutate: func(o *Options) { o.MetricsBindAddress = "[::1]:0" }},
		{name: "unknown mode", mutate: func(o *Options) { o.ProxyMode = "iptables" }, want: "--proxy-mode"},
		{name: "no port", mutate: func(o *Options) { o.HealthzBindAddress = "0.0.0.0" }, want: "--healthz-bind-address"},
		{name: "host name", mutate: func(o *Options) { o.MetricsBindAddress = "localhost:10249" }, want: "--metrics-bind-address"},
		{name: "port too big", mutate: func(o *Options) { o.MetricsBindAddress = "127.0.0.1:70000" }, want: "--metrics-bind-address"},
		{name: "negative min sync", mutate: func(o *Options) { o.MinSyncPeriod = -time.Second }, want: "--iptables-min-sync-period"},
		{name: "zero sync period", mutate: func(o *Options) { o.SyncPeriod = 0 }, want: "--iptables-sync-period"},
		{name: "negative config sync", mutate: func(o *Options) { o.ConfigSyncPeriod = -1 }, want: "--config-sync-period"},
		{name: "bad node name", mutate: func(o *Options) { o.HostnameOverride = "no_underscores" }, want: "node name"},
		{name: "bad family", mutate: func(o *Options) { o.IPFamily = "IPv5" }, want: "IP family"},
		{name: "several at once", mutate: func(o *Options) { o.SyncPeriod, o.ProxyMode = 0, "x" }, want: "--iptables-sync-period must be positive; --proxy-mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			o.HostnameOverride = "node-a"
			tc.mutate(&o)
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}
