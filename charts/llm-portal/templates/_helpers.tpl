{{/* The name prefix of every object: the release name, or release-llm-portal. */}}
{{- define "llm-portal.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "llm-portal.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "llm-portal.fullname" .) -}}
{{- end -}}

{{- define "llm-portal.configName" -}}
{{- printf "%s-config" (include "llm-portal.fullname" .) -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "llm-portal.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: llm-portal
app.kubernetes.io/version: {{ .Values.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: include "llm-portal.selector" (list . "web") */}}
{{- define "llm-portal.selector" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ $root.Chart.Name }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "llm-portal.componentLabels" -}}
{{ include "llm-portal.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "llm-portal.image" -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}

{{/* "k=v,k=v" from a map, keys sorted. */}}
{{- define "llm-portal.pairs" -}}
{{- $items := list -}}
{{- range $key, $value := . -}}
{{- $items = append $items (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- join "," $items -}}
{{- end -}}

{{/*
The non-secret settings (environment name: string value), every one read by portal/settings*.py.
One definition for the ConfigMap of the long-running pods and the inline env of the migration
hook (which runs before the release's ConfigMap exists).
*/}}
{{- define "llm-portal.config" -}}
{{- $v := .Values -}}
DEBUG: "false"
ALLOWED_HOSTS: {{ prepend $v.portal.allowedHosts "localhost" | uniq | join "," | quote }}
{{- with $v.portal.csrfTrustedOrigins }}
CSRF_TRUSTED_ORIGINS: {{ join "," . | quote }}
{{- end }}
HTTPS: {{ $v.portal.https | toString | quote }}
TRUSTED_PROXY_COUNT: {{ $v.portal.trustedProxyCount | int | toString | quote }}
LOGIN_FAILURE_LIMIT: {{ $v.portal.loginFailureLimit | int | toString | quote }}
LOGIN_COOLOFF_SECONDS: {{ $v.portal.loginCooloffSeconds | int | toString | quote }}
LOG_LEVEL: {{ $v.portal.logLevel | quote }}
LOG_FORMAT: {{ $v.portal.logFormat | quote }}
DB_CONN_MAX_AGE: {{ $v.database.connMaxAge | int | toString | quote }}
CELERY_VISIBILITY_TIMEOUT: {{ $v.broker.visibilityTimeout | int | toString | quote }}
RECONCILE_SWEEP_SECONDS: {{ $v.portal.reconcileSweepSeconds | int | toString | quote }}
METRICS_SCRAPE_SECONDS: {{ $v.portal.metricsScrapeSeconds | int | toString | quote }}
PROMETHEUS_SCRAPE_INTERVAL_SECONDS: {{ $v.portal.prometheusScrapeIntervalSeconds | toString | quote }}
{{- with $v.portal.prometheusUrl }}
PROMETHEUS_URL: {{ . | quote }}
{{- end }}
{{- with $v.portal.platformAdmin.username }}
PLATFORM_ADMIN_USERNAME: {{ . | quote }}
PLATFORM_ADMIN_PASSWORD_FILE: "/run/secrets/platform-admin/password"
{{- end }}
{{- with $v.portal.platformAdmin.email }}
PLATFORM_ADMIN_EMAIL: {{ . | quote }}
{{- end }}
RUNTIME_BACKENDS: {{ join "," $v.runtime.backends | quote }}
RUNTIME_DEFAULT_BACKEND: {{ $v.runtime.defaultBackend | quote }}
KSERVE_DEPLOYMENT_MODE: {{ $v.runtime.kserveDeploymentMode | quote }}
KUBERNETES_TIMEOUT_SECONDS: {{ $v.runtime.kubernetesTimeoutSeconds | toString | quote }}
RAY_VERSION: {{ $v.runtime.rayVersion | quote }}
RAY_IMAGE: {{ $v.runtime.rayImage | quote }}
VLLM_IMAGE: {{ $v.runtime.vllmImage | quote }}
MODEL_CACHE_PVC: {{ $v.runtime.modelCachePvc | quote }}
MODEL_CACHE_SIZE_GI: {{ $v.runtime.modelCacheSizeGi | toString | quote }}
MODEL_CACHE_STORAGE_CLASS: {{ $v.runtime.modelCacheStorageClass | quote }}
NCCL_DEBUG: {{ $v.runtime.ncclDebug | quote }}
KUEUE_COHORT: {{ $v.kueue.cohort | quote }}
KUEUE_CPU_FLAVOR: {{ $v.kueue.cpuFlavor | quote }}
{{- with $v.kueue.cpuNodeLabels }}
KUEUE_CPU_NODE_LABELS: {{ include "llm-portal.pairs" . | quote }}
{{- end }}
KUEUE_QUEUEING_STRATEGY: {{ $v.kueue.queueingStrategy | quote }}
KUEUE_RECLAIM_WITHIN_COHORT: {{ $v.kueue.reclaimWithinCohort | quote }}
KUEUE_WITHIN_CLUSTER_QUEUE: {{ $v.kueue.withinClusterQueue | quote }}
KUEUE_SYNC_SECONDS: {{ $v.kueue.syncSeconds | int | toString | quote }}
KUEUE_CONFIG_NAMESPACE: {{ $v.kueue.configNamespace | quote }}
KUEUE_CONFIG_MAP: {{ $v.kueue.configMap | quote }}
KARPENTER_PLATFORM: {{ $v.karpenter.platform | quote }}
KARPENTER_NODE_CLASS_GROUP: {{ $v.karpenter.nodeClassGroup | quote }}
KARPENTER_NODE_CLASS_KIND: {{ $v.karpenter.nodeClassKind | quote }}
KARPENTER_NODE_CLASS_NAME: {{ $v.karpenter.nodeClassName | quote }}
KARPENTER_NODE_ROLE: {{ $v.karpenter.nodeRole | quote }}
KARPENTER_AMI_ALIAS: {{ $v.karpenter.amiAlias | quote }}
KARPENTER_AMI_ALLOW_LATEST: {{ $v.karpenter.amiAllowLatest | toString | quote }}
KARPENTER_ROOT_VOLUME_GIB: {{ $v.karpenter.rootVolumeGiB | int | toString | quote }}
{{- with $v.karpenter.subnetTags }}
KARPENTER_SUBNET_TAGS: {{ include "llm-portal.pairs" . | quote }}
{{- end }}
{{- with $v.karpenter.securityGroupTags }}
KARPENTER_SECURITY_GROUP_TAGS: {{ include "llm-portal.pairs" . | quote }}
{{- end }}
GATEWAY_API: {{ $v.gateway.api | toString | quote }}
GATEWAY_NAME: {{ $v.gateway.name | quote }}
GATEWAY_NAMESPACE: {{ $v.gateway.namespace | quote }}
{{- with $v.gateway.publicUrl }}
GATEWAY_PUBLIC_URL: {{ . | quote }}
{{- end }}
API_KEY_NAMESPACE: {{ $v.gateway.apiKeyNamespace | quote }}
# The tenant endpoints' `/v1/models` route goes to this Service (access.tenant_endpoint).
PORTAL_SERVICE_NAME: {{ printf "%s-web" (include "llm-portal.fullname" .) | quote }}
PORTAL_SERVICE_NAMESPACE: {{ .Release.Namespace | quote }}
PORTAL_SERVICE_PORT: {{ $v.web.service.port | int | toString | quote }}
{{- if $v.oidc.enabled }}
{{- with $v.oidc.issuer }}
OIDC_OP_DISCOVERY_ISSUER: {{ . | quote }}
{{- end }}
OIDC_RP_CLIENT_ID: {{ $v.oidc.clientId | quote }}
OIDC_RP_SIGN_ALGO: {{ $v.oidc.signAlgo | quote }}
OIDC_OP_AUTHORIZATION_ENDPOINT: {{ $v.oidc.authorizationEndpoint | quote }}
OIDC_OP_TOKEN_ENDPOINT: {{ $v.oidc.tokenEndpoint | quote }}
OIDC_OP_USER_ENDPOINT: {{ $v.oidc.userEndpoint | quote }}
{{- with $v.oidc.jwksEndpoint }}
OIDC_OP_JWKS_ENDPOINT: {{ . | quote }}
{{- end }}
OIDC_RP_SCOPES: {{ $v.oidc.scopes | quote }}
OIDC_USE_PKCE: {{ $v.oidc.usePkce | toString | quote }}
OIDC_GROUPS_CLAIM: {{ $v.oidc.groupsClaim | quote }}
OIDC_USERNAME_CLAIM: {{ $v.oidc.usernameClaim | quote }}
{{- with $v.oidc.platformAdminGroups }}
OIDC_PLATFORM_ADMIN_GROUPS: {{ join "," . | quote }}
{{- end }}
{{- end }}
{{- range $name, $value := $v.extraConfig }}
{{ $name }}: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/* The secret settings, each from its Secret and key (env entries). */}}
{{- define "llm-portal.secretEnv" -}}
{{- $s := .Values.secrets -}}
{{- $refs := list (list "SECRET_KEY" $s.secretKey) (list "DATABASE_URL" $s.databaseUrl) (list "CELERY_BROKER_URL" $s.brokerUrl) (list "CACHE_URL" $s.cacheUrl) (list "METRICS_TOKEN" $s.metricsToken) -}}
{{- if .Values.oidc.enabled -}}
{{- $refs = append $refs (list "OIDC_RP_CLIENT_SECRET" .Values.oidc.clientSecret) -}}
{{- end -}}
{{- range $refs }}
- name: {{ index . 0 }}
  valueFrom:
    secretKeyRef:
      name: {{ (index . 1).secretName }}
      key: {{ (index . 1).key }}
      {{- if (index . 1).optional }}
      optional: true
      {{- end }}
{{- end }}
{{- end -}}

{{/* envFrom (the ConfigMap) and env (the Secret references) of a long-running container. */}}
{{- define "llm-portal.env" -}}
envFrom:
  - configMapRef:
      name: {{ include "llm-portal.configName" . }}
env:
{{- include "llm-portal.secretEnv" . | trim | nindent 2 }}
{{- end -}}

{{- define "llm-portal.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{- define "llm-portal.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{/* New code must not serve an old schema: wait until the migration hook has run. */}}
{{- define "llm-portal.waitForMigrations" -}}
- name: wait-for-migrations
  image: {{ include "llm-portal.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["sh", "-c", "until python manage.py migrate --check >/dev/null; do echo waiting for migrations; sleep 5; done"]
  {{- include "llm-portal.env" . | nindent 2 }}
  {{- include "llm-portal.containerSecurityContext" . | nindent 2 }}
  resources:
    {{- toYaml .Values.waitForMigrations.resources | nindent 4 }}
{{- end -}}

{{/* Scheduling and pull secrets shared by every pod. */}}
{{- define "llm-portal.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Pod annotations: restart the pods when the configuration changes. */}}
{{- define "llm-portal.podAnnotations" -}}
checksum/config: {{ include "llm-portal.config" . | sha256sum }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}
