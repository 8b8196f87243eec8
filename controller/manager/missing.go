package manager

// missing are the controllers of kube-controller-manager v1.36 that kplane does not have, with
// why: --help lists them beside the registered ones, so that a user comparing the two knows.
var missing = []struct{ name, why string }{
	{"endpointslice-mirroring-controller", "not yet: Endpoints written by hand are not mirrored into slices"},
	{"certificatesigningrequest-signing-controller", "no certificates API yet"},
	{"certificatesigningrequest-approving-controller", "no certificates API yet"},
	{"certificatesigningrequest-cleaner-controller", "no certificates API yet"},
	{"podcertificaterequest-cleaner-controller", "no certificates API yet"},
	{"kube-apiserver-serving-clustertrustbundle-publisher-controller", "no certificates API yet"},
	{"clusterrole-aggregation-controller", "no RBAC yet"},
	{"legacy-serviceaccount-token-cleaner-controller", "not yet"},
	{"validatingadmissionpolicy-status-controller", "kplane's apiserver writes the policies' status.typeChecking itself"},
	{"ttl-controller", "its node annotation serves kubelets' Secret caches; kplane's node agent needs none"},
	{"taint-eviction-controller", "node-lifecycle-controller evicts pods from NoExecute-tainted nodes itself"},
	{"node-ipam-controller", "each node agent takes pod IPs from its own --pod-cidr"},
	{"persistentvolume-attach-detach-controller", "kplane's volumes are local: nothing to attach"},
	{"persistentvolume-expander-controller", "kplane's volumes are local directories: nothing to expand"},
	{"ephemeral-volume-controller", "not yet"},
	{"volumeattributesclass-protection-controller", "no VolumeAttributesClass API yet"},
	{"storageversion-garbage-collector-controller", "one apiserver: no storage versions to collect"},
	{"service-cidr-controller", "no ServiceCIDR API yet"},
	{"resourceclaim-controller", "no dynamic resource allocation yet"},
	{"device-taint-eviction-controller", "no dynamic resource allocation yet"},
	{"bootstrap-signer-controller", "off by default in v1.36; no bootstrap tokens yet"},
	{"token-cleaner-controller", "off by default in v1.36; no bootstrap tokens yet"},
	{"selinux-warning-controller", "off by default in v1.36"},
}
