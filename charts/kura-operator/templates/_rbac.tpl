{{/*
What the operator does in the namespaces it watches: reconcile KuraInstances
into their children and KuraGateways. Bound cluster-wide (ClusterRole) or, with
watchNamespace, in that namespace only (Role). Never Secrets (env values from
Secrets are references the kubelet resolves), never PersistentVolumeClaims (data
is never deleted). Pods: read only, and only the dedicated gateways' (a label
selector; the operator keeps their names, labels and PodScheduled condition), to
report a gateway pod the scheduler cannot place; an instance's availability
comes from its StatefulSet's status.
*/}}
{{- define "kura-operator.watchedRules" -}}
# Watch instances; patch only the operator's own metadata on them (the spec is the user's).
- apiGroups: ["kura.dev"]
  resources: ["kurainstances"]
  verbs: ["get", "list", "watch", "patch"]
# Write status: revisions, inventory, conditions.
- apiGroups: ["kura.dev"]
  resources: ["kurainstances/status"]
  verbs: ["get", "patch", "update"]
# Children carry an owner reference with blockOwnerDeletion=true, which needs
# update on the owner's finalizers (OwnerReferencesPermissionEnforcement).
- apiGroups: ["kura.dev"]
  resources: ["kurainstances/finalizers"]
  verbs: ["update"]
# Dedicated gateways: rendered by the instance controller, reconciled by the
# gateway controller, deleted when nothing of their namespace uses them (only
# those the operator created); get, to confirm before collecting a class that
# its gateway is gone; patch also removes the finalizer of earlier releases.
- apiGroups: ["kura.dev"]
  resources: ["kuragateways"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["kura.dev"]
  resources: ["kuragateways/status"]
  verbs: ["get", "patch", "update"]
# A gateway's Deployment and Service are owned by it with blockOwnerDeletion=true.
- apiGroups: ["kura.dev"]
  resources: ["kuragateways/finalizers"]
  verbs: ["update"]
# Rendered children: server-side apply (create, patch), a metadata-only watch to
# notice drift (get, list, watch), and pruning what a new revision drops (delete).
- apiGroups: ["apps"]
  resources: ["statefulsets", "deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "configmaps", "serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["ingresses", "networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# When an Ingress moves to another class, the address its old controller wrote
# is cleared, so it cannot pass for an address of the new one.
- apiGroups: ["networking.k8s.io"]
  resources: ["ingresses/status"]
  verbs: ["patch"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# A dedicated gateway's pod the scheduler cannot place is reported, with the
# scheduler's reason (watched by label: app.kubernetes.io/name=kura-gateway).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
# A dedicated gateway's ingress controller runs as a ServiceAccount of its
# own, bound in the gateway's namespace to the ClusterRole <release>-gateway
# (what Traefik reads there). bind: that ClusterRole only, so the operator can
# grant what it does not hold itself (Secrets), and nothing else.
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["clusterroles"]
  resourceNames: [{{ printf "%s-gateway" (include "kura-operator.clusterName" .) | quote }}]
  verbs: ["bind"]
# Events on instances: a force re-apply, a rollout, a stall are recorded there.
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
