// Package publish writes the node's RailNode: created on first use (owned by the Node, so it goes
// when the node goes), then only its status subresource is updated.
package publish

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// ConditionInterfacesResolved is True when every rail of the node has a host interface.
const ConditionInterfacesResolved = "InterfacesResolved"

// Condition reasons and messages are constants so the operator and users can match on them.
const (
	ReasonAllResolved      = "AllInterfacesFound"
	ReasonSomeUnresolved   = "InterfacesMissing"
	messageAllResolved     = "every rail has a host interface on this node"
	messageUnresolvedStart = "rails without a host interface: "
)

// Publisher writes one node's RailNode.
type Publisher struct {
	Client       client.Client
	NodeName     string
	AgentVersion string
	Clock        clock.PassiveClock
}

// Publish makes the node's RailNode show st (its rails and counts), stamping observedTime, the
// agent version and the InterfacesResolved condition. It creates the RailNode if needed and
// retries on write conflicts; other errors are returned for the caller's backoff.
func (p *Publisher) Publish(ctx context.Context, st nezhav1.RailNodeStatus) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rn, err := p.getOrCreate(ctx)
		if err != nil {
			return err
		}
		next := st.DeepCopy()
		next.ObservedTime = ptr.To(metav1.NewTime(p.Clock.Now()))
		next.AgentVersion = p.AgentVersion
		next.Conditions = rn.Status.Conditions
		meta.SetStatusCondition(&next.Conditions, resolvedCondition(st, rn.Generation))
		rn.Status = *next
		if err := p.Client.Status().Update(ctx, rn); err != nil {
			return fmt.Errorf("update RailNode %s status: %w", p.NodeName, err)
		}
		return nil
	})
}

func (p *Publisher) getOrCreate(ctx context.Context) (*nezhav1.RailNode, error) {
	rn := &nezhav1.RailNode{}
	err := p.Client.Get(ctx, client.ObjectKey{Name: p.NodeName}, rn)
	if err == nil {
		return rn, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("get RailNode %s: %w", p.NodeName, err)
	}
	rn = &nezhav1.RailNode{ObjectMeta: metav1.ObjectMeta{Name: p.NodeName}}
	if owner := p.nodeOwnerRef(ctx); owner != nil {
		rn.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	if err := p.Client.Create(ctx, rn); err != nil {
		return nil, fmt.Errorf("create RailNode %s: %w", p.NodeName, err)
	}
	return rn, nil
}

// nodeOwnerRef makes the Node own its RailNode so the garbage collector removes the RailNode with
// the node. Without a readable Node (test clusters, missing RBAC) the RailNode simply has no owner.
func (p *Publisher) nodeOwnerRef(ctx context.Context) *metav1.OwnerReference {
	node := &corev1.Node{}
	if err := p.Client.Get(ctx, client.ObjectKey{Name: p.NodeName}, node); err != nil {
		return nil
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
}

func resolvedCondition(st nezhav1.RailNodeStatus, generation int64) metav1.Condition {
	var missing []string
	for _, r := range st.Rails {
		if r.Interface == "" {
			missing = append(missing, r.Name)
		}
	}
	c := metav1.Condition{
		Type: ConditionInterfacesResolved, Status: metav1.ConditionTrue,
		Reason: ReasonAllResolved, Message: messageAllResolved, ObservedGeneration: generation,
	}
	if len(missing) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonSomeUnresolved
		c.Message = messageUnresolvedStart + strings.Join(missing, ", ")
		if len(c.Message) > 32768 {
			c.Message = c.Message[:32768]
		}
	}
	return c
}
