package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// CacheAndClientOptions narrow what the manager caches, shared by main and the envtest suite
// so tests run with the production cache: only the operator's own pods are cached (caching every
// pod of a big cluster costs memory and buys nothing) and Secrets are never cached (the operator
// may only get and create them). Cached objects carry no managedFields.
func CacheAndClientOptions(o ctrl.Options, s *runtime.Scheme) ctrl.Options {
	o.Scheme = s
	o.Cache = cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{nezhav1.ManagedByLabel: nezhav1.ManagedByValue})},
	},
		// managedFields are server-side apply bookkeeping the operator never reads; dropping them
		// from the cache saves a good share of its memory with 10,000 worker pods cached.
		DefaultTransform: cache.TransformStripManagedFields(),
	}
	o.Client = client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
	return o
}
