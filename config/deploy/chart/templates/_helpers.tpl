{{/* Names and labels. */}}
{{- define "ragbus.fullname" -}}
{{- if contains "ragbus" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-ragbus" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ragbus.selector" -}}
app.kubernetes.io/name: ragbus
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{- define "ragbus.labels" -}}
{{ include "ragbus.selector" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "ragbus.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-credentials" (include "ragbus.fullname" .)) -}}
{{- end -}}

{{- define "ragbus.tlsSecretName" -}}
{{- .Values.secrets.tls.existingSecret | default (printf "%s-tls" (include "ragbus.fullname" .)) -}}
{{- end -}}

{{/* Whether a CA (and maybe a client certificate) is mounted for the broker. */}}
{{- define "ragbus.tls" -}}
{{- if or .Values.secrets.tls.existingSecret .Values.secrets.tls.ca }}true{{ end -}}
{{- end -}}

{{- define "ragbus.kafkaSasl" -}}
{{- if and (eq .Values.bus.kind "kafka") .Values.bus.kafka.saslMechanism }}true{{ end -}}
{{- end -}}

{{- define "ragbus.pulsarToken" -}}
{{- if and (eq .Values.bus.kind "pulsar") .Values.bus.pulsar.tokenAuth }}true{{ end -}}
{{- end -}}

{{- define "ragbus.busUrl" -}}
{{- if eq .Values.bus.kind "kafka" -}}
kafka://{{ .Values.bus.kafka.bootstrapServers }}
{{- else -}}
{{ .Values.bus.pulsar.serviceUrl }}
{{- end -}}
{{- end -}}

{{/*
The query hosts' shards (query.shards), refused where they cannot work: docs/deploy.md, "Sharded query
hosts". The number, 0 when unsharded.
*/}}
{{- define "ragbus.shards" -}}
{{- $v := .Values -}}
{{- $shards := int ($v.query.shards | default 0) -}}
{{- $standbys := int ($v.query.standbys | default 0) -}}
{{- if $shards -}}
{{- if ne $v.bus.kind "kafka" -}}
{{- fail (printf "query.shards %d needs bus.kind kafka: query hosts own shards through a Kafka consumer group dealt by ragbus's own policy, which Pulsar's Python client cannot do" $shards) -}}
{{- end -}}
{{- if not $v.query.enabled -}}
{{- fail "query.shards needs query.enabled: the query hosts are what holds the shards" -}}
{{- end -}}
{{- if $v.all.enabled -}}
{{- fail "query.shards: turn all.enabled off: the all-in-one host runs unsharded (ragbus shards only the query role) and would hold every document beside the shards" -}}
{{- end -}}
{{- $hosts := ternary (int $v.query.replicas) (int $v.autoscaling.query.minReplicas) (eq $v.autoscaling.mode "none") -}}
{{- $from := ternary "query.replicas" "autoscaling.query.minReplicas" (eq $v.autoscaling.mode "none") -}}
{{- if lt $hosts 1 -}}
{{- fail (printf "query.shards %d needs at least one query host (%s is %d)" $shards $from $hosts) -}}
{{- end -}}
{{- if ge $standbys $hosts -}}
{{- fail (printf "query.standbys %d needs more query hosts than that (%s is %d): a shard's standbys are hosts other than its owner" $standbys $from $hosts) -}}
{{- end -}}
{{- else if $standbys -}}
{{- fail (printf "query.standbys %d needs query.shards: a standby keeps a copy of another host's shard" $standbys) -}}
{{- end -}}
{{- $shards -}}
{{- end -}}

