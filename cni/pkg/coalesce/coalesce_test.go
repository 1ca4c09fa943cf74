package coalesce

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func fired(c *Coalescer) bool {
	select {
	case <-c.Ready():
		return true
	default:
		return false
	}
}

func TestBurstInsideWindowSignalsOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	c := New(clk, 200*time.Millisecond)

	// 50 flaps, 2 ms apart: all inside one 200 ms window.
	for i := 0; i < 50; i++ {
		c.Notify()
		clk.Step(2 * time.Millisecond)
	}
	if fired(c) {
		t.Fatal("signalled before the window closed")
	}
	clk.Step(100 * time.Millisecond) // 200 ms after the first change
	if !fired(c) {
		t.Fatal("no signal when the window closed")
	}
	if fired(c) {
		t.Fatal("signalled twice for one window")
	}
	if got := c.Absorbed(); got != 49 {
		t.Errorf("Absorbed() = %d, want 49", got)
	}
}

func TestLatencyIsBoundedByWindowUnderContinuousFlapping(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	c := New(clk, 200*time.Millisecond)
	signals := 0
	// A link flapping every 10 ms for 1 s: a trailing-edge debounce would never fire; this must
	// fire every window.
	for i := 0; i < 100; i++ {
		c.Notify()
		clk.Step(10 * time.Millisecond)
		if fired(c) {
			signals++
		}
	}
	if signals != 5 {
		t.Errorf("%d signals in 1 s of flapping with a 200 ms window, want 5", signals)
	}
}

func TestQuietAfterSignalOpensNewWindow(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	c := New(clk, 200*time.Millisecond)
	c.Notify()
	clk.Step(200 * time.Millisecond)
	if !fired(c) {
		t.Fatal("first window did not signal")
	}
	clk.Step(time.Second)
	if fired(c) {
		t.Fatal("signal without a change")
	}
	c.Notify()
	clk.Step(199 * time.Millisecond)
	if fired(c) {
		t.Fatal("second window closed early")
	}
	clk.Step(time.Millisecond)
	if !fired(c) {
		t.Fatal("second window did not signal")
	}
}

func TestZeroWindowSignalsAtOnce(t *testing.T) {
	c := New(clocktesting.NewFakeClock(time.Unix(0, 0)), 0)
	c.Notify()
	if !fired(c) {
		t.Fatal("zero window did not signal at once")
	}
}
