package controller_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	runtimeprober "github.com/nezha-project/nezha/operator/internal/prober"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// fakePlugin stands in for one worker process's NCCL plugin endpoint
// (runtime/src/nccl/plugin_context.cc over runtime/src/control/rail_routes.cc): GET /status in
// the plugin's document, POST /rails/{name}/drain|restore only with a fresh signature made with
// the job's control credential, 409 for the last rail, and a drain that applies to this process
// alone (the plugin does not agree it with other processes).
type fakePlugin struct {
	srv        *httptest.Server
	credential string
	// localRank and localWorldSize are what /status says of the pod's processes; nil: nothing,
	// as a plugin from before those fields.
	localRank, localWorldSize *int

	mu      sync.Mutex
	rails   []string
	drained map[string]bool
	asked   []string
	nonces  map[string]bool
}

func (p *fakePlugin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.URL.Path == "/status" && r.Method == http.MethodGet {
		type rail struct {
			Name      string `json:"name"`
			BytesSent uint64 `json:"bytes_sent"`
			Drained   bool   `json:"drained"`
		}
		doc := struct {
			Rails          []rail `json:"rails"`
			LastFailure    string `json:"last_failure"`
			LocalRank      *int   `json:"local_rank,omitempty"`
			LocalWorldSize *int   `json:"local_world_size,omitempty"`
		}{LocalRank: p.localRank, LocalWorldSize: p.localWorldSize}
		for _, name := range p.rails {
			doc.Rails = append(doc.Rails, rail{Name: name, BytesSent: 1 << 20, Drained: p.drained[name]})
		}
		_ = json.NewEncoder(w).Encode(doc)
		return
	}
	name, action, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/rails/"), "/")
	if r.Method != http.MethodPost || (action != "drain" && action != "restore") || !slices.Contains(p.rails, name) {
		http.NotFound(w, r)
		return
	}
	if why := p.refusal(r); why != "" {
		http.Error(w, why, http.StatusUnauthorized)
		return
	}
	p.asked = append(p.asked, action+" "+name)
	if action == "drain" {
		inUse := 0
		for _, other := range p.rails {
			if other != name && !p.drained[other] {
				inUse++
			}
		}
		if inUse == 0 {
			http.Error(w, "draining "+name+" would leave no rail", http.StatusConflict)
			return
		}
	}
	p.drained[name] = action == "drain"
	w.WriteHeader(http.StatusAccepted)
}

// refusal checks the request's signature as the runtime's verifier does
// (runtime/src/control/request_auth.h): HMAC-SHA256 keyed with the control credential over
// "nezha-control-v2", method, path, timestamp and nonce; timestamp within 30 s; nonce unseen.
func (p *fakePlugin) refusal(r *http.Request) string {
	fields := map[string]string{}
	for _, kv := range strings.Split(strings.TrimPrefix(r.Header.Get("Authorization"), "Nezha-HMAC-SHA256 "), ", ") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			fields[k] = v
		}
	}
	ts, err := strconv.ParseInt(fields["ts"], 10, 64)
	if err != nil || fields["nonce"] == "" {
		return "missing signature"
	}
	mac := hmac.New(sha256.New, []byte(p.credential))
	fmt.Fprintf(mac, "nezha-control-v2\n%s\n%s\n%s\n%s", r.Method, r.URL.Path, fields["ts"], fields["nonce"])
	if !hmac.Equal([]byte(hex.EncodeToString(mac.Sum(nil))), []byte(fields["sig"])) {
		return "wrong signature"
	}
	if time.Since(time.Unix(ts, 0)).Abs() > 30*time.Second {
		return "stale request"
	}
	if p.nonces[fields["nonce"]] {
		return "replayed request"
	}
	p.nonces[fields["nonce"]] = true
	return ""
}

func (p *fakePlugin) state() (drained map[string]bool, asked []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	drained = map[string]bool{}
	for k, v := range p.drained {
		if v {
			drained[k] = true
		}
	}
	return drained, slices.Clone(p.asked)
}

