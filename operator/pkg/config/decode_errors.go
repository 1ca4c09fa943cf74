package config

import (
	"encoding/json"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	configapi "github.com/nezha-project/nezha/operator/api/config/v1alpha1"
)

// checkTypeMeta names a missing or wrong apiVersion or kind: the scheme's own message for them
// ("no kind is registered ...") does not say which line of the file is wrong.
func checkTypeMeta(raw []byte) field.ErrorList {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(raw, &tm); err != nil {
		return nil // not a document at all: the decoder says why
	}
	var errs field.ErrorList
	errs = append(errs, checkTypeField(field.NewPath("apiVersion"), tm.APIVersion, configapi.GroupVersion.String())...)
	errs = append(errs, checkTypeField(field.NewPath("kind"), tm.Kind, "Configuration")...)
	return errs
}

func checkTypeField(path *field.Path, got, want string) field.ErrorList {
	switch got {
	case want:
		return nil
	case "":
		return field.ErrorList{field.Required(path, "want "+want)}
	default:
		return field.ErrorList{field.NotSupported(path, got, []string{want})}
	}
}

// locateDecodeError finds the field whose value could not be decoded. encoding/json names the
// field for a wrong JSON type but not when the type's own decoder refuses the value (a duration
// such as "ten"), so each value of the document is decoded again into its field's type, the
// deepest failing one winning. nil: no single field is at fault.
func locateDecodeError(raw []byte) *field.Error {
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil
	}
	return badValue(doc, reflect.TypeOf(configapi.Configuration{}), nil)
}

func badValue(value any, t reflect.Type, path *field.Path) *field.Error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if obj, ok := value.(map[string]any); ok && t.Kind() == reflect.Struct {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			child, present := obj[name]
			if name == "" || !present {
				continue
			}
			if e := badValue(child, f.Type, path.Child(name)); e != nil {
				return e
			}
		}
	}
	if path == nil {
		return nil
	}
	js, err := json.Marshal(value)
	if err != nil {
		return nil
	}
	if err := json.Unmarshal(js, reflect.New(t).Interface()); err != nil {
		return field.Invalid(path, value, err.Error())
	}
	return nil
}