{{/*
The settings of a role (dict "root" $ "role" ROLE), as a YAML map: the chart's wiring of the bus and the
probes, and the query hosts' shards, over the role's own settings, over `settings`.
*/}}
{{- define "ragbus.settings" -}}
{{- $v := .root.Values -}}
{{- $role := index $v .role -}}
{{- $merged := mergeOverwrite (deepCopy ($v.settings | default dict)) (deepCopy ($role.settings | default dict)) -}}
{{- $log := dig "stores" "log" true $merged -}}
{{- if not $log -}}
{{- fail "settings: [stores] log must stay true: every role of the chart makes its stores from the log" -}}
{{- end -}}
{{- $shards := include "ragbus.shards" .root | int -}}
{{- if or (hasKey ($merged.stores | default dict) "shards") (dig "processors" "shard-host" "standbys" "" $merged | toString) -}}
{{- fail (printf "settings (%s): [stores] shards and [processors.shard-host] standbys are the chart's: set query.shards and query.standbys" .role) -}}
{{- end -}}
{{- $bus := dict "url" (include "ragbus.busUrl" .root) -}}
{{- $tls := include "ragbus.tls" .root -}}
{{- if eq $v.bus.kind "kafka" -}}
{{- $kafka := dict "security_protocol" $v.bus.kafka.securityProtocol -}}
{{- if $v.bus.kafka.saslMechanism -}}
{{- if not (hasPrefix "SASL_" $v.bus.kafka.securityProtocol) -}}
{{- fail "bus.kafka.saslMechanism needs securityProtocol SASL_PLAINTEXT or SASL_SSL" -}}
{{- end -}}
{{- $_ := set $kafka "sasl_mechanism" $v.bus.kafka.saslMechanism -}}
{{- end -}}
{{- if $tls -}}
{{- $_ := set $kafka "ssl_cafile" "/etc/ragbus/tls/ca.crt" -}}
{{- if $v.secrets.tls.clientCertificate -}}
{{- $_ := set $kafka "ssl_certfile" "/etc/ragbus/tls/tls.crt" -}}
{{- $_ := set $kafka "ssl_keyfile" "/etc/ragbus/tls/tls.key" -}}
{{- end -}}
{{- end -}}
{{- if $shards -}}
{{- /* Every role's (whoever appends first makes the log): a multiple of the shards, at least ragbus's own. */ -}}
{{- $given := dig "bus" "kafka" "changelog_topics" "partitions" 0 $merged | int -}}
{{- if and $given (mod $given $shards) -}}
{{- fail (printf "settings (%s): [bus.kafka] changelog_topics.partitions %d is not a multiple of query.shards %d: shard k holds the documents log's partitions p with p %% shards == k, so the log must split evenly" .role $given $shards) -}}
{{- end -}}
{{- if not $given -}}
{{- $default := int (.root.Files.Get "files/wiring.json" | fromJson).kafka.changelog_partitions -}}
{{- $given = mul (div (add $default (sub $shards 1)) $shards) $shards -}}
{{- end -}}
{{- $_ := set $kafka "changelog_topics" (dict "partitions" $given) -}}
{{- end -}}
{{- $_ := set $bus "kafka" $kafka -}}
{{- else -}}
{{- $pulsar := dict "admin_url" $v.bus.pulsar.adminUrl -}}
{{- if $v.bus.pulsar.metricsUrl -}}
{{- $_ := set $pulsar "metrics_url" $v.bus.pulsar.metricsUrl -}}
{{- end -}}
{{- if $tls -}}
{{- $_ := set $pulsar "tls_trust_certs_file_path" "/etc/ragbus/tls/ca.crt" -}}
{{- end -}}
{{- $_ := set $bus "pulsar" $pulsar -}}
{{- end -}}
{{- $chart := dict "bus" $bus -}}
{{- if eq .role "gateway" -}}
{{- $_ := set $chart "gateway" (dict "host" "0.0.0.0" "port" $v.gateway.port) -}}
{{- else -}}
{{- $_ := set $chart "stores" (dict "log" true) -}}
{{- if and $shards (eq .role "query") -}}
{{- $_ := set $chart "stores" (dict "log" true "shards" $shards) -}}
{{- $_ := set $chart "processors" (dict "shard-host" (dict "standbys" (int .root.Values.query.standbys))) -}}
{{- end -}}
{{- $_ := set $chart "metrics" (dict "host" "0.0.0.0" "port" $v.metrics.port) -}}
{{- end -}}
{{- toYaml (mergeOverwrite $merged $chart) -}}
{{- end -}}

