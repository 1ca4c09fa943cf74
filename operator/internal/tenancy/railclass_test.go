package tenancy_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/scheme"
	"github.com/nezha-project/nezha/operator/internal/tenancy"
)

func TestCheckRailClassAllowed(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"team": "vision"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}},
	).Build()
	ctx := context.Background()
	open := &nezhav1.RailClass{ObjectMeta: metav1.ObjectMeta{Name: "open"}}
	fenced := &nezhav1.RailClass{ObjectMeta: metav1.ObjectMeta{Name: "fenced"},
		Spec: nezhav1.RailClassSpec{AllowedNamespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "vision"}}}}
	for _, ns := range []string{"team-a", "team-b"} {
		if err := tenancy.CheckRailClassAllowed(ctx, c, open, ns); err != nil {
			t.Errorf("a RailClass without allowedNamespaces refused %s: %v", ns, err)
		}
	}
	if err := tenancy.CheckRailClassAllowed(ctx, c, fenced, "team-a"); err != nil {
		t.Errorf("the selected namespace was refused: %v", err)
	}
	err := tenancy.CheckRailClassAllowed(ctx, c, fenced, "team-b")
	var notAllowed *tenancy.NotAllowedError
	if !errors.As(err, &notAllowed) || err.Error() != `RailClass "fenced" does not allow namespace "team-b": its spec.allowedNamespaces `+
		`does not select it (an administrator may label the namespace or widen the selector)` {
		t.Errorf("unselected namespace: %v", err)
	}
	bad := fenced.DeepCopy()
	bad.Spec.AllowedNamespaces = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}
	if err := tenancy.CheckRailClassAllowed(ctx, c, bad, "team-a"); err == nil || errors.As(err, &notAllowed) {
		t.Errorf("an invalid selector must be an error naming the field, not a refusal: %v", err)
	}
}
