// Package prober talks to the control endpoints in a worker — the Nezha runtime's
// (NEZHA_CONTROL_ADDR, port 9402) and the NCCL net plugin's (NEZHA_NCCL_CONTROL_ADDR, port 9434;
// endpoint.go): it reads their own view of the rails, and drains or restores a rail.
//
// Contract (runtime/README.md "Control endpoint"): GET http://<pod IP>:9402/status returns 200 and
//
//	{"rank": 0, "world_size": 2, "ops": 10, "rails": [{"name": "rail0", "state": "healthy", "bytes": 1, ...}], ...}
//
// of which the prober reads rank, rails[].name/state and the "preflight" section (other fields
// are ignored). state is
// "healthy", "failed" (the runtime stopped using the rail and replays its share on the others),
// "probing" (failed, waiting to be re-admitted; counted as failed) or "drained" (an operator
// asked the runtime to stop using a working rail: not a failure, so not counted as failed).
//
// POST /rails/{name}/drain|restore changes the job and is signed per request with the job's
// control credential (ControlCredential, never sent itself):
//
//	Authorization: Nezha-HMAC-SHA256 ts=<unix seconds>, nonce=<32 hex>, sig=<hex HMAC-SHA256>
//
// over "nezha-control-v2\n" METHOD "\n" PATH "\n" ts "\n" nonce (runtime/src/control/request_auth.h).
// The runtime accepts a signature within 30 s of its timestamp and only once, so a sniffed
// request cannot be replayed; it answers 202 and applies the request at its next operation on
// every rank, or 401 with the reason.
package prober

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Rail states in the /status document.
const (
	StateHealthy = "healthy"
	StateFailed  = "failed"
	StateProbing = "probing"
	StateDrained = "drained"
)

// Action is what POST /rails/{name}/{action} asks of the runtime.
type Action string

const (
	// Drain takes a working rail out of the job's split (it keeps its connections).
	Drain Action = "drain"
	// Restore puts a drained rail back.
	Restore Action = "restore"
)

// Status is the /status document.
type Status struct {
	Rank      int32        `json:"rank"`
	Rails     []RailStatus `json:"rails"`
	Preflight *Preflight   `json:"preflight,omitempty"`
}

// Pre-flight results in the /status document (runtime/README.md "Pre-flight").
const (
	PreflightPassed    = "passed"    // every checked pair passed
	PreflightFailed    = "failed"    // some pair failed; the job started without those rails
	PreflightWaiting   = "waiting"   // some pair failed; the runtime holds the start until it passes
	PreflightRecovered = "recovered" // failed at start, every such rail re-admitted since
	PreflightOff       = "off"       // not run (NEZHA_PREFLIGHT=off, or a one-rank job)
)

// Preflight is the runtime's start-up check of every rail: the failing (rank, rail, peer) pairs
// this rank knows of, its own with the reason (at most 32 listed; FailureCount says how many).
type Preflight struct {
	Policy       string             `json:"policy"`
	Result       string             `json:"result"`
	FailureCount int                `json:"failure_count"`
	Failures     []PreflightFailure `json:"failures"`
}

// PreflightFailure is one pair: rank could not use rail with peer (-1: peer not known).
type PreflightFailure struct {
	Rank   int32  `json:"rank"`
	Rail   string `json:"rail"`
	Peer   int32  `json:"peer"`
	Reason string `json:"reason"`
}

// Report is what the operator reads from one runtime: its rails' states and its pre-flight
// check (nil when the runtime does not report one).
type Report struct {
	Rails     map[string]string
	Preflight *Preflight
	// LocalRank is which process of its pod answered, LocalWorldSize how many processes the pod
	// runs: each serves the endpoint on its own port (Endpoint.ProcessPort). Only the NCCL plugin
	// reports them, each plugin being one process's; the runtime's answer is 0 and 1.
	LocalRank, LocalWorldSize int
}

// RailStatus is one rail in the /status document.
type RailStatus struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

// maxBody bounds what the operator reads from a worker.
const maxBody = 1 << 20

// HTTP probes workers over HTTP, on each endpoint's contract port (Endpoint.Port).
type HTTP struct {
	Client *http.Client
	// Ports replaces an endpoint's contract port (tests point it at a local server); nil: the
	// contract's.
	Ports map[Endpoint]int
	// Now is the clock that timestamps signed requests (nil: time.Now).
	Now func() time.Time
}

func (h *HTTP) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// controlAuthScheme names the runtime's per-request signature (runtime/src/control/request_auth.h).
const controlAuthScheme = "Nezha-HMAC-SHA256"

// SignRequest returns the Authorization value for one mutating control request: a fresh random
// nonce (or the one given, for tests), the timestamp at, and the HMAC-SHA256 keyed with the
// control credential over method, path, timestamp and nonce.
func SignRequest(credential, method, path string, at time.Time, nonce []byte) (string, error) {
	if nonce == nil {
		nonce = make([]byte, 16)
		if _, err := rand.Read(nonce); err != nil {
			return "", fmt.Errorf("control request nonce: %w", err)
		}
	}
	ts := strconv.FormatInt(at.Unix(), 10)
	n := hex.EncodeToString(nonce)
	mac := hmac.New(sha256.New, []byte(credential))
	mac.Write([]byte("nezha-control-v2\n" + method + "\n" + path + "\n" + ts + "\n" + n))
	return fmt.Sprintf("%s ts=%s, nonce=%s, sig=%s", controlAuthScheme, ts, n, hex.EncodeToString(mac.Sum(nil))), nil
}

