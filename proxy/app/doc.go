// Package app is kplane's service proxy as a program, as cmd/kube-proxy/app is kube-proxy's:
// its Options (kube-proxy's flags, defaults and validation) and Start, which builds the
// informers and the proxy/config sources, feeds a proxy.Proxier programming the data path the
// caller chose, and serves /healthz, /livez and /metrics. `kplane proxy` and `kplane up`
// choose the data path (nftables, else userspace) and call it; the data paths' tests call it
// with theirs.
package app
