package userspace

import (
	"errors"
	"log/slog"
	"syscall"

	"github.com/kplane/kplane/proxy"
)

// Reasons passed to proxy.State.Report (short, stable: the proxy uses them as metric labels).
const (
	reasonUnsupportedProtocol = "unsupported-protocol"
	reasonPortInUse           = "port-in-use"
	reasonAddressNotAvailable = "address-not-available"
	reasonListenFailed        = "listen-failed"
)

// problems collects, during one Apply, what keeps service ports from being served, so that
// each port's problems reach proxy.State.Report as one report. The proxy keeps one report per
// port and logs it again when it differs, so two separate reports for one port (two addresses
// failing) would be logged at every sync.
type problems struct {
	// reporting: the State has a Problems callback, which logs and counts what it is given;
	// the proxier's own log lines then go to debug level, so that each problem is logged once.
	reporting bool
	byPort    map[proxy.ServicePortName][]problem
}

type problem struct {
	reason string
	err    error
}

func (ps *problems) add(name proxy.ServicePortName, reason string, err error) {
	if ps.byPort == nil {
		ps.byPort = make(map[proxy.ServicePortName][]problem)
	}
	ps.byPort[name] = append(ps.byPort[name], problem{reason: reason, err: err})
}

// logLevel is the level of the proxier's own line about a problem.
func (ps *problems) logLevel() slog.Level {
	if ps.reporting {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// reportTo sends one report per service port: the first problem's reason and every error.
func (ps *problems) reportTo(s proxy.State) {
	for _, name := range sortedNames(ps.byPort) {
		list := ps.byPort[name]
		errs := make([]error, len(list))
		for i, pr := range list {
			errs[i] = pr.err
		}
		s.Report(name, list[0].reason, errors.Join(errs...))
	}
}

// listenReason classifies a failure to listen.
func listenReason(err error) string {
	switch {
	case errors.Is(err, syscall.EADDRINUSE), errors.Is(err, errAddressTaken):
		return reasonPortInUse
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return reasonAddressNotAvailable
	}
	return reasonListenFailed
}

// errAddressTaken: another service port of the same State has the address.
var errAddressTaken = errors.New("address taken by another service port")
