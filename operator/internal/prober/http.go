// Package prober reads the Nezha runtime's own view of its rails from a worker's control
// endpoint (NEZHA_CONTROL_ADDR, port 9402).
//
// Contract (runtime/README.md "Control endpoint"): GET http://<pod IP>:9402/status returns 200 and
//
//	{"rank": 0, "world_size": 2, "ops": 10, "rails": [{"name": "rail0", "state": "healthy", "bytes": 1, ...}], ...}
//
// of which the prober reads rank and rails[].name/state (other fields are ignored). state is
// "healthy", "failed" (the runtime stopped using the rail and replays its share on the others),
// "probing" (failed, waiting to be re-admitted; counted as failed) or "drained" (an operator
// asked the runtime to stop using a working rail: not a failure, so not counted as failed).
package prober

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// Rail states in the /status document.
const (
	StateHealthy = "healthy"
	StateFailed  = "failed"
	StateProbing = "probing"
	StateDrained = "drained"
)

// Status is the /status document.
type Status struct {
	Rank  int32        `json:"rank"`
	Rails []RailStatus `json:"rails"`
}

// RailStatus is one rail in the /status document.
type RailStatus struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

// maxBody bounds what the operator reads from a worker.
const maxBody = 1 << 20

// HTTP probes workers over HTTP. Port defaults to the contract's control port.
type HTTP struct {
	Client *http.Client
	Port   int
}

// NewHTTP returns a prober with a short timeout: a runtime that does not answer quickly is
// treated as "no information", never as a failed rail.
func NewHTTP(timeout time.Duration) *HTTP {
	return &HTTP{Client: &http.Client{Timeout: timeout}, Port: nezhav1.ControlPort}
}

// FailedRails implements controller.RuntimeProber.
func (h *HTTP) FailedRails(ctx context.Context, pod *corev1.Pod) ([]string, error) {
	if pod.Status.PodIP == "" {
		return nil, fmt.Errorf("pod %s has no IP yet", pod.Name)
	}
	url := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(h.Port)) + "/status"
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
	return parseStatus(io.LimitReader(resp.Body, maxBody))
}

func parseStatus(r io.Reader) ([]string, error) {
	var st Status
	if err := json.NewDecoder(r).Decode(&st); err != nil {
		return nil, fmt.Errorf("runtime /status: %w", err)
	}
	var failed []string
	for i, rs := range st.Rails {
		switch rs.State {
		case StateHealthy, StateDrained:
		case StateFailed, StateProbing:
			failed = append(failed, rs.Name)
		default:
			return nil, fmt.Errorf("runtime /status: rails[%d].state: unknown value %q", i, rs.State)
		}
		if rs.Name == "" {
			return nil, fmt.Errorf("runtime /status: rails[%d].name is empty", i)
		}
	}
	return failed, nil
}
