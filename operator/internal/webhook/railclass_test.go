package webhook

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configapi "github.com/nezha-project/nezha/operator/api/config/v1alpha1"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// A RailClass asking for a transport the injected runtime lacks is refused, naming
// spec.transport and what the runtime has (the envtest suite runs the same validator behind a
// real apiserver with every transport allowed, for the controllers' rdma cases).
func TestTransportTheRuntimeLacksIsRefused(t *testing.T) {
	v := RailClassValidator{Transports: []nezhav1.Transport{nezhav1.TransportTCP}}
	for _, tr := range []nezhav1.Transport{nezhav1.TransportRDMA, nezhav1.TransportSHARP} {
		rc := &nezhav1.RailClass{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
		rc.Spec.Transport = tr
		rc.Spec.Network.NADRef = &nezhav1.NADReference{Name: "n", Namespace: "ns"}
		_, err := v.ValidateCreate(context.Background(), rc)
		if err == nil || !strings.Contains(err.Error(), `spec.transport: Invalid value: "`+string(tr)+`"`) ||
			!strings.Contains(err.Error(), "it has: tcp;") {
			t.Errorf("%s: want a refusal naming spec.transport, got %v", tr, err)
		}
	}
	for _, tr := range []nezhav1.Transport{nezhav1.TransportTCP} {
		rc := &nezhav1.RailClass{ObjectMeta: metav1.ObjectMeta{Name: "ok"}}
		rc.Spec.Transport = tr
		if _, err := v.ValidateCreate(context.Background(), rc); err != nil {
			t.Errorf("%s refused: %v", tr, err)
		}
	}
	// The runtime built from this tree has all three (rdma and sharp load their libraries at run time).
	def := RailClassValidator{Transports: configapi.DefaultRuntimeTransports()}
	for tr, ok := range map[nezhav1.Transport]bool{nezhav1.TransportTCP: true, nezhav1.TransportRDMA: true, nezhav1.TransportSHARP: true} {
		rc := &nezhav1.RailClass{ObjectMeta: metav1.ObjectMeta{Name: "d"}}
		rc.Spec.Transport = tr
		rc.Spec.Network.NADRef = &nezhav1.NADReference{Name: "n", Namespace: "ns"}
		if _, err := def.ValidateCreate(context.Background(), rc); (err == nil) != ok {
			t.Errorf("default transports, %s: accepted=%v, want %v (%v)", tr, err == nil, ok, err)
		}
	}
}
