package controller_test

import (
	"context"
	"strings"
	"testing"

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
