// Package coalesce bounds how often the rail agent writes to the API server while links flap:
// the first change after a quiet period opens a window, every change inside it is absorbed, and
// one signal fires when the window closes. The receiver then publishes the latest state, so the
// latest state wins and a change is published at most one window (plus the write) after it
// happened, however fast the link flaps.
package coalesce

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Coalescer turns bursts of Notify calls into at most one signal per window.
type Coalescer struct {
	clock  clock.WithDelayedExecution
	window time.Duration
	ready  chan struct{}

	mu       sync.Mutex
	open     bool  // a window is open; mu held
	absorbed int64 // notifications merged into an already open window; mu held
}

// New returns a coalescer with the given window; a zero window signals at once.
func New(clk clock.WithDelayedExecution, window time.Duration) *Coalescer {
	return &Coalescer{clock: clk, window: window, ready: make(chan struct{}, 1)}
}

// Ready receives one value when a window closes after one or more Notify calls.
func (c *Coalescer) Ready() <-chan struct{} { return c.ready }

// Notify records a change. It never blocks.
func (c *Coalescer) Notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open {
		c.absorbed++
		return
	}
	if c.window <= 0 {
		c.signal()
		return
	}
	c.open = true
	c.clock.AfterFunc(c.window, c.close)
}

func (c *Coalescer) close() {
	c.mu.Lock()
	c.open = false
	c.mu.Unlock()
	c.signal()
}

// signal leaves at most one pending value: a receiver that is behind publishes once.
func (c *Coalescer) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// Absorbed is how many notifications were merged into an open window (saved writes).
func (c *Coalescer) Absorbed() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.absorbed
}
