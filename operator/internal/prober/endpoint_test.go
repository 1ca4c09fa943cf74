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
	rep, err := p.Report(context.Background(), pod, NCCLPluginEndpoint)
	if err != nil || rep.Rails["r0"] != StateDrained {
		t.Errorf("plugin endpoint: %+v, %v", rep, err)
	}
	// The same document is no runtime /status: read as one it is refused, naming the field.
	if _, err := p.Report(context.Background(), pod, RuntimeEndpoint); err == nil || !strings.Contains(err.Error(), "rails[0].state") {
		t.Errorf("runtime endpoint given the plugin's document: error %v", err)
	}
	url, err := NewHTTP(0).url(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w"}, Status: corev1.PodStatus{PodIP: "10.1.2.3"}},
		NCCLPluginEndpoint, "/status")
	if err != nil || url != "http://10.1.2.3:9434/status" {
		t.Errorf("plugin URL %q, %v", url, err)
	}
}
