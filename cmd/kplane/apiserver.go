package main

import (
	"github.com/kplane/kplane/apiserver"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newAPIServerCommand() *cobra.Command {
	o := apiserver.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "apiserver",
		Short: "Serve the Kubernetes API from etcd (embedded by default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			inst, err := apiserver.Start(ctx, o)
			if err != nil {
				return err
			}
			return inst.Wait()
		},
	}
	addAPIServerFlags(cmd.Flags(), &o)
	return cmd
}

// addAPIServerFlags binds the apiserver's flags to o (kplane apiserver and kplane up).
func addAPIServerFlags(f *pflag.FlagSet, o *apiserver.Options) {
	f.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "address to listen on; anything but loopback turns on TLS and token authentication")
	f.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "port to listen on (0 = pick a free port; the written kubeconfig names it)")
	f.StringVar(&o.DataDir, "data-dir", o.DataDir, "directory for the embedded etcd, generated certificates and tokens")
	f.StringSliceVar(&o.EtcdServers, "etcd-servers", nil, "external etcd endpoints (URL,URL...); empty runs etcd embedded")
	f.StringVar(&o.ServiceClusterIPRange, "service-cluster-ip-range", o.ServiceClusterIPRange, "CIDR services get ClusterIPs from (a 127.0.0.0/8 range makes them reachable on one machine without setup)")
	f.StringVar(&o.ServiceNodePortRange, "service-node-port-range", o.ServiceNodePortRange, "port range NodePort services get ports from")
	f.StringVar(&o.TokenAuthFile, "token-auth-file", "", "CSV file of bearer tokens: token,user,uid[,\"groups\"]")
	f.BoolVar(&o.Profiling, "profiling", o.Profiling, "serve Go's profiles at /debug/pprof (to authenticated clients)")
	f.StringArrayVar(&o.ServiceAccountIssuers, "service-account-issuer", o.ServiceAccountIssuers, "issuer (\"iss\") of service-account tokens; repeat it to also accept tokens of other issuers (the first one signs)")
	f.StringArrayVar(&o.ServiceAccountKeyFiles, "service-account-key-file", nil, "PEM file of keys that verify service-account tokens, besides the signing key (repeatable)")
	f.StringVar(&o.ServiceAccountSigningKeyFile, "service-account-signing-key-file", "", "PEM private key (RSA or ECDSA) service-account tokens are signed with; default: sa.key in the data dir, made on first start")
	f.StringSliceVar(&o.APIAudiences, "api-audiences", nil, "audiences a token must be meant for to be used against this server (default: the service-account issuers)")
	f.StringVar(&o.TLSCertFile, "tls-cert-file", "", "serving certificate (PEM); default: self-signed into the data dir when TLS is on")
	f.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", "", "private key of --tls-cert-file")
	f.StringVar(&o.WriteKubeconfig, "write-kubeconfig", "", "write a kubeconfig for this server to PATH")
	f.DurationVar(&o.CompactionInterval, "etcd-compaction-interval", o.CompactionInterval, "how often etcd history is compacted")
}
