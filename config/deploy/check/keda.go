package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
	"sigs.k8s.io/yaml"
)

// The CRD files (in KEDA's source, config/crd/bases) whose schemas the KEDA kinds are checked against.
var crdFiles = map[string]string{
	"ScaledObject":          "keda.sh_scaledobjects.yaml",
	"TriggerAuthentication": "keda.sh_triggerauthentications.yaml",
}

var kubeVersion = moduleVersion("k8s.io/api")

func moduleVersion(path string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "?"
	}
	for _, dep := range info.Deps {
		if dep.Path == path {
			if dep.Replace != nil {
				return dep.Replace.Version
			}
			return dep.Version
		}
	}
	return "?"
}

func checkKeda(objects []*object, crds string) []string {
	var problems []string
	schemas := map[string]*spec.Schema{}
	auths := map[string]*kedav1alpha1.TriggerAuthentication{}
	for _, o := range objects {
		if ta, ok := o.typed.(*kedav1alpha1.TriggerAuthentication); ok {
			auths[o.name] = ta
		}
	}
	for _, o := range objects {
		file, isKeda := crdFiles[o.kind]
		if !isKeda {
			continue
		}
		schema, seen := schemas[o.kind]
		if !seen {
			var err error
			if schema, err = crdSchema(filepath.Join(crds, file)); err != nil {
				return append(problems, fmt.Sprintf("%s: KEDA's CRD schema: %v", o, err))
			}
			schemas[o.kind] = schema
		}
		var generic any
		if err := utiljson.Unmarshal(o.raw, &generic); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", o, err))
			continue
		}
		for _, err := range validate.NewSchemaValidator(schema, nil, "", strfmt.Default).Validate(generic).Errors {
			problems = append(problems, fmt.Sprintf("%s: CRD schema: %v", o, err))
		}
		so, ok := o.typed.(*kedav1alpha1.ScaledObject)
		if !ok {
			continue
		}
		for _, err := range []error{
			kedav1alpha1.ValidateTriggers(so.Spec.Triggers),
			kedav1alpha1.CheckReplicaCountBoundsAreValid(so),
			kedav1alpha1.CheckFallbackValid(so),
		} {
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", o, err))
			}
		}
		if so.IsUsingModifiers() {
			if _, err := kedav1alpha1.ValidateAndCompileScalingModifiers(so); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", o, err))
			}
		}
		for i, trigger := range so.Spec.Triggers {
			var params []string
			if ref := trigger.AuthenticationRef; ref != nil && (ref.Kind == "" || ref.Kind == "TriggerAuthentication") {
				if ta := auths[ref.Name]; ta != nil {
					params = authParams(ta)
				}
			}
			for _, p := range checkTrigger(trigger.Type, trigger.Metadata, params) {
				problems = append(problems, fmt.Sprintf("%s: spec.triggers[%d] (%s): %s", o, i, trigger.Name, p))
			}
		}
	}
	return problems
}

// authParams are the parameter names a TriggerAuthentication gives a scaler.
func authParams(ta *kedav1alpha1.TriggerAuthentication) []string {
	var names []string
	for _, ref := range ta.Spec.SecretTargetRef {
		names = append(names, ref.Parameter)
	}
	for _, env := range ta.Spec.Env {
		names = append(names, env.Parameter)
	}
	for _, ref := range ta.Spec.ConfigMapTargetRef {
		names = append(names, ref.Parameter)
	}
	return names
}

// crdSchema is the openAPIV3Schema of the CRD's storage version.
func crdSchema(path string) (*spec.Schema, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w (config/deploy/tools/install copies them beside the program)", err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Storage bool `json:"storage"`
				Schema  struct {
					OpenAPIV3Schema json.RawMessage `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(text, &crd); err != nil {
		return nil, err
	}
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			schema := &spec.Schema{}
			if err := json.Unmarshal(v.Schema.OpenAPIV3Schema, schema); err != nil {
				return nil, err
			}
			return schema, nil
		}
	}
	return nil, fmt.Errorf("%s has no storage version", path)
}
