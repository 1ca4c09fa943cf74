package prober

import (
	"encoding/json"
	"fmt"
	"io"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// Endpoint is one kind of control endpoint a worker process serves. Both kinds answer the same
// routes (runtime/src/control/rail_routes.h: GET /status, GET /metrics, signed POST
// /rails/{name}/drain|restore) with the same signature, but on their own port and with their
// own /status document.
type Endpoint string

const (
	// RuntimeEndpoint is libnezha's communicator (spec.runtime.integration: collectives):
	// NEZHA_CONTROL_ADDR, port 9402, the runtime's /status (state per rail, rank, pre-flight).
	RuntimeEndpoint Endpoint = "runtime"
	// NCCLPluginEndpoint is the NCCL net plugin (integration: nccl): NEZHA_NCCL_CONTROL_ADDR,
	// port 9434, the plugin's /status (a "drained" flag per rail; docs/nccl.md "Endpoint,
	// metrics and steering").
	NCCLPluginEndpoint Endpoint = "nccl"
)

// Port is the endpoint's port in process 0 of a pod (the operator's contract with the workers,
// operator/README.md "Contract with the workers").
func (e Endpoint) Port() int {
	if e == NCCLPluginEndpoint {
		return nezhav1.NCCLControlPort
	}
	return nezhav1.ControlPort
}

// AgreedAcrossRanks reports whether a drain or restore asked of one process is applied by every
// rank of the job. The communicator agrees on it with every rank (runtime/README.md "Control
// endpoint"); the plugin applies it to the connections of its own process only (each NCCL
// connection is a two-rank engine job: docs/nccl.md "One engine"), so every process that uses
// the rail must be asked.
func (e Endpoint) AgreedAcrossRanks() bool { return e != NCCLPluginEndpoint }

// parse reads the endpoint's /status document.
func (e Endpoint) parse(r io.Reader) (*Report, error) {
	if e == NCCLPluginEndpoint {
		return parsePluginStatus(r)
	}
	return parseStatus(r)
}

// pluginStatus is the NCCL plugin's /status document (runtime/src/nccl/plugin_context.cc,
// statsJson):
//
//	{"rails":[{"name":"r0","bytes_sent":1,"bytes_received":2,"failures":0,"readmissions":0,"drained":false}],"last_failure":""}
//
// The operator reads rails[].name and rails[].drained. The plugin reports no current failure
// state per rail (a rail can be out of one connection and in another), so it never makes a rail
// count as failed; the agents' RailNodes do that.
type pluginStatus struct {
	Rails []struct {
		Name    string `json:"name"`
		Drained *bool  `json:"drained"`
	} `json:"rails"`
}

func parsePluginStatus(r io.Reader) (*Report, error) {
	var st pluginStatus
	if err := json.NewDecoder(r).Decode(&st); err != nil {
		return nil, fmt.Errorf("NCCL plugin /status: %w", err)
	}
	states := make(map[string]string, len(st.Rails))
	for i, rs := range st.Rails {
		if rs.Name == "" {
			return nil, fmt.Errorf("NCCL plugin /status: rails[%d].name is empty", i)
		}
		if rs.Drained == nil {
			return nil, fmt.Errorf("NCCL plugin /status: rails[%d].drained is missing", i)
		}
		if _, dup := states[rs.Name]; dup {
			return nil, fmt.Errorf("NCCL plugin /status: rails[%d].name: %q listed twice", i, rs.Name)
		}
		states[rs.Name] = StateHealthy
		if *rs.Drained {
			states[rs.Name] = StateDrained
		}
	}
	return &Report{Rails: states}, nil
}
