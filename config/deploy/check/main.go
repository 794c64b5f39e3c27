// Command ragbus-manifest-check reads rendered Kubernetes manifests (helm template's output) and fails,
// naming the object and the field, on anything an API server or KEDA would refuse or silently ignore:
//
//   - every object is decoded strictly into its Kubernetes API type (k8s.io/api) or KEDA's
//     (github.com/kedacore/keda/v2/apis), YAML to JSON by sigs.k8s.io/yaml and JSON to the type by
//     sigs.k8s.io/json as the API server does (field names case-sensitive): an unknown or misspelled
//     field, a duplicate key, a value of the wrong type or a malformed quantity fails; kinds it does not
//     know fail too;
//   - object metadata by the API server's own rules (names, labels, annotations);
//   - KEDA objects against the openAPIV3Schema of KEDA's CRDs (-crds: required fields, enums, minimums),
//     with KEDA's own checks of triggers and replica bounds, and each trigger's metadata and
//     authentication parameters against what KEDA's scaler reads (keda_params.go, from KEDA's source);
//   - references between the objects: selectors that match a workload's pods, scale targets, probe and
//     service ports, volumes, ConfigMaps, Secrets and their keys, TriggerAuthentications; a reference to
//     an object made outside the chart is allowed with -external Kind/name.
//
// Usage: ragbus-manifest-check [-json] [-crds DIR] [-external Kind/name]... FILE... ("-" or none: standard input)
// -json writes the objects, once checked, as one JSON array (what the tests read).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The kinds a chart of ragbus renders, each with the type it must decode into and how its name is checked.
var kinds = map[string]struct {
	make func() any
	name apivalidation.ValidateNameFunc
}{
	"v1/ConfigMap":                           {func() any { return &corev1.ConfigMap{} }, apivalidation.NameIsDNSSubdomain},
	"v1/Secret":                              {func() any { return &corev1.Secret{} }, apivalidation.NameIsDNSSubdomain},
	"v1/Service":                             {func() any { return &corev1.Service{} }, apivalidation.NameIsDNS1035Label},
	"v1/ServiceAccount":                      {func() any { return &corev1.ServiceAccount{} }, apivalidation.NameIsDNSSubdomain},
	"apps/v1/Deployment":                     {func() any { return &appsv1.Deployment{} }, apivalidation.NameIsDNSSubdomain},
	"apps/v1/StatefulSet":                    {func() any { return &appsv1.StatefulSet{} }, apivalidation.NameIsDNSSubdomain},
	"policy/v1/PodDisruptionBudget":          {func() any { return &policyv1.PodDisruptionBudget{} }, apivalidation.NameIsDNSSubdomain},
	"autoscaling/v2/HorizontalPodAutoscaler": {func() any { return &autoscalingv2.HorizontalPodAutoscaler{} }, apivalidation.NameIsDNSSubdomain},
	"networking.k8s.io/v1/NetworkPolicy":     {func() any { return &networkingv1.NetworkPolicy{} }, apivalidation.NameIsDNSSubdomain},
	"keda.sh/v1alpha1/ScaledObject":          {func() any { return &kedav1alpha1.ScaledObject{} }, apivalidation.NameIsDNSSubdomain},
	"keda.sh/v1alpha1/TriggerAuthentication": {func() any { return &kedav1alpha1.TriggerAuthentication{} }, apivalidation.NameIsDNSSubdomain},
}

// object is one decoded document: where it came from, its kind and name, and its typed value.
type object struct {
	where string // file and document number
	kind  string
	name  string
	raw   []byte // the document as JSON
	typed any
}

func (o *object) String() string { return fmt.Sprintf("%s %s/%s", o.where, o.kind, o.name) }

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var external list
	asJSON := flag.Bool("json", false, "once checked, write the objects to standard output as one JSON array")
	crds := flag.String("crds", "", "directory of KEDA's CRD files (default: keda-crds beside this program)")
	flag.Var(&external, "external", "Kind/name of an object made outside these manifests, which they may refer to (repeatable)")
	flag.Parse()
	if *crds == "" {
		if self, err := os.Executable(); err == nil {
			*crds = filepath.Join(filepath.Dir(self), "keda-crds")
		}
	}
	files := flag.Args()
	if len(files) == 0 {
		files = []string{"-"}
	}
	var objects []*object
	var problems []string
	for _, file := range files {
		found, bad := decodeFile(file)
		objects = append(objects, found...)
		problems = append(problems, bad...)
	}
	if len(problems) == 0 { // the checks below need every object decoded
		problems = append(problems, checkKeda(objects, *crds)...)
		problems = append(problems, checkReferences(objects, external)...)
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, p)
		}
		fmt.Fprintf(os.Stderr, "%d problem(s) in %d object(s)\n", len(problems), len(objects))
		os.Exit(1)
	}
	counts := map[string]int{}
	raws := make([]json.RawMessage, 0, len(objects))
	for _, o := range objects {
		counts[o.kind]++
		raws = append(raws, o.raw)
	}
	summary := os.Stdout
	if *asJSON {
		out, err := json.Marshal(raws)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(string(out))
		summary = os.Stderr
	}
	fmt.Fprintf(summary, "%d objects checked against Kubernetes %s types and KEDA %s: %v\n", len(objects), kubeVersion, kedaVersion, counts)
}

func decodeFile(file string) ([]*object, []string) {
	var in io.Reader = os.Stdin
	name := "stdin"
	if file != "-" {
		name = file
		f, err := os.Open(file)
		if err != nil {
			return nil, []string{err.Error()}
		}
		defer f.Close()
		in = f
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(in))
	var objects []*object
	var problems []string
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return objects, append(problems, fmt.Sprintf("%s: %v", name, err))
		}
		o, bad := decode(fmt.Sprintf("%s#%d", name, n), doc)
		if o != nil {
			objects = append(objects, o)
		}
		problems = append(problems, bad...)
	}
	return objects, problems
}

// decode decodes one YAML document strictly into the type of its kind; an empty document is none.
func decode(where string, doc []byte) (*object, []string) {
	raw, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", where, err)}
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, nil // only comments: helm leaves these where a template renders nothing
	}
	var head struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ObjectMeta `json:"metadata"`
	}
	if err := yaml.Unmarshal(raw, &head); err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", where, err)}
	}
	key := head.APIVersion + "/" + head.Kind
	o := &object{where: where, kind: head.Kind, name: head.Metadata.Name, raw: raw}
	kind, known := kinds[key]
	if !known {
		return nil, []string{fmt.Sprintf("%s: %s %s is not a kind this checker knows", where, key, head.Metadata.Name)}
	}
	o.typed = kind.make()
	// Case-sensitive, as the API server decodes: sigs.k8s.io/yaml's UnmarshalStrict goes through
	// encoding/json, which matches field names in any case and took readOnlyRootFileSystem for
	// readOnlyRootFilesystem (the test of a misspelled field found it).
	strict, err := kjson.UnmarshalStrict(raw, o.typed, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", o, err)}
	}
	var problems []string
	for _, e := range strict {
		problems = append(problems, fmt.Sprintf("%s: %v", o, e))
	}
	for _, e := range apivalidation.ValidateObjectMeta(&head.Metadata, false, kind.name, field.NewPath("metadata")) {
		problems = append(problems, fmt.Sprintf("%s: %v", o, e))
	}
	return o, problems
}
