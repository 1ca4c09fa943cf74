// Package listenertest opens the connections a listener on a shared network must survive — one
// that closes at once, one that sends random bytes, one that sends half an HTTP request, and
// several that connect and stay idle — so a test can show the listener still answers its real
// clients while they are open.
package listenertest

import (
	"math/rand"
	"net"
	"testing"
	"time"
)

// Abuse opens the stray connections to addr and keeps the slow ones open until the test ends.
func Abuse(t testing.TB, addr string, idle int) {
	t.Helper()
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	_ = dial().Close()
	junk := make([]byte, 512)
	rng := rand.New(rand.NewSource(1))
	_, _ = rng.Read(junk)
	_, _ = dial().Write(junk)
	_, _ = dial().Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Half: "))
	for i := 0; i < idle; i++ {
		dial()
	}
}
