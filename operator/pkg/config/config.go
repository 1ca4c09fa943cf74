// Package config loads the nezha-operator's configuration file (config.nezha.io/v1alpha1
// Configuration, operator/api/config/v1alpha1): decoded strictly (an unknown or misspelt field is
// an error naming it), defaulted, then validated, so a bad value stops the operator at start
// with the field's path. Like Kueue's and JobSet's pkg/config, it is importable, so the Helm
// chart's tests load the file the chart renders with the operator's own code.
package config

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	configapi "github.com/nezha-project/nezha/operator/api/config/v1alpha1"
)

// Load reads, defaults and validates the configuration file at path.
func Load(path string) (*configapi.Configuration, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	cfg, err := Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("configuration %s: %w", path, err)
	}
	return cfg, nil
}

// Decode reads, defaults and validates a configuration document (YAML or JSON).
func Decode(raw []byte) (*configapi.Configuration, error) {
	if errs := checkTypeMeta(raw); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	scheme := runtime.NewScheme()
	if err := configapi.AddToScheme(scheme); err != nil {
		return nil, err
	}
	// Strict: duplicate and unknown fields are errors, as a typo must not be a silent default.
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	cfg := &configapi.Configuration{}
	obj, gvk, err := codecs.UniversalDecoder(configapi.GroupVersion).Decode(raw, nil, cfg)
	if err != nil {
		if runtime.IsStrictDecodingError(err) {
			return nil, err // unknown or duplicate fields, each named
		}
		if bad := locateDecodeError(raw); bad != nil {
			return nil, bad
		}
		return nil, err
	}
	if obj != cfg {
		return nil, fmt.Errorf("%s is not a %s Configuration", gvk, configapi.GroupVersion)
	}
	if errs := Validate(cfg); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return cfg, nil
}
