package main

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// scalerParam is one parameter a KEDA scaler reads (keda_params.go lists them, from KEDA's source).
type scalerParam struct {
	Names    []string // the name, and any alias KEDA also takes
	Metadata bool     // read from the trigger's metadata
	Auth     bool     // read from its TriggerAuthentication
	Env      bool     // may be given as <name>FromEnv: a variable of the scale target's container
	Required bool     // neither optional nor defaulted
	Kind     string   // how KEDA parses the text: string, int, float, bool or list (comma-separated)
	Enum     []string // the values KEDA takes, if it names them
}

// checkTrigger checks a trigger's metadata, and the parameters its TriggerAuthentication gives (auth: the
// parameter names; nil when it has none), as KEDA's scaler reads them: every key one it reads, every value
// one it parses, every parameter it needs given.
func checkTrigger(kind string, metadata map[string]string, auth []string) []string {
	params, known := scalerParams[kind]
	if !known {
		return []string{fmt.Sprintf("trigger type %q: not a scaler this checker knows (%s)", kind, knownScalers())}
	}
	var problems []string
	given := map[*scalerParam]bool{}
	keys := make([]string, 0, len(metadata))
	for key := range metadata {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		value := metadata[key]
		p, fromEnv := find(params, key)
		switch {
		case p == nil:
			problems = append(problems, fmt.Sprintf("%s trigger: metadata %q is no parameter of KEDA's %s scaler", kind, key, kind))
			continue
		case fromEnv && !p.Env:
			problems = append(problems, fmt.Sprintf("%s trigger: %q cannot come from the environment", kind, key))
		case !fromEnv && !p.Metadata:
			problems = append(problems, fmt.Sprintf("%s trigger: %q is read from a TriggerAuthentication, not metadata", kind, key))
		}
		given[p] = true
		if !fromEnv {
			if problem := checkValue(p, value); problem != "" {
				problems = append(problems, fmt.Sprintf("%s trigger: %s %s", kind, key, problem))
			}
		}
	}
	for _, name := range auth {
		p, _ := find(params, name)
		if p == nil || !p.Auth {
			problems = append(problems, fmt.Sprintf("%s trigger: authentication parameter %q is none KEDA's %s scaler reads", kind, name, kind))
			continue
		}
		given[p] = true
	}
	for i := range params {
		if params[i].Required && !given[&params[i]] {
			problems = append(problems, fmt.Sprintf("%s trigger: %q is required", kind, params[i].Names[0]))
		}
	}
	return problems
}

func find(params []scalerParam, key string) (*scalerParam, bool) {
	for i := range params {
		for _, name := range params[i].Names {
			if key == name {
				return &params[i], false
			}
			if key == name+"FromEnv" {
				return &params[i], true
			}
		}
	}
	return nil, false
}

func checkValue(p *scalerParam, value string) string {
	items := []string{value}
	if p.Kind == "list" {
		items = strings.Split(value, ",")
	}
	for _, item := range items {
		item = strings.TrimSpace(item)
		var err error
		switch p.Kind {
		case "int":
			_, err = strconv.ParseInt(item, 10, 64)
		case "float":
			_, err = strconv.ParseFloat(item, 64)
		case "bool":
			_, err = strconv.ParseBool(item)
		}
		if err != nil {
			return fmt.Sprintf("%q is not a%s %s", value, map[bool]string{true: "n", false: ""}[p.Kind == "int"], p.Kind)
		}
		if len(p.Enum) > 0 && !slices.Contains(p.Enum, item) {
			return fmt.Sprintf("%q is none of %s", item, strings.Join(p.Enum, ", "))
		}
	}
	return ""
}

func knownScalers() string {
	names := make([]string, 0, len(scalerParams))
	for name := range scalerParams {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
