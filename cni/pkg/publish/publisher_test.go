package publish

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := nezhav1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func status(rails ...nezhav1.RailInterfaceStatus) nezhav1.RailNodeStatus {
	return nezhav1.RailNodeStatus{Rails: rails, RailCount: int32(len(rails))}
}

// The API server's behaviour that matters here (create, status subresource, conflicts) is the
// fake client's too; envtest runs of the whole agent are in pkg/agent.
func TestPublishCreatesOwnedRailNodeAndKeepsSpec(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1"}}
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(node).WithStatusSubresource(&nezhav1.RailNode{}).Build()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	p := &Publisher{Client: c, NodeName: "n1", AgentVersion: "v1", Clock: clk}
	ctx := context.Background()

	if err := p.Publish(ctx, status(nezhav1.RailInterfaceStatus{Name: "r0", Interface: "eth0", OperState: nezhav1.LinkUp, Carrier: true})); err != nil {
		t.Fatal(err)
	}
	rn := &nezhav1.RailNode{}
	if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, rn); err != nil {
		t.Fatal(err)
	}
	if len(rn.OwnerReferences) != 1 || rn.OwnerReferences[0].UID != "uid-1" || rn.OwnerReferences[0].Kind != "Node" {
		t.Errorf("owner references %+v, want the Node", rn.OwnerReferences)
	}
	cond := rn.Status.Conditions[0]
	if rn.Status.AgentVersion != "v1" || !rn.Status.ObservedTime.Time.Equal(time.Unix(1000, 0)) || cond.Status != metav1.ConditionTrue {
		t.Errorf("status %+v", rn.Status)
	}

	// An administrator quarantines a rail; the agent's next write must not undo it, and the
	// condition keeps its transition time while it stays True.
	rn.Spec.QuarantinedRails = []string{"r0"}
	if err := c.Update(ctx, rn); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute)
	if err := p.Publish(ctx, status(nezhav1.RailInterfaceStatus{Name: "r0", Interface: "eth0", OperState: nezhav1.LinkDown})); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, rn); err != nil {
		t.Fatal(err)
	}
	if len(rn.Spec.QuarantinedRails) != 1 || rn.Status.Rails[0].OperState != nezhav1.LinkDown {
		t.Errorf("after second publish: spec %+v status %+v", rn.Spec, rn.Status.Rails)
	}
	if got := rn.Status.Conditions[0].LastTransitionTime; !got.Time.Equal(cond.LastTransitionTime.Time) {
		t.Errorf("condition transition time moved from %v to %v without a change", cond.LastTransitionTime, got)
	}
}

func TestPublishWithoutNodeAndWithUnresolvedRails(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithStatusSubresource(&nezhav1.RailNode{}).Build()
	p := &Publisher{Client: c, NodeName: "ghost", Clock: clocktesting.NewFakeClock(time.Unix(0, 0))}
	err := p.Publish(context.Background(), status(
		nezhav1.RailInterfaceStatus{Name: "r0", OperState: nezhav1.LinkNotPresent},
		nezhav1.RailInterfaceStatus{Name: "r1", OperState: nezhav1.LinkNotPresent},
	))
	if err != nil {
		t.Fatal(err)
	}
	rn := &nezhav1.RailNode{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "ghost"}, rn); err != nil {
		t.Fatal(err)
	}
	cond := rn.Status.Conditions[0]
	if len(rn.OwnerReferences) != 0 || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonSomeUnresolved || cond.Message != "rails without a host interface: r0, r1" {
		t.Errorf("owners %+v condition %+v", rn.OwnerReferences, cond)
	}
}

func TestPublishRetriesConflictsAndReturnsOtherErrors(t *testing.T) {
	conflicts := 2
	unavailable := false
	base := fake.NewClientBuilder().WithScheme(scheme(t)).WithStatusSubresource(&nezhav1.RailNode{})
	c := base.WithInterceptorFuncs(interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if unavailable {
				return apierrors.NewServiceUnavailable("apiserver down")
			}
			if conflicts > 0 {
				conflicts--
				return apierrors.NewConflict(schema.GroupResource{Group: "nezha.io", Resource: "railnodes"}, obj.GetName(), nil)
			}
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
	}).Build()
	p := &Publisher{Client: c, NodeName: "n", Clock: clocktesting.NewFakeClock(time.Unix(0, 0))}
	if err := p.Publish(context.Background(), status()); err != nil {
		t.Fatalf("two conflicts then success: %v", err)
	}
	unavailable = true
	if err := p.Publish(context.Background(), status()); err == nil || !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("unavailable API server: %v, want the error back for the caller's backoff", err)
	}
}
