package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// requestTimeout bounds one API request, so a write to an unreachable API server fails and is
// retried with backoff instead of hanging the loop.
const requestTimeout = 10 * time.Second

// Scheme holds the types the agent reads and writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := nezhav1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewFromConfig builds an agent talking to the API server of cfg: an informer cache of
// RailClasses (which keeps serving the last known classes while the API server is away) and a
// direct client for the RailNode writes. Run starts the cache and waits for it first.
func NewFromConfig(cfg *rest.Config, opts Options, log logr.Logger) (*Agent, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = requestTimeout
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{&nezhav1.RailClass{}: {}}})
	if err != nil {
		return nil, fmt.Errorf("RailClass cache: %w", err)
	}
	writer, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	changed, err := WatchRailClasses(context.Background(), c)
	if err != nil {
		return nil, err
	}
	a, err := New(opts, log, writer, c, changed)
	if err != nil {
		return nil, err
	}
	a.startCache = func(ctx context.Context) error {
		go func() {
			if err := c.Start(ctx); err != nil {
				log.Error(err, "RailClass cache stopped")
			}
		}()
		log.Info("waiting for the RailClass cache to sync")
		if !c.WaitForCacheSync(ctx) {
			return fmt.Errorf("RailClass cache did not sync: %w", ctx.Err())
		}
		return nil
	}
	return a, nil
}
