package agent

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// WatchRailClasses returns a channel that receives a value (at most one pending) whenever a
// RailClass is added, changed or deleted in the informer cache c.
func WatchRailClasses(ctx context.Context, c cache.Cache) (<-chan struct{}, error) {
	inf, err := c.GetInformer(ctx, &nezhav1.RailClass{})
	if err != nil {
		return nil, fmt.Errorf("RailClass informer: %w", err)
	}
	ch := make(chan struct{}, 1)
	poke := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	})
	if err != nil {
		return nil, fmt.Errorf("RailClass event handler: %w", err)
	}
	return ch, nil
}
