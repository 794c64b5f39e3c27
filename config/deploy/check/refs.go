package main

import (
	"fmt"
	"slices"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// workload is a Deployment or StatefulSet: what other objects select, scale and mount into.
type workload struct {
	o        *object
	replicas *int32
	selector *metav1.LabelSelector
	pod      corev1.PodTemplateSpec
	claims   []string // a StatefulSet's volumeClaimTemplates
	service  string   // a StatefulSet's serviceName
	scaledBy []string // the HPAs and ScaledObjects that target it
}

type index struct {
	byKind    map[string]map[string]*object
	workloads map[string]*workload // "Kind/name"
	external  []string
}

func (ix *index) has(kind, name string) bool {
	return ix.byKind[kind][name] != nil || slices.Contains(ix.external, kind+"/"+name)
}

// keys are the keys of a rendered ConfigMap or Secret; nil for one made outside (not checked).
func (ix *index) keys(kind, name string) []string {
	o := ix.byKind[kind][name]
	if o == nil {
		return nil
	}
	var keys []string
	switch v := o.typed.(type) {
	case *corev1.Secret:
		for k := range v.Data {
			keys = append(keys, k)
		}
		for k := range v.StringData {
			keys = append(keys, k)
		}
	case *corev1.ConfigMap:
		for k := range v.Data {
			keys = append(keys, k)
		}
		for k := range v.BinaryData {
			keys = append(keys, k)
		}
	}
	if keys == nil {
		keys = []string{}
	}
	return keys
}

func checkReferences(objects []*object, external []string) []string {
	ix := &index{byKind: map[string]map[string]*object{}, workloads: map[string]*workload{}, external: external}
	var problems []string
	add := func(o *object, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s: %s", o, fmt.Sprintf(format, args...)))
	}
	for _, o := range objects {
		if ix.byKind[o.kind] == nil {
			ix.byKind[o.kind] = map[string]*object{}
		}
		if ix.byKind[o.kind][o.name] != nil {
			add(o, "a second %s named %q", o.kind, o.name)
		}
		ix.byKind[o.kind][o.name] = o
		switch v := o.typed.(type) {
		case *appsv1.Deployment:
			ix.workloads["Deployment/"+o.name] = &workload{o: o, replicas: v.Spec.Replicas, selector: v.Spec.Selector, pod: v.Spec.Template}
		case *appsv1.StatefulSet:
			w := &workload{o: o, replicas: v.Spec.Replicas, selector: v.Spec.Selector, pod: v.Spec.Template, service: v.Spec.ServiceName}
			for _, c := range v.Spec.VolumeClaimTemplates {
				w.claims = append(w.claims, c.Name)
			}
			ix.workloads["StatefulSet/"+o.name] = w
		}
	}
	for _, w := range sortedWorkloads(ix) {
		problems = append(problems, checkWorkload(ix, w)...)
	}
	for _, o := range objects {
		switch v := o.typed.(type) {
		case *corev1.Service:
			if len(v.Spec.Selector) == 0 {
				continue
			}
			pods := selected(ix, labels.SelectorFromSet(v.Spec.Selector))
			if len(pods) == 0 {
				add(o, "selector %v matches no workload's pods", v.Spec.Selector)
			}
			for _, port := range v.Spec.Ports {
				if port.TargetPort.Type == intstr.String {
					for _, w := range pods {
						if !hasPort(w.pod.Spec, port.TargetPort.StrVal) {
							add(o, "targetPort %q is no container port of %s", port.TargetPort.StrVal, w.o)
						}
					}
				}
			}
		case *policyv1.PodDisruptionBudget:
			if v.Spec.MinAvailable != nil && v.Spec.MaxUnavailable != nil {
				add(o, "minAvailable and maxUnavailable cannot both be set")
			}
			selector, err := metav1.LabelSelectorAsSelector(v.Spec.Selector)
			if err != nil || selector.Empty() {
				add(o, "selector %v: %v", v.Spec.Selector, err)
			} else if len(selected(ix, selector)) == 0 {
				add(o, "selector %v matches no workload's pods", selector)
			}
		case *autoscalingv2.HorizontalPodAutoscaler:
			ref := v.Spec.ScaleTargetRef
			w := target(ix, o, ref.APIVersion, ref.Kind, ref.Name, &problems)
			if v.Spec.MinReplicas != nil && *v.Spec.MinReplicas > v.Spec.MaxReplicas {
				add(o, "minReplicas %d > maxReplicas %d", *v.Spec.MinReplicas, v.Spec.MaxReplicas)
			}
			if w == nil {
				continue
			}
			w.scaledBy = append(w.scaledBy, o.String())
			for _, m := range v.Spec.Metrics {
				if m.Resource == nil || m.Resource.Target.Type != autoscalingv2.UtilizationMetricType {
					continue
				}
				for _, c := range w.pod.Spec.Containers {
					if _, ok := c.Resources.Requests[m.Resource.Name]; !ok {
						add(o, "%s utilization of %s, whose container %s requests no %s", m.Resource.Name, w.o, c.Name, m.Resource.Name)
					}
				}
			}
		case *kedav1alpha1.ScaledObject:
			ref := v.Spec.ScaleTargetRef
			if ref == nil {
				continue // the CRD schema says so
			}
			kind := ref.Kind
			if kind == "" {
				kind = "Deployment"
			}
			apiVersion := ref.APIVersion
			if apiVersion == "" {
				apiVersion = "apps/v1"
			}
			if w := target(ix, o, apiVersion, kind, ref.Name, &problems); w != nil {
				w.scaledBy = append(w.scaledBy, o.String())
			}
			for i, t := range v.Spec.Triggers {
				if r := t.AuthenticationRef; r != nil {
					kind := r.Kind
					if kind == "" {
						kind = "TriggerAuthentication"
					}
					if !ix.has(kind, r.Name) {
						add(o, "spec.triggers[%d].authenticationRef: no %s %q", i, kind, r.Name)
					}
				}
			}
		case *kedav1alpha1.TriggerAuthentication:
			for i, ref := range v.Spec.SecretTargetRef {
				problems = append(problems, keyRef(ix, o, fmt.Sprintf("spec.secretTargetRef[%d]", i), "Secret", ref.Name, ref.Key, false)...)
			}
			for i, ref := range v.Spec.ConfigMapTargetRef {
				problems = append(problems, keyRef(ix, o, fmt.Sprintf("spec.configMapTargetRef[%d]", i), "ConfigMap", ref.Name, ref.Key, false)...)
			}
		}
	}
	for _, w := range sortedWorkloads(ix) {
		switch {
		case len(w.scaledBy) > 1:
			add(w.o, "scaled by more than one autoscaler: %v", w.scaledBy)
		case len(w.scaledBy) == 1 && w.replicas != nil:
			add(w.o, "sets spec.replicas but %s scales it: every upgrade would reset the count", w.scaledBy[0])
		}
	}
	return problems
}

func sortedWorkloads(ix *index) []*workload {
	keys := make([]string, 0, len(ix.workloads))
	for k := range ix.workloads {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	found := make([]*workload, 0, len(keys))
	for _, k := range keys {
		found = append(found, ix.workloads[k])
	}
	return found
}

func target(ix *index, o *object, apiVersion, kind, name string, problems *[]string) *workload {
	w := ix.workloads[kind+"/"+name]
	if w == nil || apiVersion != "apps/v1" {
		*problems = append(*problems, fmt.Sprintf("%s: scale target %s %s/%s is not among the objects", o, apiVersion, kind, name))
		return nil
	}
	return w
}

func selected(ix *index, selector labels.Selector) []*workload {
	var found []*workload
	for _, w := range sortedWorkloads(ix) {
		if selector.Matches(labels.Set(w.pod.Labels)) {
			found = append(found, w)
		}
	}
	return found
}

func hasPort(pod corev1.PodSpec, name string) bool {
	for _, c := range pod.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

func keyRef(ix *index, o *object, where, kind, name, key string, optional bool) []string {
	if !ix.has(kind, name) {
		if optional {
			return nil
		}
		return []string{fmt.Sprintf("%s: %s: no %s %q", o, where, kind, name)}
	}
	if keys := ix.keys(kind, name); key != "" && keys != nil && !slices.Contains(keys, key) {
		return []string{fmt.Sprintf("%s: %s: %s %q has no key %q (it has %v)", o, where, kind, name, key, keys)}
	}
	return nil
}

func checkWorkload(ix *index, w *workload) []string {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s: %s", w.o, fmt.Sprintf(format, args...)))
	}
	selector, err := metav1.LabelSelectorAsSelector(w.selector)
	switch {
	case err != nil || selector.Empty():
		add("spec.selector %v: %v", w.selector, err)
	case !selector.Matches(labels.Set(w.pod.Labels)):
		add("spec.selector %v does not match the pod template's labels %v", selector, w.pod.Labels)
	}
	if w.o.kind == "StatefulSet" && w.service != "" && !ix.has("Service", w.service) {
		add("serviceName %q: no such Service", w.service)
	}
	spec := w.pod.Spec
	volumes := slices.Clone(w.claims)
	for i, v := range spec.Volumes {
		volumes = append(volumes, v.Name)
		where := fmt.Sprintf("spec.template.spec.volumes[%d]", i)
		switch {
		case v.ConfigMap != nil:
			optional := v.ConfigMap.Optional != nil && *v.ConfigMap.Optional
			problems = append(problems, keyRef(ix, w.o, where, "ConfigMap", v.ConfigMap.Name, "", optional)...)
			for _, item := range v.ConfigMap.Items {
				problems = append(problems, keyRef(ix, w.o, where, "ConfigMap", v.ConfigMap.Name, item.Key, optional)...)
			}
		case v.Secret != nil:
			optional := v.Secret.Optional != nil && *v.Secret.Optional
			problems = append(problems, keyRef(ix, w.o, where, "Secret", v.Secret.SecretName, "", optional)...)
			for _, item := range v.Secret.Items {
				problems = append(problems, keyRef(ix, w.o, where, "Secret", v.Secret.SecretName, item.Key, optional)...)
			}
		case v.PersistentVolumeClaim != nil:
			if !ix.has("PersistentVolumeClaim", v.PersistentVolumeClaim.ClaimName) {
				add("%s: no PersistentVolumeClaim %q", where, v.PersistentVolumeClaim.ClaimName)
			}
		}
	}
	for _, name := range volumes {
		if n := countOf(volumes, name); n > 1 {
			add("volume %q defined %d times", name, n)
		}
	}
	containers := append(slices.Clone(spec.InitContainers), spec.Containers...)
	var names []string
	for _, c := range containers {
		if slices.Contains(names, c.Name) {
			add("two containers named %q", c.Name)
		}
		names = append(names, c.Name)
		for _, m := range c.VolumeMounts {
			if !slices.Contains(volumes, m.Name) {
				add("container %s mounts %q, which is no volume", c.Name, m.Name)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			where := fmt.Sprintf("container %s env %s", c.Name, e.Name)
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				problems = append(problems, keyRef(ix, w.o, where, "Secret", r.Name, r.Key, r.Optional != nil && *r.Optional)...)
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				problems = append(problems, keyRef(ix, w.o, where, "ConfigMap", r.Name, r.Key, r.Optional != nil && *r.Optional)...)
			}
		}
		for _, e := range c.EnvFrom {
			if r := e.SecretRef; r != nil {
				problems = append(problems, keyRef(ix, w.o, "container "+c.Name+" envFrom", "Secret", r.Name, "", r.Optional != nil && *r.Optional)...)
			}
			if r := e.ConfigMapRef; r != nil {
				problems = append(problems, keyRef(ix, w.o, "container "+c.Name+" envFrom", "ConfigMap", r.Name, "", r.Optional != nil && *r.Optional)...)
			}
		}
		for what, probe := range map[string]*corev1.Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe, "startupProbe": c.StartupProbe} {
			if probe == nil {
				continue
			}
			var port *intstr.IntOrString
			if probe.HTTPGet != nil {
				port = &probe.HTTPGet.Port
			} else if probe.TCPSocket != nil {
				port = &probe.TCPSocket.Port
			}
			if port != nil && port.Type == intstr.String && !hasPort(corev1.PodSpec{Containers: []corev1.Container{c}}, port.StrVal) {
				add("container %s %s: port %q is none of its ports", c.Name, what, port.StrVal)
			}
		}
		for name, limit := range c.Resources.Limits {
			if request, ok := c.Resources.Requests[name]; ok && request.Cmp(limit) > 0 {
				add("container %s requests %s %s, over its limit %s", c.Name, request.String(), name, limit.String())
			}
		}
	}
	return problems
}

func countOf(values []string, value string) int {
	n := 0
	for _, v := range values {
		if v == value {
			n++
		}
	}
	return n
}
