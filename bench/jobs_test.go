package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Job benchmarks' workload: completions pods, parallelism at a time. KPLANE_BENCH_JOB_COMPLETIONS
// and _PARALLELISM override them.
func jobShape() (completions, parallelism int32) {
	c, _ := strconv.Atoi(envOr("KPLANE_BENCH_JOB_COMPLETIONS", "1000"))
	p, _ := strconv.Atoi(envOr("KPLANE_BENCH_JOB_PARALLELISM", "100"))
	return int32(c), int32(p)
}

func benchJob(name string, completions, parallelism int32, command string) *batchv1.Job {
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: batchv1.JobSpec{
		Completions: &completions, Parallelism: &parallelism, BackoffLimit: new(int32(1000)),
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64(0)),
			Containers:                    []corev1.Container{{Name: "main", Image: "sh", Command: []string{"/bin/sh", "-c", command}}}}},
	}}
}

// waitComplete waits for the Job's Complete condition and returns when it appeared (as the
// watch saw it), failing after timeout.
func waitComplete(b *testing.B, c *client.Client, ns, name string, timeout time.Duration) time.Time {
	b.Helper()
	deadline := time.Now().Add(timeout)
	jobs := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns)
	for time.Now().Before(deadline) {
		j, err := jobs.Get(context.Background(), name)
		if err != nil {
			b.Fatal(err)
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
				return time.Now()
			}
			if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
				b.Fatalf("job failed: %s: %s", cond.Reason, cond.Message)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("job %s/%s not complete within %v", ns, name, timeout)
	return time.Time{}
}

// BenchmarkJobController measures the Job controllers alone on a fresh kplane apiserver, with
// the same client QPS and burst (KPLANE_BENCH_KCM_QPS / _BURST, default 20 / 30, the managers'
// default): a Job of 1000 completions at parallelism 100 whose pods the benchmark plays the
// node for (each pod is marked Succeeded as soon as it appears); time from the Job's creation
// to its Complete condition, completions per second, and the manager's RSS. The reference is
// kube-controller-manager (KPLANE_REFERENCE_KCM) running only its job controller; "kplane-all"
// runs kplane's manager with every controller on (the RSS figure the issue asks for: idle,
// then after the run). Run with -benchtime=1x.
func BenchmarkJobController(b *testing.B) {
	qps, burst := envOr("KPLANE_BENCH_KCM_QPS", "20"), envOr("KPLANE_BENCH_KCM_BURST", "30")
	impls := map[string]func(kubeconfig string) *exec.Cmd{
		"kplane": func(kubeconfig string) *exec.Cmd {
			return exec.Command(kplaneBinary(b), "controller-manager", "--kubeconfig", kubeconfig, "--controllers", "job",
				"--leader-elect=false", "--secure-port", "0", "--kube-api-qps", qps, "--kube-api-burst", burst)
		},
		"kplane-all": func(kubeconfig string) *exec.Cmd {
			return exec.Command(kplaneBinary(b), "controller-manager", "--kubeconfig", kubeconfig, "--controllers", "*",
				"--leader-elect=false", "--secure-port", "0", "--kube-api-qps", qps, "--kube-api-burst", burst)
		},
	}
	if bin := os.Getenv("KPLANE_REFERENCE_KCM"); bin != "" {
		impls["reference"] = func(kubeconfig string) *exec.Cmd {
			return exec.Command(bin, "--kubeconfig", kubeconfig, "--controllers", "job", "--leader-elect=false",
				"--secure-port", "0", "--kube-api-qps", qps, "--kube-api-burst", burst, "--v", "0")
		}
	}
	for _, name := range []string{"kplane", "reference", "kplane-all"} {
		start, ok := impls[name]
		if !ok {
			continue
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				runJobControllerBench(b, start)
			}
		})
	}
}

