//! Wires the gRPC server, the HTTP health endpoint and the background loops,
//! and runs them until the shutdown future resolves.

use crate::broker::{Broker, BrokerSettings, retention};
use crate::config::Settings;
use crate::grpc::{AdminApi, QueueApi};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::pb;
use crate::pb::admin_service_server::AdminServiceServer;
use crate::pb::queue_service_server::QueueServiceServer;
use crate::store::Store;
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;

/// Detects clients that vanished without closing their connection.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Serves gRPC on `grpc` and `/healthz`, `/readyz`, `/metrics` on `http` until `shutdown`
/// resolves, then drains for at most `settings.drain_timeout`.
///
/// Takes bound listeners so that callers (and tests) can bind port 0.
pub async fn run(
    grpc: TcpListener,
    http: TcpListener,
    store: Store,
    settings: Settings,
    shutdown: impl Future<Output = ()>,
) -> Result<(), BoxError> {
    let grpc_addr = grpc.local_addr()?;
    let http_addr = http.local_addr()?;
    let stop = CancellationToken::new();

    let (reporter, health_service) = tonic_health::server::health_reporter();
    let health = Health::new(reporter, stop.clone());
    health.publish().await; // NOT_SERVING until Redis answers
    let broker_settings = BrokerSettings {
        dedupe_window: settings.dedupe_window,
        promote_ahead: settings.promote_ahead,
        default_ack_deadline: settings.limits.default_ack_deadline,
    };
    let metrics = Metrics::new(settings.metrics_max_topics);
    let broker = Broker::new(
        store.clone(),
        broker_settings,
        metrics.clone(),
        stop.clone(),
    );
    health.spawn_loop("redis-monitor", health.clone().run_monitor(store.clone()));
    health.spawn_loop("promoter", broker.promoter().run(stop.clone()));
    health.spawn_loop(
        "trimmer",
        retention::run_trimmer(
            store.clone(),
            settings.default_retention,
            settings.trim_interval,
            stop.clone(),
        ),
    );
    health.spawn_loop(
        "memory-guard",
        broker
            .memory_guard()
            .run(store.clone(), settings.memory_limit_ratio, stop.clone()),
    );
    health.spawn_loop(
        "hint-listener",
        broker.wakeups().clone().run_hint_listener(stop.clone()),
    );

    // Both reflection versions: grpcurl 1.8 only speaks v1alpha.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    // Large enough that an oversize payload is reported as INVALID_ARGUMENT
    // naming the message, not rejected as an undecodable request.
    let max_request = (settings.limits.max_payload_bytes as usize * 2).max(16 * 1024 * 1024);
    let admin = AdminServiceServer::new(AdminApi::new(broker.clone(), settings.limits.clone()));
    let queue = QueueServiceServer::new(QueueApi::new(broker, settings.limits.clone()))
        .max_decoding_message_size(max_request);

    let grpc_server = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(queue)
        .add_service(admin)
        .serve_with_incoming_shutdown(
            // Without TCP_NODELAY, Nagle's algorithm holds small stream
            // responses back for tens of milliseconds.
            TcpIncoming::from(grpc)
                .with_nodelay(Some(true))
                .with_keepalive(Some(TCP_KEEPALIVE)),
            stop.clone().cancelled_owned(),
        );
    let http_routes = health.http_routes().merge(metrics.routes(store));
    let http_server =
        axum::serve(http, http_routes).with_graceful_shutdown(stop.clone().cancelled_owned());

    tracing::info!(%grpc_addr, metrics_addr = %http_addr, "serving");
    let mut grpc_task = tokio::spawn(grpc_server);
    let http_task = tokio::spawn(async move { http_server.await });

    tokio::select! {
        _ = shutdown => {}
        result = &mut grpc_task => {
            stop.cancel();
            result??;
            return Err("gRPC server stopped unexpectedly".into());
        }
    }

    // Not ready first, so load balancers stop sending; then end the streams
    // (their unacked messages stay pending for redelivery) and drain.
    stop.cancel();
    health.publish().await;
    match tokio::time::timeout(settings.drain_timeout, grpc_task).await {
        Ok(result) => result??,
        Err(_) => tracing::warn!(
            timeout = %humantime::format_duration(settings.drain_timeout),
            "drain timeout reached, exiting with calls in flight"
        ),
    }
    http_task.abort();
    tracing::info!("stopped");
    Ok(())
}
