package metricreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterSharesAndReports(t *testing.T) {
	reg := prometheus.NewRegistry()
	var errs []error
	first := Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"}), &errs)
	second := Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"}), &errs)
	if first != second || len(errs) != 0 {
		t.Fatalf("a second counter of the same name is not the first one (errs %v)", errs)
	}
	// Same name, another type: refused, reported, and the new collector still usable.
	g := Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "x_total", Help: "other"}), &errs)
	g.Set(1)
	if len(errs) != 1 {
		t.Fatalf("errs %v, want one", errs)
	}
}
