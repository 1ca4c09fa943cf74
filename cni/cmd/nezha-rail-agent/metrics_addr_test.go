package main

import (
	"strings"
	"testing"
)

// TestMetricsListenOnlyOnTheNodeAddress: the agent runs in the host network, so ":9403" would
// listen on the rail interfaces too; with the node's address it listens there only.
func TestMetricsListenOnlyOnTheNodeAddress(t *testing.T) {
	for _, c := range []struct{ addr, ip, want string }{
		{":9403", "10.0.0.5", "10.0.0.5:9403"},
		{":9403", "fd00::5", "[fd00::5]:9403"},
		{":9403", "", ":9403"},
		{"0", "10.0.0.5", "0"},
	} {
		if got, err := metricsListenAddress(c.addr, c.ip); err != nil || got != c.want {
			t.Errorf("metricsListenAddress(%q, %q) = %q, %v; want %q", c.addr, c.ip, got, err, c.want)
		}
	}
	if _, err := metricsListenAddress(":9403", "node-a"); err == nil || !strings.Contains(err.Error(), "--metrics-bind-ip") {
		t.Errorf("a bad IP must be an error naming the flag, got %v", err)
	}
}
