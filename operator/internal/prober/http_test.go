package prober

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// serve starts a fake runtime control endpoint on loopback and returns a pod pointing at it.
func serve(t *testing.T, status int, body string) (*HTTP, *corev1.Pod) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return proberFor(srv)
}

func TestFailedRails(t *testing.T) {
	cases := []struct {
		name    string
		status  int
		body    string
		want    []string
		wantErr string
	}{
		{"all healthy", 200, `{"rank":0,"rails":[{"name":"a","state":"healthy"},{"name":"b","state":"healthy"}]}`, nil, ""},
		{"failed and probing", 200, `{"rank":1,"rails":[{"name":"a","state":"failed"},{"name":"b","state":"probing"},{"name":"c","state":"healthy"}]}`, []string{"a", "b"}, ""},
		{"runtime's full document, drained is no failure", 200,
			`{"rank":0,"world_size":2,"ops":7,"rails":[{"name":"a","state":"drained","bytes":10,"split":0,"ranks_reachable":2},` +
				`{"name":"b","state":"failed","bytes":5,"split":1,"ranks_reachable":0}],"failovers":1,"readmissions":0,"replayed_slices":3}`,
			[]string{"b"}, ""},
		{"unknown state", 200, `{"rails":[{"name":"a","state":"meh"}]}`, nil, `rails[0].state: unknown value "meh"`},
		{"rail listed twice", 200, `{"rails":[{"name":"a","state":"failed"},{"name":"a","state":"healthy"}]}`, nil, `"a" listed twice`},
		{"empty name", 200, `{"rails":[{"name":"","state":"failed"}]}`, nil, "rails[0].name is empty"},
		{"not JSON", 200, `<html>`, nil, "runtime /status"},
		{"server error", 503, ``, nil, "503"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, pod := serve(t, tc.status, tc.body)
			got, err := p.FailedRails(context.Background(), pod)
			if errorAsWanted(t, err, tc.wantErr) {
				return
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// errorAsWanted fails t unless err matches want (a substring; "": no error) and reports whether
// the case ends there (an error was wanted and came).
func errorAsWanted(t *testing.T, err error, want string) bool {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
	return true
}

func TestReportReadsThePreflightSection(t *testing.T) {
	// The runtime's document (runtime/src/comm/control_status.cc) for a rail that failed the
	// start-up check on this rank (reason known) and on its peer (pair only).
	body := `{"rank":1,"world_size":2,"ops":3,"rails":[{"name":"r0","state":"healthy"},{"name":"r1","state":"probing"}],` +
		`"preflight":{"policy":"degrade","result":"failed","peers_checked":1,"seconds":1.5,"failure_count":2,"failures":[` +
		`{"rank":0,"rail":"r1","peer":1,"reason":""},{"rank":1,"rail":"r1","peer":0,"reason":"connect: rail r1 to rank 0: timed out"}]}}`
	p, pod := serve(t, 200, body)
	rep, err := p.Report(context.Background(), pod, RuntimeEndpoint, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := &Report{
		Rails: map[string]string{"r0": StateHealthy, "r1": StateProbing},
		Preflight: &Preflight{Policy: "degrade", Result: PreflightFailed, FailureCount: 2, Failures: []PreflightFailure{
			{Rank: 0, Rail: "r1", Peer: 1}, {Rank: 1, Rail: "r1", Peer: 0, Reason: "connect: rail r1 to rank 0: timed out"}}},
		LocalWorldSize: 1,
	}
	if d := cmp.Diff(want, rep); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	for _, bad := range []struct{ body, want string }{
		{`{"rails":[],"preflight":{"result":"maybe"}}`, `preflight.result: unknown value "maybe"`},
		{`{"rails":[],"preflight":{"result":"failed","failure_count":1,"failures":[{"rank":0,"rail":"","peer":1}]}}`, "preflight.failures[0].rail is empty"},
		{`{"rails":[],"preflight":{"result":"failed","failure_count":0,"failures":[{"rank":0,"rail":"r","peer":1}]}}`, "preflight.failure_count"},
		{`{"rails":[],"preflight":{"result":"failed","failure_count":1,"failures":[{"rank":0,"rail":"r","peer":-2}]}}`, "preflight.failures[0].peer"},
	} {
		p, pod := serve(t, 200, bad.body)
		if _, err := p.Report(context.Background(), pod, RuntimeEndpoint, 0); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want %q", bad.body, err, bad.want)
		}
	}
}

func TestNoPodIP(t *testing.T) {
	_, err := NewHTTP(time.Second).FailedRails(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w"}})
	if err == nil || !strings.Contains(err.Error(), "no IP") {
		t.Errorf("error %v", err)
	}
}

// steerServer stands in for a runtime's control endpoint that wants requests signed with
// credential (checked as runtime/src/control/request_auth.cc does: the signature recomputed, the
// timestamp within 30 s of the server's clock, each nonce once) and records what it was asked.
func steerServer(t *testing.T, credential string) (*HTTP, *corev1.Pod, *[]string) {
	t.Helper()
	var asked []string
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := checkSignature(credential, r, seen); why != "" {
			w.Header().Set("WWW-Authenticate", controlAuthScheme+` realm="nezha-control"`)
			http.Error(w, why, http.StatusUnauthorized)
			return
		}
		asked = append(asked, r.Method+" "+r.URL.Path)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	p, pod := proberFor(srv)
	return p, pod, &asked
}

// proberFor returns a prober whose endpoints (both kinds) are srv, and a pod at srv's address.
func proberFor(srv *httptest.Server) (*HTTP, *corev1.Pod) {
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	n, _ := strconv.Atoi(port)
	p := NewHTTP(2 * time.Second)
	p.Ports = map[Endpoint]int{RuntimeEndpoint: n, NCCLPluginEndpoint: n}
	return p, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0"}, Status: corev1.PodStatus{PodIP: host}}
}

func checkSignature(credential string, r *http.Request, seen map[string]bool) string {
	params := map[string]string{}
	for _, kv := range strings.Split(strings.TrimPrefix(r.Header.Get("Authorization"), controlAuthScheme+" "), ", ") {
		k, v, _ := strings.Cut(kv, "=")
		params[k] = v
	}
	ts, err := strconv.ParseInt(params["ts"], 10, 64)
	nonce := params["nonce"]
	raw, herr := hex.DecodeString(nonce)
	if err != nil || herr != nil {
		return fmt.Sprintf("malformed Authorization %q", r.Header.Get("Authorization"))
	}
	want, _ := SignRequest(credential, r.Method, r.URL.Path, time.Unix(ts, 0), raw)
	switch {
	case want != r.Header.Get("Authorization"):
		return "wrong signature for this job's control endpoint"
	case time.Since(time.Unix(ts, 0)).Abs() > 30*time.Second:
		return "stale request"
	case seen[nonce]:
		return "replayed request"
	}
	seen[nonce] = true
	return ""
}

// The runtime checks the same vector (runtime/tests/control/request_auth_test.cc): a change on
// one side alone breaks one test.
func TestSignRequestMatchesTheRuntimesVector(t *testing.T) {
	cred := ControlCredential([]byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"))
	nonce, _ := hex.DecodeString("00112233445566778899aabbccddeeff")
	got, err := SignRequest(cred, http.MethodPost, "/rails/r1/drain", time.Unix(1700000000, 0), nonce)
	if err != nil {
		t.Fatal(err)
	}
	want := "Nezha-HMAC-SHA256 ts=1700000000, nonce=00112233445566778899aabbccddeeff, " +
		"sig=ca740fdd1c3209a52ec73220e0d1b8868cb7d4c0542354d49374e730dc4e8f3e"
	if got != want {
		t.Errorf("SignRequest = %s, want %s", got, want)
	}
}

// Each request gets its own nonce, so two identical drains are two different signatures (the
// runtime refuses a repeated one as a replay).
func TestSignedRequestsNeverRepeat(t *testing.T) {
	at := time.Unix(1700000000, 0)
	a, _ := SignRequest("cred", http.MethodPost, "/rails/r1/drain", at, nil)
	b, _ := SignRequest("cred", http.MethodPost, "/rails/r1/drain", at, nil)
	if a == b {
		t.Errorf("two signatures with fresh nonces are equal: %s", a)
	}
}

// A clock far off the runtime's gives a stale timestamp: the runtime's 401 comes back as the error.
func TestSetRailWithAStaleClockIsRefused(t *testing.T) {
	cred := ControlCredential([]byte("token-of-the-job"))
	p, pod, asked := steerServer(t, cred)
	p.Now = func() time.Time { return time.Now().Add(-time.Hour) }
	err := p.SetRail(context.Background(), pod, RuntimeEndpoint, 0, "rail-b", Drain, cred)
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "stale") {
		t.Errorf("stale clock: error %v, want the runtime's 401 naming a stale request", err)
	}
	if len(*asked) != 0 {
		t.Errorf("a stale request reached the runtime: %v", *asked)
	}
}

func TestSetRailPostsWithTheCredential(t *testing.T) {
	cred := ControlCredential([]byte("token-of-the-job"))
	p, pod, asked := steerServer(t, cred)
	ctx := context.Background()
	if err := p.SetRail(ctx, pod, RuntimeEndpoint, 0, "rail-b", Drain, cred); err != nil {
		t.Fatal(err)
	}
	if err := p.SetRail(ctx, pod, RuntimeEndpoint, 0, "rail-b", Restore, cred); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"POST /rails/rail-b/drain", "POST /rails/rail-b/restore"}, *asked); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	err := p.SetRail(ctx, pod, RuntimeEndpoint, 0, "rail-b", Drain, ControlCredential([]byte("another job's token")))
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "wrong signature") {
		t.Errorf("wrong credential: error %v, want the runtime's 401 and its words", err)
	}
	for _, bad := range []struct {
		rail   string
		action Action
		want   string
	}{
		{"", Drain, "rail name"}, {"a/b", Drain, "rail name"}, {"a?x", Restore, "rail name"},
		{"rail-b", "explode", `rail action "explode"`},
	} {
		if err := p.SetRail(ctx, pod, RuntimeEndpoint, 0, bad.rail, bad.action, cred); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("SetRail(%q, %q): error %v, want %q", bad.rail, bad.action, err, bad.want)
		}
	}
	if len(*asked) != 2 {
		t.Errorf("refused requests reached the runtime: %v", *asked)
	}
}

// FuzzParseStatus: whatever a worker's runtime (or something posing as it) answers, the prober
// returns known rail states or an error, never a panic, and never an empty rail name.
func FuzzParseStatus(f *testing.F) {
	for _, seed := range []string{
		`{"rank":0,"rails":[{"name":"r0","state":"healthy"},{"name":"r1","state":"failed"}]}`,
		`{"rank":1,"rails":[{"name":"r0","state":"probing"},{"name":"r1","state":"drained"}]}`,
		`{"rails":[{"name":"","state":"failed"}]}`, `{"rails":[{"state":"exploded"}]}`, `[]`, `{`, ``,
		`{"rails":[],"preflight":{"policy":"degrade","result":"failed","failure_count":1,"failures":[{"rank":1,"rail":"r1","peer":0,"reason":"connect: timed out"}]}}`,
		`{"rails":[],"preflight":{"result":"maybe"}}`, `{"rails":[],"preflight":{"result":"failed","failures":[{"rank":-1,"rail":""}]}}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		rep, err := parseStatus(strings.NewReader(body))
		if err != nil {
			return
		}
		states := rep.Rails
		if p := rep.Preflight; p != nil {
			if p.FailureCount < len(p.Failures) {
				t.Fatalf("failure_count below the list accepted from %q", body)
			}
			for _, f := range p.Failures {
				if f.Rank < 0 || f.Peer < -1 || f.Rail == "" {
					t.Fatalf("bad pre-flight pair %+v accepted from %q", f, body)
				}
			}
		}
		for name, state := range states {
			if name == "" {
				t.Fatalf("empty rail name accepted from %q", body)
			}
			if state != StateHealthy && state != StateFailed && state != StateProbing && state != StateDrained {
				t.Fatalf("unknown state %q accepted from %q", state, body)
			}
		}
	})
}
