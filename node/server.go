package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// PreviousLogFile holds the output of a container's previous run: LogFile is renamed to it
// when the container is started again, so `kubectl logs --previous` has something to show.
const PreviousLogFile = LogFile + ".previous"

// followPoll is how often a followed log file is checked for new output.
const followPoll = 150 * time.Millisecond

// listen opens the agent's HTTP port (--address, --port; port 0 picks a free one) and records
// the port actually bound, which fillStatus reports as the kubelet endpoint.
func (a *Agent) listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(a.o.Address, strconv.Itoa(a.o.Port)))
	if err != nil {
		return nil, fmt.Errorf("node server: %w", err)
	}
	a.port.Store(int32(ln.Addr().(*net.TCPAddr).Port))
	return ln, nil
}

// Port is the port the agent's HTTP server listens on (0 until Run has opened it).
func (a *Agent) Port() int { return int(a.port.Load()) }

// serve answers the agent's HTTP endpoints on ln until ctx is cancelled; it returns once
// every handler has finished (requests' contexts derive from ctx, so followed logs end too,
// and Shutdown waits for them).
func (a *Agent) serve(ctx context.Context, ln net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", a.serveLogs)
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}", a.serveLogs)
	mux.HandleFunc("GET /stats/summary", a.serveSummary)
	mux.Handle("GET /metrics/resource", a.resourceMetricsHandler())
	var sessions sync.WaitGroup
	a.handleStreaming(ctx, mux, &sessions)
	srv := &http.Server{
		Handler:           mux,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("node server", "err", err)
		}
	}()
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		_ = srv.Close()
	}
	<-done
	sessions.Wait()
}

// logRequest is a parsed /containerLogs request.
type logRequest struct {
	follow, previous, timestamps bool
	tailLines                    int64 // <0: all
	limitBytes                   int64 // <=0: no limit
	since                        time.Time
}

func parseLogRequest(r *http.Request, now time.Time) (logRequest, error) {
	q := r.URL.Query()
	lr := logRequest{follow: isTrueParam(q.Get("follow")), previous: isTrueParam(q.Get("previous")),
		timestamps: isTrueParam(q.Get("timestamps")), tailLines: -1}
	var sinceSeconds int64
	for name, dst := range map[string]*int64{"tailLines": &lr.tailLines, "limitBytes": &lr.limitBytes, "sinceSeconds": &sinceSeconds} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return lr, fmt.Errorf("invalid %s %q", name, v)
			}
			*dst = n
		}
	}
	if sinceSeconds > 0 {
		lr.since = now.Add(-time.Duration(sinceSeconds) * time.Second)
	}
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return lr, fmt.Errorf("invalid sinceTime %q: %v", v, err)
		}
		lr.since = t
	}
	return lr, nil
}

func isTrueParam(v string) bool { return v == "true" || v == "1" }

