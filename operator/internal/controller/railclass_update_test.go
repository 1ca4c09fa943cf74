package controller_test

import (
	"context"
	"fmt"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// TestRailClassChangeUpdatesOwnedNAD: editing a RailClass's CNI config reaches the job's NAD
// (through the RailClass watch), so workers created from then on attach with the new config.
func TestRailClassChangeUpdatesOwnedNAD(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	r0 := ns + "-r0"
	mustCreate(t, tu.MakeRailClass(r0).Obj())
	mustCreate(t, tu.MakeJob("upd", ns, r0).Obj())
	eventually(t, "pod", podExists(ns, "upd-0"))

	rc := &nezhav1.RailClass{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: r0}, rc); err != nil {
		t.Fatal(err)
	}
	rc.Spec.Network.Config = tu.MacvlanConfig("ens9")
	rc.Spec.SRIOVResourceName = sriovResource
	if err := k8s.Update(ctx, rc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "NAD follows RailClass", func() error {
		nad := &nadv1.NetworkAttachmentDefinition{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "upd-" + r0}, nad); err != nil {
			return err
		}
		if nad.Spec.Config != tu.MacvlanConfig("ens9") || nad.Annotations["k8s.v1.cni.cncf.io/resourceName"] != sriovResource {
			return fmt.Errorf("NAD config %s annotations %v", nad.Spec.Config, nad.Annotations)
		}
		return nil
	})
	// A NAD of the same name that the job does not own is never overwritten.
	other := newNamespace(t)
	mustCreate(t, &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "clash-" + r0},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: tu.MacvlanConfig("eth7")}})
	mustCreate(t, tu.MakeJob("clash", other, r0).Obj())
	eventually(t, "conflict", conditionIs(other, "clash", nezhav1.ConditionNetworksReady, metav1.ConditionFalse, "NetworkAttachmentConflict",
		"exists and is not owned by this job"))
	nad := &nadv1.NetworkAttachmentDefinition{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: other, Name: "clash-" + r0}, nad); err != nil || nad.Spec.Config != tu.MacvlanConfig("eth7") {
		t.Errorf("foreign NAD touched: %v %s", err, nad.Spec.Config)
	}
}
