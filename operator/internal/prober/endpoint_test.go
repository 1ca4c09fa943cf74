package prober

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
)

// The NCCL plugin's /status (runtime/src/nccl/plugin_context.cc statsJson) read as rail states:
// drained or healthy; every malformed document is an error naming the field.
func TestPluginStatusReadsDrainedPerRail(t *testing.T) {
	cases := []struct {
		name, body string
		want       map[string]string
		wantErr    string
	}{
		{"the plugin's document", `{"rails":[` +
			`{"name":"r0","bytes_sent":10,"bytes_received":12,"failures":1,"readmissions":1,"drained":false},` +
			`{"name":"r1","bytes_sent":0,"bytes_received":0,"failures":0,"readmissions":0,"drained":true}],"last_failure":"r1: carrier"}`,
			map[string]string{"r0": StateHealthy, "r1": StateDrained}, ""},
		{"no drained flag", `{"rails":[{"name":"r0"}]}`, nil, "rails[0].drained is missing"},
		{"drained not a bool", `{"rails":[{"name":"r0","drained":"yes"}]}`, nil, "NCCL plugin /status"},
		{"empty name", `{"rails":[{"name":"","drained":false}]}`, nil, "rails[0].name is empty"},
		{"rail listed twice", `{"rails":[{"name":"a","drained":false},{"name":"a","drained":true}]}`, nil, `rails[1].name: "a" listed twice`},
		{"local_world_size zero", `{"rails":[],"local_rank":0,"local_world_size":0}`, nil, "local_world_size: 0 is outside 1..4096"},
		{"local_world_size absurd", `{"rails":[],"local_world_size":100000}`, nil, "local_world_size: 100000 is outside 1..4096"},
		{"local_world_size not a number", `{"rails":[],"local_world_size":"8"}`, nil, "NCCL plugin /status"},
		{"local_rank negative", `{"rails":[],"local_rank":-1,"local_world_size":2}`, nil, "local_rank: -1 is outside 0..local_world_size-1 (1)"},
		{"local_rank not below the size", `{"rails":[],"local_rank":2,"local_world_size":2}`, nil, "local_rank: 2 is outside"},
		{"local_rank without a size", `{"rails":[],"local_rank":1}`, nil, "local_rank: 1 is outside 0..local_world_size-1 (0)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := parsePluginStatus(strings.NewReader(tc.body))
			if errorAsWanted(t, err, tc.wantErr) {
				return
			}
			if d := cmp.Diff(tc.want, rep.Rails); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			if rep.Preflight != nil {
				t.Errorf("the plugin runs no pre-flight, got %+v", rep.Preflight)
			}
		})
	}
}

// Which process of its pod answered, and how many the pod runs: a plugin from before those fields
// is one process per pod.
func TestPluginStatusSaysWhichProcessOfHowMany(t *testing.T) {
	for body, want := range map[string][2]int{
		`{"rails":[{"name":"r0","drained":false}],"last_failure":""}`:                                     {0, 1},
		`{"rails":[{"name":"r0","drained":false}],"last_failure":"","local_rank":3,"local_world_size":8}`: {3, 8},
		`{"rails":[],"local_world_size":2}`:                                                               {0, 2},
	} {
		rep, err := parsePluginStatus(strings.NewReader(body))
		if err != nil || rep.LocalRank != want[0] || rep.LocalWorldSize != want[1] {
			t.Errorf("%s: %+v, %v; want process %d of %d", body, rep, err, want[0], want[1])
		}
	}
	rep, err := parseStatus(strings.NewReader(`{"rank":0,"rails":[]}`))
	if err != nil || rep.LocalWorldSize != 1 {
		t.Errorf("the runtime's /status is one process's answer for the whole pod: %+v, %v", rep, err)
	}
}

