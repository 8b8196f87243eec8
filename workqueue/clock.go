package workqueue

import "time"

// Clock is the time source of a queue: Now for timestamps, NewTimer for AddAfter's single timer
// and the periodic metrics update. Tests pass a clock they can step by hand (WithClock).
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a Clock. C delivers the time once the timer fires. Reset
// re-arms it for d from now and Stop disarms it; after either, no value from an earlier arming is
// delivered (the Go 1.23 time.Timer contract).
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }
