package agent

import (
	"fmt"
	"os"
	"time"
)

// Tunables of the rail agent. Each is declared once here with its environment variable and
// default; the command line flag of the same meaning overrides the environment.
const (
	// EnvCoalesceWindow bounds RailNode writes while links flap: changes inside one window make
	// one write (flag --coalesce-window).
	EnvCoalesceWindow     = "NEZHA_AGENT_COALESCE_WINDOW"
	DefaultCoalesceWindow = 200 * time.Millisecond

	// EnvResyncPeriod is how often the agent re-reads every link (error counters change without
	// link events) and rewrites the RailNode, refreshing observedTime (flag --resync-period).
	EnvResyncPeriod     = "NEZHA_AGENT_RESYNC_PERIOD"
	DefaultResyncPeriod = 30 * time.Second

	// EnvMaxRetryBackoff caps the exponential backoff of failed RailNode writes, and so how long
	// after the API server returns the latest state is written (flag --max-retry-backoff).
	EnvMaxRetryBackoff     = "NEZHA_AGENT_MAX_RETRY_BACKOFF"
	DefaultMaxRetryBackoff = 5 * time.Second

	// firstRetryBackoff is where the backoff starts; it doubles up to the cap.
	firstRetryBackoff = 200 * time.Millisecond
)

// Options configure an Agent.
type Options struct {
	// NodeName is the node this agent runs on; the RailNode has the same name.
	NodeName string
	// NetNSPath is the network namespace to watch; "" watches the agent's own (the host's, as a
	// hostNetwork DaemonSet). Tests point it at a throw-away namespace.
	NetNSPath string
	// SysClassNet is the /sys/class/net directory used to resolve PCI addresses.
	SysClassNet string
	// AgentVersion is written to status.agentVersion.
	AgentVersion    string
	CoalesceWindow  time.Duration
	ResyncPeriod    time.Duration
	MaxRetryBackoff time.Duration
}

// Validate names the first bad field.
func (o *Options) Validate() error {
	switch {
	case o.NodeName == "":
		return fmt.Errorf("node name is empty: set --node-name (the DaemonSet passes spec.nodeName)")
	case o.CoalesceWindow < 0 || o.CoalesceWindow > time.Second:
		return fmt.Errorf("coalesce window %v is outside 0..1s (%s): a RailNode must follow a link within 1 s", o.CoalesceWindow, EnvCoalesceWindow)
	case o.ResyncPeriod < time.Second:
		return fmt.Errorf("resync period %v is below 1s (%s)", o.ResyncPeriod, EnvResyncPeriod)
	case o.MaxRetryBackoff < firstRetryBackoff:
		return fmt.Errorf("max retry backoff %v is below %v (%s)", o.MaxRetryBackoff, firstRetryBackoff, EnvMaxRetryBackoff)
	}
	return nil
}

// DurationFromEnv returns the duration in env, or def when env is unset. A malformed value is an
// error naming the variable, never a silent fallback.
func DurationFromEnv(env string, def time.Duration) (time.Duration, error) {
	v, ok := os.LookupEnv(env)
	if !ok || v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("environment variable %s=%q: %w", env, v, err)
	}
	return d, nil
}