// fakePlugins routes the real client (prober.HTTP) to the fake plugin of the pod whose IP it
// dials, process k's on the plugin's contract port + k.
type fakePlugins struct {
	client *runtimeprober.HTTP

	mu     sync.Mutex
	byAddr map[string]*fakePlugin // "IP:port"
	next   int
}

func newFakePlugins() *fakePlugins {
	f := &fakePlugins{byAddr: map[string]*fakePlugin{}}
	var dialer net.Dialer
	f.client = &runtimeprober.HTTP{Client: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			f.mu.Lock()
			p := f.byAddr[addr]
			f.mu.Unlock()
			if p == nil {
				return nil, fmt.Errorf("no NCCL plugin listens on %s", addr)
			}
			return dialer.DialContext(ctx, network, p.srv.Listener.Addr().String())
		},
	}}}
	return f
}

// serve starts a fake plugin for pod (rails all in use), one that does not report the pod's
// processes, and gives the pod an IP it answers on.
func (f *fakePlugins) serve(t *testing.T, ns, pod, credential string, rails ...string) *fakePlugin {
	t.Helper()
	return f.serveProcesses(t, ns, pod, credential, 0, rails, nil)[0]
}

// serveProcesses starts the fake plugins of a pod running size processes (rails all in use), each
// reporting its local rank and size, except those listed silent (nil in the result: nothing
// listens on their port); size 0 is one plugin that reports neither.
func (f *fakePlugins) serveProcesses(t *testing.T, ns, pod, credential string, size int, rails []string, silent []int) []*fakePlugin {
	t.Helper()
	f.mu.Lock()
	f.next++
	ip := fmt.Sprintf("198.18.%d.%d", f.next/250, 1+f.next%250) // RFC 2544 test range
	f.mu.Unlock()
	plugins := make([]*fakePlugin, max(size, 1))
	for k := range plugins {
		if slices.Contains(silent, k) {
			continue
		}
		p := &fakePlugin{credential: credential, rails: rails, drained: map[string]bool{}, nonces: map[string]bool{}}
		if size > 0 {
			p.localRank, p.localWorldSize = ptr.To(k), ptr.To(size)
		}
		p.srv = httptest.NewServer(p)
		t.Cleanup(p.srv.Close)
		f.mu.Lock()
		f.byAddr[net.JoinHostPort(ip, strconv.Itoa(nezhav1.NCCLControlPort+k))] = p
		f.mu.Unlock()
		plugins[k] = p
	}
	obj, err := getPod(ns, pod)
	if err != nil {
		t.Fatal(err)
	}
	obj.Status.PodIP = ip
	if err := k8s.Status().Update(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	return plugins
}

func pluginIs(p *fakePlugin, drained map[string]bool, asked ...string) func() error {
	return func() error {
		gotDrained, gotAsked := p.state()
		if fmt.Sprint(gotDrained) != fmt.Sprint(drained) || !slices.Equal(gotAsked, asked) {
			return fmt.Errorf("plugin drained %v asked %q, want drained %v asked %q", gotDrained, gotAsked, drained, asked)
		}
		return nil
	}
}

// ncclActions reads nezha_operator_rail_actions_total{action, result, endpoint="nccl"}.
func ncclActions(t *testing.T, action, result string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() != "nezha_operator_rail_actions_total" {
			continue
		}
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["action"] == action && labels["result"] == result && labels["endpoint"] == "nccl" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestNCCLJobsRailsAreSteeredThroughEachWorkersPlugin: an NCCL job's rails are steered as a
// collective job's, through the plugin's endpoint (port 9434, signed with the job's credential).
// The plugin applies a drain to its own process only, so every worker on a node whose agent
// reports the rail down is asked, each once, and no other; when the agents report it up again
// every plugin that has it drained is asked to restore. No runtime endpoint is asked: the job
// has none.
func TestNCCLJobsRailsAreSteeredThroughEachWorkersPlugin(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	// Ranks 0 and 1 share n0 (two processes there, as with two GPUs), rank 2 is on n1.
	r0, r1, plugins := ncclJob(t, ns, "nccl", []string{n0, n0, n1}, nezhav1.IntegrationNCCL)
	p0, p1, p2 := plugins[0], plugins[1], plugins[2]
	drainsBefore, restoresBefore := ncclActions(t, "drain", "accepted"), ncclActions(t, "restore", "accepted")

	// n0's agent reports r1 down: both plugins on n0 are asked, n1's is not.
	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", false).Obj())
	eventually(t, "rank 0's plugin drained", pluginIs(p0, map[string]bool{r1: true}, "drain "+r1))
	eventually(t, "rank 1's plugin drained", pluginIs(p1, map[string]bool{r1: true}, "drain "+r1))
	eventually(t, "drained in status", drainedRailsAre(ns, "nccl", fmt.Sprintf("%s node=%s rank=0", r1, n0)))
	eventually(t, "drain event", eventSeen(ns, "nccl", corev1.EventTypeWarning, "RailDrained", fmt.Sprintf(
		"draining rail %q: rail %q down on node %q: interface \"eth2\" operState=down carrier=false; rank 0's NCCL plugin on node %q accepted the drain and applies it to every connection of that process",
		r1, r1, n0, n0)))
	eventually(t, "drains counted", func() error {
		if got := ncclActions(t, "drain", "accepted") - drainsBefore; got != 2 {
			return fmt.Errorf("nezha_operator_rail_actions_total{action=drain,result=accepted,endpoint=nccl} grew by %v, want 2", got)
		}
		return nil
	})

	// n1 quarantines r1 too: its plugin is asked as well, n0's not again.
	quarantineByHand(t, n1, r1)
	eventually(t, "rank 2's plugin drained", pluginIs(p2, map[string]bool{r1: true}, "drain "+r1))
	for i, p := range []*fakePlugin{p0, p1} {
		if err := pluginIs(p, map[string]bool{r1: true}, "drain "+r1)(); err != nil {
			t.Errorf("rank %d: %v", i, err)
		}
	}

	// Both agents report it up and the quarantine is lifted: every plugin restores it.
	setQuarantine(t, n1)
	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	for i, p := range []*fakePlugin{p0, p1, p2} {
		eventually(t, fmt.Sprintf("rank %d's plugin restored", i), pluginIs(p, map[string]bool{}, "drain "+r1, "restore "+r1))
	}
	eventually(t, "nothing drained in status", drainedRailsAre(ns, "nccl"))
	eventually(t, "restore event", eventSeen(ns, "nccl", corev1.EventTypeNormal, "RailRestored",
		fmt.Sprintf("restoring rail %q: every worker's node reports it up again; rank 0's NCCL plugin accepted the restore", r1)))
	if got := ncclActions(t, "restore", "accepted") - restoresBefore; got != 3 {
		t.Errorf("restores counted %v, want 3", got)
	}
	if calls := prober.callsIn(ns); len(calls) != 0 {
		t.Errorf("the runtime endpoint was asked %+v; an NCCL-only job runs no runtime", calls)
	}
}

// ncclJob runs a job with the integrations given, one worker per entry of nodes, each with a
// fake plugin whose rails are all in use (one that does not report the pod's processes), on
// nodes whose agents report every rail up.
func ncclJob(t *testing.T, ns, name string, nodes []string, integrations ...nezhav1.Integration) (string, string, []*fakePlugin) {
	t.Helper()
	r0, r1, plugins := ncclJobOfProcesses(t, ns, name, nodes, 0, nil, integrations...)
	var first []*fakePlugin
	for _, pod := range plugins {
		first = append(first, pod[0])
	}
	return r0, r1, first
}

// ncclJobOfProcesses is ncclJob with size processes per pod, each with its own plugin reporting
// its local rank and the size (0: one plugin that reports neither), but for silent[rank]: the
// processes of that pod whose plugin does not answer (nil in the result). It returns each
// pod's plugins by local rank.
func ncclJobOfProcesses(t *testing.T, ns, name string, nodes []string, size int, silent map[int][]int,
	integrations ...nezhav1.Integration) (string, string, [][]*fakePlugin) {
	t.Helper()
	r0, r1 := runningJobOn(t, ns, name, nodes, tu.MakeJob(name, ns).Integration(integrations...))
	cred := jobCredential(t, ns, name)
	var plugins [][]*fakePlugin
	for rank := range nodes {
		plugins = append(plugins, prober.plugins.serveProcesses(t, ns, fmt.Sprintf("%s-%d", name, rank), cred, size,
			[]string{r0, r1}, silent[rank]))
	}
	for _, node := range slices.Compact(slices.Sorted(slices.Values(nodes))) {
		putRailNode(t, tu.MakeRailNode(node).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	}
	eventually(t, "healthy", conditionIs(ns, name, nezhav1.ConditionRailsHealthy, metav1.ConditionTrue, "AllRailsUp", ""))
	return r0, r1, plugins
}

// TestJobsWithBothIntegrationsAreSteeredThroughBothEndpoints: a job that uses Nezha's collectives
// and NCCL has its rail drained in the runtime (one request, agreed by every rank) and in every
// plugin on the node; the drain is recorded once, and it is forgotten only when both restored it.
func TestJobsWithBothIntegrationsAreSteeredThroughBothEndpoints(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	r0, r1, plugins := ncclJob(t, ns, "both", []string{n0, n1}, nezhav1.IntegrationCollectives, nezhav1.IntegrationNCCL)
	prober.setStates(ns, "both-0", bothHealthy(r0, r1))
	prober.setStates(ns, "both-1", bothHealthy(r0, r1))
	cred := jobCredential(t, ns, "both")

	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", false).Obj())
	eventually(t, "runtime asked", callsAre(ns, steerCall{"both-1", r1, runtimeprober.Drain, cred}))
	eventually(t, "plugin on n1 drained", pluginIs(plugins[1], map[string]bool{r1: true}, "drain "+r1))
	eventually(t, "recorded once", drainedRailsAre(ns, "both", fmt.Sprintf("%s node=%s rank=1", r1, n1)))
	if err := pluginIs(plugins[0], map[string]bool{})(); err != nil {
		t.Errorf("the plugin on n0, whose node reports the rail up, was asked: %v", err)
	}

	// The runtime refuses the restore at first: the rail stays recorded as the operator's.
	prober.refuseOn(ns, "both-1", errors.New("POST http://10.0.0.2:9402/rails/x/restore: 503 Service Unavailable"))
	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	eventually(t, "plugin restored", pluginIs(plugins[1], map[string]bool{}, "drain "+r1, "restore "+r1))
	eventually(t, "runtime's refusal seen", eventSeen(ns, "both", corev1.EventTypeWarning, "RailActionFailed",
		fmt.Sprintf("could not restore rail %q through pod both-1 (runtime)", r1)))
	if err := drainedRailsAre(ns, "both", fmt.Sprintf("%s node=%s rank=1", r1, n1))(); err != nil {
		t.Errorf("forgotten before the runtime restored it: %v", err)
	}
	prober.refuseOn(ns, "both-1", nil)
	eventually(t, "forgotten once both restored", drainedRailsAre(ns, "both"))
	eventually(t, "restore event", eventSeen(ns, "both", corev1.EventTypeNormal, "RailRestored",
		fmt.Sprintf("restoring rail %q: every worker's node reports it up again; rank 1's runtime accepted the restore", r1)))
}

// TestEveryNCCLProcessOfAPodIsSteered: a pod runs one process per GPU, each with its own plugin
// on port 9434 + its local rank; process 0's /status says how many there are. Every process on a
// node whose agent reports the rail down is asked to drain, each once and counted once, none
// elsewhere; and every one that has it drained is asked to restore.
func TestEveryNCCLProcessOfAPodIsSteered(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	r0, r1, pods := ncclJobOfProcesses(t, ns, "procs", []string{n0, n1}, 3, nil, nezhav1.IntegrationNCCL)
	drainsBefore, restoresBefore := ncclActions(t, "drain", "accepted"), ncclActions(t, "restore", "accepted")

	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", false).Obj())
	for k, p := range pods[0] {
		eventually(t, fmt.Sprintf("process %d on n0 drained", k), pluginIs(p, map[string]bool{r1: true}, "drain "+r1))
	}
	eventually(t, "drained in status", drainedRailsAre(ns, "procs", fmt.Sprintf("%s node=%s rank=0", r1, n0)))
	eventually(t, "drains counted per process", func() error {
		if got := ncclActions(t, "drain", "accepted") - drainsBefore; got != 3 {
			return fmt.Errorf("nezha_operator_rail_actions_total{action=drain,result=accepted,endpoint=nccl} grew by %v, want 3", got)
		}
		return nil
	})
	for k, p := range pods[1] {
		if err := pluginIs(p, map[string]bool{})(); err != nil {
			t.Errorf("process %d on n1, whose node reports the rail up: %v", k, err)
		}
	}

	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	for k, p := range pods[0] {
		eventually(t, fmt.Sprintf("process %d on n0 restored", k), pluginIs(p, map[string]bool{}, "drain "+r1, "restore "+r1))
	}
	eventually(t, "nothing drained in status", drainedRailsAre(ns, "procs"))
	if got := ncclActions(t, "restore", "accepted") - restoresBefore; got != 3 {
		t.Errorf("restores counted %v, want 3", got)
	}
}

// TestANCCLProcessThatDoesNotAnswerIsNamedAndTheOthersStillSteered: process 1 of a pod that says
// it runs three does not answer. Processes 0 and 2 are drained all the same; process 1 is named
// in a RailActionFailed Event with its port, and the drain stays on record until it answers.
func TestANCCLProcessThatDoesNotAnswerIsNamedAndTheOthersStillSteered(t *testing.T) {
	ns := newNamespace(t)
	n0 := ns + "-n0"
	r0, r1, pods := ncclJobOfProcesses(t, ns, "quiet", []string{n0}, 3, map[int][]int{0: {1}}, nezhav1.IntegrationNCCL)

	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", false).Obj())
	eventually(t, "process 0 drained", pluginIs(pods[0][0], map[string]bool{r1: true}, "drain "+r1))
	eventually(t, "process 2 drained", pluginIs(pods[0][2], map[string]bool{r1: true}, "drain "+r1))
	eventually(t, "the silent process named", eventSeen(ns, "quiet", corev1.EventTypeWarning, "RailActionFailed", fmt.Sprintf(
		"could not drain rail %q through pod quiet-0 (NCCL plugin (process 1, port %d)): its /status did not answer: ",
		r1, nezhav1.NCCLControlPort+1)))
	eventually(t, "drained in status", drainedRailsAre(ns, "quiet", fmt.Sprintf("%s node=%s rank=0", r1, n0)))

	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	eventually(t, "process 0 restored", pluginIs(pods[0][0], map[string]bool{}, "drain "+r1, "restore "+r1))
	eventually(t, "process 2 restored", pluginIs(pods[0][2], map[string]bool{}, "drain "+r1, "restore "+r1))
	eventually(t, "the silent process named again", eventSeen(ns, "quiet", corev1.EventTypeWarning, "RailActionFailed",
		fmt.Sprintf("could not restore rail %q through pod quiet-0 (NCCL plugin (process 1, port %d))", r1, nezhav1.NCCLControlPort+1)))
	if err := drainedRailsAre(ns, "quiet", fmt.Sprintf("%s node=%s rank=0", r1, n0))(); err != nil {
		t.Errorf("forgotten while a process that may have it drained did not answer: %v", err)
	}
}

// setQuarantine sets node's RailNode spec.quarantinedRails, as an admin would.
func setQuarantine(t *testing.T, node string, rails ...string) {
	t.Helper()
	rn := &nezhav1.RailNode{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: node}, rn); err != nil {
		t.Fatal(err)
	}
	rn.Spec.QuarantinedRails = rails
	if err := k8s.Update(context.Background(), rn); err != nil {
		t.Fatal(err)
	}
}
