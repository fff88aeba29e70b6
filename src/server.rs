//! Wires the gRPC server, the HTTP health endpoint and the background loops,
//! and runs them until the shutdown future resolves.

use crate::broker::{Broker, BrokerSettings, registry_repair, retention};
use crate::config::Settings;
use crate::error::BoxError;
use crate::grpc::{AdminApi, PubSubApi, QueueApi};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::metrics::{Limit, SecurityMetrics};
use crate::pb;
use crate::pb::admin_service_server::AdminServiceServer;
use crate::pb::queue_service_server::QueueServiceServer;
use crate::security::ServerSecurity;
use crate::store::Store;
use crate::tls::HttpListener;
use crate::ui::Dashboard;
use crate::workers::{Accepted, Workers};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tonic::service::interceptor::InterceptedService;

/// Detects clients that vanished without closing their connection.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// Pause after a failed accept.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Serves gRPC on `grpc` and `/healthz`, `/readyz`, `/metrics` and the dashboard (`/ui/`)
/// on `http` until `shutdown`
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
        ack_ride_wait: settings.ack_ride_wait,
        default_ack_deadline: settings.limits.default_ack_deadline,
        max_message_bytes: settings.limits.max_message_bytes(),
        subscribe_buffer_bytes: settings.limits.subscribe_buffer_bytes,
    };
    let metrics = Metrics::new(settings.metrics_max_topics);
    let security = ServerSecurity::new(&settings.security, metrics.security().clone())?;
    let authorizer = security.authorizer.clone();
    let broker = Broker::new(
        store.clone(),
        broker_settings,
        metrics.clone(),
        stop.clone(),
    );
    health.spawn_loop("redis-monitor", health.clone().run_monitor(store.clone()));
    health.spawn_loop("promoter", broker.promoter().run(stop.clone()));
    health.spawn_loop("scheduler", broker.scheduler().run(stop.clone()));
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
        "registry-repair",
        registry_repair::run(store.clone(), stop.clone()),
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
    health.spawn_loop(
        "reloader",
        security
            .reloadable
            .run(settings.security.reload_interval, stop.clone()),
    );

    // Both reflection versions: grpcurl 1.8 only speaks v1alpha.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    // Health is always open; reflection needs a token with --auth-reflection.
    let reflection_check = {
        let authorizer = authorizer.clone();
        move |request: tonic::Request<()>| {
            authorizer.check_reflection(&request)?;
            Ok(request)
        }
    };
    let shared_routes = Routes::new(health_service)
        .add_service(InterceptedService::new(
            reflection().build_v1()?,
            reflection_check.clone(),
        ))
        .add_service(InterceptedService::new(
            reflection().build_v1alpha()?,
            reflection_check,
        ));
    // Large enough that an oversize payload is reported as INVALID_ARGUMENT
    // naming the message, not rejected as an undecodable request.
    let max_request = (settings.limits.max_payload_bytes as usize * 2).max(16 * 1024 * 1024);
    let limits = settings.limits.clone();
    let workers_broker = broker.clone();
    let workers_stop = stop.clone();
    // Each worker serves the same routes over a Redis connection of its own,
    // so that its calls never wait on another thread.
    let http2 = settings.security.clone();
    let worker_count = settings.workers(store.redis_on_this_machine());
    let mut workers = Workers::start(worker_count, security.grpc.clone(), move |incoming| {
        let broker = workers_broker.clone();
        let limits = limits.clone();
        let authorizer = authorizer.clone();
        let http2 = http2.clone();
        let routes = shared_routes.clone();
        let stop = workers_stop.clone();
        async move {
            let broker = broker.with_store(broker.store().with_own_shared_connection()?);
            let admin = AdminServiceServer::new(AdminApi::new(
                broker.clone(),
                limits.clone(),
                authorizer.clone(),
            ));
            let pubsub = PubSubApi::new(broker.clone(), limits.clone(), authorizer.clone());
            let queue = QueueServiceServer::new(QueueApi::new(broker, limits, authorizer))
                .max_decoding_message_size(max_request);
            let routes = crate::grpc::content_type::grpc_only(
                routes
                    .add_service(queue)
                    .add_service(admin)
                    .add_service(pubsub.publisher())
                    .add_service(pubsub.subscriber()),
            );
            tonic::transport::Server::builder()
                .max_concurrent_streams(http2.max_concurrent_streams)
                // hyper's guard against streams the server resets for errors
                // (tonic turns it off by default): RUSTSEC-2024-0003.
                .http2_max_local_error_reset_streams(Some(LOCAL_RESET_STREAMS))
                .http2_max_header_list_size(http2.max_header_list_bytes)
                .http2_keepalive_interval(Some(http2.http2_keepalive_interval))
                .http2_keepalive_timeout(Some(http2.http2_keepalive_timeout))
                .add_routes(routes)
                .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
                .await?;
            Ok(())
        }
    })?;
    let grpc_server = {
        let stop = stop.clone();
        let workers_finished = workers.finished();
        let connections = ConnectionSlots {
            free: Arc::new(Semaphore::new(settings.security.max_connections as usize)),
            metrics: metrics.security().clone(),
        };
        async move {
            tokio::try_join!(
                accept(grpc, &mut workers, connections, stop),
                workers_finished
            )?;
            Ok::<_, BoxError>(())
        }
    };
    let mut http_routes = health.http_routes().merge(metrics.routes(store));
    if settings.dashboard.enabled {
        let dashboard = Dashboard::new(
            broker.clone(),
            security.authorizer.clone(),
            health.clone(),
            settings.dashboard.clone(),
            settings.memory_limit_ratio,
            settings.security.http_tls_cert.is_some(),
        );
        http_routes = http_routes.merge(dashboard.routes());
        health.spawn_loop(
            "dashboard-sampler",
            broker.clone().run_sampler(stop.clone()),
        );
    }
    let http = HttpListener::new(http, security.http.clone())?;
    let http_server =
        axum::serve(http, http_routes).with_graceful_shutdown(stop.clone().cancelled_owned());

    tracing::info!(%grpc_addr, metrics_addr = %http_addr, workers = worker_count, "serving");
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

