//! Metrics of TLS, authentication and abuse limits.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PortLabels {
    port: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FileLabels {
    file: &'static str,
}

#[derive(Clone, Default)]
pub struct SecurityMetrics {
    denied: Family<ReasonLabels, Counter>,
    limited: Family<ReasonLabels, Counter>,
    reload_failures: Family<FileLabels, Counter>,
    certificate_expiry: Family<PortLabels, Gauge<f64, AtomicU64>>,
}

impl SecurityMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "redq_auth_denied",
            "Calls refused by authentication (reason=unauthenticated) or authorization (reason=permission_denied), and streams ended by a revoked token (reason=revoked)",
            self.denied.clone(),
        );
        r.register(
            "redq_limited",
            "Connections, streams and publishes refused by an abuse limit (reason=connections, streams_per_token, publish_rate)",
            self.limited.clone(),
        );
        r.register(
            "redq_reload_failures",
            "Changed files that could not be loaded, so the previous ones stay in use (file=grpc_tls, http_tls, tokens)",
            self.reload_failures.clone(),
        );
        r.register(
            "redq_tls_certificate_expiry_seconds",
            "When the certificate in use expires, as Unix time, by port (grpc, http)",
            self.certificate_expiry.clone(),
        );
    }

    pub fn unauthenticated(&self) {
        self.denied(Reason::Unauthenticated);
    }

    pub fn permission_denied(&self) {
        self.denied(Reason::PermissionDenied);
    }

    pub fn revoked(&self) {
        self.denied(Reason::Revoked);
    }

    fn denied(&self, reason: Reason) {
        self.denied
            .get_or_create(&ReasonLabels {
                reason: reason.label(),
            })
            .inc();
    }

    pub fn limited(&self, limit: Limit) {
        self.limited
            .get_or_create(&ReasonLabels {
                reason: limit.label(),
            })
            .inc();
    }

    pub fn reload_failed(&self, file: &'static str) {
        self.reload_failures
            .get_or_create(&FileLabels { file })
            .inc();
    }

    pub fn certificate_expires(&self, port: &'static str, unix_seconds: f64) {
        self.certificate_expiry
            .get_or_create(&PortLabels { port })
            .set(unix_seconds);
    }
}

enum Reason {
    Unauthenticated,
    PermissionDenied,
    Revoked,
}

impl Reason {
    fn label(&self) -> &'static str {
        match self {
            Reason::Unauthenticated => "unauthenticated",
            Reason::PermissionDenied => "permission_denied",
            Reason::Revoked => "revoked",
        }
    }
}

/// The abuse limits.
#[derive(Clone, Copy)]
pub enum Limit {
    Connections,
    StreamsPerToken,
    PublishRate,
}

impl Limit {
    fn label(&self) -> &'static str {
        match self {
            Limit::Connections => "connections",
            Limit::StreamsPerToken => "streams_per_token",
            Limit::PublishRate => "publish_rate",
        }
    }
}
