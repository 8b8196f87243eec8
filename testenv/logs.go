package testenv

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"path"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// kplane's components log through the process's default slog.Logger, which `kplane` sets up
// from its flags. In a test binary that logger is shared by every Env and by the test's own
// code, and a line does not say which Env wrote it. So the first Env replaces it, once, with
// a logRouter that tells kplane's lines (logged from kplane's packages) from the others: the
// others go where they went before; kplane's go to the writers of the running Envs that
// asked for them (WithLogs), and nowhere otherwise, as envtest hides its kube-apiserver's and
// etcd's output.

// kplaneModule is the import path prefix of kplane's packages: "github.com/kplane/kplane/".
var kplaneModule = path.Dir(reflect.TypeFor[Env]().PkgPath()) + "/"

var logSinks struct {
	once  sync.Once
	mu    sync.Mutex
	sinks []*slog.Handler // one per running Env started WithLogs
}

// routeLogs makes kplane's log lines go to w (when not nil) until the returned function is
// called.
func routeLogs(w io.Writer) (stop func()) {
	logSinks.once.Do(func() {
		others := slog.Default().Handler()
		if reflect.TypeOf(others).String() == "*slog.defaultHandler" {
			// slog's own default writes through the log package, whose output SetDefault sends
			// to the new default handler: keeping it would loop.
			others = newClassicHandler(log.New(log.Writer(), log.Prefix(), log.Flags()))
		}
		slog.SetDefault(slog.New(&logRouter{others: others}))
	})
	if w == nil {
		return func() {}
	}
	sink := new(slog.Handler)
	*sink = slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})
	logSinks.mu.Lock()
	logSinks.sinks = append(logSinks.sinks, sink)
	logSinks.mu.Unlock()
	return func() {
		logSinks.mu.Lock()
		defer logSinks.mu.Unlock()
		logSinks.sinks = slices.DeleteFunc(logSinks.sinks, func(s *slog.Handler) bool { return s == sink })
	}
}

func currentSinks() []*slog.Handler {
	logSinks.mu.Lock()
	defer logSinks.mu.Unlock()
	return slices.Clone(logSinks.sinks)
}

// logRouter sends kplane's records to the sinks, the others to others.
type logRouter struct {
	others slog.Handler
	// with are the WithAttrs and WithGroup calls that made this handler, applied to a sink
	// when a record goes to it (sinks come and go with their Envs).
	with []func(slog.Handler) slog.Handler
}

func (h *logRouter) Enabled(ctx context.Context, level slog.Level) bool {
	if h.others.Enabled(ctx, level) {
		return true
	}
	logSinks.mu.Lock()
	defer logSinks.mu.Unlock()
	return level >= slog.LevelInfo && len(logSinks.sinks) > 0
}

func (h *logRouter) Handle(ctx context.Context, r slog.Record) error {
	if !fromKplane(r.PC) {
		if !h.others.Enabled(ctx, r.Level) {
			return nil
		}
		return h.others.Handle(ctx, r)
	}
	for _, sink := range currentSinks() {
		s := *sink
		for _, f := range h.with {
			s = f(s)
		}
		if s.Enabled(ctx, r.Level) {
			_ = s.Handle(ctx, r.Clone())
		}
	}
	return nil
}

func (h *logRouter) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logRouter{others: h.others.WithAttrs(attrs),
		with: append(slices.Clip(h.with), func(s slog.Handler) slog.Handler { return s.WithAttrs(attrs) })}
}

func (h *logRouter) WithGroup(name string) slog.Handler {
	return &logRouter{others: h.others.WithGroup(name),
		with: append(slices.Clip(h.with), func(s slog.Handler) slog.Handler { return s.WithGroup(name) })}
}

// fromKplane reports whether the record logged at pc was logged by kplane's code: a package
// of its module, not a test's (kplane's own tests are testenv's users too). Records the log
// package forwards have no pc: they are never kplane's, which logs through slog.
func fromKplane(pc uintptr) bool {
	if pc == 0 {
		return false
	}
	f, _ := runtime.CallersFrames([]uintptr{pc}).Next()
	// A function's name is its package's path, a dot, and its name within the package.
	slash := strings.LastIndex(f.Function, "/")
	pkg, _, _ := strings.Cut(f.Function[slash+1:], ".")
	pkg = f.Function[:slash+1] + pkg
	return strings.HasPrefix(pkg, kplaneModule) && !strings.HasSuffix(pkg, "_test")
}

// classicHandler writes records as slog's own default handler does ("INFO message k=v"), and
// the log package's lines unchanged, through out: the log package's writer, prefix and flags
// as they were before slog.SetDefault changed them.
type classicHandler struct {
	out  *classicOut
	text slog.Handler // writes the attributes alone into out.buf
}

type classicOut struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	logger *log.Logger
}

func newClassicHandler(l *log.Logger) *classicHandler {
	out := &classicOut{logger: l}
	attrsOnly := func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
			return slog.Attr{}
		}
		return a
	}
	return &classicHandler{out: out, text: slog.NewTextHandler(&out.buf, &slog.HandlerOptions{ReplaceAttr: attrsOnly})}
}

func (c *classicHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelInfo
}

func (c *classicHandler) Handle(ctx context.Context, r slog.Record) error {
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	if r.PC == 0 {
		return c.out.logger.Output(0, r.Message)
	}
	c.out.buf.Reset()
	if err := c.text.Handle(ctx, r); err != nil {
		return err
	}
	line := r.Level.String() + " " + r.Message
	if attrs := strings.TrimSpace(c.out.buf.String()); attrs != "" {
		line += " " + attrs
	}
	return c.out.logger.Output(0, line)
}

func (c *classicHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &classicHandler{out: c.out, text: c.text.WithAttrs(attrs)}
}

func (c *classicHandler) WithGroup(name string) slog.Handler {
	return &classicHandler{out: c.out, text: c.text.WithGroup(name)}
}