// serveLogs streams a container's log file. The container may be omitted for a pod with one
// container (the apiserver names it anyway).
func (a *Agent) serveLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, ctr := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	lr, err := parseLogRequest(r, a.clock.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w1, pod := a.findPod(ns, name)
	if w1 == nil {
		http.Error(w, fmt.Sprintf("pod %q in namespace %q is not running on node %s", name, ns, a.name), http.StatusNotFound)
		return
	}
	if ctr == "" {
		if len(pod.Spec.Containers) != 1 {
			http.Error(w, fmt.Sprintf("a container name must be specified for pod %s", name), http.StatusBadRequest)
			return
		}
		ctr = pod.Spec.Containers[0].Name
	}
	if !hasContainer(pod, ctr) {
		http.Error(w, fmt.Sprintf("container %s is not valid for pod %s", ctr, name), http.StatusBadRequest)
		return
	}
	dir := ContainerDir(a.o.DataDir, w1.uid, ctr)
	file := LogFile
	if lr.previous {
		file = PreviousLogFile
	}
	f, err := os.Open(filepath.Join(dir, file))
	if errors.Is(err, os.ErrNotExist) {
		msg := fmt.Sprintf("container %q in pod %q is waiting to start", ctr, name)
		if lr.previous {
			msg = fmt.Sprintf("previous terminated container %q in pod %q not found", ctr, name)
		}
		http.Error(w, msg, http.StatusBadRequest)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	if lr.tailLines >= 0 {
		off, err := tailOffset(f, lr.tailLines)
		if err == nil {
			_, err = f.Seek(off, io.SeekStart)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	out := &limitedFlusher{w: w, rc: http.NewResponseController(w), left: lr.limitBytes}
	if lr.limitBytes <= 0 {
		out.left = -1
	}
	lw := &logWriter{out: out, in: bufio.NewReaderSize(f, 64<<10), req: lr}
	if _, err := lw.copy(); err != nil || !lr.follow || lr.previous {
		return
	}
	a.follow(r.Context(), lw, f, ns, name, ctr, w1)
}

// follow copies what is appended to f until the request ends, the limit is reached, or the
// container's run is over: its log file was replaced by a restart, its pod worker is gone,
// or the pod's status shows it terminated for good. What is left in f is copied first.
func (a *Agent) follow(ctx context.Context, lw *logWriter, f *os.File, ns, name, ctr string, worker *podWorker) {
	t := time.NewTicker(followPoll)
	defer t.Stop()
	path := f.Name()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Checked before copying, so the output written before the run ended is not lost.
		over := a.runOver(f, path, ns, name, ctr, worker)
		n, err := lw.copy()
		if err != nil || lw.out.left == 0 || (over && n == 0) {
			return
		}
	}
}

// logWriter turns the records of a log file (CRI format, see LogFile) into the text kubectl
// shows: each record's text, prefixed with its time when asked, records before since left out.
type logWriter struct {
	out     *limitedFlusher
	in      *bufio.Reader
	req     logRequest
	partial []byte // the start of a record whose end was not written yet
}

// copy writes every complete record read from in and reports how many bytes it read.
func (l *logWriter) copy() (int, error) {
	read := 0
	for {
		chunk, err := l.in.ReadSlice('\n')
		read += len(chunk)
		if errors.Is(err, bufio.ErrBufferFull) || (err != nil && len(chunk) > 0) {
			l.partial = append(l.partial, chunk...)
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return read, nil
			}
			return read, err
		}
		line := chunk
		if len(l.partial) > 0 {
			line = append(l.partial, chunk...)
			l.partial = l.partial[:0]
		}
		if err := l.write(line); err != nil {
			return read, err
		}
	}
}

// write writes one record (with its newline).
func (l *logWriter) write(line []byte) error {
	ts, _, tag, text, ok := parseLogRecord(line)
	if !ok { // not a record (a file written by an older agent): the line as it is
		_, err := l.out.Write(line)
		return err
	}
	if !l.req.since.IsZero() && ts.Before(l.req.since) {
		return nil
	}
	var buf []byte
	if l.req.timestamps {
		buf = ts.AppendFormat(buf, time.RFC3339Nano)
		buf = append(buf, ' ')
	}
	buf = append(buf, text...)
	if tag == 'F' {
		buf = append(buf, '\n')
	}
	_, err := l.out.Write(buf)
	return err
}

// parseLogRecord splits "<time> <stream> <F|P> <text>\n".
func parseLogRecord(line []byte) (ts time.Time, stream string, tag byte, text []byte, ok bool) {
	line = bytes.TrimSuffix(line, []byte{'\n'})
	t, rest, found := bytes.Cut(line, []byte{' '})
	if !found {
		return
	}
	st, rest, found := bytes.Cut(rest, []byte{' '})
	if !found || len(rest) < 2 || (rest[0] != 'F' && rest[0] != 'P') || rest[1] != ' ' {
		return
	}
	ts, err := time.Parse(time.RFC3339Nano, string(t))
	if err != nil {
		return
	}
	return ts, string(st), rest[0], rest[2:], true
}

func (a *Agent) runOver(f *os.File, path, ns, name, ctr string, worker *podWorker) bool {
	if fi, err := f.Stat(); err != nil {
		return true
	} else if cur, err := os.Stat(path); err != nil || !os.SameFile(fi, cur) {
		return true // restarted (renamed to PreviousLogFile) or removed
	}
	w, pod := a.findPod(ns, name)
	if w != worker {
		return true
	}
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if cs.Name == ctr {
			return cs.State.Terminated != nil
		}
	}
	return false
}

// findPod returns the worker running the pod ns/name on this node and its latest state,
// preferring a pod that is not being deleted (a pod recreated under the same name may have
// two workers for a moment).
func (a *Agent) findPod(ns, name string) (*podWorker, *corev1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var found *podWorker
	var foundPod *corev1.Pod
	for _, w := range a.workers {
		p, removed := w.latest()
		if p.Namespace != ns || p.Name != name || removed {
			continue
		}
		if found == nil || (foundPod.DeletionTimestamp != nil && p.DeletionTimestamp == nil) {
			found, foundPod = w, p
		}
	}
	return found, foundPod
}

func hasContainer(p *corev1.Pod, name string) bool {
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for _, c := range cs {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}

// tailOffset is the offset in f where its last n lines begin, found by reading backwards
// in chunks so a long log is not read whole. A final line without a newline counts as a line.
func tailOffset(f *os.File, n int64) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := fi.Size()
	if n == 0 {
		return end, nil
	}
	const chunk = 64 << 10
	buf := make([]byte, chunk)
	pos := end
	newlines := int64(0)
	for pos > 0 {
		size := min(int64(chunk), pos)
		pos -= size
		if _, err := f.ReadAt(buf[:size], pos); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		for i := size - 1; i >= 0; i-- {
			if buf[i] != '\n' || pos+i == end-1 { // the file's trailing newline ends the last line
				continue
			}
			newlines++
			if newlines == n {
				return pos + i + 1, nil
			}
		}
	}
	return 0, nil
}

// limitedFlusher writes at most left bytes (-1: no limit) and flushes after every write, so
// a followed log reaches the client line by line.
type limitedFlusher struct {
	w    io.Writer
	rc   *http.ResponseController
	left int64
}

func (l *limitedFlusher) Write(p []byte) (int, error) {
	if l.left == 0 {
		return 0, io.ErrShortWrite
	}
	full := len(p)
	if l.left > 0 && int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.w.Write(p)
	if l.left > 0 {
		l.left -= int64(n)
	}
	if err == nil {
		err = l.rc.Flush()
	}
	if err == nil && n < full {
		err = io.ErrShortWrite // limit reached: ends io.Copy
	}
	return n, err
}
