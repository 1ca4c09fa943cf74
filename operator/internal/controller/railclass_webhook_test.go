package controller_test

import (
	"context"
	"strings"
	"testing"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// TestRailClassConfigValidatedAtAdmission: a RailClass whose network.config is not a CNI config
// is refused by the real apiserver (through the operator's webhook) with the field named; a good
// one is accepted.
func TestRailClassConfigValidatedAtAdmission(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	for _, tc := range []struct{ name, config, want string }{
		{"notjson", `{"cniVersion": "1.0.0", type: macvlan}`, "spec.network.config: Invalid value"},
		{"noversion", `{"type": "macvlan", "master": "eth1"}`, "spec.network.config[cniVersion]: Required value"},
		{"notype", `{"cniVersion": "1.0.0", "master": "eth1"}`, "spec.network.config[type]: Required value"},
	} {
		rc := tu.MakeRailClass(ns + "-" + tc.name).Obj()
		rc.Spec.Network.Config = tc.config
		err := k8s.Create(ctx, rc)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want the apiserver to refuse it with %q, got %v", tc.name, tc.want, err)
		}
	}
	ok := tu.MakeRailClass(ns + "-ok").Obj()
	if err := k8s.Create(ctx, ok); err != nil {
		t.Fatalf("a valid RailClass was refused: %v", err)
	}
	ok.Spec.Network.Config = `{"cniVersion": "1.0.0"}`
	if err := k8s.Update(ctx, ok); err == nil || !strings.Contains(err.Error(), "[type]") {
		t.Fatalf("an update breaking the config must be refused, got %v", err)
	}
}

// TestRailClassTransportTheRuntimeLacksIsRefused: this tree's runtime has only tcp, so a RailClass
// asking for rdma or sharp is refused at admission, naming spec.transport.
func TestRailClassTransportTheRuntimeLacksIsRefused(t *testing.T) {
	ns := newNamespace(t)
	for _, tr := range []nezhav1.Transport{nezhav1.TransportRDMA, nezhav1.TransportSHARP} {
		rc := tu.MakeRailClass(ns + "-" + string(tr)).Obj()
		rc.Spec.Transport = tr
		err := k8s.Create(context.Background(), rc)
		if err == nil || !strings.Contains(err.Error(), "spec.transport: Invalid value: \""+string(tr)+"\"") ||
			!strings.Contains(err.Error(), "it has: tcp") {
			t.Errorf("%s: want a refusal naming spec.transport, got %v", tr, err)
		}
	}
}
