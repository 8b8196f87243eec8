package workqueue

// Option configures a queue at construction.
type Option func(*options)

type options struct {
	name    string
	clock   Clock
	metrics *Metrics
}

// WithName names the queue. A named queue reports metrics labelled name=<name> (to the Metrics
// given by WithMetrics, else to the package default registered with Prometheus' default
// registerer); an unnamed queue reports none. Two queues with one name share their series, as in
// Kubernetes, so names should be unique within a process.
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithClock replaces the wall clock, for tests that drive AddAfter and the metrics by hand.
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithMetrics sends a named queue's metrics to m instead of the package default. It has no effect
// on an unnamed queue.
func WithMetrics(m *Metrics) Option { return func(o *options) { o.metrics = m } }

func buildOptions(opts []Option) options {
	o := options{clock: realClock{}}
	for _, opt := range opts {
		opt(&o)
	}
	if o.clock == nil {
		o.clock = realClock{}
	}
	return o
}
