// Package metricreg registers Prometheus collectors the way kplane's components share them.
package metricreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg and returns the collector to use: c itself, or the collector
// of the same type already registered under its name, so that components sharing a registry
// (two controllers, one proxier per simulated node) share their metrics. Any other failure is
// appended to errs and c is returned unregistered: metrics never stop a component.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C, errs *[]error) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	*errs = append(*errs, err)
	return c
}
