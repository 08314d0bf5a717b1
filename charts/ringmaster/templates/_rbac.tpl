{{/* The RBAC rules, one table for both layouts of rbac.yaml (see its header). */}}
{{- define "ringmaster.namespacedRules" -}}
# kopf indexes and watches the workers and reducers (cluster_state.py, trainingjob.py,
# reductionserverpool.py); the TrainingJob controller creates worker pods and deletes them on
# gang restart and suspend. Patched only to let a serving pod through its admission scheduling
# gate (pinned to the host admission granted it: docs/architecture.md); status is the kubelet's.
# Read one by one (get) only when a gate lift is refused, to tell a pod already through from one
# still held (controllers/admission_gate.py).
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, get, create, delete, patch]
# Rendezvous Services (created by TrainingJobs); reducer and serving Services, server-side applied
# by ReductionServerPools and InferenceEndpoints (patch, and create when absent). Never read back.
- apiGroups: [""]
  resources: [services]
  verbs: [create, patch]
# PoolProfiles' payload, mounted into their measurement pods: one ConfigMap per namespace,
# server-side applied (created when absent, then patched by that name only).
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create]
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [ringmaster-profile-payload]
  verbs: [patch]
# kopf.event() posts core v1 Events (kopf creates them, it never patches or lists them).
- apiGroups: [""]
  resources: [events]
  verbs: [create]
# kopf's watches and indexes over the three kinds; the operator never writes their spec.
- apiGroups: [ringmaster.dev]
  resources: [inferenceendpoints]
  verbs: [list, watch]
# PoolProfiles: indexed and watched; the operator never writes their spec.
- apiGroups: [ringmaster.dev]
  resources: [poolprofiles]
  verbs: [list, watch]
# TTL: ttlSecondsAfterFinished deletes the finished TrainingJob.
- apiGroups: [ringmaster.dev]
  resources: [trainingjobs]
  verbs: [list, watch, delete]
# A TrainingJob that names no shared pool server-side applies its own ReductionServerPool.
- apiGroups: [ringmaster.dev]
  resources: [reductionserverpools]
  verbs: [list, watch, create, patch]
# phase, conditions and the engine's plan: a merge patch of the status subresource.
- apiGroups: [ringmaster.dev]
  resources: [trainingjobs/status, reductionserverpools/status, inferenceendpoints/status, poolprofiles/status]
  verbs: [patch]
# Owned objects carry ownerReferences with blockOwnerDeletion; clusters that enable the
# OwnerReferencesPermissionEnforcement admission plugin (OpenShift does) require update on the
# owner's finalizers for that. No finalizer is ever set.
- apiGroups: [ringmaster.dev]
  resources: [trainingjobs/finalizers, reductionserverpools/finalizers, inferenceendpoints/finalizers, poolprofiles/finalizers]
  verbs: [update]
# Reducers of a ReductionServerPool: server-side applied (create when absent, then patch).
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [create, patch]
# InferenceEndpoint model servers: indexed and watched for readiness, server-side applied (also the
# replica count under a second field manager); deleted when the endpoint's arrangement changes
# (aggregated replicas to prefill / decode sides and back; garbage collection does the rest).
- apiGroups: [apps]
  resources: [deployments]
  verbs: [list, watch, create, patch, delete]
# The Gateway API Inference Extension (spec.routing): an endpoint's InferencePools and its
# InferenceObjective are server-side applied, and deleted when routing is turned off.
- apiGroups: [inference.networking.k8s.io]
  resources: [inferencepools]
  verbs: [create, patch, delete]
- apiGroups: [inference.networking.x-k8s.io]
  resources: [inferenceobjectives]
  verbs: [create, patch, delete]
# The optional HPA of an InferenceEndpoint: indexed, applied, and deleted when autoscaling is off.
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [list, watch, create, patch, delete]
{{- if .Values.lws.enabled }}
# LeaderWorkerSet (lws.enabled): an endpoint whose replicas span hosts runs as one, indexed and
# watched for readiness, server-side applied (also its count under a second field manager), and
# deleted when its replicas come back to one host; the Deployment it replaces is deleted then.
- apiGroups: [leaderworkerset.x-k8s.io]
  resources: [leaderworkersets]
  verbs: [list, watch, create, patch, delete]
{{- end }}
{{- if .Values.kueue.enabled }}
# Kueue (kueue.enabled): a labelled TrainingJob's Workload is indexed and watched, created, patched
# (its pod sets while queued; spec.active on suspend and resume) and deleted when the job's shape
# changes after admission or it loses its queue label; its status gets PodsReady, Finished and,
# after an eviction, the quota reservation given back (controllers/kueue_workloads.py).
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  verbs: [patch]
{{- end }}
{{- end }}
{{- define "ringmaster.clusterRules" -}}
{{- if .Values.progress.enabled }}
# The progress endpoint asks the API server whether a worker's token is valid for its job's
# audience (controllers/progress_server.py). Create only: a TokenReview is never stored.
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
{{- end }}
# The TrainingJob controller indexes namespaces being deleted: their jobs' pods going is no worker
# failure (no gang restart). kopf also follows them when it serves only some namespaces.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
# kopf indexes every node to discover the node pools (placement/pools.py). A PoolProfile labels
# (ringmaster.dev/degraded) the hosts it finds below their pool and, if asked, taints them: get
# and patch, on nodes only.
- apiGroups: [""]
  resources: [nodes]
  verbs: [list, watch, get, patch]
# Admission orders waiting TrainingJobs by the value of their pods' PriorityClass
# (admission/cycle.py); kopf indexes and watches them. Read only.
- apiGroups: [scheduling.k8s.io]
  resources: [priorityclasses]
  verbs: [list, watch]
# kopf's resource observer lists and watches CRDs to notice its kinds (re)appearing.
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
{{- if .Values.kueue.enabled }}
# Kueue (kueue.enabled): an admitted flavor's node labels and tolerations go into the pods; a
# WorkloadPriorityClass sets a Workload's priority; a flavor's Topology says which levels a
# topology request may name. Indexed and watched; read only.
- apiGroups: [kueue.x-k8s.io]
  resources: [resourceflavors, workloadpriorityclasses, topologies]
  verbs: [list, watch]
{{- end }}
{{- end }}
