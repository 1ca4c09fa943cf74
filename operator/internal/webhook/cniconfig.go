// Package webhook holds the operator's admission checks that CEL cannot express: a RailClass's
// spec.network.config must be a CNI configuration, which means parsing JSON.
package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxCNIConfigBytes bounds spec.network.config (a NAD spec.config is a few hundred bytes).
const MaxCNIConfigBytes = 64 << 10

var cniVersionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// ValidateCNIConfig checks that config is a CNI network configuration as Multus reads it from a
// NetworkAttachmentDefinition: one JSON object with a cniVersion string ("1.0.0") and either a
// plugin "type" or a non-empty "plugins" list whose entries each have one. Errors name the field.
func ValidateCNIConfig(path *field.Path, config string) field.ErrorList {
	var errs field.ErrorList
	if len(config) > MaxCNIConfigBytes {
		return append(errs, field.TooLong(path, "", MaxCNIConfigBytes))
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(config)))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return append(errs, field.Invalid(path, abbreviate(config), "not a JSON object: "+err.Error()))
	}
	if dec.More() {
		return append(errs, field.Invalid(path, abbreviate(config), "trailing data after the JSON object"))
	}
	if doc == nil {
		return append(errs, field.Invalid(path, abbreviate(config), "not a JSON object"))
	}
	v, ok := doc["cniVersion"]
	switch s, isString := v.(string); {
	case !ok:
		errs = append(errs, field.Required(path.Key("cniVersion"), "a CNI config needs a cniVersion such as \"1.0.0\""))
	case !isString || !cniVersionRE.MatchString(s):
		errs = append(errs, field.Invalid(path.Key("cniVersion"), short(v), "want a version string such as \"1.0.0\""))
	}
	_, hasType := doc["type"]
	plugins, hasPlugins := doc["plugins"]
	switch {
	case hasType && hasPlugins:
		errs = append(errs, field.Invalid(path, abbreviate(config), "a CNI config has either \"type\" (one plugin) or \"plugins\" (a list), not both"))
	case hasType:
		errs = append(errs, validateType(path.Key("type"), doc["type"])...)
	case hasPlugins:
		list, ok := plugins.([]any)
		if !ok || len(list) == 0 {
			errs = append(errs, field.Invalid(path.Key("plugins"), fmt.Sprintf("%T", plugins), "want a non-empty list of plugin configs"))
			break
		}
		for i, p := range list {
			obj, ok := p.(map[string]any)
			if !ok {
				errs = append(errs, field.Invalid(path.Key("plugins").Index(i), fmt.Sprintf("%T", p), "want a JSON object"))
				continue
			}
			if t, ok := obj["type"]; ok {
				errs = append(errs, validateType(path.Key("plugins").Index(i).Key("type"), t)...)
			} else {
				errs = append(errs, field.Required(path.Key("plugins").Index(i).Key("type"), "every plugin needs a type"))
			}
		}
	default:
		errs = append(errs, field.Required(path.Key("type"), "a CNI config needs a plugin \"type\" (or a \"plugins\" list)"))
	}
	if name, ok := doc["name"]; ok {
		if _, isString := name.(string); !isString {
			errs = append(errs, field.Invalid(path.Key("name"), short(name), "want a string"))
		}
	}
	return errs
}

func validateType(path *field.Path, v any) field.ErrorList {
	s, ok := v.(string)
	if !ok || s == "" || len(s) > 253 {
		return field.ErrorList{field.Invalid(path, short(v), "want the plugin's binary name, e.g. \"macvlan\"")}
	}
	return nil
}

// short shows a JSON value of any size in a bounded error message.
func short(v any) string { return abbreviate(fmt.Sprintf("%v", v)) }

// abbreviate keeps error messages readable (and bounded) for long configs.
func abbreviate(s string) string {
	if len(s) <= 120 {
		return s
	}
	return s[:117] + "..."
}
