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

// MaxPluginProcesses bounds the plugin processes the operator reaches in one pod: process k of a
// pod serves its endpoint on port NCCLControlPort + k (the plugin adds its local rank,
// docs/nccl.md "Steering"), and the job's NetworkPolicy opens the control ports up to
// ControlPort + builder.MaxProcessesPerPod - 1, that is 9434 + 31.
const MaxPluginProcesses = 32

// ProcessPort is the endpoint's port in process k of a pod (k = its local rank).
func (e Endpoint) ProcessPort(process int) int { return e.Port() + process }

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
//	{"rails":[{"name":"r0","bytes_sent":1,"bytes_received":2,"failures":0,"readmissions":0,"drained":false}],"last_failure":"",
//	 "local_rank":0,"local_world_size":8}
//
// The operator reads rails[].name and rails[].drained, and which process of its pod answered
// (local_rank) out of how many (local_world_size: the others serve the ports above). A plugin
// from before those two fields is one process per pod as far as the operator knows. The plugin reports no current failure
// state per rail (a rail can be out of one connection and in another), so it never makes a rail
// count as failed; the agents' RailNodes do that.
type pluginStatus struct {
	Rails []struct {
		Name    string `json:"name"`
		Drained *bool  `json:"drained"`
	} `json:"rails"`
	LocalRank      *int `json:"local_rank"`
	LocalWorldSize *int `json:"local_world_size"`
}

// maxLocalWorldSize is the most processes per pod the plugin accepts (NEZHA_LOCAL_WORLD_SIZE,
// runtime/src/nccl/plugin_context.cc); a document claiming more is not the plugin's.
const maxLocalWorldSize = 4096

// processes checks local_rank and local_world_size and returns them (0 and 1 when absent).
func (st *pluginStatus) processes() (localRank, worldSize int, err error) {
	localRank, worldSize = 0, 1
	if st.LocalWorldSize != nil {
		worldSize = *st.LocalWorldSize
		if worldSize < 1 || worldSize > maxLocalWorldSize {
			return 0, 0, fmt.Errorf("NCCL plugin /status: local_world_size: %d is outside 1..%d", worldSize, maxLocalWorldSize)
		}
	}
	if st.LocalRank != nil {
		localRank = *st.LocalRank
		if localRank < 0 || localRank >= worldSize {
			return 0, 0, fmt.Errorf("NCCL plugin /status: local_rank: %d is outside 0..local_world_size-1 (%d)", localRank, worldSize-1)
		}
	}
	return localRank, worldSize, nil
}

func parsePluginStatus(r io.Reader) (*Report, error) {
	var st pluginStatus
	if err := json.NewDecoder(r).Decode(&st); err != nil {
		return nil, fmt.Errorf("NCCL plugin /status: %w", err)
	}
	localRank, worldSize, err := st.processes()
	if err != nil {
		return nil, err
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
	return &Report{Rails: states, LocalRank: localRank, LocalWorldSize: worldSize}, nil
}