// NewHTTP returns a prober with a short timeout: a runtime that does not answer quickly is
// treated as "no information", never as a failed rail.
func NewHTTP(timeout time.Duration) *HTTP {
	return &HTTP{Client: &http.Client{Timeout: timeout}}
}

// RailStates returns each rail's state in the runtime of pod.
func (h *HTTP) RailStates(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	rep, err := h.Report(ctx, pod, RuntimeEndpoint, 0)
	if err != nil {
		return nil, err
	}
	return rep.Rails, nil
}

// Report implements controller.RuntimeProber: GET /status of endpoint ep in process process of
// pod (0: the one on the contract port).
func (h *HTTP) Report(ctx context.Context, pod *corev1.Pod, ep Endpoint, process int) (*Report, error) {
	url, err := h.url(pod, ep, process, "/status")
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return ep.parse(io.LimitReader(resp.Body, maxBody))
}

// FailedRails returns the rails the runtime in pod stopped using because they failed.
func (h *HTTP) FailedRails(ctx context.Context, pod *corev1.Pod) ([]string, error) {
	states, err := h.RailStates(ctx, pod)
	if err != nil {
		return nil, err
	}
	return Failed(states), nil
}

// SetRail implements controller.RuntimeProber: POST /rails/{rail}/{drain|restore} to endpoint ep
// of process process in pod with the job's control credential. The endpoint answers 202 (the runtime applies it at its next
// operation on every rank; the plugin on every connection of its process).
func (h *HTTP) SetRail(ctx context.Context, pod *corev1.Pod, ep Endpoint, process int, rail string, action Action, credential string) error {
	if action != Drain && action != Restore {
		return fmt.Errorf("rail action %q: want %q or %q", action, Drain, Restore)
	}
	if rail == "" || strings.ContainsAny(rail, "/?#% ") {
		return fmt.Errorf("rail name %q cannot be sent in a control path", rail)
	}
	url, err := h.url(pod, ep, process, "/rails/"+rail+"/"+string(action))
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	auth, err := SignRequest(credential, http.MethodPost, req.URL.Path, h.now(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", auth)
	resp, err := h.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("POST %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func (h *HTTP) url(pod *corev1.Pod, ep Endpoint, process int, path string) (string, error) {
	if pod.Status.PodIP == "" {
		return "", fmt.Errorf("pod %s has no IP yet", pod.Name)
	}
	if process < 0 || process >= MaxPluginProcesses {
		return "", fmt.Errorf("process %d of pod %s: outside 0..%d", process, pod.Name, MaxPluginProcesses-1)
	}
	port, ok := h.Ports[ep]
	if !ok {
		port = ep.Port()
	}
	return "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port+process)) + path, nil
}

// Failed lists, sorted, the rails whose state means the runtime stopped using them because they
// failed ("failed", "probing"); "drained" is an operator's choice, not a failure.
func Failed(states map[string]string) []string {
	var failed []string
	for name, state := range states {
		if state == StateFailed || state == StateProbing {
			failed = append(failed, name)
		}
	}
	sort.Strings(failed)
	return failed
}

func parseStatus(r io.Reader) (*Report, error) {
	var st Status
	if err := json.NewDecoder(r).Decode(&st); err != nil {
		return nil, fmt.Errorf("runtime /status: %w", err)
	}
	if err := checkPreflight(st.Preflight); err != nil {
		return nil, err
	}
	states := make(map[string]string, len(st.Rails))
	for i, rs := range st.Rails {
		switch rs.State {
		case StateHealthy, StateDrained, StateFailed, StateProbing:
		default:
			return nil, fmt.Errorf("runtime /status: rails[%d].state: unknown value %q", i, rs.State)
		}
		if rs.Name == "" {
			return nil, fmt.Errorf("runtime /status: rails[%d].name is empty", i)
		}
		if _, dup := states[rs.Name]; dup {
			return nil, fmt.Errorf("runtime /status: rails[%d].name: %q listed twice", i, rs.Name)
		}
		states[rs.Name] = rs.State
	}
	return &Report{Rails: states, Preflight: st.Preflight, LocalWorldSize: 1}, nil
}

// checkPreflight refuses a pre-flight section the operator could misreport, naming the field.
func checkPreflight(p *Preflight) error {
	if p == nil {
		return nil
	}
	switch p.Result {
	case PreflightPassed, PreflightFailed, PreflightWaiting, PreflightRecovered, PreflightOff:
	default:
		return fmt.Errorf("runtime /status: preflight.result: unknown value %q", p.Result)
	}
	if p.FailureCount < len(p.Failures) {
		return fmt.Errorf("runtime /status: preflight.failure_count: %d is less than the %d failures listed", p.FailureCount, len(p.Failures))
	}
	for i, f := range p.Failures {
		switch {
		case f.Rank < 0:
			return fmt.Errorf("runtime /status: preflight.failures[%d].rank: %d is negative", i, f.Rank)
		case f.Peer < -1:
			return fmt.Errorf("runtime /status: preflight.failures[%d].peer: %d is below -1", i, f.Peer)
		case f.Rail == "":
			return fmt.Errorf("runtime /status: preflight.failures[%d].rail is empty", i)
		}
	}
	return nil
}
