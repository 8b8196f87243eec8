// Package node is the node agent (`kplane node`): it registers a Node, renews its Lease in
// kube-node-lease, and runs the pods bound to it (field selector spec.nodeName) as local
// processes, reporting their status.
//
// Each container runs command+args (a first word "kplane" is this binary) in
// <data-dir>/pods/<uid>/<container>/, with its env values plus POD_IP, POD_NAME and
// POD_NAMESPACE, stdout and stderr appended to LogFile there, in its own process group with
// SIGKILL as parent-death signal. Each pod gets one address of --pod-cidr (default
// 127.77.0.0/16, loopback, so binding $POD_IP:port needs no setup). Exited containers are
// restarted per restartPolicy with a doubling backoff; a pod with a deletionTimestamp gets
// SIGTERM, its grace period, SIGKILL, then its object is deleted with grace period 0.
//
// Start it in-process with New(c, o) and (*Agent).Run(ctx), or Run(ctx, o) from a kubeconfig.
//
// TODO (issue 6, not done yet):
//   - readiness and liveness probes (httpGet, tcpSocket, exec; delays, periods, thresholds);
//     today a container is ready as soon as its process runs.
//   - env valueFrom (fieldRef, configMap, secret) and $(VAR) expansion in command/args.
//   - init containers, ephemeral containers, sidecars; a pod with them runs only its containers.
//   - `kubectl logs` (logs subresource served from LogFile; --previous needs per-run files).
//   - events (Started, Killing, BackOff), and a reason in status when no pod IP is left.
//   - node status beyond Ready (pressure conditions), node shutdown marking pods.
//   - tests of restart backoff with OnFailure and of the agent's own shutdown.
package node
