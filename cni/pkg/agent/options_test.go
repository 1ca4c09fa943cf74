package agent

import (
	"strings"
	"testing"
	"time"
)

func validOptions() Options {
	return Options{NodeName: "n", CoalesceWindow: DefaultCoalesceWindow, ResyncPeriod: DefaultResyncPeriod, MaxRetryBackoff: DefaultMaxRetryBackoff}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*Options)
		wantErr string
	}{
		{"defaults", func(*Options) {}, ""},
		{"no node", func(o *Options) { o.NodeName = "" }, "--node-name"},
		{"window above 1s", func(o *Options) { o.CoalesceWindow = 2 * time.Second }, EnvCoalesceWindow},
		{"negative window", func(o *Options) { o.CoalesceWindow = -time.Millisecond }, EnvCoalesceWindow},
		{"tiny resync", func(o *Options) { o.ResyncPeriod = time.Millisecond }, EnvResyncPeriod},
		{"tiny backoff", func(o *Options) { o.MaxRetryBackoff = time.Millisecond }, EnvMaxRetryBackoff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := validOptions()
			tc.mutate(&o)
			err := o.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.wantErr)
			}
		})
	}
}

func TestDurationFromEnv(t *testing.T) {
	t.Setenv(EnvCoalesceWindow, "")
	if d, err := DurationFromEnv(EnvCoalesceWindow, time.Second); err != nil || d != time.Second {
		t.Errorf("unset: %v, %v", d, err)
	}
	t.Setenv(EnvCoalesceWindow, "50ms")
	if d, err := DurationFromEnv(EnvCoalesceWindow, time.Second); err != nil || d != 50*time.Millisecond {
		t.Errorf("50ms: %v, %v", d, err)
	}
	t.Setenv(EnvCoalesceWindow, "fast")
	if _, err := DurationFromEnv(EnvCoalesceWindow, time.Second); err == nil || !strings.Contains(err.Error(), EnvCoalesceWindow) {
		t.Errorf("malformed value: %v, want an error naming the variable", err)
	}
}