// FuzzParsePluginStatus: whatever a plugin (or something posing as it) answers, the prober
// returns rail states healthy or drained with non-empty names and a process inside its pod's
// count, or an error; never a panic.
func FuzzParsePluginStatus(f *testing.F) {
	for _, seed := range []string{
		`{"rails":[{"name":"r0","bytes_sent":1,"drained":false},{"name":"r1","drained":true}],"last_failure":"","local_rank":1,"local_world_size":2}`,
		`{"rails":[{"name":"r0","drained":false}]}`, `{"rails":[],"local_rank":5,"local_world_size":2}`,
		`{"rails":[],"local_world_size":-3}`, `{"rails":[{"name":""}]}`, `[]`, `{`, ``,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		rep, err := parsePluginStatus(strings.NewReader(body))
		if err != nil {
			return
		}
		if rep.LocalWorldSize < 1 || rep.LocalWorldSize > maxLocalWorldSize || rep.LocalRank < 0 || rep.LocalRank >= rep.LocalWorldSize {
			t.Fatalf("process %d of %d accepted from %q", rep.LocalRank, rep.LocalWorldSize, body)
		}
		for name, state := range rep.Rails {
			if name == "" || (state != StateHealthy && state != StateDrained) {
				t.Fatalf("rail %q in state %q accepted from %q", name, state, body)
			}
		}
	})
}

// Process k of a pod is asked on the endpoint's port + k; no port beyond the pod's range is
// dialled.
func TestEachProcessIsAskedOnItsOwnPort(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w"}, Status: corev1.PodStatus{PodIP: "10.1.2.3"}}
	url, err := NewHTTP(0).url(pod, NCCLPluginEndpoint, 7, "/status")
	if err != nil || url != "http://10.1.2.3:9441/status" {
		t.Errorf("process 7's URL %q, %v", url, err)
	}
	if NCCLPluginEndpoint.ProcessPort(MaxPluginProcesses-1) != nezhav1.ControlPort+builder.MaxProcessesPerPod-1 {
		t.Errorf("the last plugin port %d is not the top of the control ports the job's NetworkPolicy opens",
			NCCLPluginEndpoint.ProcessPort(MaxPluginProcesses-1))
	}
	for _, k := range []int{-1, MaxPluginProcesses} {
		if _, err := NewHTTP(0).url(pod, NCCLPluginEndpoint, k, "/status"); err == nil || !strings.Contains(err.Error(), "outside 0..31") {
			t.Errorf("process %d: error %v", k, err)
		}
	}
}

// Each endpoint is asked on its own contract port and read with its own document.
func TestEndpointsUseTheirPortAndDocument(t *testing.T) {
	if got := RuntimeEndpoint.Port(); got != nezhav1.ControlPort {
		t.Errorf("runtime port %d", got)
	}
	if got := NCCLPluginEndpoint.Port(); got != nezhav1.NCCLControlPort {
		t.Errorf("plugin port %d", got)
	}
	if !RuntimeEndpoint.AgreedAcrossRanks() || NCCLPluginEndpoint.AgreedAcrossRanks() {
		t.Error("the runtime agrees a drain across ranks, the plugin applies it to its own process")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"rails":[{"name":"r0","drained":true}],"last_failure":""}`))
	}))
	t.Cleanup(srv.Close)
	p, pod := proberFor(srv)
	rep, err := p.Report(context.Background(), pod, NCCLPluginEndpoint, 0)
	if err != nil || rep.Rails["r0"] != StateDrained {
		t.Errorf("plugin endpoint: %+v, %v", rep, err)
	}
	// The same document is no runtime /status: read as one it is refused, naming the field.
	if _, err := p.Report(context.Background(), pod, RuntimeEndpoint, 0); err == nil || !strings.Contains(err.Error(), "rails[0].state") {
		t.Errorf("runtime endpoint given the plugin's document: error %v", err)
	}
	url, err := NewHTTP(0).url(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w"}, Status: corev1.PodStatus{PodIP: "10.1.2.3"}},
		NCCLPluginEndpoint, 0, "/status")
	if err != nil || url != "http://10.1.2.3:9434/status" {
		t.Errorf("plugin URL %q, %v", url, err)
	}
}