/// Streams a connection may have reset for errors before it is closed.
const LOCAL_RESET_STREAMS: usize = 1024;

/// The places under `--max-connections`.
struct ConnectionSlots {
    free: Arc<Semaphore>,
    metrics: SecurityMetrics,
}

/// Accepts gRPC connections and hands them to the workers until `stop`. A
/// connection beyond `--max-connections` is closed at once (rather than
/// left in the backlog, where its client would wait without knowing).
async fn accept(
    listener: TcpListener,
    workers: &mut Workers,
    slots: ConnectionSlots,
    stop: CancellationToken,
) -> Result<(), BoxError> {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            accepted = listener.accept() => accepted,
        };
        match accepted.and_then(|(connection, _)| configure(connection)) {
            Ok(stream) => match slots.free.clone().try_acquire_owned() {
                Ok(permit) => workers.assign(Accepted { stream, permit }),
                Err(_) => {
                    slots.metrics.limited(Limit::Connections);
                    tracing::debug!("refused a gRPC connection: --max-connections reached");
                }
            },
            Err(err) => {
                // Out of file descriptors, or a connection reset before it
                // was accepted: try again shortly rather than stop serving.
                tracing::warn!(error = %err, "accepting a gRPC connection failed");
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
}

fn configure(connection: tokio::net::TcpStream) -> std::io::Result<std::net::TcpStream> {
    // Without TCP_NODELAY, Nagle's algorithm holds small stream responses
    // back for tens of milliseconds.
    connection.set_nodelay(true)?;
    socket2::SockRef::from(&connection)
        .set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(TCP_KEEPALIVE))?;
    connection.into_std()
}