{{/*
A TOML document from a map (dict "table" MAP "path" KEYS): its keys and values, then a [table] per map
in it. Whole numbers are written as integers (Helm reads every number of the values as a float).
*/}}
{{- define "ragbus.toml" -}}
{{- $path := .path -}}
{{- $scalars := list -}}
{{- $tables := list -}}
{{- range $key, $value := .table -}}
{{- if kindIs "map" $value -}}
{{- $tables = append $tables $key -}}
{{- else -}}
{{- $scalars = append $scalars $key -}}
{{- end -}}
{{- end -}}
{{- if and $path $scalars -}}
{{- printf "\n[%s]\n" (include "ragbus.tomlPath" $path) -}}
{{- end -}}
{{- range $key := $scalars -}}
{{- printf "%s = %s\n" (include "ragbus.tomlKey" $key) (include "ragbus.tomlValue" (index $.table $key)) -}}
{{- end -}}
{{- range $key := $tables -}}
{{- include "ragbus.toml" (dict "table" (index $.table $key) "path" (append $path $key)) -}}
{{- end -}}
{{- end -}}

{{- define "ragbus.tomlPath" -}}
{{- $keys := list -}}
{{- range . }}{{ $keys = append $keys (include "ragbus.tomlKey" .) }}{{ end -}}
{{- join "." $keys -}}
{{- end -}}

{{- define "ragbus.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end -}}
{{- end -}}

{{- define "ragbus.tomlValue" -}}
{{- if kindIs "string" . -}}
{{- toJson . -}}
{{- else if kindIs "bool" . -}}
{{- ternary "true" "false" . -}}
{{- else if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) -}}
{{- if eq (float64 .) (floor .) }}{{ int64 . }}{{ else }}{{ float64 . }}{{ end -}}
{{- else if kindIs "slice" . -}}
{{- $items := list -}}
{{- range . }}{{ $items = append $items (include "ragbus.tomlValue" .) }}{{ end -}}
[{{ join ", " $items }}]
{{- else if kindIs "invalid" . -}}
{{- fail "settings: a setting without a value (null): TOML has none; leave the key out" -}}
{{- else -}}
{{- fail (printf "settings: a value TOML cannot hold here: %v" .) -}}
{{- end -}}
{{- end -}}

{{/*
The lanes a role's workers serve (dict "root" $ "role" ROLE), as JSON {"lanes": [{topic, group,
processor}]}: config/settings.py lanes() (the topic unless interactive is false, and the bulk topic) over the role's processors (files/wiring.json, from
config/pipelines.py ROLES, or the sharded query role's), each section the wiring of config/defaults.toml with the role's settings over it.
*/}}
{{- define "ragbus.lanes" -}}
{{- $wiring := .root.Files.Get "files/wiring.json" | fromJson -}}
{{- $settings := include "ragbus.settings" . | fromYaml -}}
{{- $sections := $settings.processors | default dict -}}
{{- $lanes := list -}}
{{- $names := index $wiring.roles $.role -}}
{{- if dig "stores" "shards" 0 $settings -}}
{{- /* The shard-served processors' groups (<group>.shard-<k>) are left out: each has one member, the shard's
owner, whatever the number of hosts (docs/deploy.md, "Sharded query hosts"). */ -}}
{{- $names = index $wiring.sharded_roles $.role -}}
{{- end -}}
{{- range $name := $names -}}
{{- $section := mergeOverwrite (deepCopy (index $wiring.processors $name)) (deepCopy (index $sections $name | default dict)) -}}
{{- $group := get $section "group" | default $name -}}
{{- if ne (toString (get $section "interactive")) "false" -}}
{{- $lanes = append $lanes (dict "processor" $name "topic" (get $section "topic" | default $name) "group" $group) -}}
{{- end -}}
{{- if get $section "bulk_topic" -}}
{{- $lanes = append $lanes (dict "processor" $name "topic" (get $section "bulk_topic") "group" (printf "%s-bulk" $group)) -}}
{{- end -}}
{{- end -}}
{{- toJson (dict "lanes" $lanes) -}}
{{- end -}}