func runJobControllerBench(b *testing.B, startCM func(string) *exec.Cmd) {
	b.StopTimer()
	api, _ := startKplane(b, b.TempDir())
	defer api.stop()
	c, err := client.FromKubeconfig(api.kubeconfig, -1, 0)
	if err != nil {
		b.Fatal(err)
	}
	ns := "bench-job"
	if _, err := client.Resource[*corev1.Namespace](c, "namespaces").Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopNode := playNode(ctx, b, c, ns)
	defer stopNode()

	cmd := startCM(api.kubeconfig)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logs, _ := os.Create(filepath.Join(b.TempDir(), "cm.log"))
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	time.Sleep(3 * time.Second) // started and synced, before the Job appears
	idle := rssMB(cmd.Process.Pid)

	completions, parallelism := jobShape()
	b.StartTimer()
	began := time.Now()
	if _, err := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns).Create(ctx, benchJob("work", completions, parallelism, "true")); err != nil {
		b.Fatal(err)
	}
	done := waitComplete(b, c, ns, "work", 15*time.Minute)
	b.StopTimer()
	took := done.Sub(began)
	b.ReportMetric(took.Seconds(), "complete-s")
	b.ReportMetric(float64(completions)/took.Seconds(), "completions/s")
	b.ReportMetric(idle, "idle-RSS-MB")
	b.ReportMetric(rssMB(cmd.Process.Pid), "RSS-after-MB")
	b.ReportMetric(peakRSSMB(cmd.Process.Pid), "peak-RSS-MB")
}

// playNode marks every pod that appears in ns Succeeded, with a terminated container, from a
// few goroutines: the node's part, without running anything.
func playNode(ctx context.Context, b *testing.B, c *client.Client, ns string) (stop func()) {
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	todo := make(chan *corev1.Pod, 10000)
	inf := cache.NewInformer[*corev1.Pod]("bench-pods", pods)
	inf.AddHandler(cache.Handler[*corev1.Pod]{OnAdd: func(p *corev1.Pod, _ bool) {
		if p.Status.Phase == "" || p.Status.Phase == corev1.PodPending {
			todo <- p
		}
	}}, 0)
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { inf.Run(runCtx) })
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-runCtx.Done():
					return
				case p := <-todo:
					p = p.DeepCopy()
					now := metav1.Now()
					p.Status.Phase = corev1.PodSucceeded
					p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
						Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, StartedAt: now, FinishedAt: now}}}}
					if _, err := pods.UpdateStatus(runCtx, p); err != nil && runCtx.Err() == nil && !client.IsNotFound(err) {
						b.Errorf("marking %s succeeded: %v", p.Name, err)
					}
				}
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

// BenchmarkUpJob measures a Job of 1000 completions at parallelism 100 under `kplane up`, its
// pods real processes (/bin/sh -c true): time from creation to Complete, and the up process's
// RSS after it. Target: under 15 s. Run with -benchtime=1x.
func BenchmarkUpJob(b *testing.B) {
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		up := exec.Command(kplaneBinary(b), "up", "--secure-port", "0", "--data-dir", dir)
		up.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		// The log outlives the data dir, for a run that goes wrong.
		logs, _ := os.CreateTemp("", "kplane-bench-upjob-*.log")
		up.Stdout, up.Stderr = logs, logs
		if err := up.Start(); err != nil {
			b.Fatal(err)
		}
		kubeconfig := filepath.Join(dir, "kubeconfig")
		var c *client.Client
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("kplane up not ready (log: %s)", logs.Name())
			}
			if _, err := os.Stat(kubeconfig); err != nil {
				continue
			}
			var err error
			if c, err = client.FromKubeconfig(kubeconfig, -1, 0); err != nil {
				continue
			}
			if _, err := client.Resource[*corev1.ServiceAccount](c, "serviceaccounts").Namespace("default").Get(context.Background(), "default"); err == nil {
				break
			}
		}
		completions, parallelism := jobShape()
		b.StartTimer()
		began := time.Now()
		if _, err := client.Resource[*batchv1.Job](c, "jobs").Namespace("default").Create(context.Background(),
			benchJob("work", completions, parallelism, "true")); err != nil {
			b.Fatal(err)
		}
		done := waitComplete(b, c, "default", "work", 10*time.Minute)
		b.StopTimer()
		took := done.Sub(began)
		b.ReportMetric(took.Seconds(), "complete-s")
		b.ReportMetric(float64(completions)/took.Seconds(), "completions/s")
		b.ReportMetric(rssMB(up.Process.Pid), "up-RSS-MB")
		_ = up.Process.Signal(syscall.SIGTERM)
		exited := make(chan error, 1)
		go func() { exited <- up.Wait() }()
		select {
		case <-exited:
			_ = os.Remove(logs.Name())
		case <-time.After(30 * time.Second):
			_ = up.Process.Signal(syscall.SIGQUIT) // its goroutines, into the log
			<-exited
			b.Fatalf("kplane up did not exit within 30 s of SIGTERM; goroutines in %s", logs.Name())
		}
	}
}
