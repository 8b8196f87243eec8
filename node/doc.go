// Package node is the node agent (`kplane node`): it registers a Node, renews its Lease in
// kube-node-lease, and runs the pods bound to it (field selector spec.nodeName) as local
// processes, reporting their status.
//
// Each pod's lifecycle is two parts. podMachine (machine.go) is a pure state machine: given
// the pod, process exits, probe results and the time, it decides what to start, restart,
// probe, signal and report, and the status to write; it does no I/O and reads no clock, and
// its tests drive it table by table. The pod worker (worker.go) is its executor: one
// goroutine per pod feeds it and carries out its actions with the runtime (runtime.go:
// processes and their logs), the probes (probe.go) and the API. Time comes from
// Options.Clock.
//
// Each container runs command+args (a first word "kplane" is this binary) in
// <data-dir>/pods/<uid>/<container>/, with its env values plus POD_IP, POD_NAME and
// POD_NAMESPACE, in its own process group with SIGKILL as parent-death signal. Its stdout
// and stderr are copied into LogFile there, a time per line (a restart renames it to
// PreviousLogFile), so logs can be shown with --timestamps, --since and --since-time. Each pod gets
// one address of --pod-cidr (default 127.77.0.0/16, loopback, so binding $POD_IP:port needs
// no setup; when the range is used up the pod stays Pending with a FailedCreatePodSandBox
// event, and is tried again on its next update). Exited containers are
// restarted per restartPolicy with a doubling backoff; a pod with a deletionTimestamp gets
// SIGTERM, its grace period, SIGKILL, then its object is deleted with grace period 0.
//
// Init containers run one after another, each to completion, before the containers start;
// a failing one is restarted with the same backoff (under restartPolicy Never it fails the
// pod). Startup, liveness and readiness probes (exec in the container's directory and env,
// tcpSocket, httpGet to the pod IP by default) run as the kubelet's (probe.go): a container is
// started once its startup probe passed and ready once its readiness probe passes; failing
// liveness or startup probes kill it (SIGTERM, then SIGKILL after the grace period) and it is
// restarted per restartPolicy. Unlike the kubelet, a readiness probe that has not passed yet
// in a run is tried again after 25 ms, doubling up to its period (Unhealthy events at most
// once a period), so a container is Ready within moments of listening, not a period later.
//
// The agent serves HTTP on --address:--port (0: a free port, reported in the Node's
// status.daemonEndpoints): GET /containerLogs/<ns>/<pod>/<container>, which the apiserver's
// pods/log proxies to, with follow, previous, tailLines and limitBytes; and the kubelet's
// streaming endpoints /exec/<ns>/<pod>/<container>, /attach/<ns>/<pod>/<container> and
// /portForward/<ns>/<pod> (streaming.go), which pods/exec, pods/attach and pods/portforward
// pass through to, upgraded connection and all. Like a v1.36 kubelet, they speak what kubectl
// asks for first, WebSocket (v5.channel.k8s.io; port-forward: SPDY tunnelled through
// WebSocket), and SPDY/3.1, its fallback: SPDY with k8s.io/cri-streaming's server side, v5
// with k8s.io/streaming's wsstream. An exec'd process starts through containerRun.startProcess
// (process.go): command looked up in the container's PATH, the container's env (plus
// TERM=xterm on a terminal) and working directory, a process group of its own (a session on
// a pseudo-terminal with -t, resized as the client asks); what it leaves in its group is
// killed when it exits, and all of it when the container's process exits or the agent stops.
// A program that does not exist exits 127, one that cannot be executed 126, as in a shell. A
// container with stdin: true gets a stdin pipe the agent keeps for attach (stdinOnce: closed
// when the first attach session that wrote it ends); tty: true runs it on a pseudo-terminal,
// logged as stdout; attached clients get the output as it is read (sessions.go). Port-forward
// connects to the pod IP, never 127.0.0.1 (which could be another pod's or the host's port):
// a program that listens on 127.0.0.1 only is not reachable. A connection that fails is
// reported on its error stream and the session goes on (kubectl itself then ends it); once
// one side of a forwarded connection has ended, the other has a second to finish (as socat's
// -t), then both are closed.
//
// A container's environment is built as the kubelet's (env.go): envFrom (ConfigMaps, Secrets,
// with prefix), then env in order (value with $(VAR) references to variables defined before
// it, "$$" escaping "$"; valueFrom fieldRef, configMapKeyRef, secretKeyRef), POD_IP, POD_NAME
// and POD_NAMESPACE defined first so that both can override and refer to them; command and
// args have their $(VAR) references expanded against it. A missing ConfigMap, Secret or key
// that is not optional keeps the container Waiting with reason CreateContainerConfigError,
// retried every backoff base (not counted as a restart). Events as component "kubelet":
// Started, Failed, BackOff, Killing, Unhealthy.
//
// Start it in-process with New(c, o) and (*Agent).Run(ctx), or Run(ctx, o) from a kubeconfig.
//
// TODO (issue 6, not done yet):
//   - probes: grpc, httpGet with scheme HTTPS; a container killed by a liveness probe whose
//     process exits 0 is not restarted under OnFailure (the kubelet restarts it).
//   - env: resourceFieldRef (fails the container start today), service link variables
//     (enableServiceLinks), fileKeyRef.
//   - sidecars (init containers with restartPolicy Always: such a container stays Waiting
//     with CreateContainerConfigError saying so, and the pod Pending), ephemeral containers.
//   - The node's HTTP endpoint is plain and unauthenticated.
//   - exec'd processes run in the container's env and directory but not yet in its mount
//     namespace or cgroup (startProcess is where they will enter them).
//   - events: Created/Pulled; the involved object has no fieldPath
//     (spec.containers{name}), the source host is the machine's hostname, not the node name.
//   - node status beyond Ready (pressure conditions), node shutdown marking pods.
//   - tests of restart backoff with OnFailure and of the agent's own shutdown.
package node
